"""The production topology's moving parts, on 127.0.0.1, for the fault tests and bench/chaos.py.

`PgBouncer`: Debian's pgbouncer (/usr/sbin/pgbouncer) with `pool_mode = transaction` in front of
a PostgreSQL server, started from a config written into a temporary directory, on a free port.
`Partition`: a TCP proxy in a thread between one "host" (its processes' DATABASE_URL) and
PostgreSQL, whose `cut()` drops every connection and leaves new ones hanging unanswered (a network
gone, not a refused port) until `heal()`. Both stop by themselves when the test or run ends.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

PGBOUNCER = Path("/usr/sbin/pgbouncer")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s") from None
            time.sleep(0.05)


class PgBouncer:
    """pgbouncer in transaction pooling for every database of the server at upstream_port.

    pgbouncer refuses to run as root, so as root it runs as `postgres`. `server_login_retry = 1`:
    after PostgreSQL restarts or fails over, pgbouncer tries its servers again within a second
    instead of the default 15.
    """

    def __init__(self, *, upstream_port: int = 5432, upstream_host: str = "127.0.0.1", pool_size: int = 40) -> None:
        if not PGBOUNCER.exists():
            raise RuntimeError(f"{PGBOUNCER} is missing: apt-get install pgbouncer")
        self.dir = Path(tempfile.mkdtemp(prefix="pollerdash-pgbouncer-"))
        self.port = free_port()
        self.upstream = (upstream_host, upstream_port)
        self.config = self.dir / "pgbouncer.ini"
        (self.dir / "userlist.txt").write_text('"root" ""\n')
        self.config.write_text(
            "[databases]\n"
            # lock_timeout as pollerdash sets it on a direct connection (docs/deployment.md).
            f"* = host={upstream_host} port={upstream_port} connect_query='SET lock_timeout TO 10000'\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.dir / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\nmax_client_conn = 1000\n"
            "server_login_retry = 1\nserver_connect_timeout = 5\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\npidfile = {self.dir / 'pgbouncer.pid'}\n"
        )
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_postgres:
            for path in (self.dir, *self.dir.iterdir()):
                shutil.chown(path, "postgres", "postgres")
        self.popen: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.popen = subprocess.Popen(
            [*self.as_postgres, str(PGBOUNCER), str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_for_port(self.port, timeout=30, what="pgbouncer")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; its log ends:\n{self.log()[-2000:]}") from None

    def repoint(self, *, upstream_port: int) -> None:
        """Send every new server connection to another PostgreSQL (a promoted replica), as a failover
        manager does: the config is rewritten and pgbouncer reloaded (SIGHUP); clients stay connected."""
        text = self.config.read_text().replace(f"port={self.upstream[1]} ", f"port={upstream_port} ")
        self.config.write_text(text)
        self.upstream = (self.upstream[0], upstream_port)
        pid = int((self.dir / "pgbouncer.pid").read_text().split()[0])
        os.kill(pid, signal.SIGHUP)

    def url(self, database: str, *, user: str = "root") -> str:
        return f"postgres://{user}@127.0.0.1:{self.port}/{database}"

    def restart(self) -> None:
        """Stop at once (every client connection dropped, transactions in flight aborted), start again."""
        self.kill()
        self.start()

    def kill(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)
        (self.dir / "pgbouncer.pid").unlink(missing_ok=True)  # killed: nothing removed it

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        try:
            self.kill()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class Partition:
    """A TCP proxy on a free port to (host, port); `cut()` is the network between them gone.

    Cut, nothing is closed and nothing is lost: the proxy stops moving bytes either way, so a
    query in flight waits unanswered, a write sits in the socket buffers, and a new connection is
    accepted but reaches nothing - what a host sees while its network is down and TCP retransmits.
    `heal()` moves the held bytes on: the host's late writes reach PostgreSQL as they would after
    a real partition, which is what the fences must refuse.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 5432) -> None:
        self.target = (host, port)
        self.port = free_port()
        self._open = threading.Event()
        self._open.set()
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="partition-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the partition proxy did not start")

    @property
    def is_cut(self) -> bool:
        return not self._open.is_set()

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    def stop(self) -> None:
        self._open.set()
        self._loop.call_soon_threadsafe(self._close_all)
        self._thread.join(timeout=10)

    def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._loop.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    async def _until_open(self) -> None:
        while self.is_cut:
            await asyncio.sleep(0.05)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        await self._until_open()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self._until_open()
                data = await reader.read(65536)
                if not data:
                    break
                await self._until_open()  # read just before the cut: held until it heals
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.transport.abort()
            self._writers.discard(writer)
