"""Request bodies are capped before anything reads them (pollerdash/body_limits.py), in a real uvicorn
process: a 200 MiB body with a bad token is refused 413 with nothing spooled to disk and memory
unchanged, whether it declares its length or is chunked; everything ordinary still works through
the same process (password sign-in, an admin form, a streamed audit export, the agent API)."""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from django.contrib.auth import get_user_model

from operations.agents.identities import agent_token_issue
from operations.audit import checkpoints
from operations.models import EscalationPolicy
from tests.integration.support import Proc, Processes, start_web

pytestmark = [pytest.mark.integration]

MiB = 1024 * 1024
HUGE = 200 * MiB
MACHINE_CAP = 64 * 1024
PAGE_CAP = MiB


@dataclass
class Web:
    proc: Proc
    url: str
    spool: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


@pytest.fixture
def web(processes: Processes, tmp_path: Path) -> Web:
    # Django spools a body past 2.5 MB to a temporary file in TMPDIR: this process gets its own.
    spool = tmp_path / "spool"
    spool.mkdir()
    key = tmp_path / "audit-signing-key.pem"
    checkpoints.generate_key_file(key)  # exports close with a signed checkpoint
    # Plain-http cookies: the test client talks to it over http.
    proc, url = start_web(
        processes, TMPDIR=spool, ALLOWED_HOSTS="127.0.0.1", SECURE_COOKIES="0", AUDIT_SIGNING_KEY_FILE=key
    )
    return Web(proc, url, spool)


