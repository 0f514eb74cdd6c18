"""The admin, with its modules imported when the site needs them rather than at every start-up."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import SimpleAdminConfig
from django.contrib.admin.checks import check_admin_app, check_dependencies
from django.core import checks


class AdminConfig(SimpleAdminConfig):
    """django.contrib.admin without autodiscovery in ready(): every app's admin module (forms,
    profile and policy validation, django-q2's admin) is imported by the root URLconf
    (pollerdash/urls.py), which a web process loads, or by the admin's system checks, which
    `manage.py check` runs. A command or a worker that serves no page does not import them
    (tests/test_startup.py)."""

    def ready(self) -> None:
        checks.register(check_dependencies, checks.Tags.admin)
        checks.register(check_registered_admins, checks.Tags.admin)


def check_registered_admins(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The admin's own checks of every ModelAdmin, after the admins are registered: the checks
    run in no fixed order, and the URL checks that load the URLconf may come after these."""
    admin.autodiscover()
    return check_admin_app(app_configs, **kwargs)
