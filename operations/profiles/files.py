"""Profiles files (TOML): parsed and validated whole; an invalid file is refused with every problem."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from operations.notify.store import missing_policies
from operations.profiles.checks import kind_of
from operations.profiles.spec import ProfileSpec, validate_profile


# TOML key -> model field. Only the five state sets are named differently in the file.
class ProfilesInvalid(Exception):
    """A profiles file was rejected whole; `problems` lists every reason, each naming its provider."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


# --- files ----------------------------------------------------------------------------------------


def _label(index: int, entry: object) -> str:
    slug = entry.get("slug") if isinstance(entry, dict) else None
    if isinstance(slug, str) and slug and len(slug) <= 64:
        return f"provider #{index} ({slug})"
    return f"provider #{index}"


def parse_profiles(*, document: Mapping[str, object]) -> list[ProfileSpec]:
    """Validate every [[provider]] of a parsed TOML document; raise ProfilesInvalid listing all problems."""
    problems = [
        f"unknown top-level key {key!r} (a profiles file holds only [[provider]] tables)"
        for key in document
        if key != "provider"
    ]
    entries = document.get("provider")
    if entries is None or entries == []:
        problems.append("no [[provider]] tables")
        entries = []
    elif not isinstance(entries, list):
        problems.append(f"provider must be an array of tables ([[provider]]), not {kind_of(entries)}")
        entries = []

    specs: list[ProfileSpec] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(entries, start=1):
        label = _label(index, entry)
        if not isinstance(entry, dict):
            problems.append(f"{label}: must be a table, not {kind_of(entry)}")
            continue
        result = validate_profile(raw=entry)
        if isinstance(result, list):
            problems.extend(f"{label}: {problem}" for problem in result)
            continue
        if result.slug in first_index:
            problems.append(f"{label}: slug: duplicate of provider #{first_index[result.slug]}")
            continue
        first_index[result.slug] = index
        specs.append(result)
    for spec in specs:
        if spec.escalation_policy in missing_policies(names={spec.escalation_policy} - {""}):
            index = first_index[spec.slug]
            problems.append(
                f"provider #{index} ({spec.slug}): escalation_policy: no policy named {spec.escalation_policy!r}"
                " (load it with loadpolicies first)"
            )
    if problems:
        raise ProfilesInvalid(problems)
    return specs


def load_profiles_file(*, path: Path) -> list[ProfileSpec]:
    """Read and validate a TOML profiles file; raise ProfilesInvalid listing every problem."""
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise ProfilesInvalid([f"{path}: cannot read: {exc.strerror or exc}"]) from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfilesInvalid([f"{path}: not valid TOML: {exc}"]) from exc
    return parse_profiles(document=document)
