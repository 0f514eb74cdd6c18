"""The generic checks of a profile value: text, dotted field paths, lists, numbers, choices. Each
returns its problems (empty when the value is acceptable); no I/O."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from operations.vocabulary import ONE_LINE_CONTROL_CHARACTERS

# Non-empty segments without whitespace, joined by dots ("result.output_url", "items.0.id").
_DOTTED = re.compile(r"[^\s.]+(?:\.[^\s.]+)*")


def kind_of(value: object) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def text(value: object, *, max_length: int, pattern: re.Pattern[str] | None = None, shape: str = "") -> list[str]:
    if not isinstance(value, str):
        return [f"must be a string, not {kind_of(value)}"]
    if not value.strip():
        return ["must not be empty"]
    if ONE_LINE_CONTROL_CHARACTERS.search(value):
        # PostgreSQL refuses NUL in text outright; the other controls only hide what a value says.
        return ["must not contain control characters"]
    if len(value) > max_length:
        return [f"must be at most {max_length} characters"]
    if pattern is not None and not pattern.fullmatch(value):
        return [f"{value!r} {shape}"]
    return []


def dotted_path(value: object, *, max_length: int = 200) -> list[str]:
    return text(
        value,
        max_length=max_length,
        pattern=_DOTTED,
        shape="is not a dotted field path like result.output_url (no spaces, no empty parts)",
    )


def string_list(value: object, *, dotted: bool) -> list[str]:
    if not isinstance(value, list):
        return [f"must be a list of strings, not {kind_of(value)}"]
    problems: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(value, start=1):
        if not isinstance(item, str) or not item.strip():
            problems.append(f"item {index} must be a non-empty string")
            continue
        if ONE_LINE_CONTROL_CHARACTERS.search(item):
            problems.append(f"item {index} must not contain control characters")
            continue
        if item in seen:
            problems.append(f"{item!r} is listed twice")
        seen.add(item)
        if dotted:
            problems.extend(f"item {index}: {message}" for message in dotted_path(item))
    return problems


def states(value: object) -> list[str]:
    return string_list(value, dotted=False)


def dotted_list(value: object) -> list[str]:
    return string_list(value, dotted=True)


def number(value: object, *, minimum: float, inclusive: bool, maximum: float | None = None) -> list[str]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return [f"must be a number, not {kind_of(value)}"]
    if not math.isfinite(value):
        return ["must be a finite number"]
    too_low = value < minimum if inclusive else value <= minimum
    if too_low or (maximum is not None and value > maximum):
        lower = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        upper = f" and <= {maximum:g}" if maximum is not None else ""
        return [f"must be {lower}{upper}, not {value!r}"]
    return []


def integer(value: object, *, minimum: int, maximum: int) -> list[str]:
    if isinstance(value, bool) or not isinstance(value, int):
        return [f"must be a whole number, not {kind_of(value)}"]
    if not minimum <= value <= maximum:
        return [f"must be an integer from {minimum} to {maximum}, not {value}"]
    return []


def choice(value: object, *, allowed: Sequence[str]) -> list[str]:
    if not isinstance(value, str) or value not in allowed:
        return [f"must be one of {', '.join(allowed)}, not {value!r}"]
    return []
