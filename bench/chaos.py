"""The fault run: the production topology, one fault after another, one command.

    .venv/bin/python bench/chaos.py            # make chaos: 6,000 operations, faults 60 s apart, a 90 s partition
    .venv/bin/python bench/chaos.py --short    # make chaos-short (CI): 2,000 operations, 10 s partition, < 5 min
    .venv/bin/python bench/chaos.py --direct   # the same straight to PostgreSQL (make chaos-direct[-short])

Everything runs on 127.0.0.1 and stops by itself: two PRIVATE PostgreSQL clusters, a primary and
its synchronous replica (bench/failover.py's pair; never the shared server), the fake provider, two
"hosts" each with a qcluster and a dispatcher, two web processes (uvicorn) and the audit signer.
Through PgBouncer (the default): PgBouncer in transaction pooling in front of the primary
(bench/topology.py), every process with DATABASE_POOL_MODE=transaction, host A through a TCP proxy
that can be cut; `--direct`: every process on the pair's multi-host URL, host A through a cuttable
proxy to each server. Operations of the soak's kind (each job finishes at the provider after a
log-normal duration) arrive over the first half of the fault phase, and the run injects, in
sequence: SIGKILL of host B's qcluster (restarted at once, as a supervisor would), SIGKILL of host
A's dispatcher (restarted), host A cut off from the database for --partition-s, a primary failover
(the primary's postmaster SIGKILLed, the replica promoted; through PgBouncer, PgBouncer is then
repointed at it with a reload, as a failover manager does, and the processes keep their URL), and
last a PgBouncer restart (direct: a restart of the promoted server). Then it drains until every
operation is finished. This process's own queries use the pair's multi-host URL. A recorder thread
appends audit entries throughout (each whose COMMIT returned must be on the promoted server), and a
decider closes, through the decision service, the cards that jobs of their own account open
throughout (bench/chaos_decisions.py).

It prints, per fault, the recovery time (from the fault to the first 5 s whose dispatch lag p95 is
at most 1 s) and the invariants that have a moment (the offending request's), counted from that
fault to the next; then, in total, the invariants, each of which must be 0: the soak's (requests
over budget, never charged, closer than the schedule allows, operations lost or stuck;
bench/soak.py `report`), the topology's (requests after the deadline, two requests for one fence,
false outcomes, audit decisions missing or doubled for an answered request, a signed tree smaller
than one signed before, a web process not answering at the end, an acknowledged audit commit
missing after the failover) and the decider's (decisions returned applied and then lost, cards
decided twice, cards left undecided). Exit status 1 on any.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import chaos_decisions, soak
from bench._setup import ROOT, django_on_scratch_postgres, free_port, percentile, start_fake_provider
from bench.failover import AckedAppends, ReplicatedPair, with_retry
from bench.topology import Partition, PgBouncer, wait_for_port

RUNS_DIR = ROOT / "var" / "chaos"
SHORT = {"ops": 2000, "seconds": 150.0, "fault_every": 22.0, "partition_s": 10.0, "median": 15.0}
FAULTS = ("kill qcluster", "kill dispatcher", "partition", "primary failover")


class ThroughPgBouncer:
    """Every process through PgBouncer in transaction pooling; host A through a cuttable proxy to it.
    The failover repoints PgBouncer at the promoted replica; the last fault restarts PgBouncer."""

    last_fault = "pgbouncer restart"
    pool_mode = "transaction"

    def __init__(self, *, pair: ReplicatedPair, database: str) -> None:
        self.pair = pair
        self.bouncer = PgBouncer(upstream_port=pair.ports[0])
        self.partition = Partition(port=self.bouncer.port)
        url = self.bouncer.url(database)
        self.urls = {"a": url.replace(f":{self.bouncer.port}/", f":{self.partition.port}/"), "b": url}

    def cut(self) -> None:
        self.partition.cut()

    def heal(self) -> None:
        self.partition.heal()

    def failover(self) -> str:
        postmaster = self.pair.kill_primary()
        self.pair.promote()
        self.bouncer.repoint(upstream_port=self.pair.ports[1])
        return f"the primary's postmaster {postmaster} SIGKILLed, the replica promoted, PgBouncer repointed at it"

    def last(self) -> str:
        self.bouncer.restart()
        return "PgBouncer killed and started again (every client connection dropped)"

    def stop(self) -> None:
        self.partition.stop()
        self.bouncer.stop()


class Direct:
    """Every process straight to PostgreSQL on the pair's multi-host URL; host A through a cuttable
    proxy to each server. The failover is the promotion alone (libpq finds the new primary); the
    last fault restarts the promoted server."""

    last_fault = "postgres restart"
    pool_mode = "session"

    def __init__(self, *, pair: ReplicatedPair, database: str) -> None:
        self.pair = pair
        self.partitions = [Partition(port=port) for port in pair.ports]
        tail = f"/{database}?target_session_attrs=read-write"
        hosts_a = ",".join(f"127.0.0.1:{partition.port}" for partition in self.partitions)
        self.urls = {"a": f"postgres://root@{hosts_a}{tail}", "b": f"{pair.server}{tail}"}

    def cut(self) -> None:
        for partition in self.partitions:
            partition.cut()

    def heal(self) -> None:
        for partition in self.partitions:
            partition.heal()

    def failover(self) -> str:
        postmaster = self.pair.kill_primary()
        self.pair.promote()
        return (
            f"the primary's postmaster {postmaster} SIGKILLed, the replica promoted (processes on the multi-host URL)"
        )

    def last(self) -> str:
        started = time.monotonic()
        subprocess.run(
            ["pg_ctlcluster", "15", self.pair.names[1], "restart", "-m", "fast"], check=True, capture_output=True
        )
        return f"the promoted primary restarted (fast shutdown) in {time.monotonic() - started:.1f} s"

    def stop(self) -> None:
        for partition in self.partitions:
            partition.stop()


class Topology:
    """The processes: two hosts (qcluster + dispatcher), two web processes, the signer."""

    def __init__(self, *, out: Path, route: ThroughPgBouncer | Direct, key: Path) -> None:
        self.out = out
        base = dict(os.environ)
        base.update(
            LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
            Q_WORKERS="2",
            AUDIT_SIGNING_KEY_FILE=str(key),
            METRICS_ALLOW_LOOPBACK="1",
        )
        if route.pool_mode == "transaction":
            base["DATABASE_POOL_MODE"] = "transaction"
        self.env = {host: {**base, "DATABASE_URL": url} for host, url in route.urls.items()}
        self.procs: dict[str, subprocess.Popen] = {}
        self.web_ports = [free_port(), free_port()]
        try:
            for host in ("a", "b"):
                self.start(f"qcluster-{host}")
                self.start(f"dispatcher-{host}")
            for index in range(2):
                self.start(f"web-{index}")
            self.start("signer")
            for port in self.web_ports:
                wait_for_port(port, timeout=120, what="a web process")
        except BaseException:
            self.stop()
            raise

    def start(self, name: str) -> None:
        kind, _, host = name.partition("-")
        env = self.env["a" if host == "a" else "b"]
        if kind == "web":
            command = [sys.executable, "-m", "uvicorn", "pollerdash.asgi:application", "--host", "127.0.0.1"]
            command += ["--port", str(self.web_ports[int(host)]), "--lifespan", "off", "--no-access-log"]
        else:
            manage = {
                "qcluster": ["qcluster"],
                "dispatcher": ["dispatch_polls"],
                "signer": ["audit_checkpoint", "--loop"],
            }
            command = [sys.executable, "-c", soak.BOOT, *manage[kind]]
        with (self.out / f"{name}.log").open("ab") as sink:
            self.procs[name] = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill(self, name: str) -> None:
        """SIGKILL the process and everything it forked; a supervisor starts it again."""
        try:
            os.killpg(self.procs[name].pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.procs[name].wait(timeout=10)
        self.start(name)

    def web_answering(self) -> int:
        import httpx

        answering = 0
        for port in self.web_ports:
            try:
                answering += httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 200
            except httpx.HTTPError:
                pass
        return answering

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def inject(name: str, *, topology: Topology, route: ThroughPgBouncer | Direct, args: argparse.Namespace) -> str:
    """The fault, as it happens; returns what was done."""
    if name == "kill qcluster":
        topology.kill("qcluster-b")
        return "host B's qcluster (sentinel and workers) SIGKILLed, started again"
    if name == "kill dispatcher":
        topology.kill("dispatcher-a")
        return "host A's dispatcher SIGKILLed, started again"
    if name == "partition":
        route.cut()
        time.sleep(args.partition_s)  # the length of the outage itself
        route.heal()
        return f"host A cut off from the database for {args.partition_s:g} s, then healed"
    if name == "primary failover":
        return route.failover()
    return route.last()


def recovery_s(fault_at: float, *, window: float = 5.0, until: float) -> float | None:
    """From the fault to the start of the first `window`-second span (in 1 s steps) whose dispatch
    lag p95 is <= 1 s: 0 when the fault never pushed it over."""
    from datetime import UTC, datetime

    from operations.models import StatusCheck

    rows = StatusCheck.objects.filter(
        account="soak", started_at__gte=datetime.fromtimestamp(fault_at, UTC), due_at__isnull=False
    ).values_list("started_at", "due_at")
    lags = sorted((started.timestamp(), (started - due).total_seconds()) for started, due in rows)
    start = fault_at
    while start < until:
        inside = [lag for at, lag in lags if start <= at < start + window]
        if len(inside) >= 5 and percentile(inside, 95) <= 1.0:
            return start - fault_at
        start += 1.0
    return None


def topology_invariants(result: dict, *, moments: list[tuple[str, float]] | None = None) -> dict[str, int]:
    """The invariants the soak does not count; `moments` as in bench/soak.py's `report`."""
    from django.db.models import Count, F, Max

    moments = [] if moments is None else moments

    from operations.models import AuditCheckpoint, AuditEntry, Operation, StatusCheck

    checks = StatusCheck.objects.filter(account="soak")
    late = list(checks.filter(sent_at__gt=F("operation__deadline_at")).values_list("sent_at", flat=True))
    after_deadline = len(late)
    moments += [("requests after the deadline", sent.timestamp()) for sent in late]
    doubled_fences = checks.values("operation_id", "fence").annotate(n=Count("id"), last=Max("sent_at")).filter(n__gt=1)
    per_fence = len(doubled_fences)
    moments += [("two requests for one fence", row["last"].timestamp()) for row in doubled_fences]
    done_at = {soak.job_name(index, done): done for index, _, done in result["jobs"]}
    false = 0
    for job, status, completed in Operation.objects.filter(account="soak").values_list(
        "provider_job_id", "status", "completed_at"
    ):
        ended_wrongly = status in {"failed", "cancelled", "expired"}
        early = completed is not None and completed.timestamp() < done_at.get(job, 0) - 0.001
        false += int(ended_wrongly or early)
    answered = dict(
        checks.exclude(decision="").values("operation_id").annotate(n=Count("id")).values_list("operation_id", "n")
    )
    decided = dict(
        AuditEntry.objects.filter(type="controller.decision", operation_id__in=list(answered))
        .values("operation_id")
        .annotate(n=Count("id"))
        .values_list("operation_id", "n")
    )
    missing = sum(max(0, n - decided.get(op, 0)) for op, n in answered.items())
    doubled = sum(max(0, decided.get(op, 0) - n) for op, n in answered.items())
    signed = list(AuditCheckpoint.objects.order_by("signed_at", "pk").values_list("size", "signed_at"))
    shrunk = [at for (before, _), (after, at) in zip(signed, signed[1:], strict=False) if after < before]
    smaller = len(shrunk)
    moments += [("signed trees smaller than an earlier one", at.timestamp()) for at in shrunk]
    return {
        "requests after the deadline": after_deadline,
        "two requests for one fence": per_fence,
        "false outcomes": false,
        "audit decisions missing for an answered request": missing,
        "audit decisions recorded twice": doubled,
        "signed trees smaller than an earlier one": smaller,
        "web processes not answering at the end": 2 - result["web_answering"],
    }


