"""One entry line of a version-2 or -3 export: its JSON and its fields (version-1 entries are
returned as parsed, for the chain verifier to check)."""

from __future__ import annotations

from .base import _TIME_RE, ACTOR_KEYS, ENTRY_V2_KEYS
from .chain import _EXACT, _scan_fast, compact_json


def parse_entry(line: bytes, *, log: str, strict: bool) -> dict:
    """The parsed entry; raises ValueError saying what is wrong with it."""
    try:
        text = line.decode("utf-8")
        obj, end = _scan_fast(text, 0)
    except (UnicodeDecodeError, ValueError, StopIteration) as exc:
        raise ValueError(f"entry is not valid JSON: {exc}") from None
    if end != len(text) or type(obj) is not dict:
        raise ValueError("bytes after the entry's JSON value")
    if obj.get("v") == 1:
        return obj
    _check_fields(obj, log=log)
    if strict:
        try:
            exact = _EXACT.decode(text)
        except ValueError as exc:
            raise ValueError(f"entry is not strict JSON: {exc}") from None
        if compact_json(exact) != line:
            raise ValueError("entry is not in canonical form (RFC 8785)")
    return obj


def _check_fields(obj: dict, *, log: str) -> None:
    actor = obj.get("actor")
    if (
        obj.keys() != ENTRY_V2_KEYS
        or obj["v"] != 2
        or type(actor) is not dict
        or actor.keys() != ACTOR_KEYS
        or type(obj["data"]) is not dict
    ):
        raise ValueError("not an audit entry (fields differ from v1 and v2)")
    if obj["log"] != log:
        raise ValueError(f"entry of another log ({str(obj['log'])[:80]!r})")
    at, operation_id = obj["at"], obj["operation_id"]
    if type(at) is not str or not _TIME_RE.match(at) or type(obj["type"]) is not str:
        raise ValueError("at is a UTC time with six fractional digits and type a string")
    if not (operation_id is None or type(operation_id) is str):
        raise ValueError("operation_id is not a string or null")
    if type(actor["kind"]) is not str or type(actor["id"]) is not str:
        raise ValueError("actor kind and id are strings")
