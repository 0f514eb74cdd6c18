"""A real `qcluster` never runs a schedule that is not pollerdash's (issue 16, finding 1).

The reproduction: a Schedule with func=os.system and an argument that writes `id` to a file, due
now. django-q2's scheduler runs in the cluster's sentinel about 30 s after start; the test waits
for that pass to have handled the row, then looks for the file.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import Failure, Schedule

from operations.task_registry import REFUSE_TASK
from tests.integration.support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_schedule_for_os_system_is_refused_by_a_real_cluster(processes, tmp_path):
    marker = tmp_path / "pwned"
    evil = Schedule.objects.create(
        name="evil",
        func="os.system",
        args=repr(f"id > {marker}"),
        schedule_type=Schedule.ONCE,
        next_run=timezone.now() - timedelta(seconds=1),
    )
    processes.start("qcluster", Q_WORKERS=1)

    # The scheduler removes a once-schedule when it enqueues it; a worker then runs the task, which
    # either writes the file or is recorded as a refusal.
    wait_until(
        lambda: (
            not Schedule.objects.filter(pk=evil.pk).exists()
            and (marker.exists() or Failure.objects.filter(func=REFUSE_TASK).exists())
        ),
        timeout=90,
        what="the scheduler's pass and the worker's run of the task",
        processes=processes,
    )
    assert not marker.exists()
    [failure] = Failure.objects.filter(func=REFUSE_TASK)
    assert "'os.system' is not one of pollerdash's task functions" in str(failure.result)
