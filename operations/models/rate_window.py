from __future__ import annotations

from django.db import models


class RateWindow(models.Model):
    """How many times something happened in one fixed time window (operations.limits.ratelimit).

    In the database, so a quota holds across every web, worker and MCP process at once.
    """

    # What is counted and for whom, e.g. "registrations:agent:7" or "decisions:user:3".
    key = models.CharField(max_length=120)
    window_start = models.DateTimeField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "window_start"], name="one_rate_window_per_key")]

    def __str__(self) -> str:
        return f"{self.key} @ {self.window_start:%Y-%m-%d %H:%M:%S}: {self.count}"
