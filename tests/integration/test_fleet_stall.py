"""A real fleet that stops working says so, and says so no more once it works again (issue 30).

The workers are frozen with SIGSTOP: every process stays alive, as in the soak that stalled, and
the dispatcher keeps beating. Its heartbeat turns unhealthy, it logs the stall, the system panel
shows it red; after SIGCONT the polls go out and the heartbeat is healthy again.
"""

from __future__ import annotations

import os
import signal

import pytest
from django.urls import reverse

from operations.models import ProcessHeartbeat
from tests.integration.support import wait_until
from tests.integration.test_dispatch_processes import SUCCEEDS_AT_ONCE, fast_profile, finished, register
from tests.operations.test_metrics import a_viewer

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

STALL_S = 2


def heartbeat_problems() -> list[str] | None:
    beat = ProcessHeartbeat.objects.filter(kind="dispatcher").first()
    return None if beat is None else beat.info.get("stalled")


def test_a_frozen_fleet_turns_red_and_back(processes, make_profile, fake_provider, client, django_user_model, settings):
    settings.STALL_ALERT_S = STALL_S  # the panel's own check, as the dispatcher's
    profile = fast_profile(make_profile)
    cluster = processes.start("qcluster", Q_WORKERS=1)
    dispatcher = processes.start("dispatcher", STALL_ALERT_S=STALL_S)
    warm_up = [register(profile, SUCCEEDS_AT_ONCE) for _ in range(2)]
    wait_until(lambda: finished(warm_up), timeout=30, what="both processes to be up", processes=processes)
    wait_until(lambda: heartbeat_problems() == [], timeout=10, what="a healthy heartbeat", processes=processes)
    client.force_login(a_viewer(django_user_model, "oncall"))

    os.killpg(cluster.pid, signal.SIGSTOP)  # alive, making no progress
    try:
        ops = [register(profile, SUCCEEDS_AT_ONCE) for _ in range(3)]

        def all_three_reported() -> bool:
            # The queue's stall or the first operations' may be seen a heartbeat before all three.
            return any(
                problem.startswith("Polling has stopped: 3 operations") for problem in heartbeat_problems() or []
            )

        wait_until(all_three_reported, timeout=STALL_S + 15, what="the stall", processes=processes)
        assert "the fleet has stalled. Polling has stopped" in dispatcher.log()
        html = client.get(reverse("system")).content.decode()
        assert 'data-alert="stalled"' in html and ">alive, stalled<" in html
        assert "Dispatch is healthy" not in html
    finally:
        os.killpg(cluster.pid, signal.SIGCONT)

    wait_until(lambda: finished(ops), timeout=30, what="the polls after SIGCONT", processes=processes)
    wait_until(lambda: heartbeat_problems() == [], timeout=10, what="a healthy heartbeat again", processes=processes)
    assert "the fleet is working again" in dispatcher.log()
    html = client.get(reverse("system")).content.decode()
    assert 'data-alert="stalled"' not in html and ">alive, stalled<" not in html
