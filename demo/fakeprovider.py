"""A fake job provider: a real threaded HTTP server for tests, benchmarks and the demo.

The job id selects the behaviour: ``<scenario>__k1=v1__k2=v2`` (see ``SCENARIOS``). Behaviour is
driven by ``n``, the number of status GETs seen for that job id so far (this one included), so
runs are deterministic and need no sleeps except where a scenario is explicitly about time.

URL layout (provider profiles point here):

- ``GET /v1/jobs/{job_id}``: status; ``POST /v1/jobs/{job_id}/cancel``: cancel
- ``GET /console/{job_id}``: a tiny HTML page for humans (inspect links)
- ``GET /_requests?job_id=X&since=SEQ``: the request log; ``POST /_reset``; ``GET /_health``

Scenarios (parameter defaults in brackets; ``delay_ms=N`` works on all of them; any other job id
behaves like ``slow_success__polls=2``):

- slow_success [polls=3], late_failure [polls=3], never_finishes, duplicate_completion [polls=1],
  terminal_flip [polls=1], succeeded_no_result, past_own_expiry, partial [total=100, failed=3],
  unknown_state [value=needs_payment; null, missing, number], bench [polls=3] (lean bodies)
- retry_after_seconds [value=120, status=503, times=1],
  retry_after_date [form=imf|rfc850|asctime, offset=30, status=503, times=1, date_skew=0],
  rate_limited_no_hint [times=infinite], bad_hint [value=-1, polls=2],
  poll_interval_hint [value=30, polls=2], poll_time_hint [offset=30 or bad, polls=2]
- not_found_then_ok [polls=2], ok_then_gone [polls=1], auth_revoked [accept=], redirect [to=metadata|loop],
  flaky_5xx [pattern=500.502.504.200 (a "drop" token closes without answering), polls=6]
- huge_body [size=2097152], invalid_json [kind=truncated|html|empty|nan|dupkeys],
  slowloris [mode=dribble|headers|silent, chunk_bytes=1, chunk_delay_ms=1000, hold_s=60],
  held [hold_ms=5000, times=1]
- cancel_ok [polls=infinite], cancel_unsupported; cancelling anything else answers 202 "cancelling"
- echo_auth [in=error|state|progress|result]: a careless provider that echoes the request's
  Authorization header (as is, base64, base64url, URL-encoded) in a failure body, as the job's
  state, as its progress value or inside its result; cancelling it echoes the header as the state

This module imports nothing from Django so benchmarks can run it standalone:
``python -m demo.fakeprovider --port 8765``.
"""

from __future__ import annotations

import argparse
import base64
import json
import signal
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO
from urllib.parse import parse_qs, quote, unquote

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765

JSON = "application/json; charset=utf-8"
HTML = "text/html; charset=utf-8"

# Field names of a request log entry; entries are stored as tuples (cheap under benchmark load)
# and turned into dicts only when someone asks for them.
_LOG_FIELDS = ("seq", "job_id", "kind", "method", "path", "at", "n", "status", "auth")

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_FULL_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_REASONS = {s.value: s.phrase for s in HTTPStatus}

# Bodies above this are written separately from the headers instead of being copied into one buffer.
_SINGLE_WRITE_MAX = 64 * 1024
# huge_body is about oversized answers, not about exhausting this machine's memory.
_HUGE_BODY_MAX = 128 * 1024 * 1024
# Request bodies are read and discarded so a keep-alive connection stays in sync; bigger ones
# (or chunked ones) just end the connection.
_REQUEST_BODY_MAX = 1024 * 1024

_FAILURE_ERROR = {
    "code": "export_failed",
    "message": "Disk quota exceeded on export worker 7",
    "detail": {"worker": 7},
}


def http_date(ts: float, form: str = "imf") -> str:
    """Format a Unix time as an RFC 9110 HTTP-date: "imf" (preferred), "rfc850" or "asctime"."""
    t = time.gmtime(ts)
    clock = f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
    month = _MONTHS[t.tm_mon - 1]
    if form == "rfc850":
        return f"{_FULL_DAYS[t.tm_wday]}, {t.tm_mday:02d}-{month}-{t.tm_year % 100:02d} {clock} GMT"
    if form == "asctime":
        return f"{_DAYS[t.tm_wday]} {month} {t.tm_mday:2d} {clock} {t.tm_year}"
    return f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {month} {t.tm_year} {clock} GMT"


