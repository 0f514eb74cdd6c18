"""Primary failover under load (issue 29 item 2): a primary and its synchronous streaming replica,
the primary's postmaster SIGKILLed, the replica promoted, every process carrying on.

    .venv/bin/python bench/failover.py            # make failover: 1,000 operations, about 2.5 minutes
    .venv/bin/python bench/failover.py --short    # make failover-short (CI): 400 operations
    .venv/bin/python bench/failover.py --async    # the same with an asynchronous replica (what it can lose)

Two PostgreSQL 15 clusters made for the run with Debian's tools on free ports (pg_createcluster,
pg_basebackup -R for the replica, `synchronous_standby_names = 'replica'`, `synchronous_commit =
on`: docs/deployment.md's recommended setting) and dropped at the end (pg_dropcluster --stop); the
shared server on 5432 is never touched. A qcluster, a dispatcher, the audit signer and a web process
run with the multi-host URL `postgres://root@127.0.0.1:P1,127.0.0.1:P2/failover?target_session_attrs=
read-write`, against the fake provider, with soak-style operations arriving; a recorder thread in
this process appends audit entries in a loop and keeps those whose COMMIT returned. Half way, the
primary's postmaster is SIGKILLed and the replica promoted (pg_ctlcluster promote).

Checks, each must be 0: a process restarted or dead (none is restarted by this run), a process that
did no work after the promotion (the dispatcher's polls, the signer's checkpoint, the web's answer),
acknowledged audit commits missing on the promoted server, audit entries left pending, and
bench/chaos.py's invariants (requests after the deadline, two requests for one fence, false
outcomes, audit decisions missing or doubled, a signed tree smaller than an earlier one) and the
soak's (budget, uncharged requests, schedule, lost, stuck). Exit status 1 on any.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import soak
from bench._setup import ROOT, django_on_scratch_postgres, free_port, start_fake_provider
from bench.topology import wait_for_port

RUNS_DIR = ROOT / "var" / "failover"
DATABASE = "failover"
# CI's form: fewer operations over a shorter phase (the drain still waits out a killed poll's lease).
SHORT = {"ops": 400, "seconds": 30.0, "median": 6.0}


def _run(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    """Debian's cluster tools run as root (they act as the cluster's owner, postgres)."""
    return subprocess.run(command, check=check, capture_output=True, text=True)


class ReplicatedPair:
    """A primary and a streaming replica, each its own Debian cluster on a free port."""

    def __init__(self, *, synchronous: bool) -> None:
        tag = f"pdfo{os.getpid()}"
        self.names = (f"{tag}a", f"{tag}b")
        self.ports = (free_port(), free_port())
        self.created: list[str] = []
        try:
            self._create(synchronous=synchronous)
        except BaseException:
            self.drop()
            raise

    def _create(self, *, synchronous: bool) -> None:
        settings = [
            "listen_addresses = '127.0.0.1'",
            "max_connections = 100",
            "synchronous_commit = on",
            # docs/deployment.md: a host cut off mid-transaction keeps its row locks (a provider
            # account's) until the server ends its session; this bounds that to 5 s.
            "idle_in_transaction_session_timeout = '5s'",
        ]
        for name, port in zip(self.names, self.ports, strict=True):
            _run("pg_createcluster", "15", name, "-p", str(port), "--", "-A", "trust")
            self.created.append(name)
            Path(f"/etc/postgresql/15/{name}/conf.d/failover.conf").write_text("\n".join(settings) + "\n")
        primary, replica = self.names
        _run("pg_ctlcluster", "15", primary, "start")
        self.psql(0, "CREATE ROLE root SUPERUSER LOGIN REPLICATION", user="postgres")
        data = Path(f"/var/lib/postgresql/15/{replica}")
        for entry in data.iterdir():  # emptied, kept: postgres may not create it in its parent
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        conninfo = f"host=127.0.0.1 port={self.ports[0]} user=root application_name=replica"
        _run(
            "runuser",
            "-u",
            "postgres",
            "--",
            "pg_basebackup",
            "-d",
            conninfo,
            "-D",
            str(data),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        )
        _run("pg_ctlcluster", "15", replica, "start")
        if synchronous:
            # Only now (a commit would wait for a standby not there yet), and on the primary only: the
            # promoted replica has no standby of its own, and must not wait for one.
            self.psql(0, "ALTER SYSTEM SET synchronous_standby_names = 'replica'")
            self.psql(0, "SELECT pg_reload_conf()")
        want = "sync" if synchronous else "async"
        deadline = time.monotonic() + 60
        while self.psql(0, "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'replica'") != want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica did not reach the {want} state")
            time.sleep(0.2)

    def psql(self, index: int, sql: str, *, user: str = "root") -> str:
        command = ["psql", "-h", "127.0.0.1", "-p", str(self.ports[index]), "-U", user, "-d", "postgres"]
        return _run(*command, "-Atc", sql).stdout.strip()

    @property
    def server(self) -> str:
        """The multi-host base URL of the pair, as the processes are configured (no database)."""
        return f"postgres://root@127.0.0.1:{self.ports[0]},127.0.0.1:{self.ports[1]}"

    def kill_primary(self) -> int:
        """SIGKILL the primary's postmaster (its backends notice and exit). Returns its pid."""
        pid = int(Path(f"/var/lib/postgresql/15/{self.names[0]}/postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        return pid

    def promote(self) -> None:
        _run("pg_ctlcluster", "15", self.names[1], "promote")

    def drop(self) -> None:
        for name in reversed(self.created):
            _run("pg_dropcluster", "--stop", "15", name, check=False)
            # What pg_dropcluster leaves: the config directory (our conf.d file in it) and the log.
            shutil.rmtree(f"/etc/postgresql/15/{name}", ignore_errors=True)
            Path(f"/var/log/postgresql/postgresql-15-{name}.log").unlink(missing_ok=True)


class AckedAppends:
    """Appends an audit entry per transaction in a loop through the multi-host URL and keeps the
    (id, leaf hash) of every one whose COMMIT returned: what a client was told is committed."""

    def __init__(self) -> None:
        self.acked: list[tuple[int, str]] = []
        self.failures = 0
        self.outage: list[float] = []  # when commits failed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from django.db import DatabaseError, connection, transaction

        from operations.audit import entries

        number = 0
        while not self._stop.is_set():
            number += 1
            try:
                with transaction.atomic():
                    row = entries.append(
                        entry_type="human.inspect",
                        actor={"kind": "user", "id": "failover-recorder"},
                        operation_id=None,
                        data={"decision_id": number},
                    )
                self.acked.append((row.id, row.entry_hash))
            except DatabaseError:
                self.failures += 1
                self.outage.append(time.time())
                connection.close()
                time.sleep(0.2)
            self._stop.wait(0.02)
        connection.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def start(name: str, command: list[str], env: dict[str, str], out: Path) -> subprocess.Popen:
    with (out / f"{name}.log").open("ab") as sink:
        return subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )


def fleet(url: str, key: Path, out: Path, web_port: int) -> dict[str, subprocess.Popen]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=url,
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        Q_WORKERS="2",
        AUDIT_SIGNING_KEY_FILE=str(key),
        METRICS_ALLOW_LOOPBACK="1",
    )
    manage = [sys.executable, "-c", soak.BOOT]
    uvicorn = [sys.executable, "-m", "uvicorn", "pollerdash.asgi:application", "--host", "127.0.0.1"]
    return {
        "qcluster": start("qcluster", [*manage, "qcluster"], env, out),
        "dispatcher": start("dispatcher", [*manage, "dispatch_polls"], env, out),
        "signer": start("signer", [*manage, "audit_checkpoint", "--loop"], env, out),
        "web": start("web", [*uvicorn, "--port", str(web_port), "--lifespan", "off", "--no-access-log"], env, out),
    }


