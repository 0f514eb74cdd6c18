"""The dispatcher process itself: its name, its heartbeat (is it alive, is the fleet working) and the
housekeeping of rows nothing else removes. The steps of a dispatcher pass are operations/polls/dispatch.py.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime, timedelta

from django.utils import timezone
from django_q.models import Failure

from operations.models import ProcessHeartbeat
from operations.observability import liveness

# The dispatcher's own logger: operators filter the fleet's stall and recovery lines by this name.
logger = logging.getLogger("operations.polls.dispatch")

HEARTBEAT_KIND = "dispatcher"


def dispatcher_name() -> str:
    return f"{HEARTBEAT_KIND}@{socket.gethostname()}:{os.getpid()}"


def check_progress(*, name: str, was_stalled: bool, now: datetime | None = None) -> list[str]:
    """Is the fleet working (operations.observability.liveness)? Returns its problems, for the heartbeat: a
    dispatcher that keeps passing while nothing is polled is alive, not healthy.

    Logs an ERROR when the fleet stalls (and again every heartbeat while it stays stalled, so the
    log shows how long it lasted) and a WARNING when it works again.
    """
    problems = liveness.fleet_progress(now=now).problems()
    if problems:
        logger.error("%s: the fleet has stalled. %s", name, " ".join(problems))
    elif was_stalled:
        logger.warning("%s: the fleet is working again", name)
    return problems


def record_heartbeat(*, name: str, started_at: datetime, info: dict, now: datetime | None = None) -> None:
    """Say this process is alive (the system panel lists processes by their last heartbeat).

    `info["stalled"]` (check_progress's problems, empty when none) says whether it is healthy."""
    now = now or timezone.now()
    ProcessHeartbeat.objects.update_or_create(
        name=name,
        defaults={"kind": HEARTBEAT_KIND, "started_at": started_at, "last_seen_at": now, "info": info},
    )


def forget_heartbeat(*, name: str) -> None:
    """A clean exit removes the row: only crashed processes linger (as stale) on the panel."""
    ProcessHeartbeat.objects.filter(name=name).delete()


HOUSEKEEPING_EVERY_S = 600.0
HEARTBEATS_KEPT = timedelta(days=1)
TASK_FAILURES_KEPT = timedelta(days=7)


def housekeeping(*, now: datetime | None = None) -> int:
    """Prune rows nothing else removes; returns how many. Run every HOUSEKEEPING_EVERY_S.

    - heartbeats of processes gone for a day (crashed ones never remove their own row);
    - django-q2's failed-task rows after a week: with `ack_failures` every failure is kept, and
      pollerdash's own record of each poll is its StatusCheck and audit entry anyway.
    """
    now = now or timezone.now()
    pruned, _ = ProcessHeartbeat.objects.filter(last_seen_at__lt=now - HEARTBEATS_KEPT).delete()
    failures, _ = Failure.objects.filter(stopped__lt=now - TASK_FAILURES_KEPT).delete()
    return pruned + failures