def parse_job_id(job_id: str) -> tuple[str, dict[str, str]]:
    """Split ``scenario__k1=v1__k2=v2`` into the scenario name and its parameters."""
    scenario, *pairs = job_id.split("__")
    params: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if sep:
            params[key] = value
    return scenario, params


@dataclass(slots=True)
class _Reply:
    """What to answer; computed under the state lock, sent outside it."""

    status: int | None  # None: no HTTP answer at all (silent slowloris, dropped connection)
    body: bytes = b""
    content_type: str = JSON
    headers: list[tuple[str, str]] = field(default_factory=list)
    date_skew: float = 0.0
    delay_s: float = 0.0  # wait before answering
    chunk: tuple[int, float] | None = None  # slowloris dribble: (bytes per chunk, seconds between chunks)
    chunk_head: bool = False  # dribble the status line and headers too, not just the body
    hold_s: float = 0.0  # status None: keep the socket open this long, then close it


def _json(status: int, obj: Any, headers: list[tuple[str, str]] | None = None) -> _Reply:
    return _Reply(status, json.dumps(obj, separators=(",", ":")).encode(), headers=headers or [])


def _opt_int(params: dict[str, str], key: str) -> int | None:
    """An integer parameter, or None when absent or unparsable (for ``times``/``polls``: infinite)."""
    try:
        return int(params[key])
    except (KeyError, ValueError):
        return None


def _int(params: dict[str, str], key: str, default: int) -> int:
    value = _opt_int(params, key)
    return default if value is None else value


def _number_token(token: str) -> Any:
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        return token


@dataclass(slots=True)
class _Call:
    """One status or cancel request as a scenario sees it."""

    job_id: str
    scenario: str
    params: dict[str, str]
    n: int  # status GETs for this job so far, including this one (for cancel: status GETs so far)
    authorization: str | None  # transient: only for auth_revoked's accept= check, never stored
    now: float
    cancelled: bool
    self_url: str

    def running(self, polls: int | None, *, n: int | None = None, **extra: Any) -> _Reply:
        # Progress grows with n and never reaches 100 while running.
        n = self.n if n is None else n
        progress = min(95, 5 * n) if polls is None else min(99, 100 * n // (polls + 1))
        return _json(200, {"id": self.job_id, "state": "running", "progress_percent": progress, **extra})

    def succeeded(self, **extra: Any) -> _Reply:
        body = {"id": self.job_id, "state": "succeeded", "progress_percent": 100, "result": self.result()}
        return _json(200, body | extra)

    def failed(self) -> _Reply:
        return _json(200, {"id": self.job_id, "state": "failed", "progress_percent": 100, "error": _FAILURE_ERROR})

    def result(self) -> dict[str, str]:
        return {"output_url": f"https://files.fake.test/{quote(self.job_id, safe=':=+')}.csv"}

    def slow_success(self, polls: int, *, after: int = 0) -> _Reply:
        """slow_success counted from the request after the first ``after`` ones."""
        n = self.n - after
        if n <= polls:
            return self.running(polls, n=n)
        return self.succeeded()


def _error(status: int, code: str, message: str, headers: list[tuple[str, str]] | None = None) -> _Reply:
    return _json(status, {"error": {"code": code, "message": message}}, headers)


def _slow_success(c: _Call) -> _Reply:
    return c.slow_success(_int(c.params, "polls", 3))


def _late_failure(c: _Call) -> _Reply:
    polls = _int(c.params, "polls", 3)
    return c.running(polls) if c.n <= polls else c.failed()


def _never_finishes(c: _Call) -> _Reply:
    return c.running(None)


def _duplicate_completion(c: _Call) -> _Reply:
    return c.slow_success(_int(c.params, "polls", 1))


def _terminal_flip(c: _Call) -> _Reply:
    polls = _int(c.params, "polls", 1)
    if c.n <= polls:
        return c.running(polls)
    return c.succeeded() if c.n == polls + 1 else c.failed()


def _unavailable(status: int, headers: list[tuple[str, str]]) -> _Reply:
    if status == 429:
        return _error(429, "rate_limited", "Too many requests", headers)
    return _error(status, "unavailable", "The service is temporarily unavailable", headers)


def _retry_after_seconds(c: _Call) -> _Reply:
    times = _int(c.params, "times", 1)
    if c.n <= times:
        return _unavailable(_int(c.params, "status", 503), [("Retry-After", c.params.get("value", "120"))])
    return c.slow_success(1, after=times)


def _retry_after_date(c: _Call) -> _Reply:
    times = _int(c.params, "times", 1)
    if c.n <= times:
        when = http_date(c.now + _int(c.params, "offset", 30), c.params.get("form", "imf"))
        reply = _unavailable(_int(c.params, "status", 503), [("Retry-After", when)])
    else:
        reply = c.slow_success(1, after=times)
    # A provider with a skewed clock is skewed on every answer, not only on the throttled ones.
    reply.date_skew = _int(c.params, "date_skew", 0)
    return reply


def _rate_limited_no_hint(c: _Call) -> _Reply:
    times = _opt_int(c.params, "times")
    if times is None or c.n <= times:
        return _error(429, "rate_limited", "Too many requests")
    return c.slow_success(1, after=times)


def _not_found_then_ok(c: _Call) -> _Reply:
    if c.n <= _int(c.params, "polls", 2):
        return _error(404, "not_found", "No such job")
    return c.succeeded()


def _ok_then_gone(c: _Call) -> _Reply:
    polls = _int(c.params, "polls", 1)
    return c.running(polls) if c.n <= polls else _error(404, "not_found", "No such job")


def _succeeded_no_result(c: _Call) -> _Reply:
    return c.succeeded(result={})


def _past_own_expiry(c: _Call) -> _Reply:
    return c.running(None, expires_at="2000-01-01T00:00:00Z")


_STATE_TOKENS: dict[str, Any] = {"null": None, "number": 42}


def _unknown_state(c: _Call) -> _Reply:
    value = c.params.get("value", "needs_payment")
    body: dict[str, Any] = {"id": c.job_id, "progress_percent": 50}
    if value != "missing":
        body["state"] = _STATE_TOKENS.get(value, value)
    return _json(200, body)


def _partial(c: _Call) -> _Reply:
    total = _int(c.params, "total", 100)
    failed = _int(c.params, "failed", 3)
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


def _bad_hint(c: _Call) -> _Reply:
    polls = _int(c.params, "polls", 2)
    if c.n > polls:
        return c.succeeded()
    token = c.params.get("value", "-1")
    reply = c.running(polls)
    reply.headers = [("Retry-After", v) for v in _BAD_HINTS.get(token, [token])]
    return reply


_HINT_TOKENS: dict[str, Any] = {"string": "120", "null": None}


def _poll_interval_hint(c: _Call) -> _Reply:
    polls = _int(c.params, "polls", 2)
    if c.n > polls:
        return c.succeeded()
    token = c.params.get("value", "30")
    value = _HINT_TOKENS[token] if token in _HINT_TOKENS else _number_token(token)
    return c.running(polls, poll_after_seconds=value)


def _poll_time_hint(c: _Call) -> _Reply:
    polls = _int(c.params, "polls", 2)
    if c.n > polls:
        return c.succeeded()
    offset = _opt_int(c.params, "offset")
    when = "next tuesday" if offset is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(c.now + offset))
    return c.running(polls, next_check_at=when)


