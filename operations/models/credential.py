from __future__ import annotations

from django.db import models


class CredentialFingerprint(models.Model):
    """The fingerprint of a provider credential as the workers, which hold it, currently see it.

    Workers publish it (operations/providers/credentials.py); the dashboard compares it with the one stored
    when a provider denied the credential, to offer a retry only after a real rotation. The web
    process need not hold any provider credential, and the credential itself is never stored.
    """

    credential_env = models.CharField(max_length=100, unique=True)
    fingerprint = models.CharField(max_length=32, blank=True)
    seen_at = models.DateTimeField()

    class Meta:
        ordering = ["credential_env"]

    def __str__(self) -> str:
        return self.credential_env
