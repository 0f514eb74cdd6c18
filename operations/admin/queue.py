"""django-q2's models, view-only: a schedule's `func` is any importable callable run on a worker, so a
writable Schedule form would be code execution on the hosts that hold the credentials."""

from __future__ import annotations

# django-q2's own admins are registered first, whoever imports this module first (the URLconf's
# autodiscovery follows INSTALLED_APPS, a test may import it directly): replaced below, they must
# never be registered after ours.
import django_q.admin  # noqa: F401
from django.contrib import admin
from django_q.models import Failure, OrmQ, Schedule, Success

from operations.admin.base import ViewOnlyAdmin

for _model in (Schedule, Success, Failure, OrmQ):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)


@admin.register(Schedule)
class ScheduleAdmin(ViewOnlyAdmin):
    list_display = ("id", "name", "func", "schedule_type", "minutes", "repeats", "next_run")
    list_filter = ("schedule_type",)
    search_fields = ("name", "func")


@admin.register(Success)
class SuccessAdmin(ViewOnlyAdmin):
    list_display = ("name", "func", "group", "started", "stopped")
    search_fields = ("name", "func", "group")


@admin.register(Failure)
class FailureAdmin(ViewOnlyAdmin):
    list_display = ("name", "func", "group", "started", "stopped", "attempt_count")
    search_fields = ("name", "func", "group")


@admin.register(OrmQ)
class QueueAdmin(ViewOnlyAdmin):
    list_display = ("id", "name", "func", "lock")
    # The payload is a signed pickle; name and func are read from it by the model's methods.
    hidden_fields = ("payload",)
    extra_fields = ("name", "func")