@dataclass
class Watch:
    """What the web process holds while a request runs: its largest spooled file and its peak memory."""

    pid: int
    spool: Path
    largest_spooled: int = 0
    rss_before_kb: int = 0
    rss_peak_kb: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def _rss_kb(self) -> int:
        status = Path(f"/proc/{self.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))

    def _sample(self) -> None:
        for fd in Path(f"/proc/{self.pid}/fd").iterdir():
            try:
                if os.readlink(fd).startswith(str(self.spool)):
                    self.largest_spooled = max(self.largest_spooled, os.stat(fd).st_size)
            except OSError:
                continue  # closed between the listing and the look
        self.rss_peak_kb = max(self.rss_peak_kb, self._rss_kb())

    def run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(0.005)
        self._sample()

    def __enter__(self) -> Watch:
        self.rss_before_kb = self.rss_peak_kb = self._rss_kb()
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@dataclass
class Upload:
    response: bytes
    sent: int  # body bytes the server let the client send before it answered or closed

    @property
    def status(self) -> int:
        match = re.match(rb"HTTP/1\.1 (\d{3}) ", self.response)
        return int(match.group(1)) if match else 0


def upload(web: Web, path: str, *, size: int, chunked: bool, send_body: bool = True, **headers: str) -> Upload:
    """POST `size` bytes the way an attacker would, reading the answer while still sending (as curl
    does): chunked (no Content-Length) or with a Content-Length, in 64 KiB pieces."""
    sock = socket.create_connection(("127.0.0.1", web.port), timeout=30)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{web.port}", framing]
    lines += [
        "Content-Type: application/json",
        *(f"{name.replace('_', '-')}: {value}" for name, value in headers.items()),
    ]
    received = bytearray()

    def read() -> None:
        try:
            while chunk := sock.recv(65536):
                received.extend(chunk)
        except OSError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    reader.start()
    piece = b"x" * (64 * 1024)
    frame = f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece
    sent = 0
    try:
        while send_body and sent < size and not received:
            sock.sendall(frame)
            sent += len(piece)
        if send_body and chunked and not received:
            sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # the server closed the connection: it stopped reading
    reader.join(timeout=30)
    sock.close()
    return Upload(bytes(received), sent)


@pytest.mark.parametrize("path", ["/api/v1/operations", "/accounts/login/"])
def test_a_huge_chunked_body_with_a_bad_token_is_refused_unread_and_unspooled(web, path) -> None:
    with Watch(web.proc.pid, web.spool) as watch:
        answer = upload(web, path, size=HUGE, chunked=True, Authorization="Bearer not-a-token")

    assert answer.status == 413, answer.response[:300]
    assert b'"code":"body_too_large"' in answer.response
    cap = MACHINE_CAP if path.startswith("/api/") else PAGE_CAP
    assert f"limited to {cap} bytes".encode() in answer.response
    # It stopped reading: what the client got out is the cap plus what the sockets buffer, not 200 MiB.
    assert answer.sent < 32 * MiB, answer.sent
    assert watch.largest_spooled == 0
    assert watch.rss_peak_kb - watch.rss_before_kb < 16 * 1024, (watch.rss_before_kb, watch.rss_peak_kb)


@pytest.mark.parametrize("path", ["/api/v1/operations", "/accounts/login/", "/slack/interactions"])
def test_a_declared_length_over_the_cap_is_refused_before_a_byte_is_sent(web, path) -> None:
    started = time.monotonic()
    answer = upload(web, path, size=HUGE, chunked=False, send_body=False, Authorization="Bearer not-a-token")
    assert answer.status == 413 and answer.sent == 0
    assert time.monotonic() - started < 10  # answered, not waiting for a body that never comes


@pytest.mark.parametrize(("path", "cap"), [("/api/v1/operations", MACHINE_CAP), ("/accounts/login/", PAGE_CAP)])
@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
def test_a_body_at_the_cap_is_read_and_one_byte_more_is_not(web, path, cap, chunked) -> None:
    at_cap = upload_exact(web, path, size=cap, chunked=chunked)
    over = upload_exact(web, path, size=cap + 1, chunked=chunked)
    # At the cap Django reads it and answers as it would (no token: 401; no CSRF cookie: 403).
    assert at_cap.status in (401, 403), at_cap.response[:300]
    assert over.status == 413, over.response[:300]


def upload_exact(web: Web, path: str, *, size: int, chunked: bool) -> Upload:
    """One body of exactly `size` bytes (a single chunk when chunked)."""
    body = b"x" * size
    sock = socket.create_connection(("127.0.0.1", web.port), timeout=30)
    framing = b"Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}".encode()
    head = b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + framing + b"\r\n\r\n"
    payload = f"{size:x}\r\n".encode() + body + b"\r\n0\r\n\r\n" if chunked else body
    try:
        sock.sendall(head + payload)
    except OSError:
        pass
    received = bytearray()
    try:
        while chunk := sock.recv(65536):
            received.extend(chunk)
    except OSError:
        pass
    sock.close()
    return Upload(bytes(received), size)


@pytest.fixture
def admin_session(web) -> Iterator[httpx.Client]:
    """alice, an admin, signed in with her password through the web process."""
    get_user_model().objects.create_superuser("alice", "alice@example.test", "pw-alice-long-enough")
    with httpx.Client(base_url=web.url, timeout=30) as browser:
        page = browser.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        signed = browser.post(
            "/accounts/login/",
            data={"csrfmiddlewaretoken": token, "username": "alice", "password": "pw-alice-long-enough"},
            headers={"Referer": f"{web.url}/accounts/login/"},
        )
        assert signed.status_code == 302, signed.text[:500]
        yield browser


def test_ordinary_requests_still_work_through_the_guard(web, admin_session, transactional_db) -> None:
    browser = admin_session
    # An admin form (no files): a policy with its levels as TOML.
    form_page = browser.get("/admin/operations/escalationpolicy/add/")
    assert form_page.status_code == 200
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form_page.text).group(1)
    levels = '[[levels]]\nwait_s = 300\ntargets = [{ email = "team@example.com" }]\n'
    saved = browser.post(
        "/admin/operations/escalationpolicy/add/",
        data={
            "csrfmiddlewaretoken": token,
            "name": "payments",
            "description": "d" * 20_000,
            "repeat_last_level": "0",
            "levels": levels,
        },
        headers={"Referer": f"{web.url}/admin/operations/escalationpolicy/add/"},
    )
    assert saved.status_code == 302, saved.text[:500]
    assert EscalationPolicy.objects.filter(name="payments").exists()

    # The audit export streams (the policy change is an entry of it).
    with browser.stream("GET", "/history/audit.jsonl?format=2") as export:
        assert export.status_code == 200
        lines = b"".join(export.iter_bytes()).splitlines()
    assert any(b'"policy.changed"' in line for line in lines)

    # The agent API, with a body just under its cap.
    issued = agent_token_issue(name="report-bot")
    answer = httpx.post(
        f"{web.url}/api/v1/operations",
        json={"provider": "no-such-provider", "provider_job_id": "j1", "purpose": "p" * (MACHINE_CAP - 200)},
        headers={"Authorization": f"Bearer {issued.token}"},
        timeout=30,
    )
    assert answer.status_code != 413 and answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] != "body_too_large"
