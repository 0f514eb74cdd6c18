"""A qcluster worker killed with SIGKILL, at the moments that matter: polling goes on (issue 30).

The soak of issue 30 killed a worker whose poll had ended between its query and its kill: the
worker was idle, waiting for its next task while holding the task queue's read lock (a POSIX
semaphore, in stock django-q2). The sentinel replaced the dead worker, the lock stayed taken, and
no worker took a task again while every process was alive. operations/infrastructure/cluster_locks.py makes the
cluster's locks ones the kernel releases when their holder dies.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from operations.agents.registration import operation_register
from operations.models import Operation, StatusCheck
from operations.vocabulary import Status
from tests.integration.support import FAST_ENV, Proc, wait_until
from tests.integration.test_dispatch_processes import SUCCEEDS_AT_ONCE, fast_profile, finished, provider_log, register
from tests.support import job_id

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LEASE_S = float(FAST_ENV["POLL_LEASE_S"])
# One dispatch pass and the pickup after it: the dispatcher's full pass comes every 0.5 s
# (DISPATCH_SWEEP_EVERY_S), the pusher looks every 0.2 s (Q_POLL); the rest is a loaded machine.
ONE_PASS_S = 2.0


def worker_pids(cluster: Proc) -> list[int]:
    """The cluster's live workers (django-q2 logs each one's pid at INFO when it starts)."""
    pids = [int(pid) for pid in re.findall(r"ready for work at (\d+)", cluster.log())]
    return [pid for pid in pids if _wchan(pid) is not None]


def _wchan(pid: int) -> str | None:
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
        return Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        return None


def reading_the_task_queue(cluster: Proc) -> int | None:
    """The idle worker that holds the task queue's read lock: it sleeps in the pipe's read (the
    other idle workers sleep on the lock)."""
    readers = [pid for pid in worker_pids(cluster) if _wchan(pid) == "anon_pipe_read"]
    return readers[0] if len(readers) == 1 else None


def test_a_worker_killed_while_it_waits_for_a_task_leaves_the_cluster_working(processes, make_profile, fake_provider):
    profile = fast_profile(make_profile)
    cluster = processes.start("qcluster", Q_WORKERS=2, Q_LOG_LEVEL="INFO")
    processes.start("dispatcher")
    warm_up = [register(profile, SUCCEEDS_AT_ONCE) for _ in range(4)]
    wait_until(lambda: finished(warm_up), timeout=30, what="both processes to be up", processes=processes)
    holder = wait_until(
        lambda: reading_the_task_queue(cluster), timeout=10, what="an idle worker on the queue", processes=processes
    )
    os.kill(holder, signal.SIGKILL)
    wait_until(
        lambda: "reincarnated worker" in cluster.log(),
        timeout=10,
        what="the sentinel to replace the dead worker",
        processes=processes,
    )
    registered_at = time.time()
    ops = [register(profile, SUCCEEDS_AT_ONCE) for _ in range(6)]
    # The stock cluster never polls them: its workers wait for ever on the dead worker's lock.
    wait_until(
        lambda: finished(ops), timeout=LEASE_S + ONE_PASS_S, what="polling to go on after the kill", processes=processes
    )
    log = provider_log(fake_provider, ops)
    assert all(len(log[op.pk]) == 1 for op in ops)
    assert max(entry["at"] for entries in log.values() for entry in entries) - registered_at <= LEASE_S + ONE_PASS_S
    assert cluster.popen.poll() is None


def test_a_worker_killed_mid_poll_is_taken_over_within_a_lease_and_one_pass(processes, make_profile, fake_provider):
    profile = fast_profile(make_profile)
    cluster = processes.start("qcluster", Q_WORKERS=2, Q_LOG_LEVEL="INFO")
    processes.start("dispatcher")
    held = operation_register(
        provider_slug=profile.slug,
        provider_job_id=job_id("held", hold_ms=1500),
        registered_by="operator:integration",
        max_status_requests=3,
    )

    def in_flight() -> int | None:
        if not provider_log(fake_provider, [held])[held.pk]:
            return None
        owner = Operation.objects.filter(pk=held.pk).values_list("lease_owner", flat=True).first() or ""
        return None if not owner or owner.startswith("dispatcher@") else int(owner.rsplit(":", 1)[1])

    victim = wait_until(in_flight, timeout=30, what="the poll in flight", processes=processes)
    assert victim in worker_pids(cluster)
    os.kill(victim, signal.SIGKILL)
    # The other worker and the replacement go on polling everything else at once...
    others = [register(profile, SUCCEEDS_AT_ONCE) for _ in range(4)]
    wait_until(lambda: finished(others), timeout=ONE_PASS_S + 3, what="the other polls", processes=processes)
    # ...and the killed poll is taken over once its lease has run out, within one pass after it.
    done = wait_until(
        lambda: Operation.objects.filter(pk=held.pk, status=Status.SUCCEEDED).first(),
        timeout=LEASE_S + ONE_PASS_S + 2,
        what="the takeover",
        processes=processes,
    )
    first, second = StatusCheck.objects.filter(operation=held).order_by("sent_at")[:2]
    assert first.received_at is None  # killed in flight: charged, never answered
    takeover_s = (second.sent_at - first.sent_at).total_seconds()
    assert LEASE_S <= takeover_s <= LEASE_S + ONE_PASS_S
    assert done.status_requests_used == len(provider_log(fake_provider, [held])[held.pk])