def run(args: argparse.Namespace, *, out: Path, pair: ReplicatedPair, provider_url: str) -> dict:
    from operations.audit import checkpoints

    key = out / "audit-signing-key.pem"
    checkpoints.generate_key_file(key)
    profile = soak.make_profile(provider_url)
    route = Direct(pair=pair, database="chaos") if args.direct else ThroughPgBouncer(pair=pair, database="chaos")
    faults_planned = (*FAULTS, route.last_fault)
    try:
        topology = Topology(out=out, route=route, key=key)
    except BaseException:
        route.stop()
        raise
    recorder = AckedAppends()
    cards = chaos_decisions.make_profile(provider_url)
    decider = chaos_decisions.Decider()
    jobs = soak.plan_jobs(args, start=time.time())
    start, pending, faults, opened = time.time(), list(jobs), [], 0
    next_fault = start + args.fault_every
    try:
        while time.time() < start + args.seconds:
            due = [job for job in pending if job[1] <= time.time()]
            if due:
                with_retry(lambda due=due: soak.register(profile, due), "registering")
                pending = pending[len(due) :]
                # A card to decide for every 50 jobs, opening throughout the faults.
                count = (len(jobs) - len(pending)) // 50 - opened
                if count > 0:
                    with_retry(lambda count=count: chaos_decisions.register(cards, count), "registering")
                    opened += count
            if len(faults) < len(faults_planned) and time.time() >= next_fault:
                name = faults_planned[len(faults)]
                at = time.time()
                what = inject(name, topology=topology, route=route, args=args)
                faults.append({"name": name, "at": at, "what": what})
                soak.say(f"    {at - start:5.0f} s  {name}: {what}; {soak.load()}")
                next_fault = time.time() + args.fault_every
            time.sleep(0.2)
        drained = with_retry(lambda: soak.drain(args, start), "draining", seconds=300)
        with_retry(lambda: chaos_decisions.wait_for_cards(seconds=120), "waiting for the cards", seconds=300)
        recorder.stop()
        decider.stop()
        web = topology.web_answering()
    finally:
        recorder.stop()
        decider.stop()
        topology.stop()
        route.stop()
    return {
        "jobs": jobs,
        "start": start,
        "faults": faults,
        "drained": drained,
        "web_answering": web,
        "recorder": recorder,
        "decider": decider,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help=f"CI's short form: {SHORT}")
    parser.add_argument("--ops", type=int, default=6000)
    parser.add_argument("--seconds", type=float, default=420.0, help="length of the fault phase")
    parser.add_argument("--fault-every", type=float, default=60.0, help="seconds between faults")
    parser.add_argument("--partition-s", type=float, default=90.0, help="how long host A is cut off")
    parser.add_argument("--median", type=float, default=40.0, help="median job duration, seconds")
    parser.add_argument("--sigma", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--direct", action="store_true", help="every process straight to PostgreSQL, no PgBouncer")
    parser.add_argument("--keep-logs", action="store_true")
    if parser.parse_known_args()[0].short:
        parser.set_defaults(**SHORT)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from django.db import connections

    out = RUNS_DIR / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    soak.OUT = out
    mode = "straight to PostgreSQL" if args.direct else "through PgBouncer"
    soak.say(f"pollerdash chaos, {mode}: {soak.load()}; evidence in {out.relative_to(ROOT)}/")
    failures: dict[str, int] = {"the run did not finish": 1}
    pair = ReplicatedPair(synchronous=True)
    # The decider closes cards faster than a person's decision rate limit allows one person.
    os.environ["DECISIONS_PER_MINUTE"] = "100000"
    try:
        os.environ["BENCH_PG"] = pair.server
        # This process's own queries follow the failover through the multi-host URL.
        django_on_scratch_postgres("chaos", query="target_session_attrs=read-write")
        provider, provider_url = start_fake_provider(log=out / "provider.log")
        try:
            result = run(args, out=out, pair=pair, provider_url=provider_url)
            connections.close_all()  # this process's connection may predate the failover
            failures = with_retry(lambda: report(result, provider_url), "reporting")
        finally:
            provider.terminate()
            provider.wait(timeout=10)
    finally:
        connections.close_all()
        for name in pair.names:
            log = Path(f"/var/log/postgresql/postgresql-15-{name}.log")
            if log.exists():
                shutil.copy(log, out / f"postgres-{name[-1]}.log")
        pair.drop()
    if failures:
        soak.say(f"CHAOS FAILED: {', '.join(f'{name} {count}' for name, count in failures.items())}")
        soak.say(f"logs kept in {out}")
        sys.exit(1)
    if not args.keep_logs:
        shutil.rmtree(out, ignore_errors=True)
    print("chaos passed; every invariant 0")


def report(result: dict, provider_url: str) -> dict[str, int]:
    soak.say(f"drained at {result['drained']:.0f} s; {soak.load()}")
    end = result["start"] + result["drained"]
    moments: list[tuple[str, float]] = []
    invariants = soak.report(result, provider_url, moments=moments)
    invariants |= topology_invariants(result, moments=moments)
    invariants["acknowledged audit commits missing after the failover"] = acked_missing(result["recorder"])
    invariants |= chaos_decisions.decisions_lost(result["decider"], say=soak.say)
    soak.say("per fault (recovery: fault -> the first 5 s whose dispatch lag p95 is <= 1 s; invariants with a")
    soak.say("moment, counted from this fault to the next):")
    unrecovered = 0
    spans = [*result["faults"], {"name": "end", "at": end}]
    soak.say(f"  before the first fault: {_counted(moments, result['start'] - 3600, spans[0]['at'])}")
    for fault, following in zip(spans, spans[1:], strict=False):
        seconds = recovery_s(fault["at"], until=end)
        unrecovered += seconds is None
        recovery = "never" if seconds is None else f"{seconds:.0f} s"
        # The drain is part of the last fault's span: late effects of any fault show there.
        until = following["at"] if following["name"] != "end" else float("inf")
        lag = _lag_p95(fault["at"], min(until, end))
        soak.say(f"  {fault['name']}: recovered in {recovery}, lag p95 {lag}; {_counted(moments, fault['at'], until)}")
    invariants["faults never recovered from"] = unrecovered
    soak.say("in total (each must be 0): " + ", ".join(f"{name} {count}" for name, count in invariants.items()))
    return {name: count for name, count in invariants.items() if count}


def _lag_p95(start: float, until: float) -> str:
    """The dispatch lag p95 of the polls started in [start, until): where a slow span is."""
    from datetime import UTC, datetime

    from operations.models import StatusCheck

    rows = StatusCheck.objects.filter(
        account="soak",
        started_at__gte=datetime.fromtimestamp(start, UTC),
        started_at__lt=datetime.fromtimestamp(until, UTC),
        due_at__isnull=False,
    ).values_list("started_at", "due_at")
    lags = [(started - due).total_seconds() for started, due in rows]
    return f"{percentile(lags, 95):.2f} s over {len(lags):,} polls" if lags else "no polls"


def _counted(moments: list[tuple[str, float]], start: float, until: float) -> str:
    inside: dict[str, int] = {}
    for name, at in moments:
        if start <= at < until:
            inside[name] = inside.get(name, 0) + 1
    return ", ".join(f"{name} {count}" for name, count in sorted(inside.items())) or "every invariant 0"


def acked_missing(recorder: AckedAppends) -> int:
    """Audit entries whose COMMIT returned to the recorder, absent or different after the failover."""
    from operations.models import AuditEntry

    acked = dict(recorder.acked)
    present = dict(AuditEntry.objects.filter(pk__in=list(acked)).values_list("pk", "entry_hash"))
    soak.say(f"recorder: {len(acked):,} audit commits acknowledged, {recorder.failures} refused during the faults")
    return sum(1 for pk, leaf in acked.items() if present.get(pk) != leaf)


if __name__ == "__main__":
    main()