_HUGE_PREFIX = b'{"state":"running","pad":"'


def _huge_body(c: _Call) -> _Reply:
    size = min(max(_int(c.params, "size", 2097152), 0), _HUGE_BODY_MAX)
    pad = size - len(_HUGE_PREFIX) - 2
    body = _HUGE_PREFIX + b"x" * pad + b'"}' if pad >= 0 else _HUGE_PREFIX[:size]
    return _Reply(200, body)


_INVALID_BODIES: dict[str, tuple[bytes, str]] = {
    "truncated": (b'{"state":"runn', JSON),
    "html": (b"<html><body><h1>502 Bad Gateway</h1><p>nginx</p></body></html>", HTML),
    "empty": (b"", JSON),
    "nan": (b'{"state":"running","progress_percent":NaN}', JSON),
    "dupkeys": (b'{"state":"running","state":"succeeded"}', JSON),
}


def _invalid_json(c: _Call) -> _Reply:
    body, content_type = _INVALID_BODIES.get(c.params.get("kind", "truncated"), _INVALID_BODIES["truncated"])
    return _Reply(200, body, content_type)


def _slowloris(c: _Call) -> _Reply:
    if c.params.get("mode") == "silent":
        return _Reply(None, hold_s=_int(c.params, "hold_s", 60))
    reply = c.running(None)
    reply.chunk = (max(_int(c.params, "chunk_bytes", 1), 1), _int(c.params, "chunk_delay_ms", 1000) / 1000)
    # mode=headers trickles the status line and headers as well: a client whose only limit is a
    # per-read timeout would wait forever for the response to begin.
    reply.chunk_head = c.params.get("mode") == "headers"
    return reply


