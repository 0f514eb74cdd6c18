"""After a cancel, the provider state an agent reads is the one the cancel's answer reported."""

from __future__ import annotations

import pytest

from operations.models import Operation
from operations.tasks import forward_provider_cancel

pytestmark = pytest.mark.django_db


def test_after_a_confirmed_cancel_the_provider_state_is_the_cancels_answer(api, register, drive) -> None:
    created = register("cancel_ok")
    op = Operation.objects.get(pk=created["id"])
    drive(op, max_polls=1)
    before = api.get(f"/api/v1/operations/{op.pk}").json()
    assert before["provider_status"] == "running"

    assert api.post(f"/api/v1/operations/{op.pk}/cancel").status_code == 202
    assert forward_provider_cancel(op.pk) == "confirmed"

    after = api.get(f"/api/v1/operations/{op.pk}").json()
    assert after["status"] == "closed" and after["provider_status"] == "cancelled"
    assert after["sequence"] > before["sequence"]
