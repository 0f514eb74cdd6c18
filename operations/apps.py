from __future__ import annotations

from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "operations"
    verbose_name = "Operations"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate
        from django_q.signals import pre_enqueue

        from operations import events, people, task_registry
        from operations.infrastructure import cluster_locks
        from operations.observability import figures
        from operations.providers import checks  # noqa: F401 - checks registers itself

        # qcluster's processes share locks that a killed worker must not keep
        # (operations/infrastructure/cluster_locks.py).
        cluster_locks.install()

        # Only pollerdash's own functions enter the task queue; its schedules are written by code.
        pre_enqueue.connect(task_registry.guard_task, dispatch_uid="pollerdash.guard_task")
        post_migrate.connect(task_registry.schedules_ensure, sender=self, dispatch_uid="pollerdash.schedules_ensure")
        # Changes to the people who decide (accounts, roles) are audit entries, whoever makes them.
        people.connect()
        # Time to acknowledge / to decide, counted in the transaction of the act (operations.observability.figures).
        events.card_acknowledged.connect(figures.on_card_acknowledged, dispatch_uid="figures-card-acknowledged")
        events.card_closed.connect(figures.on_card_closed, dispatch_uid="figures-card-closed")
