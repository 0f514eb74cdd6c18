"""Soak with faults: thousands of operations, a worker killed every minute, PostgreSQL restarted once.

    .venv/bin/python bench/soak.py                                # 10,000 operations, 10 minutes
    .venv/bin/python bench/soak.py --short                        # CI's form: 3,000 in 2 minutes
    .venv/bin/python bench/soak.py --ops 2000 --seconds 120       # a short run of your own

Everything runs for real on this machine: a PRIVATE PostgreSQL cluster this script creates
(initdb into a temporary directory, its own port; never the shared server), the fake provider,
one qcluster and one dispatcher. Operations arrive evenly over the first half of the run; each
job finishes at the provider after a log-normal duration (median 60 s, clipped to half the run,
so every job ends before the run does). During the run a worker holding a lease is killed with
SIGKILL every minute and PostgreSQL is restarted once, at 40 % of the run. Then the faults stop
and the run drains until every operation is finished (or a bounded drain time passes) and stops
by itself, removing the cluster.

Counted at the fake provider (its request log) and in the database, it prints: polls/s; dispatch
lag p50/p95/p99 (StatusCheck started - due); requests per job against the pure backoff schedule
(the profile's own schedule, simulated without lag) and against a fixed 2-second poller;
detection delay (job finished at the provider -> operation completed) p50/p95, in seconds and
as a share of the job's duration, beside the pure schedule's own; and the invariants, each of
which must be 0: requests beyond an operation's budget, requests the database never charged, two
requests for one operation closer than its schedule allows, operations lost or stuck.

It fails loudly: the exit status is 1 when any invariant is not 0 (stuck included). Every run
writes under var/soak/<time>/: each process's output (qcluster, dispatcher, fake provider), the
private cluster's log, `soak.log` (what it printed), `timeline.jsonl` (bench/soak_record.py: one
sample a second of provider requests, due operations, leases, django-q2's queue and each
process's liveness) and `stalls.txt` (where every process was when polling stopped). It prints a
per-minute timeline at the end. A run that passes removes its directory (--keep-logs keeps it);
a run that fails keeps it and says where.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._setup import ROOT, django_on_scratch_postgres, free_port, percentile, start_fake_provider
from bench.soak_record import STALL_S, Recorder, load_samples, proc_state, timeline

PG_BIN = Path("/usr/lib/postgresql/15/bin")
# The soak profile's schedule (flags change it): 6 s growing 1.3x a wait up to 30 s, jitter in
# [0.7, 1] x raw. With doubling (--multiplier 2), a job is seen up to about as late again as it ran
# (the pure schedule alone puts p95 near 80 % of the duration); 1.3 keeps that near 45 % for about
# a sixth of a 2-second poller's requests. The report prints the pure schedule's own figures.
BASE_DELAY_S, MULTIPLIER, MAX_DELAY_S, JITTER_FLOOR = 6.0, 1.3, 30.0, 0.7
BUDGET = 60
FIXED_POLLER_S = 2.0
# Where runs keep their evidence; a run's directory is named after its start time.
RUNS_DIR = ROOT / "var" / "soak"
# The fleet's processes start through this, so that SIGUSR1 makes each of them (and every process a
# qcluster forks, which inherits the handler) print every thread's Python stack to its log.
BOOT = (
    "import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
    "from django.core.management import execute_from_command_line; "
    "execute_from_command_line(['manage.py', *sys.argv[1:]])"
)
OUT: Path | None = None  # the run's directory, once made


def say(text: str = "") -> None:
    """Print, and keep the line in the run's soak.log."""
    print(text, flush=True)
    if OUT is not None:
        with (OUT / "soak.log").open("a") as log:
            log.write(text + "\n")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} CPUs, shared with other work"