def _held(c: _Call) -> _Reply:
    reply = c.slow_success(1)
    # Only the first `times` requests are held, so a poll retried after a killed worker answers at once.
    if c.n <= _int(c.params, "times", 1):
        reply.delay_s = _int(c.params, "hold_ms", 5000) / 1000
    return reply


def _flaky_5xx(c: _Call) -> _Reply:
    pattern = c.params.get("pattern", "500.502.504.200").split(".")
    token = pattern[(c.n - 1) % len(pattern)]
    if token == "drop":
        # Close the connection without any answer: a transport failure rather than an HTTP one.
        return _Reply(None)
    status = int(token) if token.isdigit() else 500
    if status != 200:
        return _error(status, "upstream_error", f"Upstream answered {status}")
    polls = _int(c.params, "polls", 6)
    return c.running(polls) if c.n <= polls else c.succeeded()


def _redirect(c: _Call) -> _Reply:
    target = c.self_url if c.params.get("to") == "loop" else "http://169.254.169.254/latest/meta-data/"
    return _Reply(302, b"", headers=[("Location", target)])


def _auth_revoked(c: _Call) -> _Reply:
    accept = c.params.get("accept")
    if accept and c.authorization and c.authorization.startswith("Bearer ") and c.authorization.endswith(accept):
        return c.slow_success(1)
    return _error(401, "token_revoked", "The API token was revoked")


def _cancel_ok(c: _Call) -> _Reply:
    if c.cancelled:
        return _json(200, {"id": c.job_id, "state": "cancelled", "progress_percent": min(95, 5 * c.n)})
    polls = _opt_int(c.params, "polls")
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


def _echo_auth(c: _Call) -> _Reply:
    echoes = _echoes(c.authorization)
    where = c.params.get("in", "error")
    if where == "state":
        return _json(200, {"id": c.job_id, "state": echoes["authorization"]})
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
    return _json(200, {"id": c.job_id, "state": "failed", "progress_percent": 100, "error": error})


def _bench(c: _Call) -> _Reply:
    # Lean bodies: benchmarks measure pollerdash, not JSON size.
    if c.n <= _int(c.params, "polls", 3):
        return _json(200, {"id": c.job_id, "state": "running"})
    return _json(200, {"id": c.job_id, "state": "succeeded", "result": c.result()})


SCENARIOS: dict[str, Callable[[_Call], _Reply]] = {
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
    "slowloris": _slowloris,
    "held": _held,
    "flaky_5xx": _flaky_5xx,
    "redirect": _redirect,
    "auth_revoked": _auth_revoked,
    "cancel_ok": _cancel_ok,
    "cancel_unsupported": _never_finishes,
    "echo_auth": _echo_auth,
    "bench": _bench,
}


def _status_reply(c: _Call) -> _Reply:
    handler = SCENARIOS.get(c.scenario)
    if handler is None:
        # Any other job id (e.g. "job-123" in the demo) finishes after two polls.
        return c.slow_success(_int(c.params, "polls", 2))
    return handler(c)


def _cancel_reply(c: _Call) -> _Reply:
    if c.scenario == "cancel_ok":
        return _json(200, {"id": c.job_id, "state": "cancelled"})
    if c.scenario == "cancel_unsupported":
        return _error(405, "method_not_allowed", "This provider cannot cancel jobs", [("Allow", "GET")])
    if c.scenario == "echo_auth":
        return _json(200, {"id": c.job_id, "state": _echoes(c.authorization)["authorization"]})
    return _json(202, {"id": c.job_id, "state": "cancelling"})


