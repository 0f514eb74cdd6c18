"""Controller throughput: pure decide() and full poll_once() round trips, next to a bare httpx loop.

    make bench            # or: .venv/bin/python bench/controller.py [--seconds 10]

Prints decisions/s of the pure decision function, poll_once round trips/s (claim + charge +
HTTP GET + decision + audit entry, on PostgreSQL), a group task's path (the dispatcher's claim of
8 due operations, then `batch.poll_claims` on them: one charge, concurrent GETs, one outcome
transaction), process CPU per poll, and a bare keep-alive httpx GET loop against the same fake
provider process, with the ratios measured in the same run. The load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._setup import django_on_scratch_postgres, start_fake_provider


def bench_decide(seconds: float) -> float:
    from operations.polling.decide import Bounds, Observation, Policy, decide
    from operations.polling.states import StateTable

    now = datetime(2026, 12, 1, tzinfo=UTC)
    policy = Policy(
        profile_slug="bench",
        state_field="state",
        table=StateTable(
            pending=frozenset({"running"}),
            success=frozenset({"succeeded"}),
            failure=frozenset({"failed"}),
            cancelled=frozenset(),
            expired=frozenset(),
        ),
        required_result_fields=("result.output_url",),
        progress_field="progress_percent",
    )
    bounds = Bounds(
        registered_at=now,
        deadline_at=now + timedelta(hours=1),
        requests_used=3,
        max_requests=100,
        transport_failures_used=0,
        max_transport_failures=3,
    )
    observations = [
        Observation(
            received_at=now, http_status=200, body=json.dumps({"state": "running", "progress_percent": 40}).encode()
        ),
        Observation(
            received_at=now,
            http_status=200,
            body=json.dumps({"state": "succeeded", "result": {"output_url": "https://x/y"}}).encode(),
        ),
        Observation(received_at=now, http_status=503, headers={"retry-after": ("120",)}, body=b"{}"),
        Observation(received_at=now, http_status=429, body=b""),
    ]
    rng = random.Random(1)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for obs in observations:
            decide(policy=policy, bounds=bounds, observation=obs, rng=rng)
        count += len(observations)
    return count / (time.perf_counter() - start)


def bench_bare_httpx(url: str, seconds: float) -> float:
    import httpx

    with httpx.Client() as client:
        client.get(url)
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            client.get(url).json()
            count += 1
    return count / (time.perf_counter() - start)


def bench_poll_once(provider_url: str, seconds: float, operations: int) -> tuple[float, int, float]:
    from operations.models import Operation
    from operations.polls.controller import poll_once

    ops = _operations(provider_url, operations, slug="bench")
    rng = random.Random(2)
    count, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        for op in ops:
            fence = Operation.objects.values_list("fence", flat=True).get(pk=op.pk)
            if poll_once(operation_id=op.pk, fence=fence, rng=rng) == "polled":
                count += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return count / elapsed, count, cpu / max(count, 1) * 1000


def bench_group(provider_url: str, seconds: float, operations: int, size: int) -> tuple[float, int, float]:
    """Claim `size` due operations as the dispatcher does, then run them as one group task."""
    from django.db import transaction
    from django.utils import timezone

    from operations.lifecycle.claims import claim_due_rows
    from operations.polls.batch import poll_claims

    _operations(provider_url, operations, slug="group")
    rng = random.Random(3)
    count, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        with transaction.atomic():
            claims = claim_due_rows(account="group", now=timezone.now(), take=size, owner="bench")
        results = poll_claims(claims=[(c.operation_id, c.fence) for c in claims], rng=rng)
        count += sum(1 for result in results if result == "polled")
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return count / elapsed, count, cpu / max(count, 1) * 1000


def _operations(provider_url: str, operations: int, *, slug: str) -> list:
    from django.db import connection

    from operations.agents.registration import operation_register
    from operations.models import ProviderProfile

    profile = ProviderProfile.objects.create(
        slug=slug,
        name=slug,
        account=slug,
        status_url=f"{provider_url}/v1/jobs/{{job_id}}",
        job_id_pattern=r"^[A-Za-z0-9_.:=+-]{1,200}$",
        state_field="state",
        pending_states=["running", "queued"],
        success_states=["succeeded"],
        failure_states=["failed"],
        # The smallest delays, so each operation is due again at once: we measure the round trip.
        base_delay_s=0.001,
        max_delay_s=0.001,
        rate_limit_per_s=100_000,
        default_max_status_requests=10_000,
    )
    ops = [
        operation_register(
            provider_slug=profile.slug, provider_job_id=f"never_finishes__id={slug}{i}", registered_by="operator:bench"
        )
        for i in range(operations)
    ]
    # Planner statistics, as a running database has them (bench/dispatch.py `analyze` says why).
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE operations_operation")
    return ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--operations", type=int, default=50)
    parser.add_argument("--group", type=int, default=8, help="polls per group task")
    args = parser.parse_args()

    django_on_scratch_postgres("pollerdash_bench_controller")
    proc, base = start_fake_provider()
    try:
        decide_rate = bench_decide(args.seconds / 2)
        bare = bench_bare_httpx(f"{base}/v1/jobs/never_finishes__id=bare", args.seconds)
        polls, total, cpu_once = bench_poll_once(base, args.seconds, args.operations)
        grouped, grouped_total, cpu_group = bench_group(base, args.seconds, args.operations, args.group)
        bare_after = bench_bare_httpx(f"{base}/v1/jobs/never_finishes__id=bare", args.seconds / 2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(f"decide():                     {decide_rate:10,.0f} decisions/s (pure, one core)")
    print(f"bare httpx GET loop:          {bare:10,.0f} requests/s (keep-alive, same fake provider)")
    print(f"bare httpx GET loop, again:   {bare_after:10,.0f} requests/s (after the polls; the reference is the mean)")
    bare = (bare + bare_after) / 2
    print(f"poll_once round trips:        {polls:10,.0f} polls/s on PostgreSQL ({total} polls, {args.operations} ops)")
    print(f"    ratio to bare GET:        {polls / bare:10.2f}   this process's CPU per poll {cpu_once:.2f} ms")
    print(f"    cost per poll:            {1000 / polls - 1000 / bare:10.2f} ms over the bare GET")
    print(
        f"group task path ({args.group} a task): {grouped:10,.0f} polls/s on PostgreSQL ({grouped_total} polls,"
        " the dispatcher's claim included)"
    )
    print(f"    ratio to bare GET:        {grouped / bare:10.2f}   this process's CPU per poll {cpu_group:.2f} ms")
    print(f"    ratio to poll_once:       {grouped / polls:10.2f}")
    one, five, _ = os.getloadavg()
    print(f"load average {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} CPUs (a shared machine)")


if __name__ == "__main__":
    main()
