"""A worker host cut off from PostgreSQL mid-poll, and a provider that never answers.

Two "hosts", each a qcluster and a dispatcher: host A reaches the database through a TCP proxy
(bench/topology.py `Partition`) that is cut while A holds leases with requests in flight, host B
directly (through PgBouncer as well with PGBOUNCER=1). The cut lasts PARTITION_S seconds (8 here;
bench/chaos.py runs 90). What must hold is what docs/DESIGN.md section 10 promises for a lost
worker: B takes over after POLL_LEASE_S, A's late writes are fenced and write nothing, no request
goes over its budget or after its deadline, nothing is lost or stuck, and A works again once the
network is back, without a restart.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from bench.topology import Partition
from operations.agents.registration import operation_register
from operations.models import AuditEntry, Operation, StatusCheck
from operations.vocabulary import Status
from tests.integration.support import FAST_ENV, Processes, wait_until
from tests.integration.test_dispatch_processes import fast_profile, provider_log
from tests.support import job_id

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True), pytest.mark.postgres]

LEASE_S = float(FAST_ENV["POLL_LEASE_S"])
PARTITION_S = float(os.environ.get("PARTITION_S", "8"))


@pytest.fixture
def partition(processes: Processes) -> Iterator[Partition]:
    """A proxy to wherever the processes reach the database (PostgreSQL, or PgBouncer)."""
    url = processes.base_env["DATABASE_URL"]
    proxy = Partition(port=int(url.rsplit(":", 1)[1].split("/", 1)[0]))
    try:
        yield proxy
    finally:
        proxy.stop()


def through(partition: Partition, processes: Processes) -> str:
    url = processes.base_env["DATABASE_URL"]
    return url.replace(url.rsplit(":", 1)[1].split("/", 1)[0], str(partition.port), 1)


def test_a_host_cut_off_mid_poll_is_taken_over_and_its_late_writes_are_fenced(
    processes, partition, make_profile, fake_provider
):
    profile = fast_profile(make_profile)
    cut_host = processes.base_env | {"DATABASE_URL": through(partition, processes)}
    a_cluster = processes.start("qcluster", Q_WORKERS=2, DATABASE_URL=cut_host["DATABASE_URL"])
    a_dispatcher = processes.start("dispatcher", DATABASE_URL=cut_host["DATABASE_URL"])
    deadline = timezone.now() + timedelta(minutes=10)
    ops = [
        operation_register(
            provider_slug=profile.slug,
            provider_job_id=job_id("held", hold_ms=1500, n=n),
            registered_by="operator:integration",
            max_status_requests=2,
            deadline_at=deadline,
        )
        for n in range(4)
    ]
    # Host A holds leases with requests in flight at the provider: then its network goes.
    wait_until(
        lambda: (
            sum(bool(entries) for entries in provider_log(fake_provider, ops).values()) >= 2 and len(_leased(ops)) >= 2
        ),
        timeout=30,
        what="host A polling with leases held",
        processes=processes,
    )
    partition.cut()
    cut_at = timezone.now()
    in_flight = {op.pk for op in _leased(ops)}
    processes.start("qcluster", Q_WORKERS=2)
    processes.start("dispatcher")
    # Host B finishes everything while A is still cut off, taking over only after the leases end.
    wait_until(
        lambda: Operation.objects.filter(pk__in=[op.pk for op in ops], status=Status.SUCCEEDED).count() == len(ops),
        timeout=PARTITION_S + 30,
        what="host B to take over",
        processes=processes,
    )
    assert partition.is_cut, f"host B needed longer than the {PARTITION_S} s cut"
    for pk in in_flight:
        first, *later = StatusCheck.objects.filter(operation_id=pk).order_by("sent_at")
        if later:
            assert later[0].sent_at >= first.sent_at + timedelta(seconds=LEASE_S) - timedelta(milliseconds=50)
    done = {op.pk: op for op in Operation.objects.filter(pk__in=[op.pk for op in ops])}
    wait_until(lambda: timezone.now() >= cut_at + timedelta(seconds=PARTITION_S), timeout=PARTITION_S + 5, what="cut")
    partition.heal()

    # Host A's held writes reach PostgreSQL now, and are refused by the fences.
    wait_until(
        lambda: any(f"late result for {pk}" in a_cluster.log() for pk in in_flight),
        timeout=60,
        what="host A's late results to arrive",
        processes=processes,
    )
    log = provider_log(fake_provider, ops)
    for op in Operation.objects.filter(pk__in=[op.pk for op in ops]):
        before = done[op.pk]
        assert (op.status, op.sequence, op.completed_at, op.result) == (
            before.status,
            before.sequence,
            before.completed_at,
            before.result,
        ), op.provider_job_id
        sent = log[op.pk]
        assert len(sent) == op.status_requests_used == StatusCheck.objects.filter(operation=op).count()
        assert len(sent) <= op.max_status_requests
        assert all(check.sent_at <= op.deadline_at for check in StatusCheck.objects.filter(operation=op))
        # One decision per answered request; the request A sent before the cut decided nothing.
        answered = StatusCheck.objects.filter(operation=op).exclude(decision="").count()
        assert AuditEntry.objects.filter(operation_id=op.pk, type="controller.decision").count() == answered
        if op.pk in in_flight:
            assert StatusCheck.objects.filter(operation=op).order_by("sent_at").first().decision == ""

    # Nothing stuck: host A, never restarted, polls again once B is gone.
    for proc in processes.started[2:]:
        proc.stop()
    again = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("slow_success", polls=0, n="after"),
        registered_by="operator:integration",
        max_status_requests=2,
    )
    wait_until(
        lambda: Operation.objects.filter(pk=again.pk, status=Status.SUCCEEDED).exists(),
        timeout=60,
        what="host A to poll again after the partition healed",
        processes=processes,
    )
    assert a_cluster.popen.poll() is None and a_dispatcher.popen.poll() is None
    assert connection.vendor == "postgresql"


def test_a_provider_that_never_answers_costs_one_transport_failure_per_request(processes, make_profile, fake_provider):
    # One worker: a request stuck for good would hold up the other operation for ever.
    profile = fast_profile(make_profile)
    processes.start("qcluster", Q_WORKERS=1)
    processes.start("dispatcher")
    silent = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("slowloris", mode="silent", hold_s=60),
        registered_by="operator:integration",
        max_status_requests=10,
    )
    answered = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("slow_success", polls=1),
        registered_by="operator:integration",
        max_status_requests=10,
    )
    wait_until(
        lambda: (
            Operation.objects.filter(pk=silent.pk, status=Status.NEEDS_ATTENTION).exists()
            and Operation.objects.filter(pk=answered.pk, status=Status.SUCCEEDED).exists()
        ),
        timeout=60,
        what="the silent provider's transport budget to be spent and the other operation to finish",
        processes=processes,
    )
    silent.refresh_from_db()
    checks = list(StatusCheck.objects.filter(operation=silent).order_by("sent_at"))
    sent = provider_log(fake_provider, [silent])[silent.pk]
    # One request per transport failure, each given up at the total timeout, none unaccounted.
    assert len(sent) == len(checks) == silent.status_requests_used == silent.max_transport_failures
    assert silent.transport_failures_used == silent.max_transport_failures
    total = float(FAST_ENV["POLL_HTTP_TOTAL_TIMEOUT_S"])
    for check in checks:
        assert check.transport_error and check.charged_transport
        assert check.received_at is not None
        assert (check.received_at - check.sent_at).total_seconds() <= total + 1.0


def _leased(ops: list[Operation]) -> list[Operation]:
    """Those a worker holds (a lease, not the dispatcher's claim)."""
    held = Operation.objects.filter(pk__in=[op.pk for op in ops]).exclude(lease_owner="")
    return list(held.exclude(lease_owner__startswith="dispatcher@"))
