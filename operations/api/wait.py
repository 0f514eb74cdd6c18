"""Bounded waits that hold no thread: one shared watcher per process wakes every waiter.

A wait is a coroutine parked on a future. One watcher task per event loop re-reads the status of
every awaited operation in a single query each tick (API_WAIT_CHECK_INTERVAL_S) and resolves the
futures of those that finished or need a human. So 500 waits cost 500 parked futures and one
query per tick, not 500 threads or 500 polling loops.

Database work from async code runs on a small dedicated thread pool (`run_db`), so the number of
threads and database connections the web process uses does not grow with the number of waits.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections

from operations import selectors
from operations.api import selectors as api_selectors
from operations.api.problems import ApiProblem, not_found
from operations.representation import operation_object
from operations.vocabulary import TERMINAL_STATUSES, Status

T = TypeVar("T")
WAKE_STATUSES = frozenset({*TERMINAL_STATUSES, Status.NEEDS_ATTENTION})
CHUNK = 500

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=settings.API_DB_THREADS, thread_name_prefix="api-db")
        return _executor


# A connection used this recently is taken as it is: Django's health check (a `SELECT 1` round trip,
# CONN_HEALTH_CHECKS) before every call would cost a GET one round trip in three. One that failed,
# outlived CONN_MAX_AGE or sat idle longer is checked (and replaced if need be) before the next call.
HEALTH_CHECK_IDLE_S = 1.0
_thread = threading.local()


def _call(fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    # These threads live outside Django's request cycle: drop broken or expired connections here.
    db = connections[DEFAULT_DB_ALIAS]
    now = time.monotonic()
    expired = db.close_at is not None and now >= db.close_at
    if db.errors_occurred or expired or now - getattr(_thread, "used_at", 0.0) > HEALTH_CHECK_IDLE_S:
        close_old_connections()
    try:
        return fn(*args, **kwargs)
    finally:
        _thread.used_at = time.monotonic()


async def run_db(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run synchronous ORM code on the API's database threads."""
    return await asyncio.get_running_loop().run_in_executor(_pool(), _call, fn, args, kwargs)


def shutdown_db_threads() -> None:
    """Close the database threads' connections and stop them (tests, process shutdown)."""
    global _executor
    with _executor_lock:
        executor, _executor = _executor, None
    if executor is None:
        return
    workers = executor._max_workers
    barrier = threading.Barrier(workers)

    def close() -> None:
        connections.close_all()
        # Every job waits for the others, so each of the pool's threads runs exactly one close.
        try:
            barrier.wait(timeout=5)
        except threading.BrokenBarrierError:
            pass

    for future in [executor.submit(close) for _ in range(workers)]:
        future.result()
    executor.shutdown(wait=True)


@dataclass(eq=False)
class _Waiter:
    operation_id: str
    agent_id: int
    future: asyncio.Future
    # Wake when the sequence passes this value (event streams); None: wake on done/needs_attention.
    after_sequence: int | None = None
    # The watcher is loading its operation (the future is set when that is done).
    waking: bool = False


@dataclass
class Watcher:
    """The per-event-loop watcher: one status query per tick for all waiters."""

    loop: asyncio.AbstractEventLoop
    waiters: dict[str, set[_Waiter]] = field(default_factory=dict)
    per_agent: dict[int, int] = field(default_factory=dict)
    task: asyncio.Task | None = None
    waking: set[asyncio.Task] = field(default_factory=set)

    def add(self, waiter: _Waiter) -> None:
        if self.per_agent.get(waiter.agent_id, 0) >= settings.API_WAIT_MAX_PER_AGENT:
            raise ApiProblem(
                "too_many_waits",
                f"You already have {settings.API_WAIT_MAX_PER_AGENT} waits open on this server; let one "
                "finish, or check with GET instead.",
                headers={"Retry-After": "5"},
            )
        self.per_agent[waiter.agent_id] = self.per_agent.get(waiter.agent_id, 0) + 1
        self.waiters.setdefault(waiter.operation_id, set()).add(waiter)
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._run(), name="pollerdash-wait-watcher")

    def remove(self, waiter: _Waiter) -> None:
        group = self.waiters.get(waiter.operation_id)
        if group is not None and waiter in group:
            group.discard(waiter)
            if not group:
                del self.waiters[waiter.operation_id]
            left = self.per_agent.get(waiter.agent_id, 1) - 1
            if left:
                self.per_agent[waiter.agent_id] = left
            else:
                self.per_agent.pop(waiter.agent_id, None)
        if not self.waiters and self.task is not None and not self.task.done():
            # Nothing to watch: stop, so no task outlives a short-lived event loop.
            self.task.cancel()
            self.task = None

    async def _run(self) -> None:
        interval = settings.API_WAIT_CHECK_INTERVAL_S
        while self.waiters:
            await asyncio.sleep(interval)
            ids = list(self.waiters)
            rows: list[tuple[str, str, int]] = []
            try:
                for start in range(0, len(ids), CHUNK):
                    rows += await run_db(api_selectors.statuses, operation_ids=ids[start : start + CHUNK])
            except Exception:  # a database hiccup must not end every wait; retry next tick
                continue
            woken: dict[str, list[_Waiter]] = {}
            for operation_id, status, sequence in rows:
                for waiter in self.waiters.get(operation_id, ()):
                    if waiter.future.done() or waiter.waking:
                        continue
                    if (waiter.after_sequence is None and status in WAKE_STATUSES) or (
                        waiter.after_sequence is not None and sequence > waiter.after_sequence
                    ):
                        woken.setdefault(operation_id, []).append(waiter)
            if woken:
                # Loading the woken operations must not hold up the next tick's status query.
                for group in woken.values():
                    for waiter in group:
                        waiter.waking = True
                wake = self.loop.create_task(self._wake(woken), name="pollerdash-wait-wake")
                self.waking.add(wake)
                wake.add_done_callback(self.waking.discard)

    async def _wake(self, woken: dict[str, list[_Waiter]]) -> None:
        """Load every woken operation in one query and hand each waiter its fresh object."""
        try:
            objects = await run_db(load_operations, operation_ids=list(woken))
        except Exception:  # the waiters then load their operation themselves
            objects = {}
        for operation_id, group in woken.items():
            for waiter in group:
                if not waiter.future.done():
                    waiter.future.set_result(objects.get(operation_id))


