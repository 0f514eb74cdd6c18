from __future__ import annotations

from django.conf import settings
from django.db import models


class ExternalIdentity(models.Model):
    """The identity-provider account (issuer + subject) a local user signs in as.

    Users are matched on (issuer, subject), never on email or username: an address or a display
    name can be reassigned at the provider, a subject cannot.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "external identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="external_identity_unique")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
