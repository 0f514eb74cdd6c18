"""A fleet that stops working says so: operations overdue with nothing polled, a queue no worker
takes; red on the system panel and in /metrics, and the dispatcher's heartbeat is not healthy.

Issue 30: a soak's fleet polled nothing for minutes while every process was alive and the panel
showed it so. The rows here are the ones that fleet left (on the injected clock): operations long
due, the last status request long ago, tasks waiting with no worker taking any.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import override_settings
from django.urls import reverse
from django_q.conf import Conf
from django_q.models import OrmQ

from operations.models import Operation, ProcessHeartbeat, ProviderAccount, StatusCheck
from operations.observability import liveness, metrics
from operations.polls import heartbeat
from tests.operations.test_metrics import a_viewer
from tests.support import T0, job_id

pytestmark = pytest.mark.django_db

STALL_S = 60.0
LONG_AGO = T0 - timedelta(seconds=10 * STALL_S)


@pytest.fixture(autouse=True)
def _frozen_clock(clock, settings):
    settings.STALL_ALERT_S = STALL_S
    return clock


def polled_at(op: Operation, when) -> None:
    StatusCheck.objects.create(
        operation=op, account=op.account, fence=1, due_at=when, started_at=when, sent_at=when, decision="wait"
    )


def due(op: Operation, seconds: float) -> None:
    Operation.objects.filter(pk=op.pk).update(next_poll_at=T0 - timedelta(seconds=seconds))


def waiting_task(seconds: float) -> None:
    OrmQ.objects.create(key=Conf.CLUSTER_NAME, payload="task", lock=T0 - timedelta(seconds=seconds))


def taken_task(seconds_ago: float) -> None:
    # The ORM broker writes lock = taken + retry on the row it takes.
    OrmQ.objects.create(key=Conf.CLUSTER_NAME, payload="task", lock=T0 - timedelta(seconds=seconds_ago - Conf.RETRY))


@pytest.fixture
def stalled_fleet(make_operation):
    """What issue 30's fleet left: operations due for minutes, the last poll 3 minutes ago, tasks
    waiting 2 minutes with none taken, and a dispatcher heartbeating on."""
    first = make_operation(job_id("slow_success"))
    polled_at(first, T0 - timedelta(seconds=180))
    for op in (first, make_operation(job_id("slow_success")), make_operation(job_id("slow_success"))):
        due(op, 150)
    waiting_task(120)
    return first


@pytest.fixture
def idle_fleet(make_operation):
    """Healthy and idle: the last poll 10 minutes ago, the next one due in a minute, nothing queued."""
    op = make_operation(job_id("slow_success"))
    polled_at(op, LONG_AGO)
    Operation.objects.filter(pk=op.pk).update(next_poll_at=T0 + timedelta(seconds=60))
    return op


# --- the check ------------------------------------------------------------------------------------------


def test_operations_overdue_with_nothing_polled_and_tasks_not_taken_is_a_stall(stalled_fleet):
    progress = liveness.fleet_progress(now=T0)
    assert progress.polling_stalled and progress.queue_stalled
    assert (progress.overdue, progress.oldest_overdue_s, progress.since_last_poll_s) == (3, 150, 180)
    assert (progress.queue_waiting, progress.oldest_waiting_s, progress.since_last_take_s) == (1, 120, None)
    polling, queue = progress.problems()
    assert polling == "Polling has stopped: 3 operations due for 150 s or less and no status request sent for 180 s."
    assert queue.startswith("The task queue is not being taken: 1 task waiting, the oldest 120 s")


def test_a_healthy_idle_fleet_with_nothing_due_is_not_stalled(idle_fleet):
    progress = liveness.fleet_progress(now=T0)
    assert not progress.stalled and progress.problems() == []
    assert progress.since_last_poll_s == 10 * STALL_S  # idle for ten minutes is fine: nothing was due


def test_a_fleet_behind_but_polling_is_late_not_stalled(stalled_fleet, make_operation):
    polled_at(make_operation(job_id("slow_success")), T0 - timedelta(seconds=2))
    taken_task(seconds_ago=3)
    progress = liveness.fleet_progress(now=T0)
    assert progress.overdue == 3 and not progress.stalled


def test_a_stall_needs_the_full_alert_time(make_operation):
    op = make_operation(job_id("slow_success"))
    polled_at(op, LONG_AGO)
    due(op, STALL_S - 1)  # just fell due: the next pass takes it
    waiting_task(STALL_S - 1)
    assert not liveness.fleet_progress(now=T0).stalled
    due(op, STALL_S)
    assert liveness.fleet_progress(now=T0).polling_stalled


def test_operations_of_a_paused_account_wait_on_purpose(stalled_fleet):
    ProviderAccount.objects.filter(name=stalled_fleet.account).update(paused_until=T0 + timedelta(seconds=300))
    assert not liveness.fleet_progress(now=T0).polling_stalled


def test_a_poll_in_flight_is_taken_up_but_a_dispatchers_claim_still_waits(make_operation):
    op = make_operation(job_id("slow_success"))
    polled_at(op, LONG_AGO)
    due(op, 150)
    lease = T0 + timedelta(seconds=30)
    # Charged by a worker (claimed_at cleared): its request is in flight, nothing waits.
    Operation.objects.filter(pk=op.pk).update(lease_owner="vm:42", lease_expires_at=lease, claimed_at=None)
    assert liveness.fleet_progress(now=T0).overdue == 0
    # Claimed by a dispatcher, no worker took the task: it waits.
    Operation.objects.filter(pk=op.pk).update(lease_owner="dispatcher@vm:1", claimed_at=T0 - timedelta(seconds=100))
    assert liveness.fleet_progress(now=T0).polling_stalled


# --- the dispatcher's heartbeat ----------------------------------------------------------------------


def test_the_dispatcher_logs_the_stall_and_its_heartbeat_is_not_healthy(stalled_fleet, caplog):
    with caplog.at_level(logging.WARNING, logger="operations.polls.dispatch"):
        problems = heartbeat.check_progress(name="dispatcher@vm:7", was_stalled=False)
    heartbeat.record_heartbeat(name="dispatcher@vm:7", started_at=T0, info={"passes": 9, "stalled": problems})
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [f"dispatcher@vm:7: the fleet has stalled. {' '.join(problems)}"]
    (process,) = metrics.snapshot(now=T0).processes
    assert process.alive and not process.healthy and "Polling has stopped" in process.problems[0]


def test_a_fleet_working_again_is_logged_and_the_heartbeat_healthy(idle_fleet, caplog):
    with caplog.at_level(logging.WARNING, logger="operations.polls.dispatch"):
        problems = heartbeat.check_progress(name="dispatcher@vm:7", was_stalled=True)
    heartbeat.record_heartbeat(name="dispatcher@vm:7", started_at=T0, info={"stalled": problems})
    assert problems == []
    assert [r.getMessage() for r in caplog.records] == ["dispatcher@vm:7: the fleet is working again"]
    (process,) = metrics.snapshot(now=T0).processes
    assert process.healthy


# --- red on the panel and in /metrics -------------------------------------------------------------------


def test_the_panel_shows_a_stalled_fleet_red(stalled_fleet, client, django_user_model):
    problems = heartbeat.check_progress(name="dispatcher@vm:7", was_stalled=False)
    heartbeat.record_heartbeat(name="dispatcher@vm:7", started_at=T0, info={"stalled": problems})
    client.force_login(a_viewer(django_user_model, "stallviewer"))
    html = client.get(reverse("system")).content.decode()
    assert html.count('class="callout callout-danger" role="alert" data-alert="stalled"') == 2
    assert "Polling has stopped: 3 operations" in html and "The task queue is not being taken" in html
    assert ">alive, stalled<" in html
    assert "Dispatch is healthy" not in html


def test_the_panel_shows_a_healthy_idle_fleet_healthy(idle_fleet, client, django_user_model):
    problems = heartbeat.check_progress(name="dispatcher@vm:7", was_stalled=False)
    heartbeat.record_heartbeat(name="dispatcher@vm:7", started_at=T0, info={"stalled": problems})
    client.force_login(a_viewer(django_user_model, "idleviewer"))
    html = client.get(reverse("system")).content.decode()
    assert 'data-alert="stalled"' not in html and ">alive, stalled<" not in html
    assert "Dispatch is healthy" in html


def _metrics(client) -> dict[str, float]:
    # Scraped as a Prometheus on the same machine would (METRICS_ALLOW_LOOPBACK=1, docs/deployment.md).
    with override_settings(METRICS_ALLOW_LOOPBACK=True):
        text = client.get("/metrics").content.decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_metrics_show_a_stalled_fleet(stalled_fleet, client):
    heartbeat.record_heartbeat(
        name="dispatcher@vm:7",
        started_at=T0,
        info={"stalled": heartbeat.check_progress(name="dispatcher@vm:7", was_stalled=False)},
    )
    values = _metrics(client)
    assert values["pollerdash_polling_stalled"] == 1 and values["pollerdash_task_queue_stalled"] == 1
    assert values["pollerdash_seconds_since_last_poll"] == 180
    assert values['pollerdash_live_processes{kind="dispatcher"}'] == 1
    assert values['pollerdash_healthy_processes{kind="dispatcher"}'] == 0


def test_metrics_show_a_healthy_idle_fleet(idle_fleet, client):
    heartbeat.record_heartbeat(name="dispatcher@vm:7", started_at=T0, info={"stalled": []})
    values = _metrics(client)
    assert values["pollerdash_polling_stalled"] == 0 and values["pollerdash_task_queue_stalled"] == 0
    assert values['pollerdash_healthy_processes{kind="dispatcher"}'] == 1


def test_an_older_heartbeat_without_the_stall_field_reads_as_healthy(idle_fleet):
    ProcessHeartbeat.objects.create(
        name="dispatcher@vm:8", kind="dispatcher", started_at=T0, last_seen_at=T0, info={"passes": 3}
    )
    (process,) = metrics.snapshot(now=T0).processes
    assert process.healthy


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_a_stall_alert_time_that_is_not_positive_is_refused_at_start(value, tmp_path):
    env = {
        **os.environ,
        "SECRET_KEY": "test-only-not-secret",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "STALL_ALERT_S": value,
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'pollerdash.settings'); django.setup()",
        ],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "STALL_ALERT_S" in result.stderr and "is not a positive number of seconds" in result.stderr
