from __future__ import annotations

from django.apps import AppConfig


class EscalationsConfig(AppConfig):
    name = "escalations"
    verbose_name = "Escalations"

    def ready(self) -> None:
        from escalations import user_audit

        user_audit.connect()
