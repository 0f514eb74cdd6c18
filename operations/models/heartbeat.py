from __future__ import annotations

from django.db import models


class ProcessHeartbeat(models.Model):
    """A long-running pollerdash process says it is alive (shown on the system panel)."""

    name = models.CharField(max_length=200, unique=True)  # kind@host:pid
    kind = models.CharField(max_length=32)  # dispatcher | signer | worker
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    info = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["kind", "name"]

    def __str__(self) -> str:
        return self.name