class _State:
    """Request log and per-job counters; every access holds ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = 0  # never reset: request ids stay unique for the server's lifetime
        self.clear()

    def clear(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.by_job: dict[str, list[tuple[Any, ...]]] = {}
        self.counts: dict[tuple[str, str], int] = {}
        self.cancelled: set[str] = set()

    def record(
        self, job_id: str, kind: str, method: str, path: str, now: float, auth: str, decide: Callable[[int], _Reply]
    ) -> tuple[int, _Reply]:
        """Count and log one request; ``decide(n)`` runs under the lock so it sees consistent state."""
        with self.lock:
            self.seq += 1
            key = (job_id, kind)
            n = self.counts[key] = self.counts.get(key, 0) + 1
            reply = decide(n)
            row = (self.seq, job_id, kind, method, path, now, n, reply.status, auth)
            self.log.append(row)
            self.by_job.setdefault(job_id, []).append(row)
            return self.seq, reply

    def entries(self, job_id: str | None, since: int | None) -> list[dict[str, Any]]:
        with self.lock:
            rows = self.log if job_id is None else self.by_job.get(job_id, [])
            return [dict(zip(_LOG_FIELDS, row, strict=True)) for row in rows if since is None or row[0] > since]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    # Mandatory (TCP_NODELAY): any response written in more than one send (big bodies, slowloris, the
    # stdlib's own error pages) would otherwise wait ~40 ms on a delayed ACK: ~23 requests/s per connection.
    disable_nagle_algorithm = True
    server_version = "fakeprovider/1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: per-request logging costs throughput and clutters test output."""

    # --- routing -------------------------------------------------------------------------------

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path.startswith("/v1/jobs/"):
            segment = path[len("/v1/jobs/") :]
            if segment and "/" not in segment:
                return self._job("status", unquote(segment))
        elif path.startswith("/console/"):
            segment = path[len("/console/") :]
            if segment and "/" not in segment:
                return self._console(unquote(segment))
        elif path == "/_requests":
            qs = parse_qs(query)
            job_id = qs.get("job_id", [None])[0]
            since = _opt_int({k: v[0] for k, v in qs.items()}, "since")
            entries = self.server.state.entries(job_id, since)
            return self._send(_json(200, {"requests": entries}), None)
        elif path == "/_health":
            return self._send(_json(200, {"ok": True}), None)
        self._send(_error(404, "not_found", "No such resource"), None)

    def do_POST(self) -> None:
        self._discard_request_body()
        path = self.path.partition("?")[0]
        if path.startswith("/v1/jobs/") and path.endswith("/cancel"):
            segment = path[len("/v1/jobs/") : -len("/cancel")]
            if segment and "/" not in segment:
                return self._job("cancel", unquote(segment))
        elif path == "/_reset":
            with self.server.state.lock:
                self.server.state.clear()
            return self._send(_json(200, {"ok": True}), None)
        self._send(_error(404, "not_found", "No such resource"), None)

    def _discard_request_body(self) -> None:
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding") or (length and not length.isdigit()):
            self.close_connection = True
        elif length and int(length) > _REQUEST_BODY_MAX:
            self.close_connection = True
        elif length:
            self.rfile.read(int(length))

    # --- endpoints -----------------------------------------------------------------------------

    def _job(self, kind: str, job_id: str) -> None:
        state = self.server.state
        authorization = self._take_authorization()
        scenario, params = parse_job_id(job_id)
        now = time.time()

        def decide(n: int) -> _Reply:
            call = _Call(
                job_id=job_id,
                scenario=scenario,
                params=params,
                n=n if kind == "status" else state.counts.get((job_id, "status"), 0),
                authorization=authorization,
                now=now,
                cancelled=job_id in state.cancelled,
                self_url=f"http://{self.headers.get('Host') or self.server.host_port}{self.path}",
            )
            if kind == "status":
                return _status_reply(call)
            if scenario == "cancel_ok":
                state.cancelled.add(job_id)
            return _cancel_reply(call)

        seq, reply = state.record(job_id, kind, self.command, self.path, now, _presence(authorization), decide)
        authorization = None  # needed only for the decision; not kept through a (possibly long) send
        reply.delay_s += _int(params, "delay_ms", 0) / 1000
        self._send(reply, seq)

    def _console(self, job_id: str) -> None:
        state = self.server.state
        counts: dict[str, int] = {}

        def decide(n: int) -> _Reply:
            counts.update(
                status=state.counts.get((job_id, "status"), 0), cancel=state.counts.get((job_id, "cancel"), 0)
            )
            return _Reply(200, content_type=HTML)

        auth = _presence(self._take_authorization())
        seq, reply = state.record(job_id, "console", self.command, self.path, time.time(), auth, decide)
        scenario = parse_job_id(job_id)[0]
        reply.body = (
            "<!doctype html><html><head><meta charset='utf-8'><title>Fake provider console</title></head><body>"
            f"<h1>Job <code>{escape(job_id)}</code></h1>"
            f"<p>Scenario: <code>{escape(scenario if scenario in SCENARIOS else 'slow_success (default)')}</code></p>"
            f"<p>Status requests received: {counts['status']}. Cancel requests received: {counts['cancel']}.</p>"
            "</body></html>"
        ).encode()
        self._send(reply, seq)

    def _take_authorization(self) -> str | None:
        """Remove the credential from the parsed request so it lives no longer than the decision."""
        value = self.headers.get("Authorization")
        del self.headers["Authorization"]
        return value

    # --- writing -------------------------------------------------------------------------------

    def _send(self, reply: _Reply, seq: int | None) -> None:
        stop = self.server.stop_event
        if reply.delay_s > 0 and stop.wait(reply.delay_s):
            self.close_connection = True
            return
        if reply.status is None:
            # No answer: hold the socket (silent slowloris) or drop it at once.
            if reply.hold_s > 0:
                stop.wait(reply.hold_s)
            self.close_connection = True
            return
        body = reply.body
        lines = [
            f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Unknown')}\r\n",
            f"Date: {http_date(time.time() + reply.date_skew)}\r\n",
            f"Server: {self.server_version}\r\n",
        ]
        if seq is not None:
            lines.append(f"X-Request-Id: req_{seq}\r\n")
        lines.append(f"Content-Type: {reply.content_type}\r\nContent-Length: {len(body)}\r\n")
        lines.extend(f"{name}: {value}\r\n" for name, value in reply.headers)
        if self.close_connection:
            lines.append("Connection: close\r\n")
        lines.append("\r\n")
        head = "".join(lines).encode("latin-1")
        if reply.chunk is not None:
            size, pause = reply.chunk
            if reply.chunk_head:
                body, head = head + body, b""
            self.wfile.write(head)
            for start in range(0, len(body), size):
                # Between chunks only; checking the stop event lets stop() return promptly.
                if start and stop.wait(pause):
                    self.close_connection = True
                    return
                self.wfile.write(body[start : start + size])
        elif len(body) <= _SINGLE_WRITE_MAX:
            # One send per response: status line, headers and body in a single segment.
            self.wfile.write(head + body)
        else:
            self.wfile.write(head)
            self.wfile.write(body)


