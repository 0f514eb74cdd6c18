"""The lifecycle's transitions (operations/lifecycle/transitions.py): every status change the table
allows is made by a real lifecycle function on the database, every other one is refused before
anything is written, and a claim ends the same way on every path.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from operations.agents.identities import agent_token_issue
from operations.decisions.services import escalation_decide
from operations.lifecycle import agents, claims, humans, polls
from operations.lifecycle.cards import escalate
from operations.lifecycle.transitions import (
    ALLOWED,
    CLAIM_RELEASED,
    RESUME,
    TRANSITIONS,
    Transition,
    TransitionRefused,
)
from operations.models import Escalation, Operation, StatusCheck
from operations.polling.model import Action, Decision
from operations.polls import batch
from operations.polls.batch import poll_claims
from operations.polls.controller import poll_once
from operations.vocabulary import TERMINAL_STATUSES, DelaySource, Reason, Status
from tests.support import job_id, signed_in_now

pytestmark = pytest.mark.django_db

Edge = tuple[Status, Status]


def reload(op: Operation) -> Operation:
    return Operation.objects.select_related("provider").get(pk=op.pk)


def _targets(transition: Transition, was: Status) -> list[Status | None]:
    return sorted(transition.targets, key=str) or [None]


# --- the table, whole ------------------------------------------------------------------------------


def test_a_transition_is_allowed_exactly_from_its_statuses_along_the_tables_edges():
    """Every transition from every status to every status it can write: refused unless the
    transition starts there and the table allows the change."""
    for transition, was in itertools.product(TRANSITIONS, Status):
        for to in _targets(transition, was):
            allowed = was in transition.sources and (to is None or to in ALLOWED[was])
            change = _any_use(transition, to)
            if allowed:
                change.check(was=was)
            else:
                with pytest.raises(TransitionRefused):
                    change.check(was=was)


def test_every_edge_of_the_table_has_a_transition_that_makes_it_and_terminal_statuses_never_change():
    made = {
        (was, to)
        for transition in TRANSITIONS
        for was in transition.sources
        for to in transition.targets
        if to in ALLOWED[was]
    }
    assert made == _edges()
    assert all(
        not ALLOWED[status] for status in Status if status.value not in ("pending", "running", "needs_attention")
    )


def _edges() -> set[Edge]:
    return {(was, to) for was, targets in ALLOWED.items() for to in targets}


def _any_use(transition: Transition, to: Status | None) -> object:
    """The transition with placeholder values (only its status matters to `check`)."""
    values = dict.fromkeys(transition.gives)
    if "status" in values:
        values["status"] = to
    return transition.given(**values)


def test_a_use_gives_exactly_the_values_its_transition_takes_and_never_its_own():
    with pytest.raises(TypeError):
        RESUME.given(next_poll_at=None, delay_source="", updated_at=None, status=Status.RUNNING)
    with pytest.raises(TypeError):
        RESUME.given(next_poll_at=None, delay_source="")
    with pytest.raises(TypeError):  # the claim is the transition's to release, never a use's
        RESUME.given(next_poll_at=None, delay_source="", updated_at=None, also={"lease_owner": "me"})


# --- the walk: every allowed edge, made by the lifecycle on the database -----------------------------


def _step(seen: dict[Edge, list[str]], op: Operation, what: str, act: Callable[[], object]) -> Operation:
    """Run one lifecycle call on `op` and record the status change it made in the database."""
    was = Status(reload(op).status)
    act()
    now = reload(op)
    seen.setdefault((was, Status(now.status)), []).append(what)
    return now


def _charge(op: Operation) -> tuple[Operation, StatusCheck]:
    op = reload(op)
    now = timezone.now()
    charged = claims.charge(op=op, fence=op.fence, worker="w:1", started_at=now, now=now, reserved=False)
    assert charged is not None
    return charged


def _answer(op: Operation, check: StatusCheck, decision: Decision) -> bool:
    answer = polls.Answer(
        received_at=timezone.now(),
        http_status=200,
        retry_after="",
        request_id="",
        body_digest="",
        body_bytes=0,
        transport_error="",
    )
    return polls.record_outcome(op=op, check=check, decision=decision, answer=answer)


def _decision(action: Action, status: Status, **extra: object) -> Decision:
    return Decision(action=action, status=status, interpreted_state="x", explanation="walk", **extra)


def _wait() -> Decision:
    return _decision(
        Action.WAIT,
        Status.RUNNING,
        next_poll_at=timezone.now() + timedelta(seconds=5),
        delay_source=DelaySource.LOCAL_BACKOFF,
    )


def _user(name: str) -> object:
    user = get_user_model().objects.create_user(username=name, password="pw-" + name)
    user.groups.add(Group.objects.get_or_create(name="responder")[0])
    return user


def _decide(op: Operation, user: object, option: str, comment: str = "") -> None:
    card = Escalation.objects.get(operation=op, state=Escalation.State.OPEN)
    result = escalation_decide(
        escalation_id=card.pk,
        user=user,
        sign_in=signed_in_now(),
        option_id=option,
        card_version=card.version,
        comment=comment,
    )
    assert not result.refused, result.message


def _cancel_watch(op: Operation) -> None:
    agent = agent_token_issue(name="walker").agent
    with transaction.atomic():
        locked = Operation.objects.select_for_update().select_related("provider").get(pk=op.pk)
        agents.cancel_watch(op=locked, agent=agent, reason="no longer needed", now=timezone.now())


def _polled_to_the_end(seen: dict[Edge, list[str]], op: Operation, status: Status) -> None:
    """Charged, told to wait, charged again, then an answer that ends it with `status`."""
    charged: list[tuple[Operation, StatusCheck]] = []
    op = _step(seen, op, "claims.charge", lambda: charged.append(_charge(op)))
    op = _step(seen, op, "polls.record_outcome wait", lambda: _answer(*charged.pop(), _wait()))
    op = _step(seen, op, "claims.charge", lambda: charged.append(_charge(op)))
    done = _decision(Action.COMPLETE, status, result={"ok": True} if status.startswith("succ") else None)
    _step(seen, op, f"polls.record_outcome {status}", lambda: _answer(*charged.pop(), done))


def test_every_allowed_status_change_is_made_by_the_lifecycle(make_operation, fake_provider, clock):
    seen: dict[Edge, list[str]] = {}

    def fresh(scenario: str = "never_finishes") -> Operation:
        return make_operation(job_id(scenario))

    # pending -> running (a charge), running -> running (an answer to wait, a charge again),
    # running -> each terminal status (an answer that ends it)
    for status in sorted(TERMINAL_STATUSES - {Status.CLOSED}):
        _polled_to_the_end(seen, fresh(), status)

    # pending -> needs_attention (escalated before any request), running -> needs_attention (on an
    # answer, and before a request)
    def escalate_now(op: Operation) -> None:
        assert escalate(operation_id=op.pk, fence=None, reason=Reason.DEADLINE_EXCEEDED, explanation="walk")

    op = fresh()
    _step(seen, op, "cards.escalate", lambda: escalate_now(op))
    op = fresh()
    charged = _charge(op)
    stuck = _decision(Action.ESCALATE, Status.NEEDS_ATTENTION, reason=Reason.UNKNOWN_STATE)
    _step(seen, op, "polls.record_outcome escalate", lambda: _answer(*charged, stuck))
    op = fresh()
    _charge(op)
    _step(seen, op, "cards.escalate", lambda: escalate_now(op))

    # needs_attention -> running (a person extends), -> closed (a person closes), -> succeeded (two
    # people accept the output), -> cancelled (the provider confirms the card's cancel)
    alice, bob = _user("alice"), _user("bob")

    def escalated(scenario: str = "never_finishes", reason: Reason = Reason.DEADLINE_EXCEEDED) -> Operation:
        op = fresh(scenario)
        assert escalate(operation_id=op.pk, fence=None, reason=reason, explanation="walk")
        return op

    op = escalated()
    _step(seen, op, "humans.grant", lambda: _decide(op, alice, "extend:15m:4"))
    op = escalated()
    _step(seen, op, "humans.close", lambda: _decide(op, alice, "close"))
    op = escalated(reason=Reason.INTEGRATION_FAILURE)
    _decide(op, alice, "accept_output", "checked by hand")
    _step(seen, op, "humans.accept_output", lambda: _decide(op, bob, "accept_output", "confirmed"))
    op = escalated("cancel_ok")
    _step(seen, op, "cancels.record_cancel_answer", lambda: _decide(op, alice, "cancel_at_provider"))

    # pending, running, needs_attention -> closed (the agent cancels the watch)
    op = fresh()
    _step(seen, op, "agents.cancel_watch", lambda: _cancel_watch(op))
    op = fresh()
    _charge(op)
    _step(seen, op, "agents.cancel_watch", lambda: _cancel_watch(op))
    op = escalated()
    _step(seen, op, "agents.cancel_watch", lambda: _cancel_watch(op))

    assert set(seen) == _edges(), {edge: seen.get(edge) for edge in _edges() ^ set(seen)}


# --- refused: a change the table does not allow writes nothing ------------------------------------


def _row(op: Operation) -> tuple[object, ...]:
    found = reload(op)
    return (found.status, found.fence, found.sequence, found.status_requests_used, found.lease_owner)


def test_a_finished_operation_is_never_finished_again(make_operation, clock):
    op = make_operation(job_id("never_finishes"))
    checked = _charge(op)
    assert _answer(*checked, _decision(Action.COMPLETE, Status.FAILED, error={"code": "x"}))
    before = _row(op)
    with pytest.raises(TransitionRefused, match="finish from failed"), transaction.atomic():
        humans.finish(operation=reload(op), status=Status.CLOSED, now=timezone.now())
    assert _row(op) == before


def test_an_operation_with_a_person_is_never_charged(make_operation, clock):
    op = make_operation(job_id("never_finishes"))
    assert escalate(operation_id=op.pk, fence=None, reason=Reason.DEADLINE_EXCEEDED, explanation="walk")
    before, checks = _row(op), StatusCheck.objects.count()
    with pytest.raises(TransitionRefused, match="charge from needs_attention"):
        _charge(op)
    assert _row(op) == before and StatusCheck.objects.count() == checks


def test_an_answer_naming_a_status_its_transition_does_not_write_is_refused(make_operation, clock):
    op = make_operation(job_id("never_finishes"))
    charged = _charge(op)
    before = _row(op)
    with pytest.raises(TransitionRefused):
        _answer(*charged, _decision(Action.WAIT, Status.PENDING, next_poll_at=timezone.now()))
    with pytest.raises(TransitionRefused):
        _answer(*charged, _decision(Action.COMPLETE, Status.NEEDS_ATTENTION))
    # Nothing written: the request stays charged and leased, like a lost answer.
    assert _row(op) == before


# --- a claim ends the same way on every path -----------------------------------------------------


def _claimed(op: Operation, *, clock: object) -> claims.Claim:
    (claim,) = claims.claim_due_rows(account=op.account, now=timezone.now(), take=1, owner="dispatcher:1")
    assert claim.operation_id == op.pk
    assert reload(op).claim_due_at is not None
    return claim


def _released(op: Operation) -> dict[str, object]:
    found = reload(op)
    return {name: getattr(found, name) for name in CLAIM_RELEASED}


@pytest.mark.parametrize(
    "path",
    ["release", "expired lease", "defer", "wait", "escalate on an answer", "finish", "escalate", "late answer"],
)
def test_every_path_that_ends_a_claim_leaves_the_same_fields(make_operation, fake_provider, clock, path):
    scenario = {"escalate on an answer": "unknown_state", "finish": "slow_success"}.get(path, "never_finishes")
    op = make_operation(job_id(scenario, polls=1) if path == "finish" else job_id(scenario))
    with transaction.atomic():
        claim = _claimed(op, clock=clock)
    fence_before = reload(op).fence
    if path == "release":
        assert claims.release(operation_id=op.pk, fence=claim.fence)
    elif path == "expired lease":
        lease = reload(op).lease_expires_at
        clock.move_to(lease + timedelta(seconds=1), tick=False)
        expired = claims.ExpiredLease(operation_id=op.pk, owner="dispatcher:1", fence=claim.fence, expired_at=lease)
        assert claims.take_expired_lease(lease=expired)
    elif path == "defer":
        with transaction.atomic():
            later = timezone.now() + timedelta(seconds=30)
            assert claims.defer(op=reload(op), fence=claim.fence, until=later, why="busy", now=timezone.now())
    elif path in ("wait", "escalate on an answer", "finish"):
        poll_once(operation_id=op.pk, fence=claim.fence)
    elif path == "escalate":
        assert escalate(operation_id=op.pk, fence=claim.fence, reason=Reason.DEADLINE_EXCEEDED, explanation="x")
    else:  # the agent cancels while the request is in flight; its answer comes after
        loaded = reload(op)
        now = timezone.now()
        op_, check = claims.charge(op=loaded, fence=claim.fence, worker="w:1", started_at=now, now=now, reserved=True)
        _cancel_watch(op)
        assert _answer(op_, check, _wait())
        assert reload(op).status == Status.CLOSED
    expected = {"wait": Status.RUNNING, "escalate on an answer": Status.NEEDS_ATTENTION}
    assert _released(op) == dict(CLAIM_RELEASED)
    assert reload(op).fence > fence_before
    if path in expected:
        assert reload(op).status == expected[path]


# --- one definition: the single poll and a group write the same change ----------------------------


def _owned(op: Operation, before: Operation) -> dict[str, object]:
    found = reload(op)
    return {
        "status": found.status,
        "fence": found.fence - before.fence,
        "sequence": found.sequence - before.sequence,
        "status_requests_used": found.status_requests_used - before.status_requests_used,
        "approved_checks": found.approved_checks,
        "delay_source": found.delay_source,
        "next_poll_at set": found.next_poll_at is not None,
        **{name: getattr(found, name) for name in CLAIM_RELEASED},
    }


@pytest.mark.parametrize("scenario", ["slow_success", "never_finishes"])
def test_a_group_of_polls_writes_exactly_what_single_polls_write(
    make_operation, fake_provider, clock, monkeypatch, scenario
):
    groups: list[int] = []
    charge_group = batch.charge_group
    monkeypatch.setattr(batch, "charge_group", lambda **kw: groups.append(len(kw["claims"])) or charge_group(**kw))
    jobs = [job_id(scenario, polls=1) if scenario == "slow_success" else job_id(scenario) for _ in range(4)]
    ops = [make_operation(job) for job in jobs]
    before = {op.pk: reload(op) for op in ops}
    with transaction.atomic():
        taken = claims.claim_due_rows(account=ops[0].account, now=timezone.now(), take=4, owner="dispatcher:1")
    by_id = {claim.operation_id: claim.fence for claim in taken}
    single, grouped = ops[:2], ops[2:]
    for op in single:
        assert poll_once(operation_id=op.pk, fence=by_id[op.pk]) == "polled"
    assert poll_claims(claims=[(op.pk, by_id[op.pk]) for op in grouped]) == ["polled", "polled"]
    assert groups == [2]  # the group's path, charged together
    written = [_owned(op, before[op.pk]) for op in ops]
    assert written[0] == written[1] == written[2] == written[3], written
    assert written[0]["fence"] == 3  # the claim, the charge, the outcome


def test_an_answer_after_another_change_moves_the_sequence_past_both(make_operation, clock):
    """A paused account moves every waiting operation's sequence, one with a request in flight too:
    its answer must then move the sequence again, or an event stream that saw the pause would
    never see the answer (the same sequence twice)."""
    mine, other = make_operation(job_id("never_finishes")), make_operation(job_id("never_finishes"))
    in_flight = _charge(mine)
    charged_at = reload(mine).sequence
    paused = _decision(
        Action.WAIT,
        Status.RUNNING,
        next_poll_at=timezone.now() + timedelta(minutes=5),
        delay_source=DelaySource.PROVIDER_RETRY_AFTER,
        account_pause_until=timezone.now() + timedelta(minutes=5),
    )
    assert _answer(*_charge(other), paused)
    assert reload(mine).sequence == charged_at + 1  # the pause, seen by the agent
    assert _answer(*in_flight, _wait())
    assert reload(mine).sequence == charged_at + 2
