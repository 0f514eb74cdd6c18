"""A decision card: the facts a responder needs, the bounded options, and the snapshot of both.

`load_card` is the one loader of a card, for the decision services (under their locks) and the
dashboard alike: a fixed number of queries (extensions used, the account's pause, the card's
decisions, and for a denied credential the fingerprint the workers published), so a decision is
validated against exactly what the locked rows say and a page costs the same whatever it shows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

import rfc8785
from django.db.models import Count

from operations.cards.options import (
    Capabilities,
    Facts,
    Option,
    bounded_options,
    capabilities_of,
    human_duration,
    unavailable_notes,
)
from operations.models import Authorization, Decision, Escalation, Operation, ProviderAccount
from operations.providers.credentials import credential_current
from operations.representation import rfc3339
from operations.vocabulary import REASON_LABELS, Reason

# Authorization kinds that grant more time and checks: they count toward max_extensions.
EXTENSION_KINDS = (Authorization.Kind.EXTENSION, Authorization.Kind.TREAT_AS_PENDING)


def reason_label(reason: str) -> str:
    try:
        return REASON_LABELS[Reason(reason)]
    except ValueError:
        return reason


def console_link(*, template: str, job_id: str) -> str:
    """The provider console URL for this job, when the profile documents one (http/https only)."""
    if not template or not template.startswith(("https://", "http://")):
        return ""
    return template.replace("{job_id}", quote(job_id, safe=""))


@dataclass(frozen=True)
class Card:
    escalation: Escalation
    operation: Operation
    facts: Facts
    caps: Capabilities
    options: list[Option]
    notes: list[str]
    console_url: str
    # accept_output: the first responder's decision waiting for a second responder.
    awaiting: Decision | None = None
    inspections: list[Decision] = field(default_factory=list)

    @property
    def reason_label(self) -> str:
        return reason_label(self.escalation.reason)

    @property
    def is_open(self) -> bool:
        return self.escalation.state == Escalation.State.OPEN

    def option(self, option_id: str) -> Option | None:
        return next((option for option in self.options if option.id == option_id), None)

    def snapshot(self) -> dict[str, object]:
        """What the card showed, stored with every decision taken (or refused) on it."""
        op, esc, facts = self.operation, self.escalation, self.facts
        return {
            "escalation_id": esc.pk,
            "version": esc.version,
            "state": esc.state,
            "reason": esc.reason,
            "reason_label": self.reason_label,
            "why": esc.detail,
            "opened_at": rfc3339(esc.opened_at),
            "shown_at": rfc3339(facts.now),
            "operation": {
                "id": op.pk,
                "status": op.status,
                "purpose": op.purpose,
                "provider": op.provider.slug,
                "provider_job_id": op.provider_job_id,
                "last_provider_state": op.last_provider_state or None,
                "last_http_status": op.last_http_status,
                "last_polled_at": rfc3339(op.last_polled_at),
                "elapsed_s": int((facts.now - op.created_at).total_seconds()),
                "requests_used": op.status_requests_used,
                "max_requests": op.max_status_requests,
                "transport_failures": op.transport_failures_used,
                "max_transport_failures": op.max_transport_failures,
                "deadline": rfc3339(op.deadline_at),
                "business_deadline": rfc3339(op.business_deadline_at),
            },
            "context": dict(esc.context or {}),
            "extensions_used": facts.extensions_used,
            "max_extensions": self.caps.max_extensions,
            "provider_paused_until": rfc3339(facts.paused_until),
            "cancel_response": esc.cancel_response,
            "accepted_by": facts.accepted_by,
            "options": [option.as_dict() for option in self.options],
            "notes": list(self.notes),
        }


def snapshot_sha256(snapshot: dict[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(snapshot)).hexdigest()


def build_card(
    *,
    escalation: Escalation,
    operation: Operation,
    now: datetime,
    extensions_used: int,
    paused_until: datetime | None,
    awaiting: Decision | None = None,
    inspections: list[Decision] | None = None,
) -> Card:
    """The card for an escalation, from rows already loaded (operation with its provider)."""
    profile = operation.provider
    caps = capabilities_of(profile)
    credential_changed = False
    if escalation.reason == Reason.AUTHORIZATION_DENIED:
        # What the workers hold now (they publish it), not this web process's environment.
        current = credential_current(credential_env=profile.credential_env)
        credential_changed = bool(current) and current != (escalation.credential_fingerprint or "")
    cancel = escalation.cancel_response or {}
    facts = Facts(
        reason=escalation.reason,
        now=now,
        deadline_at=operation.deadline_at,
        requests_used=operation.status_requests_used,
        max_requests=operation.max_status_requests,
        transport_failures_used=operation.transport_failures_used,
        max_transport_failures=operation.max_transport_failures,
        business_deadline_at=operation.business_deadline_at,
        extensions_used=extensions_used,
        paused_until=paused_until,
        provider_wait_until=operation.provider_wait_until,
        business_deadline_waived=operation.business_deadline_waived_at is not None,
        provider_state=(escalation.context or {}).get("provider_state") or operation.last_provider_state or None,
        cancel_sent=bool(cancel),
        credential_changed=credential_changed,
        accepted_by=awaiting.username if awaiting is not None else None,
    )
    is_open = escalation.state == Escalation.State.OPEN
    return Card(
        escalation=escalation,
        operation=operation,
        facts=facts,
        caps=caps,
        options=bounded_options(facts=facts, caps=caps) if is_open else [],
        notes=unavailable_notes(facts=facts, caps=caps) if is_open else [],
        console_url=console_link(template=caps.console_url, job_id=operation.provider_job_id),
        awaiting=awaiting,
        inspections=list(inspections or []),
    )


def load_card(
    *, escalation: Escalation, operation: Operation, now: datetime, decisions: list[Decision] | None = None
) -> Card:
    """The card of an escalation whose operation (with its provider) is loaded.

    `decisions`: every decision taken on the card, oldest first, when the caller loaded them (the
    dashboard shows them all); otherwise only the acceptance awaiting a second responder is read.
    """
    extensions_used = Authorization.objects.filter(operation_id=operation.pk, kind__in=EXTENSION_KINDS).count()
    paused_until = ProviderAccount.objects.filter(name=operation.account).values_list("paused_until", flat=True).first()
    # Once the card is decided nobody is awaited any more (the second responder confirmed, or
    # something else closed the card).
    is_open = escalation.state == Escalation.State.OPEN
    if decisions is None:
        awaiting = (
            Decision.objects.filter(escalation=escalation, outcome=Decision.Outcome.AWAITING_SECOND)
            .order_by("decided_at")
            .first()
        )
        inspections: list[Decision] = []
    else:
        awaiting = next((d for d in decisions if d.outcome == Decision.Outcome.AWAITING_SECOND), None)
        inspections = [d for d in decisions if d.outcome == Decision.Outcome.RECORDED]
    return build_card(
        escalation=escalation,
        operation=operation,
        now=now,
        extensions_used=extensions_used,
        paused_until=paused_until,
        awaiting=awaiting if is_open else None,
        inspections=inspections,
    )


def load_cards(*, escalations: list[Escalation], now: datetime) -> dict[int, Card]:
    """The cards of many escalations (operations with their providers loaded) in a fixed number of
    queries, whatever their count: what a group's page and the check of a bulk decision show.

    The same facts as `load_card`, read in bulk; a bulk decision still checks each member again
    with `load_card` under that member's locks before applying anything to it.
    """
    if not escalations:
        return {}
    operation_ids = [e.operation_id for e in escalations]
    extensions = dict(
        Authorization.objects.filter(operation_id__in=operation_ids, kind__in=EXTENSION_KINDS)
        .values("operation_id")
        .annotate(n=Count("id"))
        .values_list("operation_id", "n")
    )
    accounts = {e.operation.account for e in escalations}
    paused = dict(ProviderAccount.objects.filter(name__in=accounts).values_list("name", "paused_until"))
    awaiting: dict[int, Decision] = {}
    for decision in Decision.objects.filter(
        escalation_id__in=[e.pk for e in escalations], outcome=Decision.Outcome.AWAITING_SECOND
    ).order_by("-decided_at", "-pk"):
        awaiting[decision.escalation_id] = decision  # the oldest wins, as in load_card
    return {
        escalation.pk: build_card(
            escalation=escalation,
            operation=escalation.operation,
            now=now,
            extensions_used=extensions.get(escalation.operation_id, 0),
            paused_until=paused.get(escalation.operation.account),
            awaiting=awaiting.get(escalation.pk) if escalation.state == Escalation.State.OPEN else None,
        )
        for escalation in escalations
    }


def waited(escalation: Escalation, now: datetime) -> str:
    return human_duration(now - escalation.opened_at)
