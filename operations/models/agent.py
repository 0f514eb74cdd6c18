from __future__ import annotations

from django.db import models


class Agent(models.Model):
    """An automated caller of the API. Operations belong to an agent; agents see only their own."""

    name = models.CharField(max_length=100, unique=True)
    # Standard Webhooks signing secret (whsec_...) for this agent's completion callbacks; shown
    # once by `create_agent_token`, never in responses, templates or logs.
    webhook_secret = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AgentToken(models.Model):
    """A bearer token of an agent. Only the SHA-256 of the token is stored."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tokens")
    token_sha256 = models.CharField(max_length=64, unique=True)
    # The first characters, so an admin can tell tokens apart without holding them.
    prefix = models.CharField(max_length=16)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.agent.name} {self.prefix}…"


class IdempotencyKey(models.Model):
    """An agent's Idempotency-Key and the request it first came with (draft-ietf-httpapi-idempotency-key)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="idempotency_keys")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    operation = models.ForeignKey("operations.Operation", on_delete=models.CASCADE, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "key"], name="idempotency_key_per_agent")]

    def __str__(self) -> str:
        return self.key
