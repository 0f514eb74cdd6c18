"""Dispatch benchmarks: real `dispatch_polls` + `qcluster` processes, PostgreSQL, the fake provider.

    .venv/bin/python bench/dispatch.py [--quick] [--workers 4] [--clusters 1] [--rates 300,450,600,750] [--skip-burst]
    .venv/bin/python bench/dispatch.py --operations 100000   # issue 29: (a), then (s)

(a) steady state: 10,000 watched operations, each polled every 100 s (about 100 polls/s due):
    dispatch lag p50/p95/p99 (StatusCheck.started_at - due time) and sustained polls/s.
(b) ceiling: due rates stepped up until lag p95 exceeds 1 s; the highest rate held, next to a bare
    keep-alive httpx GET loop against the same fake provider in the same run, as a ratio.
(c) fleet burst: 1,000 operations registered in the same second on a provider account limited to
    20 requests/s: the most requests the provider sees in any one second, next to a naive poller
    that polls every job every 5 s from the moment it is registered.

(s) scale (`--operations N`, instead of (b) and (c)): 100 polls/s due over 6,000 of (a)'s operations as
    a same-run reference, then again after N in all (the rest finished), 1,000 open cards and
    10,000,000 audit entries are built in set-based SQL (bench/scale.py) and VACUUM ANALYZE ran.

Prints figures and ratios; asserts nothing. The machine's load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._setup import ROOT, django_on_scratch_postgres, percentile, start_fake_provider

DB_NAME = os.environ.get("BENCH_DISPATCH_DB", "pollerdash_bench_dispatch")
FOREVER = 10**9  # the `bench` scenario never finishes within a run


@dataclass
class Sizes:
    steady_ops: int
    steady_period_s: float
    steady_s: float
    step_s: float
    rates: tuple[int, ...]
    burst_ops: int
    burst_watch_s: float


FULL = Sizes(10_000, 100.0, 60.0, 10.0, (150, 300, 450, 600, 750), 1_000, 15.0)  # up to the target (600)
QUICK = Sizes(2_000, 20.0, 12.0, 4.0, (100, 200), 300, 5.0)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def max_in_any_second(times: list[float]) -> int:
    ordered = sorted(times)
    best, start = 0, 0
    for end, moment in enumerate(ordered):
        while moment - ordered[start] >= 1.0:
            start += 1
        best = max(best, end - start + 1)
    return best


class Fleet:
    """pollerdash's processes for the benchmark, on the scratch database."""

    def __init__(self, *, clusters: int, workers: int) -> None:
        env = dict(os.environ)
        env.update(LOG_LEVEL="WARNING", Q_WORKERS=str(workers), PYTHONUNBUFFERED="1")
        self.procs = []
        for _ in range(clusters):
            self.procs.append(self._start(["qcluster"], env))
        self.procs.append(self._start(["dispatch_polls"], env))

    @staticmethod
    def _start(command: list[str], env: dict[str, str]) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "manage.py", *command],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def cpu_s(self) -> float:
        """CPU seconds used so far by the fleet's process groups (qcluster forks its workers)."""
        groups = {proc.pid for proc in self.procs}
        return sum(_cpu_of(pid) for pid in _pids() if _group(pid) in groups)

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu_of(pid: int) -> float:
    """CPU seconds of a process plus those of its children that already exited (workers recycle)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_s() -> float:
    """CPU seconds used so far by the whole PostgreSQL server (backends come and go)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    postmaster = int((_stat(backend) or ["", "0"])[1])
    children = [pid for pid in _pids() if (_stat(pid) or ["", ""])[1] == str(postmaster)]
    return _cpu_of(postmaster) + sum(_cpu_of(pid) for pid in children)