def with_retry(action, what: str, *, seconds: float = 60.0):
    """This process's own queries across the failover: a dropped connection is closed and the
    query tried again (Django reconnects through the multi-host URL)."""
    from django.db import DatabaseError, connection

    deadline = time.monotonic() + seconds
    while True:
        try:
            return action()
        except DatabaseError:
            connection.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: no database for {seconds:.0f} s") from None
            time.sleep(0.3)


def run(args: argparse.Namespace, *, pair: ReplicatedPair, out: Path, provider_url: str) -> dict:
    import httpx

    from operations.audit import checkpoints

    key = out / "audit-signing-key.pem"
    checkpoints.generate_key_file(key)
    profile = soak.make_profile(provider_url)
    web_port = free_port()
    procs = fleet(os.environ["DATABASE_URL"], key, out, web_port)
    wait_for_port(web_port, timeout=120, what="the web process")
    pids = {name: proc.pid for name, proc in procs.items()}
    recorder = AckedAppends()
    jobs = soak.plan_jobs(args, start=time.time())
    begin, pending, killed_at = time.time(), list(jobs), None
    try:
        while time.time() < begin + args.seconds:
            due = [job for job in pending if job[1] <= time.time()]
            if due:
                with_retry(lambda due=due: soak.register(profile, due), "registering")
                pending = pending[len(due) :]
            if killed_at is None and time.time() >= begin + args.seconds * args.kill_at:
                killed_at = time.time()
                postmaster = pair.kill_primary()
                pair.promote()
                soak.say(
                    f"    {killed_at - begin:5.0f} s  primary's postmaster {postmaster} SIGKILLed, replica promoted"
                    f" in {time.time() - killed_at:.1f} s; {soak.load()}"
                )
            time.sleep(0.2)
        drained = with_retry(lambda: soak.drain(args, begin), "draining", seconds=300)
        # The signer signs every 60 s: a drain quicker than that must not read as a signer that
        # stopped after the promotion, so wait (boundedly) for its next checkpoint.
        with_retry(lambda: _signed_after(killed_at, seconds=150), "waiting for the signer", seconds=300)
        recorder.stop()
        try:
            web = httpx.get(f"http://127.0.0.1:{web_port}/metrics", timeout=30).status_code == 200
        except httpx.HTTPError:
            web = False
        alive = {name: proc.poll() is None and proc.pid == pids[name] for name, proc in procs.items()}
    finally:
        recorder.stop()
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    return {
        "jobs": jobs,
        "start": begin,
        "drained": drained,
        "killed_at": killed_at,
        "recorder": recorder,
        "alive": alive,
        "web_answering": 2 if web else 1,  # chaos.topology_invariants counts two web processes
    }


