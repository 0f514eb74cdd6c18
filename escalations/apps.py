from __future__ import annotations

from django.apps import AppConfig


class EscalationsConfig(AppConfig):
    name = "escalations"
    verbose_name = "Escalations"