class DatabaseBackendsCpu:
    """CPU seconds used by the PostgreSQL backends serving this benchmark's database, while running.

    Backends come and go (a connection is replaced after CONN_MAX_AGE, a worker is recycled), so a
    thread samples them every `every_s` and adds up each backend's CPU from its first sample to its
    last: a floor (a backend's last fraction of a period before it exits is missed). The server's
    other databases (other sessions' tests on a shared machine) and its own background processes
    (WAL writer, checkpointer) are left out.
    """

    def __init__(self, url: str, every_s: float = 0.25) -> None:
        import psycopg

        self._conn = psycopg.connect(url, autocommit=True)
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, *, opening: bool = False) -> None:
        rows = self._conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        for (pid,) in rows:
            cpu = _cpu_of(pid)
            # Open when the window starts: counted from now; opened later: from its start.
            self._first.setdefault(pid, cpu if opening else 0.0)
            self._last[pid] = cpu

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self._sample()

    def __enter__(self) -> DatabaseBackendsCpu:
        self._sample(opening=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self._conn.close()

    @property
    def seconds(self) -> float:
        return sum(self._last[pid] - self._first[pid] for pid in self._last)


class CpuPerPoll:
    """CPU seconds per status request sent while the block ran: pollerdash's processes, the whole
    PostgreSQL server, and the backends serving this benchmark's database."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self._backends = DatabaseBackendsCpu(os.environ["DATABASE_URL"])

    def __enter__(self) -> CpuPerPoll:
        from django.utils import timezone

        self._fleet_cpu, self._pg_cpu, self._from = self._fleet.cpu_s(), postgres_cpu_s(), timezone.now()
        self._backends.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        from django.utils import timezone

        self._fleet_cpu = self._fleet.cpu_s() - self._fleet_cpu
        self._pg_cpu = postgres_cpu_s() - self._pg_cpu
        self._to = timezone.now()
        self._backends.__exit__(*exc)

    def report(self) -> None:
        from operations.models import StatusCheck

        polls = StatusCheck.objects.filter(sent_at__gte=self._from, sent_at__lt=self._to).count()
        if not polls:
            return
        # CPU per poll is the figure that travels between machines (and survives a busy one).
        per = 1000 / polls
        print(
            f"    CPU per poll: {self._fleet_cpu * per:.1f} ms in pollerdash processes (workers, pusher,"
            f" monitor, dispatcher) + {self._pg_cpu * per:.1f} ms in the PostgreSQL server"
            f" ({self._backends.seconds * per:.1f} ms in the backends serving this database; the rest is the"
            " server's own processes and, on a shared machine, other databases)"
        )


def make_profile(provider_url: str, *, slug: str, period_s: float, rate_limit: float):
    from operations.models import ProviderAccount, ProviderProfile

    profile = ProviderProfile.objects.create(
        slug=slug,
        name=slug,
        account=slug,
        status_url=f"{provider_url}/v1/jobs/{{job_id}}",
        job_id_pattern=r"^[A-Za-z0-9_.:=+-]{1,200}$",
        state_field="state",
        pending_states=["running"],
        success_states=["succeeded"],
        failure_states=["failed"],
        required_result_fields=["result.output_url"],
        # No jitter: every operation comes back exactly one period after its answer.
        base_delay_s=period_s,
        max_delay_s=period_s,
        jitter_floor=1.0,
        rate_limit_per_s=rate_limit,
        default_max_status_requests=10_000,
        default_deadline_s=7 * 86400,
    )
    ProviderAccount.objects.get_or_create(name=slug)
    return profile


def create_operations(profile, count: int, *, first_due, spacing_s: float, tag: str) -> list[str]:
    """Bulk-create watched operations (registration cost is not what is measured here)."""
    from django.utils import timezone

    from operations.lifecycle.registration import new_operation_id
    from operations.models import Operation

    now = timezone.now()
    rows = [
        Operation(
            id=new_operation_id(),
            registered_by="operator:bench",
            provider=profile,
            account=profile.account,
            provider_job_id=f"bench__polls={FOREVER}__id={tag}-{i}",
            deadline_at=now + timedelta(days=7),
            max_status_requests=10_000,
            max_transport_failures=3,
            next_poll_at=first_due + timedelta(seconds=i * spacing_s),
            created_at=now,
            updated_at=now,
        )
        for i in range(count)
    ]
    Operation.objects.bulk_create(rows, batch_size=2000)
    analyze()
    return [row.id for row in rows]


def analyze() -> None:
    """Planner statistics for the rows just created, as a running database has them.

    Without them (autovacuum analyses a new table only after a minute or so) the planner takes
    the group statements' `status IN (...)` for selective and scans every live operation for
    each one, which costs ~10 times the CPU in PostgreSQL per poll and measures nothing real.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE operations_operation")


@dataclass
class Window:
    """The polls whose due time fell in [start, end): their lags, and how many started in time."""

    lags: list[float]
    started_in_window: int


def polls_due_between(start, end, *, expected: int, grace_s: float = 10.0) -> Window:
    """Waits until all `expected` polls due in [start, end) started, or a grace period passed (the
    ones still missing are reported as missing, not hidden)."""
    from django.utils import timezone

    from operations.models import StatusCheck

    rows = StatusCheck.objects.filter(due_at__gte=start, due_at__lt=end)
    time.sleep(max(0.0, (end - timezone.now()).total_seconds()))
    deadline = time.monotonic() + grace_s
    while rows.count() < expected and time.monotonic() < deadline:
        time.sleep(0.25)
    pairs = list(rows.values_list("started_at", "due_at"))
    return Window(
        lags=[(started - due).total_seconds() for started, due in pairs],
        # Throughput counts only what started while the window lasted, not the catch-up after it.
        started_in_window=sum(1 for started, _ in pairs if started < end),
    )


def quiesce(ids: list[str]) -> None:
    """Park every operation far in the future and wait until nothing is queued or in flight."""
    from django.db import OperationalError
    from django.utils import timezone
    from django_q.models import OrmQ

    from operations.models import Operation

    for attempt in range(5):
        try:
            Operation.objects.filter(pk__in=ids).update(next_poll_at=timezone.now() + timedelta(days=1))
            break
        except OperationalError:  # a deadlock with a worker writing its group: the bench's own rows, again
            if attempt == 4:
                raise
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        busy = Operation.objects.filter(pk__in=ids, lease_expires_at__gt=timezone.now()).exists()
        if not busy and not OrmQ.objects.exists():
            return
        time.sleep(0.2)


def report_lags(label: str, window: Window, seconds: float, *, expected: int) -> tuple[float, float]:
    lags = window.lags
    rate = window.started_in_window / seconds
    # A poll that never started within the grace period counts as over any lag target.
    p95 = percentile(lags, 95) if len(lags) >= expected else float("inf")
    worst = max(lags, default=float("nan"))
    print(
        f"{label:<28} {len(lags):6d}/{expected} polls  {rate:7.1f} polls/s  lag p50 {percentile(lags, 50):6.3f} s"
        f"  p95 {percentile(lags, 95):6.3f} s  p99 {percentile(lags, 99):6.3f} s  max {worst:6.3f} s"
    )
    return rate, p95


def steady_state(provider_url: str, sizes: Sizes, fleet: Fleet) -> list[str]:
    from django.utils import timezone

    profile = make_profile(provider_url, slug="steady", period_s=sizes.steady_period_s, rate_limit=100_000)
    spacing = sizes.steady_period_s / sizes.steady_ops
    start = timezone.now() + timedelta(seconds=3)
    ids = create_operations(profile, sizes.steady_ops, first_due=start, spacing_s=spacing, tag="steady")
    due_rate = sizes.steady_ops / sizes.steady_period_s
    print(f"(a) steady state: {sizes.steady_ops:,} operations, {due_rate:.0f} polls/s due, {sizes.steady_s:.0f} s")
    warm = start + timedelta(seconds=2)
    end = warm + timedelta(seconds=sizes.steady_s)
    expected = round(sizes.steady_s / spacing)
    time.sleep(max(0.0, (warm - timezone.now()).total_seconds()))
    with CpuPerPoll(fleet) as cpu:
        window = polls_due_between(warm, end, expected=expected)
    report_lags("    end to end", window, sizes.steady_s, expected=expected)
    cpu.report()
    print(f"    {load()}")
    quiesce(ids)
    return ids


def ceiling(provider_url: str, sizes: Sizes, ids: list[str], fleet: Fleet) -> tuple[float, float]:
    """(highest rate held with lag p95 <= 1 s, highest throughput seen in any step)."""

    print(f"(b) ceiling: due rate stepped up, {sizes.step_s:.0f} s per step, until lag p95 > 1 s")
    best = peak = 0.0
    for rate in sizes.rates:
        if int(rate * sizes.step_s) > len(ids):
            break
        achieved, p95 = step(rate, sizes.step_s, ids, fleet, label=f"    {rate:4d} polls/s due")
        peak = max(peak, achieved)
        if p95 > 1.0:
            break
        best = max(best, achieved)
    print(f"    {load()}")
    return best, peak


def step(rate: int, seconds: float, ids: list[str], fleet: Fleet, *, label: str) -> tuple[float, float]:
    """The first rate x seconds of `ids` made due one every 1/rate seconds (each comes back only
    after its period, out of the step): (polls/s achieved, lag p95)."""
    from django.utils import timezone

    from operations.models import Operation

    count = int(rate * seconds)
    start = timezone.now() + timedelta(seconds=1)
    chosen = ids[:count]
    for offset in range(0, count, 1000):
        batch = chosen[offset : offset + 1000]
        whens = {pk: start + timedelta(seconds=(offset + i) / rate) for i, pk in enumerate(batch)}
        rows = list(Operation.objects.filter(pk__in=batch))
        for row in rows:
            row.next_poll_at = whens[row.pk]
        Operation.objects.bulk_update(rows, ["next_poll_at"], batch_size=1000)
    end = start + timedelta(seconds=seconds)
    with CpuPerPoll(fleet) as cpu:
        window = polls_due_between(start, end, expected=count, grace_s=5.0)
    result = report_lags(label, window, seconds, expected=count)
    cpu.report()
    quiesce(ids)
    return result


def at_scale(provider_url: str, sizes: Sizes, ids: list[str], fleet: Fleet, args: argparse.Namespace) -> None:
    """Issue 29 item 5: the same step at 100 polls/s due on this database, then again after the
    finished operations, the open cards and the audit log (bench/scale.py) are added and analysed."""
    from bench import scale

    rate = round(sizes.steady_ops / sizes.steady_period_s)
    print(f"(s) scale: {rate} polls/s due for {sizes.steady_s:.0f} s, reference first, then at {args.operations:,}")
    step(rate, sizes.steady_s, ids, fleet, label=f"    reference ({len(ids):,} operations)")
    print(f"    {load()}")
    started = time.perf_counter()
    finished = args.operations - len(ids) - args.open_cards
    profile = make_profile(provider_url, slug="finished", period_s=30.0, rate_limit=100_000)
    scale.finished_operations(profile=profile, count=finished)
    scale.open_cards(profile=profile, count=args.open_cards)
    # The integrator runs: the entries go to a log of their own in the same table.
    scale.audit_entries(count=args.audit, operations=finished, log="bench/scale")
    scale.analyze()
    print(
        f"    built {finished:,} finished operations, {args.open_cards:,} open cards, {args.audit:,} audit entries"
        f" and analysed in {time.perf_counter() - started:.0f} s"
    )
    step(rate, sizes.steady_s, ids, fleet, label=f"    at {args.operations:,} operations")
    print(f"    {load()}")


def bare_httpx(provider_url: str, seconds: float) -> float:
    import httpx

    url = f"{provider_url}/v1/jobs/bench__polls={FOREVER}__id=bare"
    with httpx.Client() as client:
        client.get(url)
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            client.get(url).json()
            count += 1
    return count / (time.perf_counter() - start)


def provider_arrivals(provider_url: str, prefix: str) -> list[float]:
    import httpx

    entries = httpx.get(f"{provider_url}/_requests", timeout=60).json()["requests"]
    return [e["at"] for e in entries if e["kind"] == "status" and e["job_id"].startswith(prefix)]


def burst(provider_url: str, sizes: Sizes) -> None:
    from django.utils import timezone

    rate_limit = 20
    profile = make_profile(provider_url, slug="burst", period_s=5.0, rate_limit=rate_limit)
    now = timezone.now()
    print(
        f"(c) fleet burst: {sizes.burst_ops:,} operations registered in the same second, account limit {rate_limit}/s"
    )
    create_operations(profile, sizes.burst_ops, first_due=now, spacing_s=0.0, tag="burst")
    time.sleep(sizes.burst_watch_s)
    ours = provider_arrivals(provider_url, f"bench__polls={FOREVER}__id=burst-")
    print(
        f"    pollerdash: max {max_in_any_second(ours):5d} requests in any one second "
        f"({len(ours)} requests in {sizes.burst_watch_s:.0f} s)"
    )
    naive = naive_poller(provider_url, sizes.burst_ops, seconds=min(sizes.burst_watch_s, 6.0))
    print(f"    naive fixed-interval poller (every 5 s): max {naive:5d} requests in any one second")
    print(f"    {load()}")


def naive_poller(provider_url: str, jobs: int, *, seconds: float, interval_s: float = 5.0, threads: int = 16) -> int:
    """What a script without pacing does: every job polled every 5 s from its registration on."""
    import httpx

    prefix = "bench__polls=1000000000__id=naive-"
    due = [time.monotonic()] * jobs
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    cursor = [0]

    def run() -> None:
        with httpx.Client() as client:
            while time.monotonic() < stop_at:
                with lock:
                    i = cursor[0] % jobs
                    cursor[0] += 1
                    wait = due[i] - time.monotonic()
                    due[i] += interval_s
                if wait > 0:
                    time.sleep(wait)
                client.get(f"{provider_url}/v1/jobs/{prefix}{i}")

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return max_in_any_second(provider_arrivals(provider_url, prefix))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run at small sizes")
    parser.add_argument("--workers", type=int, default=4, help="django-q2 workers per qcluster")
    parser.add_argument("--clusters", type=int, default=1, help="qcluster processes")
    parser.add_argument("--rates", help="step (b)'s due rates, comma-separated (polls/s), e.g. 300,450,600,750")
    parser.add_argument("--skip-burst", action="store_true", help="leave out step (c)")
    parser.add_argument(
        "--operations",
        type=int,
        help="scale mode (issue 29): after (a), 100 polls/s due again beside this many operations in all"
        " (the rest finished), --open-cards open cards and --audit entries; (b) and (c) left out",
    )
    parser.add_argument("--open-cards", type=int, default=1_000)
    parser.add_argument("--audit", type=int, default=10_000_000)
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.rates:
        sizes = replace(sizes, rates=tuple(int(rate) for rate in args.rates.split(",")))

    django_on_scratch_postgres(DB_NAME)
    provider, provider_url = start_fake_provider()
    print(f"pollerdash dispatch bench: {args.clusters} qcluster x {args.workers} workers + 1 dispatcher; {load()}")
    fleet = Fleet(clusters=args.clusters, workers=args.workers)
    try:
        ids = steady_state(provider_url, sizes, fleet)
        if args.operations:
            at_scale(provider_url, sizes, ids, fleet, args)
            return
        best, peak = ceiling(provider_url, sizes, ids, fleet)
        bare = bare_httpx(provider_url, 5.0)
        print(f"    bare httpx GET loop (keep-alive, same provider): {bare:7.0f} requests/s")
        print(f"    highest rate held, lag p95 <= 1 s:   {best:7.1f} polls/s  (ratio to bare loop {best / bare:.3f})")
        print(f"    highest throughput in any step:        {peak:7.1f} polls/s  (ratio to bare loop {peak / bare:.3f})")
        if not args.skip_burst:
            burst(provider_url, sizes)
    finally:
        fleet.stop()
        provider.terminate()
        provider.wait(timeout=10)


if __name__ == "__main__":
    main()
