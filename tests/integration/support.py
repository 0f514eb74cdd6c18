"""Helpers for the real-process tests: the provider process, pollerdash processes, waiting."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from django.db import Error as DatabaseError
from django.db import connection

from bench.topology import PgBouncer

ROOT = Path(__file__).resolve().parents[2]

# Short bounds so a takeover after a lost worker happens in seconds, not minutes. The lease
# outlives the whole request (2 s) as in production (there: 30 s request, 60 s lease).
FAST_ENV = {
    "POLL_HTTP_CONNECT_TIMEOUT_S": "1",
    "POLL_HTTP_READ_TIMEOUT_S": "2",
    "POLL_HTTP_TOTAL_TIMEOUT_S": "2",
    "POLL_LEASE_S": "3",
    "DISPATCH_HEARTBEAT_S": "1",
}


class ProviderProcess:
    """The fake provider in its own process, as in production: it shares no interpreter lock with
    pytest, so the arrival times in its log are not delayed by the test's own work."""

    def __init__(self) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "demo.fakeprovider", "--port", "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()  # the server prints its address once it listens
        if "listening on" not in line:
            self.popen.kill()
            raise RuntimeError(f"fake provider did not start: {line!r}")
        self.base_url = line.rsplit(" ", 1)[1].strip()
        self.client = httpx.Client(base_url=self.base_url, timeout=30)

    def requests(self, job_id: str | None = None, *, since: int | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {}
        if job_id is not None:
            params["job_id"] = job_id
        if since is not None:
            params["since"] = since
        return self.client.get("/_requests", params=params).json()["requests"]

    def stop(self) -> None:
        self.client.close()
        self.popen.terminate()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=10)


def start_pgbouncer() -> PgBouncer | None:
    """With PGBOUNCER=1 on PostgreSQL, a PgBouncer in transaction pooling (bench/topology.py) for the
    processes the tests start (the `pgbouncer` fixture, tests/conftest.py); None otherwise."""
    if os.environ.get("PGBOUNCER") != "1" or connection.vendor != "postgresql":
        return None
    return PgBouncer(upstream_port=int(connection.settings_dict["PORT"] or 5432))


def subprocess_database_env(bouncer: PgBouncer | None) -> dict[str, str]:
    """DATABASE_URL (and DATABASE_POOL_MODE through PgBouncer) for a process on the test database."""
    if bouncer is None:
        return {"DATABASE_URL": subprocess_database_url()}
    url = bouncer.url(connection.settings_dict["NAME"], user=connection.settings_dict["USER"] or "root")
    return {"DATABASE_URL": url, "DATABASE_POOL_MODE": "transaction"}


def subprocess_database_url() -> str:
    """The pytest test database, as a DATABASE_URL a subprocess understands (direct)."""
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        user = db["USER"] or "root"
        return f"postgres://{user}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    return f"sqlite:///{Path(db['NAME']).resolve()}"


@dataclass
class Proc:
    kind: str
    popen: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def pids(self) -> set[int]:
        """This process and every process of its group (a qcluster forks its workers)."""
        found = {self.pid}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.pid:
                        found.add(int(entry.name))
                except OSError:
                    continue
        return found

    def kill_group(self) -> None:
        """kill -9 the whole process group: the host's worker dies mid-request."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait(timeout=10)

    def stop(self, timeout: float = 15) -> int | None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of the group (workers of a killed sentinel) goes too.
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return None
        return self.popen.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Processes:
    """Start pollerdash processes; teardown stops them before the test database is flushed."""

    log_dir: Path
    base_env: dict[str, str]
    started: list[Proc] = field(default_factory=list)

    def start(self, kind: str, **env: object) -> Proc:
        """A pollerdash process; `web` is uvicorn as the Procfile runs it, on env PORT (a free port)."""
        manage = [sys.executable, "manage.py"]
        command = {
            "qcluster": [*manage, "qcluster"],
            "dispatcher": [*manage, "dispatch_polls"],
            "signer": [*manage, "audit_checkpoint", "--loop"],
            "web": [sys.executable, "-m", "uvicorn", "pollerdash.asgi:application", "--host", "127.0.0.1"]
            + ["--port", str(env.pop("PORT", 0)), "--lifespan", "off", "--no-access-log"],
        }[kind]
        log_path = self.log_dir / f"{kind}-{len(self.started)}.log"
        full_env = {**self.base_env, **{key: str(value) for key, value in env.items()}}
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                command,
                cwd=ROOT,
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = Proc(kind, popen, log_path)
        self.started.append(proc)
        return proc

    def owner_of(self, pid: int) -> Proc:
        for proc in self.started:
            if pid in proc.pids():
                return proc
        raise LookupError(f"pid {pid} belongs to no started process")

    def stop_all(self) -> dict[str, int | None]:
        return {f"{p.kind}-{i}": p.stop() for i, p in enumerate(self.started)}

    def logs(self) -> str:
        return "\n".join(f"===== {p.log_path.name}\n{p.log()[-4000:]}" for p in self.started)


def wait_until(predicate: Callable[[], Any], *, timeout: float, what: str, processes: Processes | None = None) -> Any:
    """Poll `predicate` until it returns something truthy; reconnect if the database went away."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except DatabaseError as exc:
            last_error = exc
            connection.close()
        time.sleep(0.1)
    detail = f" (last database error: {last_error})" if last_error else ""
    logs = f"\n{processes.logs()}" if processes is not None else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{detail}{logs}")


def max_in_any_window(times: list[float], *, window: float = 1.0) -> int:
    """The largest number of timestamps in any half-open window [t, t + window)."""
    ordered = sorted(times)
    best, start = 0, 0
    for end, moment in enumerate(ordered):
        while moment - ordered[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_web(group: Processes, **env: object) -> tuple[Proc, str]:
    """A web process (uvicorn serving pollerdash.asgi:application, as in the Procfile) on a free port
    of 127.0.0.1, in `group`; returns it and its base URL once it answers."""
    port = free_port()
    log_path = group.log_dir / f"web-{len(group.started)}.log"
    full_env = {**group.base_env, **{key: str(value) for key, value in env.items()}}
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "pollerdash.asgi:application", "--host", "127.0.0.1"]
            + ["--port", str(port), "--no-access-log"],
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc = Proc("web", popen, log_path)
    group.started.append(proc)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return httpx.get(f"{url}/accounts/login/", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(answers, timeout=30, what="uvicorn to answer", processes=group)
    return proc, url


class TcpBalancer:
    """One port in front of several web processes, as a load balancer: each new connection goes to the
    next backend that accepts it (a dead one is skipped). `served` lists the backend port of each
    connection, so a test sees which process answered."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.served: list[int] = []
        self._next = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, name="balancer", daemon=True).start()

    def _connect(self) -> tuple[socket.socket, int] | None:
        for _ in range(len(self.backends)):
            port = self.backends[self._next % len(self.backends)]
            self._next += 1
            try:
                return socket.create_connection(("127.0.0.1", port), timeout=5), port
            except OSError:
                continue
        return None

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            found = self._connect()
            if found is None:
                client.close()
                continue
            backend, port = found
            backend.settimeout(None)
            self.served.append(port)
            for source, target in ((client, backend), (backend, client)):
                threading.Thread(target=self._pipe, args=(source, target), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stopped.set()
        self._listener.close()


def wait_for_web(port: int, *, timeout: float = 60, processes: Processes | None = None) -> None:
    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/api/v1/openapi.json", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout=timeout, what=f"uvicorn on port {port}", processes=processes)
