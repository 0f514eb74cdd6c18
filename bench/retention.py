"""Retention under load: `manage.py archive` of a 1,000,000-entry audit log while the dispatcher polls.

    .venv/bin/python bench/retention.py             # about 6 minutes on a 2-core machine
    .venv/bin/python bench/retention.py --quick     # about 2 minutes, smaller sizes (a smoke run)

Issue 14's target: archive and prune of 1,000,000 entries with the dispatcher running, dispatch lag
p95 staying <= 1 s. In a scratch database:

1. a stored audit log of 1,000,000 entries (`--entries`) dated 2026-01-01, under the product's log
   name, so the live dispatcher's entries follow them (built in SQL by bench/audit_big.py: entries,
   leaves, every complete subtree, a signed checkpoint); 50,000 finished operations last updated
   120 days ago (past RETENTION_DAYS, 90) with 20 status checks each, and 20,000 finished django-q2
   task rows as old;
2. the real dispatcher and a qcluster (4 workers) against the fake provider with 10,000 live
   operations at 100 polls/s due (bench/dispatch.py step (a));
3. dispatch lag p50/p95/p99 over a baseline window, then `manage.py archive --before 2026-06-01` in
   a subprocess, as an operator runs it, and the lag of the polls due while it ran (also its worst
   5-second stretch), the longest open transaction and the most backends waiting on a lock seen in
   the database meanwhile (sampled every 0.25 s, as during the baseline), the archive's wall and CPU
   time and the lag during each of its steps (archive, prune, finished work), rows pruned, archive
   bytes, the load average; then the lag over the half-baseline after it (autovacuum on the tables
   just thinned);
4. the archive file verified offline, and `manage.py audit_verify` on what the database keeps.

Prints figures; asserts nothing. The scratch database and files are removed at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._setup import (
    ROOT,
    django_on_scratch_postgres,
    drop_scratch_database,
    percentile,
    start_fake_provider,
)

DB_NAME = "pollerdash_bench_retention"
BEFORE = "2026-06-01T00:00:00Z"
OLD_DAYS = 120  # past RETENTION_DAYS (90): what the same command removes beside the audit rows


@dataclass(frozen=True)
class Sizes:
    entries: int
    old_operations: int
    checks: int
    old_tasks: int
    live_ops: int
    period_s: float
    baseline_s: float


FULL = Sizes(1_000_000, 50_000, 20, 20_000, 10_000, 100.0, 60.0)
QUICK = Sizes(100_000, 5_000, 20, 2_000, 2_000, 20.0, 15.0)


def load() -> str:
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


# --- the data retention acts on --------------------------------------------------------------------


def copy_rows(
    model: type, template_pk: object, count: int, overrides: dict[str, str], *, skip: tuple[str, ...] = ()
) -> None:
    """`count` copies of one template row made by INSERT ... SELECT, `n` (1..count) numbering them;
    `overrides` are SQL expressions of `n` for some columns (the rest copied from the template)."""
    from django.db import connection

    columns = [f.column for f in model._meta.concrete_fields if f.column not in skip]
    select = [overrides.get(column, f"t.{connection.ops.quote_name(column)}") for column in columns]
    table = model._meta.db_table
    quoted = ", ".join(connection.ops.quote_name(column) for column in columns)
    with connection.cursor() as cursor:
        for first in range(1, count + 1, 200_000):
            last = min(count, first + 200_000 - 1)
            cursor.execute(
                f"INSERT INTO {table} ({quoted}) SELECT {', '.join(select)}"  # our own columns
                f" FROM {table} AS t, generate_series(%s::bigint, %s::bigint) AS n"
                f" WHERE t.{model._meta.pk.column} = %s",
                [first, last, template_pk],
            )


def build_finished_work(sizes: Sizes, provider_url: str) -> None:
    """Finished operations last updated OLD_DAYS ago, their status checks, and finished task rows
    as old (successes, as a `save_limit` other than -1 keeps them)."""
    from django.db import connection
    from django.utils import timezone
    from django_q.models import Task

    from bench.dispatch import make_profile
    from operations.models import Operation, StatusCheck

    profile = make_profile(provider_url, slug="old", period_s=30.0, rate_limit=100_000)
    old = timezone.now() - timedelta(days=OLD_DAYS)
    template = Operation.objects.create(
        id="op_TEMPLATE",
        registered_by="operator:bench",
        provider=profile,
        account=profile.account,
        provider_job_id="template",
        status="succeeded",
        deadline_at=old + timedelta(days=1),
        max_status_requests=100,
        max_transport_failures=3,
        status_requests_used=sizes.checks,
        last_provider_state="succeeded",
        last_http_status=200,
        result={"output_url": "https://example.invalid/output/template"},
        created_at=old - timedelta(hours=1),
        updated_at=old,
        completed_at=old,
    )
    check = StatusCheck.objects.create(
        operation=template,
        account=profile.account,
        fence=1,
        due_at=old,
        started_at=old,
        sent_at=old,
        received_at=old,
        http_status=200,
        provider_request_id="req_template",
        body_digest="0" * 64,
        body_bytes=412,
        provider_state="running",
        interpreted_state="pending",
        decision="wait",
        reason="provider reports 'running' (42%); next poll by local backoff",
        delay_source="local_backoff",
        delay_ms=30_000,
        next_poll_at=old,
    )
    op_id = "'op_01JRETAINED' || lpad(({n})::text, 15, '0')"
    at = "t.{col} - (n * interval '1 millisecond')"
    copy_rows(
        Operation,
        template.pk,
        sizes.old_operations,
        {
            "id": op_id.format(n="n"),
            "provider_job_id": "'old-' || n",
            "updated_at": at.format(col="updated_at"),
            "completed_at": at.format(col="completed_at"),
        },
    )
    per_op = sizes.checks
    copy_rows(
        StatusCheck,
        check.pk,
        sizes.old_operations * per_op,
        {
            "operation_id": op_id.format(n=f"(n - 1) / {per_op} + 1"),
            "fence": f"mod(n - 1, {per_op}) + 1",
            "due_at": at.format(col="due_at"),
            "started_at": at.format(col="started_at"),
            "sent_at": at.format(col="sent_at"),
            "received_at": at.format(col="received_at"),
            "provider_request_id": "'req_' || n",
            "body_digest": "encode(sha256(n::text::bytea), 'hex')",
        },
        skip=("id",),
    )
    check.delete()
    template.delete()
    done = Task.objects.create(
        id="0" * 32,
        name="template",
        func="operations.tasks.poll_group",
        started=old,
        stopped=old,
        success=True,
        result=None,
        attempt_count=1,
    )
    copy_rows(Task, done.pk, sizes.old_tasks, {"id": "md5(n::text)", "name": "'old-' || n"})
    done.delete()
    with connection.cursor() as cursor:
        for table in ("operations_operation", "operations_statuscheck", "django_q_task"):
            cursor.execute(f"ANALYZE {table}")  # fixed names


# --- watching the database while the archive runs ----------------------------------------------------


class Watcher:
    """Samples, every 0.25 s, the longest open transaction in the database (other than its own)
    and how many backends wait on a lock; and the load average."""

    def __init__(self, url: str) -> None:
        import psycopg

        self._conn = psycopg.connect(url, autocommit=True)
        self.longest_s = 0.0
        self.longest_query = ""
        self.lock_waits = 0
        self.max_load = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            row = self._conn.execute(
                "SELECT coalesce(extract(epoch FROM max(now() - xact_start)), 0),"
                " count(*) FILTER (WHERE wait_event_type = 'Lock'),"
                " (SELECT left(query, 80) FROM pg_stat_activity WHERE datname = current_database()"
                "  AND pid <> pg_backend_pid() AND xact_start IS NOT NULL ORDER BY xact_start LIMIT 1)"
                " FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            if float(row[0]) > self.longest_s:
                self.longest_s, self.longest_query = float(row[0]), row[2] or ""
            self.lock_waits = max(self.lock_waits, int(row[1]))
            self.max_load = max(self.max_load, os.getloadavg()[0])

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()


@dataclass(frozen=True)
class Window:
    pairs: list[tuple[datetime, float]]  # (due time, lag) of each poll due in the window
    missing: int  # due in the window and not started when the grace period ended


def polls_due_between(start: datetime, end: datetime, *, grace_s: float = 15.0) -> Window:
    """The polls due in [start, end), once every one of them started or the grace period passed.
    A poll that has not started is an operation whose next_poll_at is still in the window."""
    from django.utils import timezone

    from operations.models import Operation, StatusCheck

    rows = StatusCheck.objects.filter(due_at__gte=start, due_at__lt=end)
    waiting = Operation.objects.filter(provider__slug="live", next_poll_at__gte=start, next_poll_at__lt=end)
    time.sleep(max(0.0, (end - timezone.now()).total_seconds()))
    deadline = time.monotonic() + grace_s
    while waiting.exists() and time.monotonic() < deadline:
        time.sleep(0.25)
    pairs = [(due, (started - due).total_seconds()) for due, started in rows.values_list("due_at", "started_at")]
    return Window(pairs=pairs, missing=waiting.count())


def summary(label: str, window: Window) -> float:
    """Prints the window's lags; its p95, infinite when a poll never started (over any target)."""
    lags = [lag for _, lag in window.pairs]
    print(
        f"{label:<26} {len(lags):7,d} polls ({window.missing} not started)  lag p50 {percentile(lags, 50):6.3f} s"
        f"  p95 {percentile(lags, 95):6.3f} s  p99 {percentile(lags, 99):6.3f} s  max {max(lags, default=0):6.3f} s"
    )
    return float("inf") if window.missing else percentile(lags, 95)


