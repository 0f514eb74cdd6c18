"""`make demo` seeds operations that reach every escalation reason within about two minutes.

The demo profiles are loaded as the demo loads them (re-pointed at the running fake provider),
the scenarios are seeded by the demo's own function, and a small loop plays the dispatcher:
at each next due time (on the injected clock) it polls the operation that is due.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from demo import seed as demo
from operations.models import Escalation, ProviderProfile
from operations.vocabulary import Reason
from tests.support import T0, run_like_the_dispatcher

pytestmark = pytest.mark.django_db


def test_the_demo_reaches_every_escalation_reason_within_two_minutes(fake_provider, clock, rng) -> None:
    demo.load_demo_profiles(provider_url=fake_provider.base_url)
    # Pacing has its own tests; here the frozen clock would only turn waits into deferrals.
    ProviderProfile.objects.update(rate_limit_per_s=10_000)
    operations = demo.seed_scenarios()
    assert len(operations) == len(demo.SCENARIOS)

    run_like_the_dispatcher(clock, rng, until=T0 + timedelta(minutes=2))

    cards = Escalation.objects.filter(state="open").select_related("operation")
    # Every reason but a refused destination, which only a misconfigured deployment reaches (the demo's
    # profiles are bound to its fake provider): tests/operations/test_destinations.py.
    assert {card.reason for card in cards} == {reason.value for reason in Reason} - {Reason.DESTINATION_NOT_ALLOWED}
    assert all(card.opened_at <= T0 + timedelta(minutes=2) for card in cards)
    for scenario, op in zip(demo.SCENARIOS, operations, strict=True):
        op.refresh_from_db()
        reason = next((c.reason for c in cards if c.operation_id == op.pk), None)
        assert scenario.expect in (op.status, reason), (scenario.job, op.status, reason)
