"""Reading a 2xx status body: its JSON, or why it cannot be read (docs/DESIGN.md section 5)."""

from __future__ import annotations

import json
import math
import re


class Body:
    """Parsed JSON of a 2xx body, or why it could not be parsed.

    Beyond the grammar, a body must be something every later step can hold: nesting no deeper
    than MAX_DEPTH (json's parser recurses, and so do the steps after it), finite numbers, and
    text without NUL or lone surrogates (PostgreSQL's jsonb refuses NUL and infinities, UTF-8
    cannot encode a lone surrogate). Anything else is an invalid body like a truncated one.
    """

    @classmethod
    def too_large(cls, detail: str) -> Body:
        body = cls(None)
        body.problem = detail or "body over the size cap"
        return body

    def __init__(self, raw: bytes | None) -> None:
        self.value: object = None
        self.problem: str | None = None
        if not raw:
            self.problem = "empty body"
            return
        try:
            # Strict decoding: json.loads would let a lone surrogate's raw bytes through.
            text = raw.decode(json.detect_encoding(raw))
            value = json.loads(
                text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants, parse_float=_finite
            )
            if _needs_walk(raw, text):
                _check_tree(value)
            self.value = value
        except RecursionError:
            # The parser's own words ("maximum recursion depth exceeded while decoding...") would
            # be cut mid-word on the card; say what the engineer needs to know.
            self.problem = f"body is not valid JSON (nested deeper than {MAX_DEPTH} levels)"
        except (ValueError, UnicodeDecodeError) as exc:
            self.problem = f"body is not valid JSON ({str(exc)[:80]})"


# Deeper than any real status body; deep enough that nothing after the parse comes near
# Python's recursion limit.
MAX_DEPTH = 64
# A \u escape that may decode to NUL or to half of a surrogate pair.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate keys")
    return dict(pairs)


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is not a finite number")
    return value


def _needs_walk(raw: bytes, text: str) -> bool:
    """Whether the parsed value could be too deep or hold NUL or a lone surrogate: cheap tests on
    the text (brackets inside strings count too; they only cost a walk), so an ordinary body is
    not walked at all."""
    return raw.count(b"[") + raw.count(b"{") > MAX_DEPTH or _SUSPECT_ESCAPE.search(text) is not None


def _check_tree(value: object) -> None:
    """Refuse nesting past MAX_DEPTH and text with NUL or a lone surrogate, keys included."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node)
            continue
        if not isinstance(node, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            for key in node:
                _check_text(key)
            stack.extend((child, depth + 1) for child in node.values())
        else:
            stack.extend((child, depth + 1) for child in node)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise ValueError("text holds a NUL character")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ValueError("text holds a lone surrogate") from None
