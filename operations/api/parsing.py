"""Strict parsing of what agents send: JSON bodies, query parameters, headers, cursors.

Python's own parsers are permissive in ways that hide agent mistakes: `json.loads` keeps the last
of two duplicate keys and accepts NaN, `int()` accepts " 25 ", "2_5" and Arabic-Indic digits. Every
rule here refuses instead, with a problem that names the field.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from django.core import signing
from django.http import HttpRequest

from operations.api.problems import ApiProblem, FieldError

MAX_DEPTH = 16
MAX_KEYS = 1000
TIMEOUT_PATTERN = re.compile(r"[0-9]{1,4}")
LIMIT_PATTERN = re.compile(r"[0-9]{1,9}")
IDEMPOTENCY_KEY_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,255}")
RFC3339 = re.compile(
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})T(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})(?P<fraction>\.[0-9]{1,9})?"
    r"(?P<offset>Z|[+-][0-9]{2}:[0-9]{2})"
)
_SURROGATE_OR_NUL = re.compile("[\ud800-\udfff\x00]")
CURSOR_SALT = "pollerdash.api.list-cursor.v1"


class _Refused(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused(f"the key {key[:40]!r} appears twice in one object; send it once")
        result[key] = value
    return result


def _constant(name: str) -> object:
    raise _Refused(f"{name} is not JSON; send numbers only")


def _check_tree(value: object, *, depth: int, counter: list[int]) -> None:
    if depth > MAX_DEPTH:
        raise _Refused(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        if _SURROGATE_OR_NUL.search(value):
            raise _Refused("a string holds a NUL character or a lone surrogate")
    elif isinstance(value, dict):
        counter[0] += len(value)
        if counter[0] > MAX_KEYS:
            raise _Refused(f"more than {MAX_KEYS} keys")
        for key, item in value.items():
            _check_tree(key, depth=depth, counter=counter)
            _check_tree(item, depth=depth + 1, counter=counter)
    elif isinstance(value, list):
        for item in value:
            _check_tree(item, depth=depth + 1, counter=counter)


def parse_json_object(raw: bytes) -> dict[str, object]:
    """A JSON object from raw request bytes, or an `invalid_json` problem that says what is wrong."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raise ApiProblem("invalid_json", "The body starts with a UTF-8 byte order mark; send plain UTF-8 JSON.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiProblem("invalid_json", f"The body is not UTF-8 (byte {exc.start}).") from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
        _check_tree(value, depth=1, counter=[0])
    except _Refused as exc:
        raise ApiProblem("invalid_json", f"The body was refused: {exc.detail}.") from None
    except json.JSONDecodeError as exc:
        raise ApiProblem(
            "invalid_json", f"The body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}."
        ) from None
    except RecursionError:
        raise ApiProblem("invalid_json", f"The body is nested deeper than {MAX_DEPTH} levels.") from None
    except ValueError:
        # Python refuses integers of more than 4,300 digits (int_max_str_digits).
        raise ApiProblem("invalid_json", "The body holds a number too long to read.") from None
    if not isinstance(value, dict):
        raise ApiProblem("invalid_json", f"The body must be a JSON object, not a {type(value).__name__}.")
    return value


def require_json_content_type(request: HttpRequest) -> None:
    content_type = request.META.get("CONTENT_TYPE", "")
    media = content_type.split(";", 1)[0].strip().lower()
    params = {
        part.split("=", 1)[0].strip().lower(): part.split("=", 1)[-1].strip().strip('"').lower()
        for part in content_type.split(";")[1:]
        if "=" in part
    }
    if media != "application/json" or params.get("charset", "utf-8") != "utf-8":
        shown = content_type[:80] or "none"
        raise ApiProblem(
            "unsupported_media_type",
            f"Send the body as Content-Type: application/json (UTF-8); got {shown!r}.",
            headers={"Accept-Post": "application/json"},
        )


def reject_unknown_query(request: HttpRequest, allowed: set[str]) -> None:
    unknown = sorted(set(request.GET.keys()) - allowed)
    if unknown:
        names = ", ".join(sorted(allowed)) or "none"
        raise ApiProblem(
            "unknown_field",
            f"Unknown query parameter(s) {', '.join(repr(n[:40]) for n in unknown[:5])}; allowed: {names}.",
            errors=[
                FieldError(f"/query/{name[:40]}", "unknown_field", "not a parameter of this call")
                for name in unknown[:5]
            ],
        )
    for name in allowed:
        if len(request.GET.getlist(name)) > 1:
            raise ApiProblem(
                "invalid_field",
                f"Send the query parameter {name} once.",
                errors=[FieldError(f"/query/{name}", "repeated", "given more than once")],
            )


