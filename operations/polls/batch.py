"""A group task's polls (the dispatcher groups up to DISPATCH_POLLS_PER_TASK under load), batched.

Each poll keeps its guarantees (docs/DESIGN.md section 4); what the group shares is the round
trips and transactions around them:

    load every operation in one query (profiles from the per-process cache)
    gate each one (pure; a stop, a hold or an escalation takes the single poll's path), then its
        destination (a refused one is escalated, never charged)
    charge them in one short transaction: the accounts share-locked, the window's room counted per
        account, one fenced UPDATE and one multi-row INSERT of their checks   <- before sending
    send the requests concurrently over the one shared client, at most SEND_CONCURRENCY at a time
    decide each (pure), then write the outcomes in one fenced transaction (lifecycle.polls)

The charge and the outcomes are the single poll's transitions (operations/lifecycle/transitions.py),
written for many rows at once: a group cannot write anything a single poll would not.

A claim the dispatcher did not admit, or of an account with a low rate limit or near its limit
(`_admit`), is polled alone afterwards (controller.poll_once, which may wait for a send slot or
defer), so per-account pacing is the single poll's wherever it binds. A task with one claim is a
single poll: a light load keeps its latency.
"""

from __future__ import annotations

import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import cast

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from operations.lifecycle import poll_groups
from operations.lifecycle.claims import charge_group, release
from operations.limits import pacing
from operations.models import Operation
from operations.polls.controller import (
    MAX_SLOT_WAIT_S,
    SLOT_ATTEMPTS,
    PollResult,
    _rng,
    destination_or_stop,
    gate_at_charge,
    gate_or_stop,
    interpret,
    poll_once,
    worker_name,
)
from operations.polls.poll_inputs import load_for_polls
from operations.providers import http
from operations.providers.targets import Destination

# Requests of one group in flight at once, over the process's one keep-alive client. A group is
# never larger than this, so every request of a group starts at once and the group takes as long
# as its slowest request (the task's time limit is sized for one request).
SEND_CONCURRENCY = 8

# A group is charged together only on accounts allowing at least this many requests per window
# (pacing.allowance): there its requests leaving together cannot crowd the limit (see _admit).
GROUP_MIN_ALLOWANCE = 10 * SEND_CONCURRENCY

_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None


def _senders() -> ThreadPoolExecutor:
    # Created after fork, like the client: django-q2 workers never share a pool's threads.
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        _pool, _pool_pid = ThreadPoolExecutor(max_workers=SEND_CONCURRENCY, thread_name_prefix="poll-send"), os.getpid()
    return _pool


def poll_claims(*, claims: list[tuple[str, int]], rng: random.Random | None = None) -> list[PollResult]:
    """Poll a task's claimed operations, each at most once; results in the claims' order.

    A poll is only started while a whole request still fits the task's time limit; the claims
    left over are released (fence + 1, still due) so the next dispatcher pass hands them to
    another worker at once instead of waiting for their leases to run out.
    """
    rng = rng or _rng
    # The longest a poll can take: the waits for a send slot in _charge, then the whole request.
    longest_poll_s = SLOT_ATTEMPTS * MAX_SLOT_WAIT_S + settings.POLL_HTTP_TOTAL_TIMEOUT_S
    # The stubs type a settings dict's values as object; "timeout" is always a whole number of seconds.
    budget_s = cast(int, settings.Q_CLUSTER["timeout"]) - longest_poll_s - 5
    started = time.monotonic()
    # One concurrent round fits whenever one request does; a limit shorter than that leaves one poll.
    together = min(SEND_CONCURRENCY, len(claims)) if budget_s > 0 else 1
    results: dict[int, PollResult] = {}
    alone: list[int] = list(range(together, len(claims)))
    if together > 1:
        grouped = poll_group(claims=claims[:together], rng=rng)
        for index, result in enumerate(grouped):
            if result is None:
                alone.insert(0, index)
            else:
                results[index] = result
    else:
        alone.insert(0, 0)
    for position, index in enumerate(sorted(alone)):
        operation_id, fence = claims[index]
        if (position or results) and time.monotonic() - started > budget_s:
            release(operation_id=operation_id, fence=fence)
            results[index] = PollResult.STALE
            continue
        results[index] = poll_once(operation_id=operation_id, fence=fence, rng=rng)
    return [results[index] for index in range(len(claims))]


