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
  unknown_state [value=needs_payment; null, missing, number], bench [polls=3] (lean bodies),
  timed [done_ms=epoch milliseconds] (lean bodies; running until that wall-clock moment)
- retry_after_seconds [value=120, status=503, times=1],
  retry_after_date [form=imf|rfc850|asctime, offset=30, status=503, times=1, date_skew=0],
  rate_limited_no_hint [times=infinite], bad_hint [value=-1, polls=2],
  poll_interval_hint [value=30, polls=2], poll_time_hint [offset=30 or bad, polls=2]
- not_found_then_ok [polls=2], ok_then_gone [polls=1], auth_revoked [accept=], redirect [to=metadata|loop],
  flaky_5xx [pattern=500.502.504.200 (a "drop" token closes without answering), polls=6]
- huge_body [size=2097152], invalid_json [kind=truncated|html|empty|nan|dupkeys],
  hostile_body [kind=deep|surrogate|surrogate_bytes|nul|infinity|long_state|phish_state],
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
import bisect
import signal
import sys
import threading
import time
from collections.abc import Callable
from html import escape
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from io import TextIOBase
from typing import Any, TextIO
from urllib.parse import parse_qs, unquote

from demo.fakehttp import FakeServer
from demo.scenarios import (
    HTML,
    SCENARIOS,
    Call,
    Reply,
    cancel_reply,
    error_reply,
    http_date,
    int_param,
    json_reply,
    opt_int,
    parse_job_id,
    status_reply,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


# Field names of a request log entry; entries are stored as tuples (cheap under benchmark load)
# and turned into dicts only when someone asks for them.
_LOG_FIELDS = ("seq", "job_id", "kind", "method", "path", "at", "n", "status", "auth")

_REASONS = {s.value: s.phrase for s in HTTPStatus}

# Bodies above this are written separately from the headers instead of being copied into one buffer.
_SINGLE_WRITE_MAX = 64 * 1024
# Request bodies are read and discarded so a keep-alive connection stays in sync; bigger ones
# (or chunked ones) just end the connection.
_REQUEST_BODY_MAX = 1024 * 1024


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
        self, job_id: str, kind: str, method: str, path: str, now: float, auth: str, decide: Callable[[int], Reply]
    ) -> tuple[int, Reply]:
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
            # Rows are in sequence order: a reader polling for what is new (the soak's recorder,
            # every second, against tens of thousands of rows) skips the old ones without a scan.
            first = 0 if since is None else bisect.bisect_right(rows, since, key=lambda row: row[0])
            return [dict(zip(_LOG_FIELDS, row, strict=True)) for row in rows[first:]]


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
            since = opt_int({k: v[0] for k, v in qs.items()}, "since")
            entries = self.server.state.entries(job_id, since)
            return self._send(json_reply(200, {"requests": entries}), None)
        elif path == "/_health":
            return self._send(json_reply(200, {"ok": True}), None)
        self._send(error_reply(404, "not_found", "No such resource"), None)

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
            return self._send(json_reply(200, {"ok": True}), None)
        self._send(error_reply(404, "not_found", "No such resource"), None)

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

        def decide(n: int) -> Reply:
            call = Call(
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
                return status_reply(call)
            if scenario == "cancel_ok":
                state.cancelled.add(job_id)
            return cancel_reply(call)

        seq, reply = state.record(job_id, kind, self.command, self.path, now, _presence(authorization), decide)
        authorization = None  # needed only for the decision; not kept through a (possibly long) send
        reply.delay_s += int_param(params, "delay_ms", 0) / 1000
        self._send(reply, seq)

    def _console(self, job_id: str) -> None:
        state = self.server.state
        counts: dict[str, int] = {}

        def decide(n: int) -> Reply:
            counts.update(
                status=state.counts.get((job_id, "status"), 0), cancel=state.counts.get((job_id, "cancel"), 0)
            )
            return Reply(200, content_type=HTML)

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

    def _send(self, reply: Reply, seq: int | None) -> None:
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


class _Server(FakeServer):
    """demo/fakehttp.py's server (no reverse DNS at bind, daemon threads, stop() wakes held
    connections) with the provider's state and a deeper accept queue for the benchmarks."""

    request_queue_size = 256

    def __init__(self, host: str, port: int) -> None:
        self.state = _State()
        super().__init__(host, port, _Handler)


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


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, stream: TextIO | TextIOBase | None = None) -> None:
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