_watchers: dict[asyncio.AbstractEventLoop, Watcher] = {}


def watcher() -> Watcher:
    loop = asyncio.get_running_loop()
    found = _watchers.get(loop)
    if found is None:
        for old in [key for key in _watchers if key.is_closed()]:
            del _watchers[old]
        found = _watchers[loop] = Watcher(loop=loop)
    return found


def open_waits() -> int:
    """How many waits are parked in this process right now (all event loops)."""
    return sum(len(group) for hub in list(_watchers.values()) for group in list(hub.waiters.values()))


class _Timeout:
    pass


TIMED_OUT = _Timeout()


async def wait_for_change(
    *, agent_id: int, operation_id: str, timeout_s: float, after_sequence: int | None
) -> dict | None | _Timeout:
    """Park until the operation finishes/needs a human (or its sequence passes `after_sequence`).

    Returns the fresh Operation object (None if the watcher could not load it), or TIMED_OUT.
    """
    if timeout_s <= 0:
        return TIMED_OUT
    hub = watcher()
    waiter = _Waiter(
        operation_id=operation_id,
        agent_id=agent_id,
        future=hub.loop.create_future(),
        after_sequence=after_sequence,
    )
    hub.add(waiter)
    try:
        return await asyncio.wait_for(waiter.future, timeout=timeout_s)
    except TimeoutError:
        return TIMED_OUT
    finally:
        hub.remove(waiter)


def load_operations(*, operation_ids: list[str]) -> dict[str, dict]:
    """Operation objects by id, in one query (plus one for open escalations), for woken waiters."""
    found: dict[str, dict] = {}
    for start in range(0, len(operation_ids), CHUNK):
        ops = api_selectors.operations_by_id(operation_ids=operation_ids[start : start + CHUNK])
        escalations = selectors.open_escalations(operations=ops)
        found.update({op.pk: operation_object(op, open_escalation=escalations.get(op.pk)) for op in ops})
    return found


def load_operation(*, agent_id: int, operation_id: str) -> dict | None:
    """The agent's Operation object, or None (sync: run it with run_db)."""
    op = api_selectors.agent_operation(agent_id=agent_id, operation_id=operation_id)
    if op is None:
        return None
    return operation_object(op, open_escalation=selectors.open_escalation(operation=op))


async def wait_result(*, agent_id: int, operation_id: str, requested_s: int, applied_s: int) -> dict:
    """The wait_result object: returns early when the operation is done or needs a human."""
    started = time.monotonic()
    obj = await run_db(load_operation, agent_id=agent_id, operation_id=operation_id)
    if obj is None:
        raise not_found(operation_id)
    if obj["status"] not in WAKE_STATUSES:
        woke = await wait_for_change(
            agent_id=agent_id, operation_id=operation_id, timeout_s=applied_s, after_sequence=None
        )
        # Woken: the watcher loaded the operation already. Timed out: read its latest state.
        obj = (
            woke
            if isinstance(woke, dict)
            # Typing: run_db hands back whatever the call returns; None means the operation is gone.
            else await run_db(load_operation, agent_id=agent_id, operation_id=operation_id)  # type: ignore[arg-type]
        )
        if obj is None:
            raise not_found(operation_id)
    stopped = obj["status"] in WAKE_STATUSES
    return {
        "object": "wait_result",
        "operation_id": operation_id,
        "timed_out": not stopped,
        "done": obj["done"],
        "waited_s": round(time.monotonic() - started),
        "requested_timeout_s": requested_s,
        "applied_timeout_s": applied_s,
        "operation": obj,
    }
