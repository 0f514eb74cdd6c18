"""What a fake provider's answer is and how a scenario builds one: the Reply, the Call a scenario
reads (its job id's parameters, how many requests it has seen), and the HTTP-date forms.

No Django import: benchmarks run the fake provider standalone.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

JSON = "application/json; charset=utf-8"
HTML = "text/html; charset=utf-8"

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_FULL_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
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
class Reply:
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


def json_reply(status: int, obj: Any, headers: list[tuple[str, str]] | None = None) -> Reply:
    return Reply(status, json.dumps(obj, separators=(",", ":")).encode(), headers=headers or [])


def opt_int(params: dict[str, str], key: str) -> int | None:
    """An integer parameter, or None when absent or unparsable (for ``times``/``polls``: infinite)."""
    try:
        return int(params[key])
    except (KeyError, ValueError):
        return None


def int_param(params: dict[str, str], key: str, default: int) -> int:
    value = opt_int(params, key)
    return default if value is None else value


def number_token(token: str) -> Any:
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        return token


@dataclass(slots=True)
class Call:
    """One status or cancel request as a scenario sees it."""

    job_id: str
    scenario: str
    params: dict[str, str]
    n: int  # status GETs for this job so far, including this one (for cancel: status GETs so far)
    authorization: str | None  # transient: only for auth_revoked's accept= check, never stored
    now: float
    cancelled: bool
    self_url: str

    def running(self, polls: int | None, *, n: int | None = None, **extra: Any) -> Reply:
        # Progress grows with n and never reaches 100 while running.
        n = self.n if n is None else n
        progress = min(95, 5 * n) if polls is None else min(99, 100 * n // (polls + 1))
        return json_reply(200, {"id": self.job_id, "state": "running", "progress_percent": progress, **extra})

    def succeeded(self, **extra: Any) -> Reply:
        body = {"id": self.job_id, "state": "succeeded", "progress_percent": 100, "result": self.result()}
        return json_reply(200, body | extra)

    def failed(self) -> Reply:
        return json_reply(200, {"id": self.job_id, "state": "failed", "progress_percent": 100, "error": _FAILURE_ERROR})

    def result(self) -> dict[str, str]:
        return {"output_url": f"https://files.fake.test/{quote(self.job_id, safe=':=+')}.csv"}

    def slow_success(self, polls: int, *, after: int = 0) -> Reply:
        """slow_success counted from the request after the first ``after`` ones."""
        n = self.n - after
        if n <= polls:
            return self.running(polls, n=n)
        return self.succeeded()


def error_reply(status: int, code: str, message: str, headers: list[tuple[str, str]] | None = None) -> Reply:
    return json_reply(status, {"error": {"code": code, "message": message}}, headers)
