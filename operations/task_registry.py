"""What may run on a worker: pollerdash's own task functions, and the schedules it creates itself.

A django-q2 Schedule names its function as text, and the workers hold the provider credentials,
SECRET_KEY and DATABASE_URL: a schedule whose `func` is `os.system` is remote code execution. So
django-q2's models are read-only in the admin (operations/admin/queue.py), the schedules pollerdash
needs are written by code at migrate time (`schedules_ensure`), and every task, whatever enqueued
it (the scheduler included), passes `guard_task` on its way into the queue: a function that is not
one of pollerdash's own is swapped for `refuse_task` before the task is signed, so a worker never
runs it and the refusal shows as a failed task.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from dataclasses import dataclass
from functools import cache

from django.db import DEFAULT_DB_ALIAS, connections
from django_q.models import Schedule
from django_q.utils import get_func_repr

logger = logging.getLogger(__name__)

# Modules of django-q2 entry points: every public function defined in one is a task function.
TASK_MODULES = ("operations.tasks", "escalations.tasks")
REFUSE_TASK = "operations.task_registry.refuse_task"
# What a refused task keeps: its identity and routing, never its arguments, hook or options.
_KEPT_KEYS = ("id", "name", "group", "cluster", "started", "ack_failure")


@dataclass(frozen=True)
class ProjectSchedule:
    name: str
    func: str
    minutes: int


SCHEDULES = (
    # Workers hold the credentials, so they publish their fingerprints (operations/providers/credentials.py).
    ProjectSchedule("pollerdash: credential fingerprints", "operations.tasks.publish_credential_fingerprints", 1),
)


class TaskRefused(Exception):
    """A task named a function that is not one of pollerdash's; nothing of it was run."""


@cache
def task_functions() -> frozenset[str]:
    """The dotted names of every function a worker may run."""
    names = set()
    for module_name in TASK_MODULES:
        module = importlib.import_module(module_name)
        for name, func in inspect.getmembers(module, inspect.isfunction):
            if func.__module__ == module_name and not name.startswith("_"):
                names.add(f"{module_name}.{name}")
    return frozenset(names)


def guard_task(*, task: dict, **kwargs: object) -> None:
    """django-q2's pre_enqueue receiver: an unknown function (or any hook or chain) is refused.

    Raising here would abort the scheduler's whole pass, so the project's own schedules would
    stop too; the task is rewritten instead, in place, before django-q2 signs it.
    """
    func = str(get_func_repr(task.get("func")))[:200]
    if func not in task_functions():
        why = "is not one of pollerdash's task functions"
    elif task.get("hook") or task.get("chain"):
        why = "came with a hook or a chain, which pollerdash never uses"
    else:
        return
    logger.error("refused to enqueue a task: %r %s (group %r)", func, why, task.get("group"))
    kept = {key: task[key] for key in _KEPT_KEYS if key in task}
    task.clear()
    task.update(kept, func=REFUSE_TASK, args=(func, why), kwargs={})


def refuse_task(func: str, why: str) -> None:
    """Runs in place of a refused task, so the refusal is recorded as a failed task."""
    raise TaskRefused(f"{func!r} {why}; nothing was run")


def schedules_ensure(*, using: str = DEFAULT_DB_ALIAS, **kwargs: object) -> None:
    """post_migrate receiver: pollerdash's schedules exist as written here; every other is disabled."""
    if Schedule._meta.db_table not in connections[using].introspection.table_names():
        return
    schedules = Schedule.objects.using(using)
    for spec in SCHEDULES:
        schedules.update_or_create(
            name=spec.name,
            defaults={"func": spec.func, "schedule_type": Schedule.MINUTES, "minutes": spec.minutes, "repeats": -1},
        )
    known = {spec.func for spec in SCHEDULES}
    for schedule in schedules.exclude(func__in=known).exclude(repeats=0):
        logger.warning("disabled schedule %r (%r): not one of pollerdash's schedules", schedule.name, schedule.func)
        schedules.filter(pk=schedule.pk).update(repeats=0)
