"""Load generation shared by the agent-door benchmarks (bench/api.py, bench/mcp.py, bench/mcp_profile.py).

One uvicorn process of the production ASGI app, an agent with operations of a profile that never
answers, keep-alive request loops with their latencies, one raw HTTP/1.1 exchange on plain
sockets, and the web process's CPU time, RSS and thread count from /proc.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench._setup import ROOT, free_port, percentile

CLIENTS = 8
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
MODERN = "2026-07-28"


def start_web(env: dict[str, str], *, lifespan: bool = True) -> tuple[subprocess.Popen, str]:
    """One uvicorn process as the Procfile starts it, on a free port, once it answers."""
    import httpx

    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "pollerdash.asgi:application", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--no-access-log", "--log-level", "warning"]
    if not lifespan:
        command += ["--lifespan", "off"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/v1/openapi.json", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("uvicorn did not start")


def setup_data(count: int, *, deadline_s: int = 86_400, max_requests: int = 1000) -> tuple[str, list[str]]:
    """An agent's token and `count` + 1 of its operations, on a profile whose provider never answers."""
    from operations.agents.identities import agent_token_issue
    from operations.agents.registration import operation_register
    from operations.models import ProviderAccount, ProviderProfile

    ProviderProfile.objects.create(
        slug="bench",
        name="bench",
        account="bench",
        status_url="http://127.0.0.1:9/v1/jobs/{job_id}",
        job_id_pattern=r"^[A-Za-z0-9_.:=+-]{1,200}$",
        state_field="state",
        pending_states=["running"],
        success_states=["succeeded"],
        failure_states=["failed"],
        default_deadline_s=deadline_s,
        default_max_status_requests=max_requests,
    )
    ProviderAccount.objects.get_or_create(name="bench")
    issued = agent_token_issue(name="bench-agent")
    ids = [
        operation_register(
            provider_slug="bench", provider_job_id=f"job-{index}", registered_by="agent:bench-agent", agent=issued.agent
        ).pk
        for index in range(count + 1)
    ]
    return issued.token, ids


def tasks_get_request(task_id: str, request_state: str | None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a 2026-07-28 `tasks/get` from a client that declares the Tasks extension."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
    }
    params: dict[str, object] = {"taskId": task_id, "_meta": meta}
    if request_state:
        params["requestState"] = request_state
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": params}).encode()
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tasks/get",
        "Mcp-Name": task_id,
    }
    return body, headers


# --- the web process, from /proc ----------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS (KiB) and Threads of a process."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            fields[key] = int(value.split()[0])
    return fields


def load_line() -> str:
    load = os.getloadavg()
    return f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


# --- keep-alive loops -------------------------------------------------------------------------------------

Send = Callable[["RawConnection"], Awaitable[None]]


async def loop_requests(url: str, send: Send, *, seconds: float, clients: int = CLIENTS) -> tuple[list[float], float]:
    """`send(connection)` from `clients` concurrent workers, each on its own keep-alive connection
    (plain sockets, `RawConnection`), for `seconds` after one warm-up call per connection: every
    latency, and requests per second.

    Plain sockets rather than an HTTP client library: the load generator shares this machine's
    cores with the server and the database, and httpx spends more CPU per request than the
    server's cheapest answers (about 0.5 ms against 0.3-0.6 ms, 2 cores), which showed in the
    latencies as the client's own queueing (p95 45-60 ms with httpx, 12-20 ms with plain sockets,
    same server, same run)."""
    host, port = url.removeprefix("http://").split(":")
    connections = [RawConnection(host, int(port)) for _ in range(clients)]
    latencies: list[float] = []

    async def worker(connection: RawConnection, stop_at: float) -> None:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            await send(connection)
            latencies.append(time.perf_counter() - started)

    try:
        for connection in connections:
            await send(connection)  # warm: the connection, code paths, the database connections
        started = time.monotonic()
        await asyncio.gather(*(worker(connection, started + seconds) for connection in connections))
        elapsed = time.monotonic() - started
    finally:
        for connection in connections:
            connection.close()
    return latencies, len(latencies) / elapsed


async def measure(url: str, send: Send, pid: int, *, seconds: float) -> tuple[list[float], float, float]:
    """One loop's latencies, requests/s, and the web process's CPU milliseconds per request."""
    before = cpu_seconds(pid)
    latencies, rate = await loop_requests(url, send, seconds=seconds)
    return latencies, rate, (cpu_seconds(pid) - before) / (len(latencies) + 1) * 1000


def figure_line(name: str, measured: tuple[list[float], float, float], reference: float | None = None) -> str:
    latencies, rate, cpu_ms = measured
    text = (
        f"{name:<34} p50 {percentile(latencies, 50) * 1000:6.1f} ms  p95 {percentile(latencies, 95) * 1000:6.1f} ms"
        f"  {rate:7.0f} req/s  web CPU {cpu_ms:5.2f} ms/req"
    )
    if reference:
        text += f"  (ratio to the 401 reference {rate / reference:.2f})"
    return text


# --- plain sockets --------------------------------------------------------------------------------------


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 response: its status and body (by Content-Length, else to the connection's end)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        None,
    )
    body = await (reader.readexactly(length) if length is not None else reader.read())
    return status, body


def request_bytes(method: str, path: str, host: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *(f"{name}: {value}" for name, value in headers.items())]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class RawConnection:
    """One keep-alive HTTP/1.1 connection on plain sockets: a thousand of these measure the server,
    not a client library's pool (httpx's pool bookkeeping grows with its connections)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def exchange(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
        try:
            return await self._exchange(method, path, headers, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            # uvicorn closes a keep-alive connection idle for 5 s: a request after a longer pause
            # opens a new one, as any client would.
            self.close()
            return await self._exchange(method, path, headers, body)

    async def _exchange(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(request_bytes(method, path, self.host, headers, body))
        await self.writer.drain()
        return await read_response(self.reader)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