def _presence(authorization: str | None) -> str:
    return "present" if authorization else "absent"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # ThreadingMixIn would otherwise join every handler thread on close, i.e. wait for idle
    # keep-alive connections and slowloris answers.
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, host: str, port: int) -> None:
        self.state = _State()
        self.stop_event = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__((host, port), _Handler)
        self.host_port = f"{host}:{self.server_address[1]}"

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that can take seconds.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that hang up (a capped body read, a timeout, stop()) are normal here.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """Wake handler threads blocked reading idle keep-alive connections so they exit."""
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class FakeProvider:
    """The fake provider in a background thread: ``with FakeProvider().start() as fp: ...``."""

    def __init__(self) -> None:
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: str = DEFAULT_HOST, port: int = 0) -> FakeProvider:
        if self._server is not None:
            raise RuntimeError("FakeProvider already started")
        self._server = _Server(host, port)
        # A short poll interval keeps stop() fast; the cost is 20 idle wake-ups per second.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fakeprovider", daemon=True
        )
        self._thread.start()
        return self

    @property
    def _running(self) -> _Server:
        if self._server is None:
            raise RuntimeError("FakeProvider is not started")
        return self._server

    @property
    def port(self) -> int:
        return self._running.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{self._running.host_port}"

    def requests(self, job_id: str | None = None, *, since: int | None = None) -> list[dict[str, Any]]:
        """Recorded /v1 and /console requests (oldest first), optionally for one job / after a seq."""
        return self._running.state.entries(job_id, since)

    def reset(self) -> None:
        state = self._running.state
        with state.lock:
            state.clear()

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._server = self._thread = None
        server.stop_event.set()  # ends holds, delays and slowloris dribbles
        server.shutdown()
        server.close_connections()
        server.server_close()
        thread.join(timeout=5)

    def __enter__(self) -> FakeProvider:
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, stream: TextIO | None = None) -> None:
    """Serve in the foreground until SIGTERM or SIGINT (must run in the main thread)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    provider = FakeProvider().start(host=host, port=port)
    try:
        out = stream or sys.stdout
        out.write(f"fake provider listening on {provider.base_url}\n")
        out.flush()  # whoever started us (honcho, a benchmark) waits for this line on a pipe
        # A timed wait keeps the main thread responsive to signals whatever the platform.
        while not stop.wait(0.5):
            pass
    finally:
        provider.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m demo.fakeprovider", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    serve(args.host, args.port)


if __name__ == "__main__":
    main()