def poll_group(*, claims: list[tuple[str, int]], rng: random.Random) -> list[PollResult | None]:
    """Poll several claims together; None for a claim left to the single poll's path."""
    worker = worker_name()
    started_at = timezone.now()
    loaded = load_for_polls([operation_id for operation_id, _ in claims])
    results: list[PollResult | None] = [None] * len(claims)
    ready: list[tuple[int, Operation, int]] = []
    destinations: dict[str, Destination] = {}
    for index, (operation_id, fence) in enumerate(claims):
        op = loaded.get(operation_id)
        if op is None or op.fence != fence:
            results[index] = PollResult.STALE
            continue
        stopped = gate_or_stop(op=op, fence=fence, now=started_at)
        if stopped is not None:
            results[index] = stopped
        elif op.claimed_at is not None:
            # Checked before the charge, as a single poll does: a refused destination costs nothing.
            destination = destination_or_stop(op=op, fence=fence)
            if isinstance(destination, PollResult):
                results[index] = destination
            else:
                destinations[op.pk] = destination
                ready.append((index, op, fence))
    if not ready:
        return results
    with transaction.atomic():
        chosen = _admit(ready=ready)
        now = timezone.now()
        # The gate again at the charge's moment: the admission's lock waits may have carried a
        # poll past a deadline, and no request may leave after it.
        for index, op, fence in chosen:
            results[index] = gate_at_charge(op=op, fence=fence, now=now)
        chosen = [entry for entry in chosen if results[entry[0]] is None]
        sent = charge_group(
            claims=[(op, fence) for _, op, fence in chosen], worker=worker, started_at=started_at, now=now
        )
    charged = [(index, op) for index, op, _ in chosen if op.pk in sent]
    for index, op, _ in chosen:
        if op.pk not in sent:
            results[index] = PollResult.STALE
    answers = list(_senders().map(_send, [(op, destinations[op.pk]) for _, op in charged]))
    outcomes = []
    for (_, op), (raw, received_at) in zip(charged, answers, strict=True):
        decision, answer = interpret(op=op, raw=raw, received_at=received_at, rng=rng)
        outcomes.append(poll_groups.Outcome(op=op, check=sent[op.pk], decision=decision, answer=answer))
    written = poll_groups.record_group(outcomes=outcomes)
    for index, op in charged:
        results[index] = PollResult.POLLED if written[op.pk] else PollResult.STALE
    return results


def _admit(*, ready: list[tuple[int, Operation, int]]) -> list[tuple[int, Operation, int]]:
    """Inside the charge's transaction: the polls whose account has ample room for them right now.

    Accounts are share-locked in name order (lock order: accounts first), as a single admitted
    charge does. A group's requests are charged at one moment and leave together, so on a busy
    host they can reach the provider later than single polls charged after them: a group is
    therefore only charged where it is a small part of the account's allowance
    (GROUP_MIN_ALLOWANCE) and leaves at least as much room again in the window. Near an account's
    limit, as for a paused account, the polls are left to the single poll's path, each charged
    right before its own request.
    """
    chosen = []
    for name in sorted({op.account for _, op, _ in ready}):
        mine = [entry for entry in ready if entry[1].account == name]
        rate = min(op.provider.rate_limit_per_s for _, op, _ in mine)
        if pacing.allowance(rate_per_s=rate).max_in_window < GROUP_MIN_ALLOWANCE:
            continue
        account = pacing.share_account(name=name)
        if account is None:
            continue
        # Read the clock after any lock wait: `sent_at` is what pacing counts (see pacing.py).
        now = timezone.now()
        if account.paused_until and account.paused_until > now:
            # The single poll defers them (its audit entry must not come before our charge's writes).
            continue
        if pacing.room(account=name, rate_per_s=rate, now=now) >= 2 * len(mine):
            chosen += mine
    return chosen


def _send(request: tuple[Operation, Destination]) -> tuple[http.RawResponse, datetime]:
    op, destination = request
    raw = http.send_to_provider(method="GET", destination=destination, auth_scheme=op.provider.auth_scheme)
    return raw, timezone.now()
