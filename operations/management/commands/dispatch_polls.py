"""`manage.py dispatch_polls [--once]`: the dispatcher loop (steps in operations/polls/dispatch.py).

Runs on every host next to `qcluster`; any number may run at once. Every pass claims due
operations (enqueueing their poll tasks in the same transaction); every DISPATCH_SWEEP_EVERY_S a
full pass also sweeps deadlines (technical and business), re-queues expired leases, hands due
callbacks to workers, integrates pending audit entries, and lets the human layer step escalation
policies and hand due notifications to workers (operations.events.dispatcher_pass). It loops at
once while a step left work waiting at its batch limit, and otherwise sleeps (at most
DISPATCH_IDLE_SLEEP_S, less when the next due time is nearer, never below DISPATCH_MIN_SLEEP_S;
the shortest after a pass that claimed polls),
warns of near business deadlines every `dispatch.WARNINGS_EVERY_S`, checks with every heartbeat
that the fleet makes progress (an ERROR and an unhealthy heartbeat when operations are overdue and
nothing was polled, or tasks wait and no worker takes them: operations/observability/liveness.py),
stops cleanly on SIGTERM or SIGINT
(the current step finishes, exit status 0), and survives database outages by reconnecting with a
short backoff.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from types import FrameType

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import Error as DatabaseError
from django.db import close_old_connections, connection
from django.utils import timezone
from django_q.brokers import Broker, get_broker

from operations.polls import dispatch, heartbeat

logger = logging.getLogger("operations.polls.dispatch")

MAX_BACKOFF_S = 5.0


class Command(BaseCommand):
    help = "Dispatch due polls to django-q2 workers, sweep deadlines and expired leases (loop until SIGTERM)."

    def add_arguments(self, parser) -> None:  # argparse parser
        parser.add_argument("--once", action="store_true", help="run one pass and exit (for tests and cron)")

    def handle(self, *args: object, once: bool = False, **options: object) -> None:
        name = heartbeat.dispatcher_name()
        broker = get_broker()
        if once:
            self._once(name=name, broker=broker)
            return
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        loop = _Loop(name=name, broker=broker, started_at=timezone.now())
        backoff = 0.0
        logger.info(
            "%s started (batch %s, idle sleep <= %s s)", name, settings.DISPATCH_BATCH, settings.DISPATCH_IDLE_SLEEP_S
        )
        while not stop.is_set():
            try:
                # A request boundary for a long-running process: drops a connection past its
                # CONN_MAX_AGE or broken by a database restart, so the next query reconnects.
                close_old_connections()
                result = loop.run_pass()
                if backoff:
                    logger.warning("%s: database reachable again", name)
                    backoff = 0.0
                if not result.backlog:
                    # A pass that claimed polls expects more soon: the shortest sleep, without
                    # asking the database when the next one is due.
                    stop.wait(settings.DISPATCH_MIN_SLEEP_S if result.claimed else dispatch.idle_sleep_s())
            except DatabaseError as exc:
                # The database went away (restart, failover, network): nothing was committed
                # half-way, so drop the connection and try again shortly.
                backoff = min(MAX_BACKOFF_S, backoff * 2 or 0.25)
                logger.warning("%s: database error (%s); retrying in %.2f s", name, type(exc).__name__, backoff)
                connection.close()
                stop.wait(backoff)
            except Exception:
                # A bug must not stop dispatching for every other operation: log it and carry on.
                backoff = min(MAX_BACKOFF_S, backoff * 2 or 0.25)
                logger.exception("%s: pass failed; retrying in %.2f s", name, backoff)
                stop.wait(backoff)
        try:
            heartbeat.forget_heartbeat(name=name)
        except DatabaseError:
            logger.warning("%s: could not remove its heartbeat row on exit", name)
        logger.info("%s stopped after %s passes", name, loop.totals["passes"])

    def _once(self, *, name: str, broker: Broker) -> None:
        result = dispatch.run_pass(owner=name, broker=broker)
        warned = dispatch.warn_business_deadlines()
        self.stdout.write(
            f"swept {result.swept}, requeued {result.requeued}, claimed {result.claimed}, "
            f"callbacks {result.callbacks}, notifications {result.notifications}, "
            f"business deadline warnings {warned}"
        )


@dataclass
class _Loop:
    """What the loop keeps between passes: its totals (the heartbeat's info) and when each step on
    its own cadence last ran."""

    name: str
    broker: Broker
    started_at: datetime
    totals: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("passes", "swept", "requeued", "claimed", "callbacks", "notifications"), 0
        )
    )
    stalled: list[str] = field(default_factory=list)
    last_heartbeat: float = 0.0
    last_housekeeping: float = 0.0
    last_warnings: float = 0.0
    last_full: float = 0.0

    def run_pass(self) -> dispatch.PassResult:
        """One pass, then the heartbeat, the business-deadline warnings and the housekeeping if due."""
        # The sweeps, callbacks, audit integration and the layers above every
        # DISPATCH_SWEEP_EVERY_S; the passes in between only claim due polls.
        full = time.monotonic() - self.last_full >= settings.DISPATCH_SWEEP_EVERY_S
        result = dispatch.run_pass(owner=self.name, broker=self.broker, claims_only=not full)
        if full and not result.housework_backlog:
            self.last_full = time.monotonic()
        self.totals["passes"] += 1
        for key in ("swept", "requeued", "claimed", "callbacks", "notifications"):
            self.totals[key] += getattr(result, key)
        if time.monotonic() - self.last_heartbeat >= settings.DISPATCH_HEARTBEAT_S:
            # Alive is not enough: the heartbeat says whether the fleet makes progress.
            self.stalled = heartbeat.check_progress(name=self.name, was_stalled=bool(self.stalled))
            info = {**self.totals, "stalled": self.stalled}
            heartbeat.record_heartbeat(name=self.name, started_at=self.started_at, info=info)
            self.last_heartbeat = time.monotonic()
        if time.monotonic() - self.last_warnings >= dispatch.WARNINGS_EVERY_S:
            dispatch.warn_business_deadlines()
            self.last_warnings = time.monotonic()
        if time.monotonic() - self.last_housekeeping >= heartbeat.HOUSEKEEPING_EVERY_S:
            heartbeat.housekeeping()
            self.last_housekeeping = time.monotonic()
        return result
