"""Nothing an admin types becomes code on a worker (issue 16, finding 1).

django-q2's Schedule names any importable callable as text and the workers run it: a writable
Schedule admin was `os.system` on the hosts that hold the credentials. These tests drive the real
admin, django-q2's real scheduler and its real worker loop.
"""

from __future__ import annotations

import time
from datetime import timedelta
from multiprocessing import Queue, Value
from pathlib import Path
from queue import Empty
from unittest import mock

import pytest
from django.core.management.sql import emit_post_migrate_signal
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ, Schedule
from django_q.scheduler import scheduler
from django_q.signing import SignedPackage
from django_q.worker import worker

from operations.task_registry import REFUSE_TASK, SCHEDULES, task_functions

FINGERPRINTS = "pollerdash: credential fingerprints"


def evil_schedule(marker: Path, **fields: object) -> Schedule:
    values: dict[str, object] = {
        "name": "evil",
        "func": "os.system",
        "args": repr(f"id > {marker}"),
        "schedule_type": Schedule.ONCE,
        "next_run": timezone.now() - timedelta(seconds=1),
    }
    values.update(fields)
    return Schedule.objects.create(**values)


def queued_tasks() -> dict[str, dict]:
    tasks = [SignedPackage.loads(row.payload) for row in OrmQ.objects.order_by("id")]
    return {task["group"]: task for task in tasks}


def run_in_worker(tasks: list[dict]) -> list[dict]:
    """Run tasks through django-q2's own worker loop, as a cluster's worker process would."""
    task_queue: Queue = Queue()
    result_queue: Queue = Queue()
    for task in tasks:
        task_queue.put(task)
    task_queue.put("STOP")
    # The worker recycles itself after a task once its process passes Q_CLUSTER's max_rss; here
    # the process is the whole test session, which passes it late in a full run, so the rest of
    # the queue would never be read.
    with mock.patch.object(Conf, "MAX_RSS", None):
        worker(task_queue, result_queue, Value("f", -1))
    # One result per task; the queue's feeder thread can lag behind on a busy machine.
    results = []
    deadline = time.monotonic() + 60
    while len(results) < len(tasks) and time.monotonic() < deadline:
        try:
            results.append(result_queue.get(timeout=1))
        except Empty:
            continue
    return results


# --- the admin --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_admin_can_list_django_q2_schedules_but_not_add_change_or_delete_them(admin_client, tmp_path):
    schedule = Schedule.objects.get(name=FINGERPRINTS)
    form = {
        "name": "pwn",
        "func": "os.system",
        "args": repr(f"id > {tmp_path / 'pwned'}"),
        "schedule_type": Schedule.ONCE,
        "repeats": "-1",
        "next_run_0": "2026-01-01",
        "next_run_1": "00:00:00",
    }

    assert admin_client.get("/admin/django_q/schedule/add/").status_code == 403
    assert admin_client.post("/admin/django_q/schedule/add/", form).status_code == 403
    change_url = f"/admin/django_q/schedule/{schedule.pk}/change/"
    assert admin_client.post(change_url, form).status_code == 403
    assert admin_client.post(f"/admin/django_q/schedule/{schedule.pk}/delete/", {"post": "yes"}).status_code == 403
    assert not Schedule.objects.filter(func="os.system").exists()
    assert Schedule.objects.get(pk=schedule.pk).func == "operations.tasks.publish_credential_fingerprints"

    listing = admin_client.get("/admin/django_q/schedule/").content.decode()
    assert FINGERPRINTS in listing
    page = admin_client.get(change_url).content.decode()
    assert "operations.tasks.publish_credential_fingerprints" in page
    assert 'name="func"' not in page and 'name="_save"' not in page


@pytest.mark.django_db
@pytest.mark.parametrize("model", ["success", "failure", "ormq"])
def test_tasks_and_the_queue_are_view_only_too(admin_client, model):
    assert admin_client.get(f"/admin/django_q/{model}/").status_code == 200
    assert admin_client.get(f"/admin/django_q/{model}/add/").status_code == 403
    # No "resubmit selected tasks" action: it would enqueue whatever a row names.
    assert b"resubmit" not in admin_client.get(f"/admin/django_q/{model}/").content.lower()


# --- the scheduler and the worker -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "fields",
    [
        {},
        # sync would run the task inside the scheduler's own process; a hook runs in the monitor.
        {"kwargs": "q_options={'sync': True, 'hook': 'os.system'}"},
    ],
    ids=["plain", "sync-and-hook"],
)
def test_a_schedule_for_os_system_in_the_database_is_never_run(tmp_path, fields):
    marker = tmp_path / "pwned"
    evil_schedule(marker, **fields)
    Schedule.objects.filter(name=FINGERPRINTS).update(next_run=timezone.now() - timedelta(seconds=1))

    scheduler(broker=get_broker())
    tasks = queued_tasks()
    results = {task["group"]: task for task in run_in_worker(list(tasks.values()))}

    assert not marker.exists()
    refused = tasks["evil"]
    assert refused["func"] == REFUSE_TASK and refused["args"][0] == "os.system" and refused["kwargs"] == {}
    assert "hook" not in refused and "sync" not in refused
    # The project's own schedule in the same pass is unaffected.
    assert tasks[FINGERPRINTS]["func"] == "operations.tasks.publish_credential_fingerprints"
    assert results[FINGERPRINTS]["success"] is True
    assert results["evil"]["success"] is False
    assert "'os.system' is not one of pollerdash's task functions" in results["evil"]["result"]


@pytest.mark.django_db(transaction=True)
def test_a_project_function_with_a_hook_is_refused_as_well(tmp_path):
    evil_schedule(tmp_path / "pwned", func="operations.tasks.publish_credential_fingerprints", hook="os.system")
    scheduler(broker=get_broker())
    assert queued_tasks()["evil"]["args"] == (
        "operations.tasks.publish_credential_fingerprints",
        "came with a hook or a chain, which pollerdash never uses",
    )


@pytest.mark.django_db(transaction=True)
def test_migrate_writes_the_project_schedules_and_disables_any_other(tmp_path):
    Schedule.objects.filter(name__startswith="pollerdash:").delete()
    evil = evil_schedule(tmp_path / "pwned", schedule_type=Schedule.MINUTES, minutes=1, repeats=-1)

    emit_post_migrate_signal(verbosity=0, interactive=False, db="default")

    assert {(s.name, s.func, s.schedule_type, s.minutes, s.repeats) for s in Schedule.objects.exclude(pk=evil.pk)} == {
        (spec.name, spec.func, Schedule.MINUTES, spec.minutes, -1) for spec in SCHEDULES
    }
    # Kept for the operator to see, but the scheduler skips a schedule with no repeats left.
    assert Schedule.objects.get(pk=evil.pk).repeats == 0
    scheduler(broker=get_broker())
    assert "evil" not in queued_tasks()


def test_the_task_functions_are_exactly_the_entry_points_of_the_tasks_modules():
    assert task_functions() == {
        "operations.tasks.run_poll",
        "operations.tasks.run_polls",
        "operations.tasks.deliver_callback",
        "operations.tasks.forward_provider_cancel",
        "operations.tasks.publish_credential_fingerprints",
        "escalations.tasks.deliver_notification",
        "escalations.tasks.notify_escalation",
        "escalations.tasks.notify_callback_failed",
        "escalations.tasks.notify_business_deadline",
    }