class PrivateCluster:
    """A throwaway PostgreSQL cluster: initdb into a temporary directory, its own port."""

    def __init__(self, *, log: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pollerdash-soak-"))
        self.log = log
        self.data = self.dir / "data"
        self.port = free_port()
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "root", "--no-sync")
        # The server writes its log as the postgres user, into the run's directory.
        self.log.touch()
        if self.as_postgres:
            shutil.chown(self.log, "postgres", "postgres")
        self._ctl("start")

    def _run(self, *command: str) -> None:
        subprocess.run([*self.as_postgres, *command], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _ctl(self, action: str) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c max_connections=100"
        extra = ["-m", "fast"] if action in ("restart", "stop") else []
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", *extra, action
        )

    @property
    def url(self) -> str:
        return f"postgres://root@127.0.0.1:{self.port}"

    def restart(self) -> None:
        self._ctl("restart")

    def remove(self) -> None:
        try:
            self._ctl("stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class Fleet:
    """One qcluster and one dispatcher, each writing its output to the run's directory.

    WARNING and above: lease expiries, database errors and django-q2's reincarnations (CRITICAL),
    without django-q2's two INFO lines per task."""

    def __init__(self, *, workers: int, out: Path) -> None:
        env = dict(os.environ)
        env.update(LOG_LEVEL="WARNING", Q_WORKERS=str(workers), PYTHONUNBUFFERED="1")
        self.procs = [
            self._start(["qcluster"], env, out / "qcluster.log"),
            self._start(["dispatch_polls"], env, out / "dispatcher.log"),
        ]

    @property
    def roots(self) -> dict[str, int]:
        return {"qcluster": self.procs[0].pid, "dispatcher": self.procs[1].pid}

    @staticmethod
    def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        with log.open("ab") as sink:
            return subprocess.Popen(
                [sys.executable, "-c", BOOT, *command],
                cwd=ROOT,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return all(proc.poll() is None for proc in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def kill_a_leaseholder(recorder: Recorder) -> int | None:
    """SIGKILL one worker process that holds a live lease right now (a poll in flight).

    What the worker was doing in the kernel the moment before (its wchan) goes to the timeline: a
    poll in flight sleeps on the network or the database; a worker that finished its poll between
    the query and the kill waits for its next task on the task queue (anon_pipe_read)."""
    from django.utils import timezone

    from operations.models import Operation

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        owners = (
            # Charged by a worker (a dispatcher's claim not yet taken up names the dispatcher).
            Operation.objects.filter(lease_expires_at__gt=timezone.now(), claimed_at__isnull=True)
            .exclude(lease_owner="")
            .exclude(lease_owner__startswith="dispatcher@")
            .values_list("lease_owner", flat=True)
            .distinct()[:20]
        )
        for owner in owners:
            pid = int(owner.rsplit(":", 1)[1])
            before = proc_state(pid)
            if before is None:
                continue  # gone already (killed earlier, not yet reaped by its sentinel)
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            held = Operation.objects.filter(lease_owner=owner, lease_expires_at__gt=timezone.now()).count()
            wchan = before.wchan
            recorder.event("kill", pid=pid, wchan=wchan, leases=held)
            say(
                f"    killed worker {pid} at {time.time() - recorder.started:.0f} s (wchan {wchan}; {held} leases held)"
            )
            return pid
        time.sleep(0.1)
    return None


def make_profile(
    provider_url: str,
    *,
    name: str = "soak",
    budget: int = BUDGET,
    base_delay_s: float = BASE_DELAY_S,
    max_delay_s: float = MAX_DELAY_S,
):
    """The run's provider profile, its account of the same name (the invariants count by account)."""
    from operations.models import ProviderAccount, ProviderProfile

    profile = ProviderProfile.objects.create(
        slug=name,
        name=name,
        account=name,
        status_url=f"{provider_url}/v1/jobs/{{job_id}}",
        job_id_pattern=r"^[A-Za-z0-9_.:=+-]{1,200}$",
        state_field="state",
        pending_states=["running"],
        success_states=["succeeded"],
        failure_states=["failed"],
        required_result_fields=["result.output_url"],
        base_delay_s=base_delay_s,
        max_delay_s=max_delay_s,
        backoff_multiplier=MULTIPLIER,
        jitter_floor=JITTER_FLOOR,
        rate_limit_per_s=10_000,
        default_max_status_requests=budget,
        default_deadline_s=7200,
    )
    ProviderAccount.objects.get_or_create(name=name)
    return profile


def register(profile, jobs: list[tuple[int, float, float]]) -> None:
    """Create watched operations as registration leaves them (first poll due now), in bulk."""
    watch(profile, [job_name(index, done_at) for index, _, done_at in jobs], budget=BUDGET)


def watch(profile, job_ids: list[str], *, budget: int) -> None:
    """Operations of `profile` watching `job_ids`, first poll due now, as registration leaves them."""
    from django.utils import timezone

    from operations.lifecycle.registration import new_operation_id
    from operations.models import Operation

    now = timezone.now()
    rows = [
        Operation(
            id=new_operation_id(),
            registered_by=f"operator:{profile.account}",
            provider=profile,
            account=profile.account,
            provider_job_id=job_id,
            deadline_at=now + timedelta(hours=2),
            max_status_requests=budget,
            max_transport_failures=5,
            next_poll_at=now,
            created_at=now,
            updated_at=now,
        )
        for job_id in job_ids
    ]
    Operation.objects.bulk_create(rows, batch_size=1000)


def job_name(index: int, done_at: float) -> str:
    return f"timed__done_ms={round(done_at * 1000)}__id=soak-{index}"


def raw_delay(attempt: int) -> float:
    return min(MAX_DELAY_S, BASE_DELAY_S * MULTIPLIER ** min(attempt, 62))


def pure_schedule(duration_s: float, rng: random.Random) -> tuple[int, float]:
    """Requests the profile's schedule makes for a job of this duration with no lag at all, and how
    long after the job finished that schedule sees it."""
    t, attempt, requests = 0.0, 0, 1
    while t < duration_s:
        t += rng.uniform(JITTER_FLOOR * raw_delay(attempt), raw_delay(attempt))
        attempt += 1
        requests += 1
    return requests, t - duration_s


def plan_jobs(args: argparse.Namespace, *, start: float) -> list[tuple[int, float, float]]:
    """(index, arrival, done at the provider): arriving evenly over the first half of the run, each
    running a log-normal duration clipped to half the run (bench/chaos.py plans the same way)."""
    rng = random.Random(args.seed)
    jobs = []
    for index in range(args.ops):
        arrival = start + 2 + args.seconds / 2 * index / args.ops
        duration = min(max(rng.lognormvariate(math.log(args.median), args.sigma), 1.0), args.seconds / 2)
        jobs.append((index, arrival, arrival + duration))
    return jobs


def run_with_faults(args: argparse.Namespace, cluster: PrivateCluster, profile, provider_url: str, out: Path) -> dict:
    start = time.time()
    jobs = plan_jobs(args, start=start)
    arrive_s = args.seconds / 2
    say(
        f"{args.ops:,} jobs arriving over {arrive_s:.0f} s; durations log-normal, median {args.median:.0f} s, "
        f"sigma {args.sigma}, clipped to {args.seconds / 2:.0f} s "
        f"({sum(1 for _, a, d in jobs if d - a >= args.seconds / 2 - 1e-6)} clipped)"
    )
    fleet = Fleet(workers=args.workers, out=out)
    recorder = Recorder(out=out, database_url=os.environ["DATABASE_URL"], provider_url=provider_url, roots=fleet.roots)
    recorder.started = start
    recorder.start()
    kills, restarted, pending = [], None, list(jobs)
    next_kill = start + (args.first_kill if args.first_kill is not None else args.kill_every)
    restart_at = start + args.restart_at * args.seconds
    loads = [load()]
    try:
        while time.time() < start + args.seconds:
            now = time.time()
            due = [job for job in pending if job[1] <= now]
            if due:
                register(profile, due)
                pending = pending[len(due) :]
            if now >= next_kill:
                kills.append(kill_a_leaseholder(recorder))
                next_kill += args.kill_every
            if restarted is None and now >= restart_at:
                began = time.time()
                cluster.restart()
                restarted = time.time() - began
                recorder.event("postgres_restart", seconds=round(restarted, 1))
                say(f"    PostgreSQL restarted at {began - start:.0f} s ({restarted:.1f} s); {load()}")
                from django.db import connections

                connections.close_all()
            if abs(now - (start + args.seconds / 2)) < 0.5 and len(loads) == 1:
                loads.append(load())
            time.sleep(0.2)
        say(
            f"    fault phase over at {time.time() - start:.0f} s: {len(kills)} workers killed "
            f"({sum(1 for k in kills if k)} held a lease); fleet alive: {fleet.alive()}; {load()}"
        )
        drained = drain(args, start)
        loads.append(load())
    finally:
        recorder.stop()
        fleet.stop()
    return {
        "jobs": jobs,
        "start": start,
        "kills": kills,
        "restart_s": restarted,
        "drained": drained,
        "loads": loads,
        "stalls": recorder.stalls,
    }


def drain(args: argparse.Namespace, start: float) -> float:
    """Wait until no operation is left to watch, at most max delay + lease + 60 s."""
    from django.conf import settings
    from django.db import OperationalError

    from operations.models import Operation
    from operations.vocabulary import POLLABLE_STATUSES

    limit = time.time() + MAX_DELAY_S + settings.POLL_LEASE_S + 60
    while time.time() < limit:
        try:
            if not Operation.objects.filter(status__in=sorted(POLLABLE_STATUSES)).exists():
                break
        except OperationalError:
            pass
        time.sleep(1)
    return time.time() - start


def report(result: dict, provider_url: str, *, moments: list[tuple[str, float]] | None = None) -> dict[str, int]:
    """Print the figures; return the invariants (each must be 0). `moments` collects (invariant,
    when the offending request reached the provider) for the invariants that have one."""
    moments = [] if moments is None else moments
    import httpx

    from operations.models import Operation, StatusCheck
    from operations.vocabulary import POLLABLE_STATUSES

    jobs = {job_name(index, done): (arrival, done) for index, arrival, done in result["jobs"]}
    entries = httpx.get(f"{provider_url}/_requests", timeout=120).json()["requests"]
    at_provider: dict[str, list[float]] = defaultdict(list)
    for entry in entries:
        if entry["kind"] == "status" and entry["job_id"] in jobs:
            at_provider[entry["job_id"]].append(entry["at"])
    times = sorted(t for ts in at_provider.values() for t in ts)
    span = (times[-1] - times[0]) if len(times) > 1 else float("nan")
    say(f"status requests at the provider: {len(times):,} in {span:.0f} s = {len(times) / span:.1f} polls/s")

    checks = list(StatusCheck.objects.filter(account="soak").values_list("started_at", "due_at"))
    lags = [(started - due).total_seconds() for started, due in checks if due is not None]
    say(
        f"dispatch lag (StatusCheck started - due), {len(lags):,} checks: p50 {percentile(lags, 50):.3f} s  "
        f"p95 {percentile(lags, 95):.3f} s  p99 {percentile(lags, 99):.3f} s  max {max(lags, default=0):.3f} s"
    )
    ops = {
        row["provider_job_id"]: row
        for row in Operation.objects.filter(account="soak").values(
            "pk",
            "provider_job_id",
            "status",
            "completed_at",
            "status_requests_used",
            "max_status_requests",
            "next_poll_at",
        )
    }
    unanswered: dict[str, list[float]] = defaultdict(list)
    for op_id, sent in StatusCheck.objects.filter(account="soak", received_at__isnull=True).values_list(
        "operation_id", "sent_at"
    ):
        unanswered[op_id].append(sent.timestamp())

    rng = random.Random(7)
    actual = pure = fixed = 0
    pure_shares: list[float] = []
    delays, shares, beyond, uncharged, too_close, lost, stuck, escalated = [], [], 0, 0, 0, 0, 0, 0
    for name, (arrival, done) in jobs.items():
        op = ops.get(name)
        if op is None:
            lost += 1
            continue
        seen = sorted(at_provider.get(name, []))
        duration = done - arrival
        if op["status"] == "succeeded" and op["completed_at"] is not None:
            actual += len(seen)
            pure_requests, pure_delay = pure_schedule(duration, rng)
            pure += pure_requests
            pure_shares.append(pure_delay / duration)
            fixed += 1 + math.ceil(duration / FIXED_POLLER_S)
            delay = op["completed_at"].timestamp() - done
            delays.append(delay)
            shares.append(delay / duration)
        elif op["status"] in POLLABLE_STATUSES:
            # Every job finished at the provider before the fault phase ended, and the drain waited
            # its longest delay, a lease and a minute more: one still watched is stuck.
            if op["next_poll_at"] is None:
                lost += 1
            else:
                stuck += 1
        else:
            escalated += 1
        if len(seen) > op["max_status_requests"]:
            beyond += 1
            moments.append(("requests beyond budget", seen[op["max_status_requests"]]))
        if len(seen) > op["status_requests_used"]:
            uncharged += len(seen) - op["status_requests_used"]
            moments += [("requests never charged", seen[-1])] * (len(seen) - op["status_requests_used"])
        lost_before = unanswered.get(op["pk"], [])
        for i in range(1, len(seen)):
            step = max(0, i - 1 - sum(1 for sent in lost_before if sent <= seen[i - 1] + 0.5))
            floor_s = JITTER_FLOOR * raw_delay(step)
            if seen[i] - seen[i - 1] < floor_s - 0.001:
                too_close += 1
                moments.append(("two requests closer than the schedule allows", seen[i]))
    done_jobs = len(delays)
    say(f"operations: {len(jobs):,} created, {done_jobs:,} succeeded, {escalated} with a person or ended otherwise")
    if done_jobs:
        say(
            f"requests per job: {actual / done_jobs:.2f} (pure backoff schedule {pure / done_jobs:.2f}: "
            f"ratio {actual / pure:.2f}; fixed {FIXED_POLLER_S:.0f} s poller {fixed / done_jobs:.2f}: "
            f"ratio {actual / fixed:.3f})"
        )
        say(
            f"detection delay (done at the provider -> completed): p50 {percentile(delays, 50):.2f} s  "
            f"p95 {percentile(delays, 95):.2f} s; as a share of the job's duration p50 {percentile(shares, 50):.0%}  "
            f"p95 {percentile(shares, 95):.0%} (the pure schedule alone: p50 {percentile(pure_shares, 50):.0%}  "
            f"p95 {percentile(pure_shares, 95):.0%})"
        )
    say(
        f"invariants (each must be 0): requests beyond budget {beyond}, requests never charged {uncharged}, "
        f"two requests closer than the schedule allows {too_close}, operations lost {lost}, stuck {stuck}"
    )
    return {
        "requests beyond budget": beyond,
        "requests never charged": uncharged,
        "two requests closer than the schedule allows": too_close,
        "operations lost": lost,
        "stuck": stuck,
    }


def reported_stalls(out: Path) -> str:
    """When the dispatcher's heartbeat said the fleet had stalled (operations.observability.liveness), by sample."""
    seconds = [
        sample["t"]
        for sample in load_samples(out / "timeline.jsonl")
        if sample.get("beats", {}).get("dispatcher", {}).get("stalled")
    ]
    return f"{len(seconds)} s of the run, from {seconds[0]:.0f} s" if seconds else "never"


# CI's form (make soak-short): a few thousand operations, a kill every 15 s from the 10th second, the
# PostgreSQL restart at 35 %, jobs of a median 20 s; about 3 minutes on this class of machine.
SHORT = {"ops": 3000, "seconds": 120.0, "kill_every": 15.0, "first_kill": 10.0, "restart_at": 0.35, "median": 20.0}


def main() -> None:
    global BASE_DELAY_S, MULTIPLIER, MAX_DELAY_S, JITTER_FLOOR, OUT  # the run's schedule, read throughout
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="CI's short form: " + json.dumps(SHORT))
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=600.0, help="length of the fault phase")
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds between worker kills")
    parser.add_argument("--first-kill", type=float, default=None, help="first kill at (default: --kill-every)")
    parser.add_argument("--restart-at", type=float, default=0.4, help="PostgreSQL restart, share of the fault phase")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--median", type=float, default=60.0, help="median job duration, seconds")
    parser.add_argument("--sigma", type=float, default=0.8, help="log-normal sigma of job durations")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--base", type=float, default=BASE_DELAY_S, help="profile base_delay_s")
    parser.add_argument("--multiplier", type=float, default=MULTIPLIER, help="profile backoff_multiplier")
    parser.add_argument("--max-delay", type=float, default=MAX_DELAY_S, help="profile max_delay_s")
    parser.add_argument("--jitter-floor", type=float, default=JITTER_FLOOR, help="profile jitter_floor")
    parser.add_argument("--keep-logs", action="store_true", help="keep var/soak/<time>/ when the run passes too")
    if parser.parse_known_args()[0].short:
        parser.set_defaults(**SHORT)  # the short form's values, unless a flag says otherwise
    args = parser.parse_args()
    BASE_DELAY_S, MULTIPLIER, MAX_DELAY_S = args.base, args.multiplier, args.max_delay
    JITTER_FLOOR = args.jitter_floor
    # Stopped from outside (CI's time limit, Ctrl-C): the fleet and the private cluster go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    OUT = RUNS_DIR / time.strftime("%Y%m%d-%H%M%S")
    OUT.mkdir(parents=True, exist_ok=True)

    say(
        f"pollerdash soak: {load()}; profile schedule base {BASE_DELAY_S:g} s x {MULTIPLIER:g} a wait up to "
        f"{MAX_DELAY_S:g} s, jitter floor {JITTER_FLOOR:g}; evidence in {OUT.relative_to(ROOT)}/"
    )
    failures: dict[str, int] = {"the soak did not finish": 1}
    cluster = PrivateCluster(log=OUT / "postgres.log")
    try:
        os.environ["BENCH_PG"] = cluster.url
        django_on_scratch_postgres("soak")
        provider, provider_url = start_fake_provider(log=OUT / "provider.log")
        try:
            profile = make_profile(provider_url)
            result = run_with_faults(args, cluster, profile, provider_url, OUT)
            say(f"stopped at {result['drained']:.0f} s; loads seen: {' | '.join(result['loads'])}")
            invariants = report(result, provider_url)
            failures = {name: count for name, count in invariants.items() if count}
            stalls = ", ".join(f"{t:.0f} s" for t in result["stalls"]) or "none"
            say(f"stalls (operations due, no status request for {STALL_S} s or more) began at: {stalls}")
            say(f"the dispatcher's heartbeat reported the fleet stalled: {reported_stalls(OUT)}")
        finally:
            provider.terminate()
            provider.wait(timeout=10)
    finally:
        cluster.remove()
        say()
        say("timeline (per minute; req/s at the provider, the rest the most seen in that minute):")
        for line in timeline(load_samples(OUT / "timeline.jsonl")):
            say("  " + line)
    if failures:
        say(f"SOAK FAILED: {', '.join(f'{name} {count}' for name, count in failures.items())}")
        say(f"logs kept in {OUT}")
        sys.exit(1)
    if args.keep_logs:
        say(f"soak passed; logs kept in {OUT}")
    else:
        shutil.rmtree(OUT, ignore_errors=True)
        print("soak passed; every invariant 0")


if __name__ == "__main__":
    main()
