from __future__ import annotations

from django.db import models


class ProviderAccount(models.Model):
    """Shared pacing state of one provider account, across all its operations and all hosts.

    The dispatcher reserves send slots here under a row lock (so `rate_limit_per_s` holds across
    processes), and a 429/503 with Retry-After on any operation pauses the whole account.
    """

    name = models.CharField(max_length=64, unique=True)
    paused_until = models.DateTimeField(null=True, blank=True)
    pause_reason = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
