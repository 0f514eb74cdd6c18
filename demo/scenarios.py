"""The fake provider's scenarios: what each job id answers to a status GET or a cancel, driven by how many
requests that job has seen (no sleeps except where a scenario is about time). The server is
demo/fakeprovider.py; its docstring lists the scenarios and their parameters. What an answer is and
the helpers that build one: demo/replies.py.

No Django import: benchmarks run the fake provider standalone.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from demo.replies import (
    HTML,
    JSON,
    Call,
    Reply,
    error_reply,
    http_date,
    int_param,
    json_reply,
    number_token,
    opt_int,
)
from demo.replies import parse_job_id as parse_job_id  # demo/fakeprovider.py reads job ids through here

# huge_body is about oversized answers, not about exhausting this machine's memory.
_HUGE_BODY_MAX = 128 * 1024 * 1024


def _slow_success(c: Call) -> Reply:
    return c.slow_success(int_param(c.params, "polls", 3))


def _late_failure(c: Call) -> Reply:
    polls = int_param(c.params, "polls", 3)
    return c.running(polls) if c.n <= polls else c.failed()


def _never_finishes(c: Call) -> Reply:
    return c.running(None)


def _duplicate_completion(c: Call) -> Reply:
    return c.slow_success(int_param(c.params, "polls", 1))


def _terminal_flip(c: Call) -> Reply:
    polls = int_param(c.params, "polls", 1)
    if c.n <= polls:
        return c.running(polls)
    return c.succeeded() if c.n == polls + 1 else c.failed()


def _unavailable(status: int, headers: list[tuple[str, str]]) -> Reply:
    if status == 429:
        return error_reply(429, "rate_limited", "Too many requests", headers)
    return error_reply(status, "unavailable", "The service is temporarily unavailable", headers)


def _retry_after_seconds(c: Call) -> Reply:
    times = int_param(c.params, "times", 1)
    if c.n <= times:
        return _unavailable(int_param(c.params, "status", 503), [("Retry-After", c.params.get("value", "120"))])
    return c.slow_success(1, after=times)


def _retry_after_date(c: Call) -> Reply:
    times = int_param(c.params, "times", 1)
    if c.n <= times:
        when = http_date(c.now + int_param(c.params, "offset", 30), c.params.get("form", "imf"))
        reply = _unavailable(int_param(c.params, "status", 503), [("Retry-After", when)])
    else:
        reply = c.slow_success(1, after=times)
    # A provider with a skewed clock is skewed on every answer, not only on the throttled ones.
    reply.date_skew = int_param(c.params, "date_skew", 0)
    return reply


def _rate_limited_no_hint(c: Call) -> Reply:
    times = opt_int(c.params, "times")
    if times is None or c.n <= times:
        return error_reply(429, "rate_limited", "Too many requests")
    return c.slow_success(1, after=times)


def _not_found_then_ok(c: Call) -> Reply:
    if c.n <= int_param(c.params, "polls", 2):
        return error_reply(404, "not_found", "No such job")
    return c.succeeded()


def _ok_then_gone(c: Call) -> Reply:
    polls = int_param(c.params, "polls", 1)
    return c.running(polls) if c.n <= polls else error_reply(404, "not_found", "No such job")


def _succeeded_no_result(c: Call) -> Reply:
    return c.succeeded(result={})


def _past_own_expiry(c: Call) -> Reply:
    return c.running(None, expires_at="2000-01-01T00:00:00Z")


_STATE_TOKENS: dict[str, Any] = {"null": None, "number": 42}


def _unknown_state(c: Call) -> Reply:
    value = c.params.get("value", "needs_payment")
    body: dict[str, Any] = {"id": c.job_id, "progress_percent": 50}
    if value != "missing":
        body["state"] = _STATE_TOKENS.get(value, value)
    return json_reply(200, body)


def _partial(c: Call) -> Reply:
    total = int_param(c.params, "total", 100)
    failed = int_param(c.params, "failed", 3)
    return c.succeeded(summary={"processed": total, "succeeded": total - failed, "failed": failed})


_BAD_HINTS: dict[str, list[str]] = {
    "-1": ["-1"],
    "0": ["0"],
    "1e10": ["10000000000"],
    "1.5": ["1.5"],
    "plus3": ["+3"],
    "space120": [" 120"],
    "comma": ["120, 60"],
    "two": ["120", "60"],
    "garbage": ["soon"],
}


def _bad_hint(c: Call) -> Reply:
    polls = int_param(c.params, "polls", 2)
    if c.n > polls:
        return c.succeeded()
    token = c.params.get("value", "-1")
    reply = c.running(polls)
    reply.headers = [("Retry-After", v) for v in _BAD_HINTS.get(token, [token])]
    return reply


_HINT_TOKENS: dict[str, Any] = {"string": "120", "null": None}


def _poll_interval_hint(c: Call) -> Reply:
    polls = int_param(c.params, "polls", 2)
    if c.n > polls:
        return c.succeeded()
    token = c.params.get("value", "30")
    value = _HINT_TOKENS[token] if token in _HINT_TOKENS else number_token(token)
    return c.running(polls, poll_after_seconds=value)


def _poll_time_hint(c: Call) -> Reply:
    polls = int_param(c.params, "polls", 2)
    if c.n > polls:
        return c.succeeded()
    offset = opt_int(c.params, "offset")
    when = "next tuesday" if offset is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(c.now + offset))
    return c.running(polls, next_check_at=when)


_HUGE_PREFIX = b'{"state":"running","pad":"'


def _huge_body(c: Call) -> Reply:
    size = min(max(int_param(c.params, "size", 2097152), 0), _HUGE_BODY_MAX)
    pad = size - len(_HUGE_PREFIX) - 2
    body = _HUGE_PREFIX + b"x" * pad + b'"}' if pad >= 0 else _HUGE_PREFIX[:size]
    return Reply(200, body)


_INVALID_BODIES: dict[str, tuple[bytes, str]] = {
    "truncated": (b'{"state":"runn', JSON),
    "html": (b"<html><body><h1>502 Bad Gateway</h1><p>nginx</p></body></html>", HTML),
    "empty": (b"", JSON),
    "nan": (b'{"state":"running","progress_percent":NaN}', JSON),
    "dupkeys": (b'{"state":"running","state":"succeeded"}', JSON),
}


def _invalid_json(c: Call) -> Reply:
    body, content_type = _INVALID_BODIES.get(c.params.get("kind", "truncated"), _INVALID_BODIES["truncated"])
    return Reply(200, body, content_type)


PHISH_STATE = "Pay: http://evil.example/ <!channel>\n<http://x|y> *now* " + "A" * 10_000
# Bodies a hostile provider answers with 200: each breaks something after a naive json.loads (the
# parser's recursion, the text's encoding, PostgreSQL's jsonb, a column's length).
_HOSTILE_BODIES: dict[str, bytes] = {
    "deep": b"[" * 5000,
    "surrogate": b'{"state":"failed","error":"\\ud800"}',
    "surrogate_bytes": b'{"state":"failed","error":"\xed\xa0\x80"}',
    "nul": b'{"state":"failed","error":{"m":"\\u0000"}}',
    "infinity": b'{"state":"succeeded","result":{"output_url":1e400}}',
    "long_state": b'{"state":"' + b"x" * 300 + b'"}',
    # A state no table lists, written to pose as pollerdash in on-call's messages: a link, Slack's
    # mention and link syntax, a line break, then 10 kB.
    "phish_state": json.dumps({"state": PHISH_STATE}).encode(),
}


def _hostile_body(c: Call) -> Reply:
    return Reply(200, _HOSTILE_BODIES[c.params.get("kind", "deep")], JSON)


def _slowloris(c: Call) -> Reply:
    if c.params.get("mode") == "silent":
        return Reply(None, hold_s=int_param(c.params, "hold_s", 60))
    reply = c.running(None)
    reply.chunk = (max(int_param(c.params, "chunk_bytes", 1), 1), int_param(c.params, "chunk_delay_ms", 1000) / 1000)
    # mode=headers trickles the status line and headers as well: a client whose only limit is a
    # per-read timeout would wait forever for the response to begin.
    reply.chunk_head = c.params.get("mode") == "headers"
    return reply


def _held(c: Call) -> Reply:
    reply = c.slow_success(1)
    # Only the first `times` requests are held, so a poll retried after a killed worker answers at once.
    if c.n <= int_param(c.params, "times", 1):
        reply.delay_s = int_param(c.params, "hold_ms", 5000) / 1000
    return reply


def _flaky_5xx(c: Call) -> Reply:
    pattern = c.params.get("pattern", "500.502.504.200").split(".")
    token = pattern[(c.n - 1) % len(pattern)]
    if token == "drop":
        # Close the connection without any answer: a transport failure rather than an HTTP one.
        return Reply(None)
    status = int(token) if token.isdigit() else 500
    if status != 200:
        return error_reply(status, "upstream_error", f"Upstream answered {status}")
    polls = int_param(c.params, "polls", 6)
    return c.running(polls) if c.n <= polls else c.succeeded()


def _redirect(c: Call) -> Reply:
    target = c.self_url if c.params.get("to") == "loop" else "http://169.254.169.254/latest/meta-data/"
    return Reply(302, b"", headers=[("Location", target)])


def _auth_revoked(c: Call) -> Reply:
    accept = c.params.get("accept")
    if accept and c.authorization and c.authorization.startswith("Bearer ") and c.authorization.endswith(accept):
        return c.slow_success(1)
    return error_reply(401, "token_revoked", "The API token was revoked")


def _cancel_ok(c: Call) -> Reply:
    if c.cancelled:
        return json_reply(200, {"id": c.job_id, "state": "cancelled", "progress_percent": min(95, 5 * c.n)})
    polls = opt_int(c.params, "polls")
    return c.running(polls) if polls is None or c.n <= polls else c.succeeded()


def _echoes(authorization: str | None) -> dict[str, str]:
    value = authorization or ""
    token = value.partition(" ")[2] or value
    return {
        "authorization": value,
        "token": token,
        "base64": base64.b64encode(value.encode()).decode(),
        "token_base64url": base64.urlsafe_b64encode(token.encode()).decode().rstrip("="),
        "urlencoded": quote(value, safe=""),
    }


def _echo_auth(c: Call) -> Reply:
    echoes = _echoes(c.authorization)
    where = c.params.get("in", "error")
    if where == "state":
        return json_reply(200, {"id": c.job_id, "state": echoes["authorization"]})
    if where == "progress":
        return c.running(None, progress_percent=echoes["authorization"])
    if where == "result":
        result = {"output_url": f"https://files.fake.test/out.csv?token={echoes['urlencoded']}", "debug": echoes}
        return c.succeeded(result=result)
    error = {
        "code": "export_failed",
        "message": f"export failed for request with Authorization: {echoes['authorization']}",
        "request": {"headers": {"Authorization": echoes["authorization"]}},
        "encoded": echoes,
    }
    return json_reply(200, {"id": c.job_id, "state": "failed", "progress_percent": 100, "error": error})


def _bench(c: Call) -> Reply:
    # Lean bodies: benchmarks measure pollerdash, not JSON size.
    if c.n <= int_param(c.params, "polls", 3):
        return json_reply(200, {"id": c.job_id, "state": "running"})
    return json_reply(200, {"id": c.job_id, "state": "succeeded", "result": c.result()})


def _timed(c: Call) -> Reply:
    # Done at a wall-clock moment (epoch milliseconds), however often it is asked: the soak's jobs.
    if c.now * 1000 < int_param(c.params, "done_ms", 0):
        return json_reply(200, {"id": c.job_id, "state": "running"})
    return json_reply(200, {"id": c.job_id, "state": "succeeded", "result": c.result()})


SCENARIOS: dict[str, Callable[[Call], Reply]] = {
    "slow_success": _slow_success,
    "late_failure": _late_failure,
    "never_finishes": _never_finishes,
    "duplicate_completion": _duplicate_completion,
    "terminal_flip": _terminal_flip,
    "retry_after_seconds": _retry_after_seconds,
    "retry_after_date": _retry_after_date,
    "rate_limited_no_hint": _rate_limited_no_hint,
    "not_found_then_ok": _not_found_then_ok,
    "ok_then_gone": _ok_then_gone,
    "succeeded_no_result": _succeeded_no_result,
    "past_own_expiry": _past_own_expiry,
    "unknown_state": _unknown_state,
    "partial": _partial,
    "bad_hint": _bad_hint,
    "poll_interval_hint": _poll_interval_hint,
    "poll_time_hint": _poll_time_hint,
    "huge_body": _huge_body,
    "invalid_json": _invalid_json,
    "hostile_body": _hostile_body,
    "slowloris": _slowloris,
    "held": _held,
    "flaky_5xx": _flaky_5xx,
    "redirect": _redirect,
    "auth_revoked": _auth_revoked,
    "cancel_ok": _cancel_ok,
    "cancel_unsupported": _never_finishes,
    "echo_auth": _echo_auth,
    "bench": _bench,
    "timed": _timed,
}


def status_reply(c: Call) -> Reply:
    handler = SCENARIOS.get(c.scenario)
    if handler is None:
        # Any other job id (e.g. "job-123" in the demo) finishes after two polls.
        return c.slow_success(int_param(c.params, "polls", 2))
    return handler(c)


def cancel_reply(c: Call) -> Reply:
    if c.scenario == "cancel_ok":
        return json_reply(200, {"id": c.job_id, "state": "cancelled"})
    if c.scenario == "cancel_unsupported":
        return error_reply(405, "method_not_allowed", "This provider cannot cancel jobs", [("Allow", "GET")])
    if c.scenario == "echo_auth":
        return json_reply(200, {"id": c.job_id, "state": _echoes(c.authorization)["authorization"]})
    return json_reply(202, {"id": c.job_id, "state": "cancelling"})
