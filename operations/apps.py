from __future__ import annotations

from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "operations"
    verbose_name = "Operations"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate
        from django_q.signals import pre_enqueue

        from operations import people, task_registry

        # Only pollerdash's own functions enter the task queue; its schedules are written by code.
        pre_enqueue.connect(task_registry.guard_task, dispatch_uid="pollerdash.guard_task")
        post_migrate.connect(task_registry.schedules_ensure, sender=self, dispatch_uid="pollerdash.schedules_ensure")
        # Changes to the people who decide (accounts, roles) are audit entries, whoever makes them.
        people.connect()
