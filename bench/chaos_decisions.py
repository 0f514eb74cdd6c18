"""People deciding cards through the faults of bench/chaos.py: what "decisions lost" counts.

Operations of their own profile and account (`chaos-cards`, so the soak's invariants never count
them) watch jobs that never finish with a budget of two requests: each soon opens a card
(`request_budget_exhausted`). A decider thread in the run's process closes every open card through
the decision service, as a person at the dashboard would (a fresh password sign-in), across every
fault, and keeps each decision whose call returned `applied`. At the end: a returned decision
missing from the database, a card decided twice, or a card still open is a decision lost.
"""

from __future__ import annotations

import threading
import time
import uuid

ACCOUNT = "chaos-cards"
BUDGET = 2


def make_profile(provider_url: str):
    from bench import soak

    return soak.make_profile(provider_url, name=ACCOUNT, budget=BUDGET, base_delay_s=0.5, max_delay_s=2.0)


def register(profile, count: int) -> None:
    """`count` watched operations whose jobs never finish (first poll due now)."""
    from bench import soak

    soak.watch(profile, [f"never_finishes__id={uuid.uuid4().hex[:12]}" for _ in range(count)], budget=BUDGET)


class Decider:
    """Closes every open card of the account, one after another, until stopped; keeps what returned."""

    def __init__(self) -> None:
        from django.contrib.auth import get_user_model

        self.user = get_user_model().objects.create_user(username="chaos-oncall", password=uuid.uuid4().hex)
        self.applied: dict[int, int] = {}  # card -> the decision the service returned
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-decider", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from django.db import DatabaseError, connection

        while not self._stop.is_set():
            try:
                self._decide_open_cards()
            except DatabaseError:
                self.failures += 1
                connection.close()
            self._stop.wait(0.5)
        connection.close()

    def _decide_open_cards(self) -> None:
        from django.utils import timezone

        from operations.cards.signin import PASSWORD, SignIn
        from operations.decisions.services import escalation_decide
        from operations.models import Escalation

        cards = Escalation.objects.filter(operation__account=ACCOUNT, state="open").exclude(pk__in=list(self.applied))
        for pk, version in cards.values_list("pk", "version")[:20]:
            if self._stop.is_set():
                return
            result = escalation_decide(
                escalation_id=pk,
                user=self.user,
                sign_in=SignIn(method=PASSWORD, at=timezone.now()),
                option_id="close",
                card_version=version,
                comment="closed during the fault run",
            )
            if result.outcome == "applied":
                self.applied[pk] = result.decision.pk

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def decisions_lost(decider: Decider, *, say) -> dict[str, int]:
    from django.db.models import Count

    from operations.models import Decision, Escalation

    cards = Escalation.objects.filter(operation__account=ACCOUNT)
    present = set(Decision.objects.filter(pk__in=list(decider.applied.values())).values_list("pk", flat=True))
    doubled = (
        Decision.objects.filter(escalation__in=cards, outcome="applied")
        .values("escalation_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    say(
        f"decider: {cards.count()} cards opened, {len(decider.applied)} closed by a person during the faults,"
        f" {decider.failures} attempts refused by a database fault"
    )
    return {
        "decisions returned applied, then lost": sum(1 for pk in decider.applied.values() if pk not in present),
        "cards decided twice": doubled,
        "cards left undecided": cards.filter(state="open").count(),
    }


def wait_for_cards(*, seconds: float) -> None:
    """The drain of these operations: every one has its card (or is closed) within `seconds`."""
    from operations.models import Operation
    from operations.vocabulary import POLLABLE_STATUSES

    deadline = time.monotonic() + seconds
    while Operation.objects.filter(account=ACCOUNT, status__in=POLLABLE_STATUSES).exists():
        if time.monotonic() > deadline:
            return
        time.sleep(1)
