"""The system panel and /metrics: dispatch lag, the oldest due operation, queues, processes.

The figures are read from the database, so the tests write the rows the running system would
(status checks with due and start times, heartbeats, queued tasks) on the injected clock.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django_q.models import OrmQ

from operations.lifecycle.cards import escalate
from operations.models import Operation, ProcessHeartbeat, ProviderAccount, StatusCheck
from operations.observability import metrics
from operations.polls import dispatch, heartbeat
from operations.vocabulary import Reason
from tests.support import T0, job_id

pytestmark = pytest.mark.django_db


def a_viewer(user_model, username: str):
    from django.contrib.auth.models import Group

    user = user_model.objects.create_user(username, password="x")
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    return user


@pytest.fixture(autouse=True)
def _frozen_clock(clock):
    return clock


@pytest.fixture
def busy_system(make_profile, make_operation):
    """Three polls with lags 0.1, 0.2 and 1.5 s; an operation due 7 s ago; a paused account; a
    live dispatcher and a silent one; a task waiting 4 s; one open escalation."""
    profile = make_profile()
    polled = make_operation(job_id("slow_success"))
    for lag, decision in ((0.1, "wait"), (0.2, "wait"), (1.5, "succeeded")):
        due = T0 - timedelta(seconds=30)
        StatusCheck.objects.create(
            operation=polled,
            account=profile.account,
            fence=1,
            due_at=due,
            started_at=due + timedelta(seconds=lag),
            sent_at=due + timedelta(seconds=lag),
            received_at=due + timedelta(seconds=lag + 0.01),
            decision=decision,
        )
    late = make_operation(job_id("slow_success"))
    Operation.objects.filter(pk=late.pk).update(next_poll_at=T0 - timedelta(seconds=7))
    Operation.objects.filter(pk=polled.pk).update(next_poll_at=T0 + timedelta(seconds=60))
    paused = make_profile()
    held = make_operation(job_id("slow_success"), provider=paused)
    Operation.objects.filter(pk=held.pk).update(next_poll_at=T0 - timedelta(seconds=100))
    ProviderAccount.objects.filter(name=paused.account).update(
        paused_until=T0 + timedelta(seconds=90), pause_reason="429 with Retry-After"
    )
    heartbeat.record_heartbeat(name="dispatcher@host-a:11", started_at=T0 - timedelta(hours=1), info={}, now=T0)
    heartbeat.record_heartbeat(
        name="dispatcher@host-b:12", started_at=T0 - timedelta(hours=1), info={}, now=T0 - timedelta(minutes=5)
    )
    OrmQ.objects.create(key="pollerdash", payload="x", lock=T0 - timedelta(seconds=4))
    OrmQ.objects.create(key="pollerdash", payload="y", lock=T0 + timedelta(seconds=100))
    gone = make_operation(job_id("never_finishes"))
    escalate(operation_id=gone.pk, fence=0, reason=Reason.DEADLINE_EXCEEDED, explanation="test")
    return {"late": late, "paused": paused}


def test_the_snapshot_has_lag_percentiles_and_the_oldest_due_operation(busy_system):
    snap = metrics.snapshot(now=T0)
    assert snap.lag.samples == 3
    # Linear interpolation between ranks, the same on SQLite and PostgreSQL (percentile_cont).
    assert snap.lag.p50 == pytest.approx(0.2)
    assert snap.lag.p95 == pytest.approx(0.2 + 1.3 * 0.9)
    assert snap.lag.p99 == pytest.approx(0.2 + 1.3 * 0.98)
    assert snap.lag.max_s == pytest.approx(1.5)
    # The paused account's operation waits on purpose: not counted as unclaimed lag.
    assert (snap.due_unclaimed, snap.oldest_due_age_s) == (1, pytest.approx(7.0))
    assert [a.name for a in snap.paused_accounts] == [busy_system["paused"].account]
    assert snap.polls_by_decision == {"succeeded": 1, "wait": 2}
    assert snap.polls_per_s == pytest.approx(3 / 60)
    assert (snap.queue_waiting, snap.queue_taken, snap.oldest_waiting_s) == (1, 1, pytest.approx(4.0))
    assert snap.live_processes == {"dispatcher": 1}
    assert snap.open_escalations["deadline_exceeded"] == 1 and snap.open_escalations["unknown_state"] == 0
    assert snap.operations_by_status["needs_attention"] == 1


def test_a_claimed_operation_is_no_longer_unclaimed(busy_system):
    dispatch.claim_due(owner="dispatcher@host-a:11", now=T0)
    snap = metrics.snapshot(now=T0)
    assert (snap.due_unclaimed, snap.oldest_due_age_s) == (0, None)


# --- the system panel ----------------------------------------------------------------------------------


def test_the_system_panel_needs_a_login(client):
    response = client.get(reverse("system"))
    assert response.status_code == 302 and reverse("login") in response["Location"]


def test_the_system_panel_shows_what_an_on_call_engineer_needs(busy_system, client, django_user_model):
    client.force_login(a_viewer(django_user_model, "viewer1"))
    response = client.get(reverse("system"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "p50 <b>0.200 s</b>" in html and "p95 <b>1.370 s</b>" in html and "p99 <b>1.474 s</b>" in html
    assert "<b>7.0 s</b>" in html  # oldest due, unclaimed
    assert busy_system["paused"].account in html and "429 with Retry-After" in html
    assert "dispatcher@host-a:11" in html and "silent" in html
    assert "<b>1</b> waiting" in html
    assert "Dispatch lag p95 is 1.37 s" in html  # called out: over 1 s
    assert "An operation has been due for 7 s" in html
    assert "Deadline exceeded" in html
    assert "append-only triggers" in html  # the audit protection checks
    assert "<html" in html


def test_lag_right_after_a_dispatcher_started_is_explained_as_a_draining_backlog(
    busy_system, client, django_user_model
):
    """After a deploy (or `make demo`), polls that fell due while no dispatcher ran are late: the
    panel says so instead of sending the engineer to add workers."""
    ProcessHeartbeat.objects.filter(name="dispatcher@host-a:11").update(started_at=T0 - timedelta(seconds=40))
    client.force_login(a_viewer(django_user_model, "viewer4"))
    html = client.get(reverse("system")).content.decode()
    assert "Dispatch lag p95 is 1.37 s (over 1 s): a dispatcher started 40 s ago" in html
    assert "too few or busy" in html  # still named, for a lag that outlives the backlog

    ProcessHeartbeat.objects.filter(name="dispatcher@host-a:11").update(started_at=T0 - timedelta(hours=1))
    html = client.get(reverse("system")).content.decode()
    assert "Dispatch lag p95 is 1.37 s (over 1 s): workers are too few or busy." in html
    assert "started" not in html.split("Dispatch lag p95")[1].split("</p>")[0]


def test_the_panel_refresh_returns_only_the_fragment(busy_system, client, django_user_model):
    client.force_login(a_viewer(django_user_model, "viewer2"))
    response = client.get(reverse("system"), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html and "Dispatch lag" in html


def test_a_quiet_system_says_so(client, django_user_model):
    heartbeat.record_heartbeat(name="dispatcher@host-a:11", started_at=T0, info={}, now=T0)
    client.force_login(a_viewer(django_user_model, "viewer3"))
    html = client.get(reverse("system")).content.decode()
    assert "Dispatch is healthy" in html and "No polls in the last 5 minutes" in html


def test_without_a_dispatcher_heartbeat_the_panel_warns(client, django_user_model):
    client.force_login(a_viewer(django_user_model, "viewer4"))
    html = client.get(reverse("system")).content.decode()
    assert "No dispatcher has sent a heartbeat recently" in html


# --- /metrics ------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _scrape_from_loopback(settings):
    """These tests scrape as a Prometheus on the same machine would, with METRICS_ALLOW_LOOPBACK=1
    (the tests of the rule itself set it as they need)."""
    settings.METRICS_ALLOW_LOOPBACK = True


def test_metrics_are_prometheus_text_with_every_figure(busy_system, client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    text = response.content.decode()
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    expected = {
        'pollerdash_dispatch_lag_seconds{quantile="0.5"}': 0.2,
        'pollerdash_dispatch_lag_seconds{quantile="0.95"}': 1.37,
        'pollerdash_dispatch_lag_seconds{quantile="0.99"}': 1.474,
        "pollerdash_dispatch_lag_samples": 3,
        "pollerdash_oldest_due_unclaimed_seconds": 7,
        "pollerdash_due_unclaimed_operations": 1,
        'pollerdash_recent_polls{decision="wait"}': 2,
        'pollerdash_recent_polls{decision="succeeded"}': 1,
        'pollerdash_open_escalations{reason="deadline_exceeded"}': 1,
        'pollerdash_open_escalations{reason="rate_limited"}': 0,
        'pollerdash_operations{status="needs_attention"}': 1,
        "pollerdash_paused_accounts": 1,
        f'pollerdash_account_pause_remaining_seconds{{account="{busy_system["paused"].account}"}}': 90,
        "pollerdash_task_queue_waiting": 1,
        "pollerdash_task_queue_taken": 1,
        "pollerdash_task_queue_oldest_waiting_seconds": 4,
        'pollerdash_live_processes{kind="dispatcher"}': 1,
    }
    assert {key: values.get(key) for key in expected} == pytest.approx(expected)
    assert "pollerdash_audit_protection_ok{" in text
    # Figures only: no operation or job identifiers, no pause reasons (provider text).
    late = busy_system["late"]
    assert late.pk not in text and late.provider_job_id not in text and "429 with Retry-After" not in text


def test_metrics_speak_openmetrics_to_a_scraper_that_asks(busy_system, client):
    response = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.decode().rstrip().endswith("# EOF")


def test_without_a_token_metrics_are_served_to_nobody_unless_loopback_is_allowed(client, settings):
    settings.METRICS_ALLOW_LOOPBACK = False
    for address in ("127.0.0.1", "::1", "10.1.2.3"):
        refused = client.get("/metrics", REMOTE_ADDR=address)
        assert refused.status_code == 403 and b"METRICS_TOKEN" in refused.content, address


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Forwarded-For": "203.0.113.9"},
        {"X-Forwarded-For": "127.0.0.1"},  # a proxy passing on what a client claimed
        {"Forwarded": "for=127.0.0.1"},
        {"X-Real-Ip": "127.0.0.1"},
        {"X-Forwarded-Host": "pollerdash.example.com"},
        {"X-Forwarded-Proto": "https"},
        {"Via": "1.1 proxy"},
        {"True-Client-Ip": "127.0.0.1"},
        {"X-Client-Ip": "127.0.0.1"},
        {"Cf-Connecting-Ip": "127.0.0.1"},
    ],
)
def test_allowed_loopback_means_direct_clients_only_never_through_a_proxy(client, settings, headers):
    settings.METRICS_ALLOW_LOOPBACK = True
    assert client.get("/metrics", headers=headers, REMOTE_ADDR="127.0.0.1").status_code == 403


def test_allowed_loopback_serves_direct_clients_on_this_machine_only(client, settings):
    settings.METRICS_ALLOW_LOOPBACK = True
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200


def test_with_a_token_metrics_need_it_from_everywhere(client, settings):
    settings.METRICS_TOKEN = "scrape-token-123456"
    settings.METRICS_ALLOW_LOOPBACK = False
    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
    assert b"scrape-token" not in refused.content
    wrong = {"Authorization": "Bearer nope"}
    assert client.get("/metrics", headers=wrong).status_code == 401
    right = {"Authorization": "Bearer scrape-token-123456", "X-Forwarded-For": "203.0.113.9"}
    assert client.get("/metrics", headers=right, REMOTE_ADDR="10.1.2.3").status_code == 200


def test_a_signed_in_user_without_a_role_does_not_see_the_panel(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("norole", password="x"))
    assert client.get(reverse("system")).status_code == 403


def test_entries_awaiting_integration_show_their_age_on_the_panel_and_in_metrics(clock, client, django_user_model):
    from operations.audit import integrate
    from tests.audit.helpers import append_entries

    viewer = a_viewer(django_user_model, "viewer1")
    integrate.integrate_all()  # what creating the viewer appended
    append_entries(3)  # pending: no dispatcher has integrated them
    clock.move_to(T0 + timedelta(seconds=12), tick=False)

    def figures() -> dict[str, float]:
        text = client.get("/metrics").content.decode()
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("pollerdash_audit_") and not line.startswith("pollerdash_audit_protection")
        }

    assert figures() == {
        "pollerdash_audit_integration_lag_seconds": 12.0,
        "pollerdash_audit_pending_entries": 3,
    }
    client.force_login(viewer)
    html = client.get(reverse("system")).content.decode()
    assert "3 entries awaiting integration, the oldest for 12.0 s - is a dispatcher" in html
    integrate.integrate_all()
    assert figures() == {"pollerdash_audit_integration_lag_seconds": 0.0, "pollerdash_audit_pending_entries": 0}
    assert "0 entries awaiting integration" in client.get(reverse("system")).content.decode()
    append_entries(1)
    assert "1 entry awaiting integration" in client.get(reverse("system")).content.decode()