def _signed_after(moment: float | None, *, seconds: float) -> bool:
    """Whether a checkpoint was signed after `moment`, waiting up to `seconds` for one."""
    from operations.models import AuditCheckpoint

    if moment is None:
        return False
    after = datetime.fromtimestamp(moment, UTC)
    deadline = time.monotonic() + seconds
    while not AuditCheckpoint.objects.filter(signed_at__gt=after).exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


def failover_invariants(result: dict) -> dict[str, int]:
    from operations.models import AuditCheckpoint, AuditEntry, StatusCheck

    recorder: AckedAppends = result["recorder"]
    after = datetime.fromtimestamp(result["killed_at"], UTC)
    acked = dict(recorder.acked)
    present = dict(AuditEntry.objects.filter(pk__in=list(acked)).values_list("pk", "entry_hash"))
    missing = sum(1 for pk, leaf in acked.items() if present.get(pk) != leaf)
    outage = (max(recorder.outage) - result["killed_at"]) if recorder.outage else 0.0
    soak.say(
        f"recorder: {len(acked):,} audit commits acknowledged, {recorder.failures} refused while the primary was"
        f" gone; commits again {outage:.1f} s after the kill"
    )
    polls_after = StatusCheck.objects.filter(account="soak", started_at__gt=after).count()
    signed_after = AuditCheckpoint.objects.filter(signed_at__gt=after).count()
    soak.say(f"after the promotion: {polls_after:,} polls, {signed_after} checkpoints signed")
    return {
        "processes restarted or dead": sum(1 for alive in result["alive"].values() if not alive),
        "acknowledged audit commits missing after the promotion": missing,
        "audit entries left pending": AuditEntry.objects.filter(seq__isnull=True).count(),
        "no poll after the promotion": int(polls_after == 0),
        "no checkpoint signed after the promotion": int(signed_after == 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the load phase")
    parser.add_argument("--kill-at", type=float, default=0.5, help="when the primary dies, share of the phase")
    parser.add_argument("--median", type=float, default=10.0, help="median job duration, seconds")
    parser.add_argument("--sigma", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--async", dest="asynchronous", action="store_true", help="an asynchronous replica")
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--short", action="store_true", help=f"CI's short form: {SHORT}")
    if parser.parse_known_args()[0].short:
        parser.set_defaults(**SHORT)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = RUNS_DIR / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    soak.OUT = out
    mode = "asynchronous" if args.asynchronous else "synchronous"
    soak.say(f"pollerdash failover ({mode} replica): {soak.load()}; evidence in {out.relative_to(ROOT)}/")
    failures: dict[str, int] = {"the run did not finish": 1}
    pair = ReplicatedPair(synchronous=not args.asynchronous)
    try:
        os.environ["BENCH_PG"] = pair.server
        # The multi-host URL's query string goes after the database name.
        url = django_on_scratch_postgres(DATABASE, query="target_session_attrs=read-write")
        soak.say(f"DATABASE_URL={url}")
        provider, provider_url = start_fake_provider(log=out / "provider.log")
        try:
            from bench import chaos

            result = run(args, pair=pair, out=out, provider_url=provider_url)
            invariants = soak.report(result, provider_url)
            invariants |= chaos.topology_invariants(result)
            invariants |= failover_invariants(result)
            soak.say("invariants (each must be 0): " + ", ".join(f"{k} {v}" for k, v in invariants.items()))
            failures = {name: count for name, count in invariants.items() if count}
        finally:
            provider.terminate()
            provider.wait(timeout=10)
    finally:
        from django.db import connections

        connections.close_all()
        pair.drop()
    if failures:
        soak.say(f"FAILOVER FAILED: {', '.join(f'{name} {count}' for name, count in failures.items())}")
        soak.say(f"logs kept in {out}")
        sys.exit(1)
    if not args.keep_logs:
        shutil.rmtree(out, ignore_errors=True)
    print("failover passed; every invariant 0")


if __name__ == "__main__":
    main()
