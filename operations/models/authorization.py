from __future__ import annotations

from django.conf import settings
from django.db import models


class Authorization(models.Model):
    """The bounds pollerdash may spend on an operation, and who granted them.

    Number 1 is the registration's initial bounds; each approved extension adds the next one,
    chained to the previous, so the chain answers "who let this keep polling, and how far".
    """

    class Kind(models.TextChoices):
        INITIAL = "initial"
        EXTENSION = "extension"
        TREAT_AS_PENDING = "treat_as_pending"
        APPROVE_ONE_CHECK = "approve_one_check"
        RETRY_AFTER_ROTATION = "retry_after_rotation"

    operation = models.ForeignKey("operations.Operation", on_delete=models.CASCADE, related_name="authorizations")
    number = models.PositiveIntegerField()
    previous = models.OneToOneField("self", on_delete=models.PROTECT, null=True, blank=True, related_name="next")
    kind = models.CharField(max_length=24, choices=Kind.choices)
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True)
    granted_by_label = models.CharField(max_length=200)
    granted_at = models.DateTimeField()
    escalation = models.ForeignKey(
        "operations.Escalation", on_delete=models.PROTECT, null=True, blank=True, related_name="authorizations"
    )
    deadline_at = models.DateTimeField()
    max_status_requests = models.PositiveIntegerField()
    max_transport_failures = models.PositiveIntegerField()
    extra_pending_states = models.JSONField(default=list, blank=True)
    # extension / treat_as_pending: the seconds between the window's checks (the first goes out at
    # once, or when the provider's wait ends); null for grants of one request.
    check_spacing_s = models.FloatField(null=True, blank=True)
    comment = models.TextField(blank=True)

    class Meta:
        ordering = ["operation", "number"]
        constraints = [
            models.UniqueConstraint(fields=["operation", "number"], name="authorization_number_per_operation")
        ]

    def __str__(self) -> str:
        return f"{self.operation_id} #{self.number} ({self.kind})"
