"""The qcluster's locks (operations/infrastructure/cluster_locks.py): a process killed while it holds one frees it.

Issue 30's soaks stalled on two of django-q2's locks, each a POSIX semaphore kept by a SIGKILLed
worker: the task queue's read lock (held by the idle worker waiting for a task: no worker took a
task again) and a worker's timer lock (taken by the sentinel's guard loop every cycle: the
sentinel stopped replacing dead workers, and the kills that followed left none). Each test kills a
real forked process while it holds the lock, as the soak did.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from multiprocessing.synchronize import Event

import pytest
from django_q import cluster

from operations.infrastructure import cluster_locks
from operations.infrastructure.cluster_locks import ClusterQueue, KernelLock, Sentinel, timer

FORK = multiprocessing.get_context("fork")


def _hold_and_wait(lock, held: Event) -> None:
    lock.acquire()
    held.set()
    time.sleep(60)  # killed long before


def _killed_while_holding(lock) -> None:
    held = FORK.Event()
    child = FORK.Process(target=_hold_and_wait, args=(lock, held))
    child.start()
    assert held.wait(10)
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)


def test_a_semaphore_lock_stays_taken_when_its_holder_is_killed():
    """The cause, as stock django-q2 meets it: nothing releases a killed holder's semaphore."""
    lock = FORK.Lock()
    _killed_while_holding(lock)
    assert not lock.acquire(timeout=0.5)


def test_a_kernel_lock_is_free_once_its_holder_is_killed():
    lock = KernelLock()
    _killed_while_holding(lock)
    assert lock.acquire(timeout=5)
    lock.release()


def test_a_kernel_lock_excludes_other_processes_while_held():
    lock = KernelLock()
    held = FORK.Event()
    child = FORK.Process(target=_hold_and_wait, args=(lock, held))
    child.start()
    try:
        assert held.wait(10)
        assert not lock.acquire(timeout=0.3)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
    assert lock.acquire(timeout=5)
    lock.release()


def _take_one(queue: ClusterQueue, out) -> None:
    out.put(queue.get())


def test_a_worker_killed_while_it_waits_for_a_task_leaves_the_queue_working():
    """Issue 30's first stall: the idle worker holding the read lock is killed; the next worker
    still gets the next task."""
    tasks, results = ClusterQueue(maxsize=4), FORK.SimpleQueue()
    waiting = FORK.Process(target=_take_one, args=(tasks, results))
    waiting.start()
    deadline = time.monotonic() + 10
    while not _reading_the_pipe(waiting.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _reading_the_pipe(waiting.pid), "the waiting worker never reached the pipe's read"
    os.kill(waiting.pid, signal.SIGKILL)
    waiting.join(10)
    replacement = FORK.Process(target=_take_one, args=(tasks, results))
    replacement.start()
    tasks.put({"task": 1})
    replacement.join(10)
    assert replacement.exitcode == 0 and results.get() == {"task": 1}
    assert tasks.qsize() == 0


def _reading_the_pipe(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/wchan") as wchan:
            return wchan.read().strip() == "anon_pipe_read"
    except OSError:
        return False


def test_a_worker_killed_holding_its_timer_leaves_the_guard_going():
    """Issue 30's second stall: a worker killed inside `with timer.get_lock()` (where it hands in
    its result) blocked the sentinel's guard loop for ever."""
    value = timer()
    _killed_while_holding(value.get_lock())
    assert value.get_lock().acquire(timeout=5)  # what the guard does every cycle
    value.get_lock().release()
    value.value -= 0.5
    assert value.value == -1.5


def test_qcluster_forks_pollerdashs_sentinel_with_its_queues():
    cluster_locks.install()  # as operations/apps.py does at start-up
    assert cluster.Sentinel is Sentinel
    sentinel = Sentinel(FORK.Event(), FORK.Event(), "test", broker=object(), start=False)
    assert isinstance(sentinel.task_queue, ClusterQueue) and isinstance(sentinel.result_queue, ClusterQueue)
    assert isinstance(sentinel.task_queue._rlock, KernelLock) and isinstance(sentinel.result_queue._wlock, KernelLock)
    assert isinstance(sentinel.task_queue.size.count.get_lock(), KernelLock)


@pytest.mark.parametrize("maxsize", [0, 3])
def test_the_queue_keeps_its_order_and_size(maxsize):
    queue = ClusterQueue(maxsize=maxsize)
    for n in range(3):
        queue.put(n)
    assert queue.qsize() == 3
    assert [queue.get(timeout=5) for _ in range(3)] == [0, 1, 2]
    assert queue.empty()
