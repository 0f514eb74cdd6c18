"""PostgreSQL restarts in the middle of a run: every process recovers by itself.

This restarts the machine's PostgreSQL server (`pg_ctlcluster ... restart`), which every database
on it shares: run it in the PostgreSQL pass only, where the suite runs one test at a time.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from operations.agents.registration import operation_register
from operations.models import Operation, StatusCheck
from operations.vocabulary import Status
from tests.integration.support import wait_until
from tests.support import job_id

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def restart_postgres() -> None:
    version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    wait_until(
        lambda: subprocess.run(["pg_isready", "-h", "127.0.0.1", "-q"], check=False).returncode == 0,
        timeout=60,
        what="PostgreSQL to accept connections",
    )


def test_dispatchers_and_workers_recover_from_a_database_restart(processes, make_profile, fake_provider):
    profile = make_profile(base_delay_s=0.2, max_delay_s=0.5, jitter_floor=0.5)
    ops = [
        operation_register(
            provider_slug=profile.slug,
            provider_job_id=job_id("slow_success", polls=2),
            registered_by="operator:integration",
        )
        for _ in range(100)
    ]
    jobs = {op.provider_job_id: op.pk for op in ops}
    for _ in range(2):
        processes.start("qcluster", Q_WORKERS=2)
        processes.start("dispatcher")

    def sent() -> list[dict]:
        return [r for r in fake_provider.requests() if r["kind"] == "status" and r["job_id"] in jobs]

    wait_until(lambda: len(sent()) >= 100, timeout=60, what="the run to be under way", processes=processes)
    restart_postgres()
    # The test's own connection went away too: wait_until reconnects it.
    wait_until(
        lambda: Operation.objects.filter(pk__in=list(jobs.values()), status=Status.SUCCEEDED).count() == len(ops),
        timeout=90,
        what="every operation to succeed after the restart",
        processes=processes,
    )
    per_op: dict[str, int] = {}
    for request in sent():
        per_op[jobs[request["job_id"]]] = per_op.get(jobs[request["job_id"]], 0) + 1
    for op in Operation.objects.filter(pk__in=list(jobs.values())):
        checks = StatusCheck.objects.filter(operation=op).count()
        # Every request the provider saw was charged exactly once. A charge whose commit
        # acknowledgement was lost in the restart may stay charged without being sent: that
        # errs on the side of the budget, never past it.
        assert per_op[op.pk] <= op.status_requests_used == checks <= op.max_status_requests, op.provider_job_id
        assert per_op[op.pk] >= 3  # it needed three answers to succeed
    for proc in processes.started:
        assert proc.popen.poll() is None, f"{proc.log_path.name} exited: {proc.log()[-2000:]}"