def parse_timeout(raw: str | None, *, default_s: int, max_s: int) -> tuple[int, int]:
    """(requested, applied) wait timeout. Only ASCII digits; above the cap it is clamped."""
    if raw is None:
        return default_s, default_s
    if not TIMEOUT_PATTERN.fullmatch(raw):
        raise ApiProblem(
            "invalid_timeout",
            f"timeout_s must be a whole number of seconds written with ASCII digits, 0-{max_s} "
            f"(larger values are lowered to {max_s}); got {raw[:20]!r}.",
            errors=[FieldError("/query/timeout_s", "pattern", "must match ^[0-9]{1,4}$")],
        )
    requested = int(raw)
    return requested, min(requested, max_s)


def parse_limit(raw: str | None, *, default: int, maximum: int) -> int:
    if raw is None:
        return default
    if not LIMIT_PATTERN.fullmatch(raw) or int(raw) < 1:
        raise ApiProblem(
            "invalid_field",
            f"limit must be a whole number from 1 to {maximum} in ASCII digits (larger values are lowered "
            f"to {maximum}); got {raw[:20]!r}.",
            errors=[FieldError("/query/limit", "pattern", f"1-{maximum}")],
        )
    return min(int(raw), maximum)


def parse_idempotency_key(request: HttpRequest) -> str | None:
    """The Idempotency-Key header: an RFC 8941 sf-string ("...") or a bare token."""
    raw = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if raw is None:
        return None
    # Servers join repeated headers with commas; a comma is not allowed inside a key.
    if "," in raw:
        raise ApiProblem(
            "multiple_idempotency_keys",
            "Send exactly one Idempotency-Key header.",
            errors=[FieldError("/header/Idempotency-Key", "repeated", "more than one value")],
        )
    value = raw.strip(" \t")
    if value.startswith('"') or value.endswith('"'):
        if len(value) < 2 or not (value.startswith('"') and value.endswith('"')):
            raise ApiProblem(
                "idempotency_key_invalid",
                "The Idempotency-Key has an unterminated quote.",
                errors=[FieldError("/header/Idempotency-Key", "syntax", "unterminated sf-string")],
            )
        value = value[1:-1]
    if not IDEMPOTENCY_KEY_PATTERN.fullmatch(value):
        raise ApiProblem(
            "idempotency_key_invalid",
            "The Idempotency-Key must be 1-255 characters from A-Z a-z 0-9 _ . : - (a UUID is ideal).",
            errors=[FieldError("/header/Idempotency-Key", "syntax", "1-255 of [A-Za-z0-9_.:-]")],
        )
    return value


def parse_rfc3339(value: str, *, pointer: str) -> datetime:
    """A strict RFC 3339 time with an explicit offset, returned in UTC."""

    def refuse(why: str) -> ApiProblem:
        return ApiProblem(
            "invalid_field",
            f"{pointer.rsplit('/', 1)[-1]} must be an RFC 3339 time with an offset, like 2026-12-01T18:00:00Z; {why}.",
            errors=[FieldError(pointer, "format", why)],
        )

    match = RFC3339.fullmatch(value)
    if match is None:
        if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+", value):
            raise refuse("it has no time zone offset")
        raise refuse(f"got {value[:40]!r}")
    if match["time"].endswith(":60"):
        raise refuse("leap seconds (:60) are not accepted")
    try:
        parsed = datetime.fromisoformat(
            f"{match['date']}T{match['time']}{(match['fraction'] or '')[:7]}"
            f"{'+00:00' if match['offset'] == 'Z' else match['offset']}"
        )
    except ValueError:
        raise refuse(f"{value[:40]!r} is not a real date and time") from None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        # 9999-12-31T23:59:59-23:59 is a valid RFC 3339 string but no time Python can hold in UTC.
        raise refuse(f"{value[:40]!r} is outside the years 1 to 9999 in UTC") from None


def parse_deadline(value: str, *, pointer: str) -> datetime:
    """A deadline, kept to the whole second the API shows: an agent that sends back the time it
    was shown asks for the same watch (a replay), not for a different one."""
    return parse_rfc3339(value, pointer=pointer).replace(microsecond=0)


# --- list cursors ---------------------------------------------------------------------------------


def cursor_encode(*, agent_id: int, rank: int, created_at: datetime, operation_id: str) -> str:
    payload = [agent_id, rank, created_at.astimezone(UTC).isoformat(), operation_id]
    return signing.dumps(payload, salt=CURSOR_SALT, compress=True)


def cursor_decode(raw: str, *, agent_id: int) -> tuple[int, datetime, str]:
    """The position a cursor points at. Forged, altered or another agent's cursors are refused."""
    problem = ApiProblem(
        "invalid_cursor",
        "The cursor is not one this server issued to you; start again without a cursor.",
        errors=[FieldError("/query/cursor", "invalid", "not an issued cursor")],
    )
    if len(raw) > 500:
        raise problem
    try:
        payload = signing.loads(raw, salt=CURSOR_SALT)
        owner, rank, created_raw, operation_id = payload
        created_at = datetime.fromisoformat(created_raw)
    except (signing.BadSignature, ValueError, TypeError):
        raise problem from None
    if owner != agent_id or not isinstance(rank, int) or not isinstance(operation_id, str):
        raise problem
    return rank, created_at, operation_id