def worst_stretch(pairs: list[tuple[datetime, float]], seconds: float = 5.0) -> tuple[float, int]:
    """The highest lag p95 over the polls due in any `seconds`-long stretch, and how many it held."""
    if not pairs:
        return float("nan"), 0
    first = min(due for due, _ in pairs)
    buckets: dict[int, list[float]] = {}
    for due, lag in pairs:
        buckets.setdefault(int((due - first).total_seconds() // seconds), []).append(lag)
    return max((percentile(lags, 95), len(lags)) for lags in buckets.values())


def run_archive(directory: Path, env: dict[str, str]) -> tuple[float, float, int, list[tuple[datetime, str]]]:
    """`manage.py archive` as an operator runs it: wall s, CPU s, exit status, and each line it
    printed with the time it came (the command reports each step as it ends)."""
    from django.utils import timezone

    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "archive", "--before", BEFORE, "--to", str(directory)],
        cwd=ROOT,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    lines = [(timezone.now(), line.decode(errors="replace").rstrip()) for line in proc.stdout]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    return wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status), lines


def database_size() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        return str(cursor.fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--entries", type=int, help="audit entries to archive (default 1,000,000)")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.entries:
        sizes = replace(sizes, entries=args.entries)

    print(f"pollerdash retention bench: {os.cpu_count()} CPUs, load average at start {load()}")
    workdir = Path(tempfile.mkdtemp(prefix="bench-retention-"))
    key_file = workdir / "signing-key.pem"
    os.environ["AUDIT_SIGNING_KEY_FILE"] = str(key_file)  # the fleet and the archive sign with it
    url = django_on_scratch_postgres(DB_NAME)
    provider, provider_url = start_fake_provider()
    fleet = None
    try:
        from django.conf import settings

        from bench import audit_big
        from bench.audit import decision_data
        from bench.dispatch import Fleet, create_operations, make_profile, quiesce
        from operations.audit import checkpoints

        checkpoints.generate_key_file(key_file)
        settings.AUDIT_SIGNING_KEY_FILE = str(key_file)
        started = time.perf_counter()
        print(f"building {sizes.entries:,} audit entries dated 2026-01-01 ...")
        audit_big.build_log(log=settings.AUDIT_LOG_NAME, size=sizes.entries, decision_data=decision_data)
        build_finished_work(sizes, provider_url)
        print(
            f"built in {time.perf_counter() - started:.0f} s: {sizes.entries:,} entries, {sizes.old_operations:,}"
            f" finished operations {OLD_DAYS} days old with {sizes.old_operations * sizes.checks:,} status checks,"
            f" {sizes.old_tasks:,} finished task rows; database {database_size()}; load average {load()}"
        )

        from django.utils import timezone

        fleet = Fleet(clusters=1, workers=4)
        profile = make_profile(provider_url, slug="live", period_s=sizes.period_s, rate_limit=100_000)
        spacing = sizes.period_s / sizes.live_ops
        rate = 1 / spacing
        first_due = timezone.now() + timedelta(seconds=3)
        ids = create_operations(profile, sizes.live_ops, first_due=first_due, spacing_s=spacing, tag="live")
        print(f"dispatcher + qcluster (4 workers): {sizes.live_ops:,} live operations, {rate:.0f} polls/s due")
        warm = first_due + timedelta(seconds=5)
        end = warm + timedelta(seconds=sizes.baseline_s)
        with Watcher(url) as watcher:
            base = polls_due_between(warm, end)
        base_p95 = summary(f"baseline ({sizes.baseline_s:.0f} s)", base)
        worst, held = worst_stretch(base.pairs)
        print(
            f"    worst 5 s stretch: lag p95 {worst:.3f} s ({held} polls); longest open transaction"
            f" {watcher.longest_s:.1f} s ({watcher.longest_query!r}); most backends waiting on a lock at once"
            f" {watcher.lock_waits}; load average max {watcher.max_load:.2f}, now {load()}"
        )

        archive_dir = workdir / "archive"
        env = {**os.environ, "DATABASE_URL": url, "AUDIT_SIGNING_KEY_FILE": str(key_file)}
        begin = timezone.now()
        with Watcher(url) as watcher:
            wall, cpu, status, lines = run_archive(archive_dir, env)
        finish = timezone.now()
        print(f"manage.py archive --before {BEFORE}: exit {status}, {wall:.1f} s wall, {cpu:.1f} s CPU")
        step_from = begin
        for at, line in lines:
            # The polls due while this step ran (the command prints a line as each step ends).
            step = polls_due_between(step_from, at)
            lags = [lag for _, lag in step.pairs]
            print(
                f"    | +{(at - begin).total_seconds():5.1f} s {line[:200]}\n"
                f"    |   that step: {(at - step_from).total_seconds():.1f} s, lag p95"
                f" {percentile(lags, 95):.3f} s, max {max(lags, default=0):.3f} s ({step.missing} not started)"
            )
            step_from = at
        output = "\n".join(line for _, line in lines)
        during = polls_due_between(begin, finish)
        during_p95 = summary("during the archive", during)
        worst, held = worst_stretch(during.pairs)
        print(
            f"    worst 5 s stretch: lag p95 {worst:.3f} s ({held} polls); p95 ratio during/baseline"
            f" {during_p95 / base_p95:.2f}; longest open transaction {watcher.longest_s:.1f} s"
            f" ({watcher.longest_query!r}); most backends waiting on a lock at once {watcher.lock_waits};"
            f" load average max {watcher.max_load:.2f}, now {load()}"
        )
        pruned = re.search(r"removed (\d+) (?:archived audit entries )?from the database", output)
        files = sorted(archive_dir.iterdir()) if archive_dir.exists() else []
        print(
            f"    rows pruned {int(pruned.group(1)) if pruned else 0:,}; archive files {len(files)},"
            f" {sum(f.stat().st_size for f in files) / 1e6:,.0f} MB; database now {database_size()}"
        )
        # The dead rows left behind: autovacuum's turn on the big tables, with the polls beside it.
        later = timezone.now()
        after_s = sizes.baseline_s / 2
        summary(f"the {after_s:.0f} s after it", polls_due_between(later, later + timedelta(seconds=after_s)))
        print(f"    load average {load()}")
        quiesce(ids)
        fleet.stop()
        fleet = None
        keys = workdir / "keys"
        keys.write_text(checkpoints.verifier_key(checkpoints.load_signing_key(key_file)).line + "\n")
        for file in files:
            checked = subprocess.run(
                [sys.executable, str(ROOT / "operations" / "audit" / "verify"), str(file), "--keys", str(keys)],
                capture_output=True,
                text=True,
                check=False,
            )
            print(f"    offline verify {file.name}: exit {checked.returncode} {checked.stdout.strip()[:100]}")
        verified = subprocess.run(
            [sys.executable, "manage.py", "audit_verify"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        print(
            f"    manage.py audit_verify (what the database keeps): exit {verified.returncode}"
            f" {verified.stdout.strip()[:100]}"
        )
    finally:
        if fleet is not None:
            fleet.stop()
        provider.terminate()
        provider.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
        drop_scratch_database(DB_NAME)
        print(f"scratch database {DB_NAME} dropped; load average at end {load()}")


if __name__ == "__main__":
    main()
