"""django-q2's cluster with locks that a killed process cannot keep (`qcluster` runs it).

A django-q2 cluster is one sentinel process that forks the workers, a pusher (broker -> task
queue) and a monitor (result queue -> acknowledgement). They share `multiprocessing` queues and
values whose locks are POSIX semaphores, and a semaphore has no owner: a process killed while it
holds one (SIGKILL, the OOM killer, django-q2's own SIGTERM of a worker past its time limit)
leaves it held forever. The sentinel only checks that each process is alive and replaces a dead
one; the lock stays taken and every process that needs it waits for ever, alive:

- the task queue's read lock is held by the idle worker that waits for the next task (the others
  wait for the lock): kill that worker and no worker takes a task again; the pusher fills the
  in-memory queue and waits on it, the dispatcher fills django-q2's table to DISPATCH_MAX_QUEUED
  and stops claiming. Polling stops while every process is alive. (django-q2 issue #23; the
  pollerdash soak of issue 30, bench/soak.py, killed a worker whose poll had ended between the
  soak's query and its kill.)
- the result queue's write lock is held by a worker's feeder thread while it writes a result:
  kill the worker then and no result reaches the monitor again (django-q2 issue #339);
- the queue-size counter's lock and each worker's timer lock (the sentinel's guard loop takes it
  every cycle) are held for a few instructions at a time, with the same consequence.

Here every one of those locks is a `KernelLock`: an fcntl record lock on a private, unlinked file,
which the kernel releases when the process holding it exits, however it exits. What a killed
process held is free again at once; the task it was running is lost, as it always was, and the
poll's lease brings it back (docs/DESIGN.md section 10).

One permit of the bounded task queue (`queue_limit`) is still a semaphore: a worker killed in the
few instructions between reading a task and releasing the permit costs the queue one slot for
the cluster's life. The dispatcher's stall check (operations/observability/liveness.py) reports a queue that
stops moving, whatever the cause.

`install()` (operations/apps.py) makes django-q2's `Cluster` start this sentinel. Linux and the
other POSIX systems with `fork` (django-q2 uses fork where it exists, so nothing is pickled).
"""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
import time
from multiprocessing import Value
from types import TracebackType
from typing import Any

from django_q import cluster
from django_q.conf import Conf
from django_q.queues import Queue
from django_q.worker import worker


class KernelLock:
    """A lock between processes that the kernel releases when its holder exits.

    `fcntl.lockf` locks belong to a process: a forked child does not inherit its parent's, and a
    process's locks go when it dies. They do not exclude the threads of one process from each
    other; every lock here is taken by one thread per process (a worker's main thread, a queue's
    feeder thread, the monitor, the sentinel's guard loop). The same interface as a
    `multiprocessing.Lock`, so queues and values take it in place of one.
    """

    def __init__(self) -> None:
        fd, path = tempfile.mkstemp(prefix="pollerdash-lock-")
        os.unlink(path)  # nothing to clean up: the file lives as long as a process holds it open
        self._fd = fd

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while True:
            try:
                if block and deadline is None:
                    fcntl.lockf(self._fd, fcntl.LOCK_EX)
                else:
                    fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError as exc:
                # EDEADLK: the kernel's deadlock check saw a cycle between processes (it cannot
                # tell threads apart); the other side moves on, so waiting and retrying is right.
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EDEADLK):
                    raise
                if not block or (deadline is not None and time.monotonic() >= deadline):
                    return False
                time.sleep(0.001)

    def release(self) -> None:
        fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()

    def __del__(self) -> None:
        # Closing releases only this process's own locks on the file, which it no longer uses.
        try:
            os.close(self._fd)
        except OSError:
            pass


def _as_lock(lock: KernelLock) -> Any:
    # Typing: the stubs name multiprocessing's own locks, but a shared value takes any object with
    # acquire and release (multiprocessing.sharedctypes.synchronized).
    return lock


class ClusterQueue(Queue):
    """django-q2's queue (a multiprocessing queue with a size counter), its locks KernelLocks."""

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize=maxsize)
        # Set before any process is forked from the one that made the queue: every process of
        # the cluster shares these, as it would have shared the semaphores they replace.
        self._rlock = KernelLock()
        self._wlock = KernelLock()
        self.size.count = Value("i", 0, lock=_as_lock(KernelLock()))


def timer() -> Any:
    """A worker's timer (django-q2: -1 idle, seconds left while busy, 0 to be killed), whose lock
    the sentinel takes every guard cycle."""
    return Value("f", -1, lock=_as_lock(KernelLock()))


class Sentinel(cluster.Sentinel):
    """django-q2's sentinel with ClusterQueues and KernelLock timers; nothing else changes."""

    def __init__(
        self,
        stop_event: Any,
        start_event: Any,
        cluster_id: Any,
        broker: Any = None,
        timeout: int | None = None,
        start: bool = True,
    ) -> None:
        super().__init__(stop_event, start_event, cluster_id, broker, timeout, start=False)
        self.task_queue = ClusterQueue(maxsize=Conf.QUEUE_LIMIT or 0)
        self.result_queue = ClusterQueue()
        if start:
            self.start()

    def spawn_worker(self) -> None:
        self.spawn_process(worker, self.task_queue, self.result_queue, timer(), self.timeout)


def install() -> None:
    """Make django-q2's Cluster (what `manage.py qcluster` starts) fork pollerdash's sentinel.

    `Cluster.start` names the sentinel class through its module's global at the moment it forks,
    so replacing that global is the one hook django-q2 offers; every process runs apps' ready(),
    and only qcluster starts a cluster.
    """
    cluster.Sentinel = Sentinel
