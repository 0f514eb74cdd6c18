"""The soak's flight recorder: one sample a second, a per-minute timeline, stacks when it stalls.

Every second it writes one JSON line to `timeline.jsonl` in the run's directory: status requests
the provider saw in that second, operations due (and the oldest's age), leases claimed by a
dispatcher and not yet taken up, leases a worker holds (a request in flight), leases run out,
django-q2's queue (waiting for a worker / taken and not yet acknowledged), operations finished,
the dispatcher's heartbeat age, and each fleet process's liveness: alive or not, how many
processes its tree holds, the CPU it used in that second, and where each of them sleeps in the
kernel (`/proc/<pid>/wchan`: `anon_pipe_read` is a worker waiting for a task holding the task
queue's read lock, `futex_do_wait` one waiting on a lock). The soak's own events (a kill, the
PostgreSQL restart) go into the line of the second they happened in.

When operations are due and the provider has seen no request for STALL_S seconds, it writes where
every process of the fleet is (`stalls.txt`: state, wchan, kernel stack) and sends each of them
SIGUSR1, on which the soak's processes print every thread's Python stack to their log.

Linux only (it reads /proc), as the soak is.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STALL_S = 20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """The process and every process below it (qcluster forks a sentinel, which forks the rest)."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The command name (field 2) may hold spaces: the fields after its closing ")" are fixed.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children[int(fields[1])].append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


@dataclass(frozen=True)
class ProcState:
    pid: int
    state: str
    wchan: str
    cpu_ticks: int


def proc_state(pid: int) -> ProcState | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip() or "-"
    except OSError:
        return None
    if fields[0] == "Z":
        return None
    return ProcState(pid=pid, state=fields[0], wchan=wchan, cpu_ticks=int(fields[11]) + int(fields[12]))


def kernel_stack(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stack").read_text().strip()
    except OSError:
        return "(unreadable)"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


class Recorder(threading.Thread):
    """Samples the fleet once a second into `out/timeline.jsonl` until stopped."""

    def __init__(self, *, out: Path, database_url: str, provider_url: str, roots: dict[str, int]) -> None:
        super().__init__(name="soak-recorder", daemon=True)
        self.out = out
        self.database_url = database_url
        self.provider_url = provider_url
        self.roots = roots  # fleet process name -> pid of the process we started
        self.started = time.time()
        self.halt = threading.Event()
        self.pending_events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.seq = 0
        self.cpu_before: dict[int, int] = {}
        self.quiet_s = 0
        self.stall_dumps = 0
        self.stalls: list[float] = []

    def event(self, kind: str, **details: Any) -> None:
        with self.lock:
            self.pending_events.append({"kind": kind, "t": round(time.time() - self.started, 1), **details})

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)

    def run(self) -> None:
        import httpx
        import psycopg

        from operations.models import Operation, ProcessHeartbeat

        self.operations = Operation._meta.db_table
        self.heartbeats = ProcessHeartbeat._meta.db_table
        conn: psycopg.Connection | None = None
        with (
            httpx.Client(base_url=self.provider_url, timeout=10) as client,
            (self.out / "timeline.jsonl").open("a") as sink,
        ):
            next_at = time.time() + 1
            while not self.halt.wait(max(0.0, next_at - time.time())):
                next_at += 1
                sample: dict[str, Any] = {"t": round(time.time() - self.started, 1), "load": os.getloadavg()[0]}
                sample["req"] = self._provider_requests(client)
                try:
                    if conn is None or conn.closed:
                        conn = psycopg.connect(self.database_url, autocommit=True, connect_timeout=3)
                    sample.update(self._database(conn))
                except psycopg.Error as exc:
                    sample["db_error"] = type(exc).__name__
                    if conn is not None:
                        conn.close()
                    conn = None
                sample["procs"] = self._processes()
                with self.lock:
                    if self.pending_events:
                        sample["events"], self.pending_events = self.pending_events, []
                self._watch_for_stall(sample)
                sink.write(json.dumps(sample, separators=(",", ":")) + "\n")
                sink.flush()
        if conn is not None:
            conn.close()

    def _provider_requests(self, client: Any) -> int | None:
        try:
            entries = client.get("/_requests", params={"since": self.seq}).json()["requests"]
        except Exception:  # a figure missing for one second is not worth stopping the soak
            return None
        if entries:
            self.seq = entries[-1]["seq"]
        return sum(1 for entry in entries if entry["kind"] == "status")

    def _database(self, conn: Any) -> dict[str, Any]:
        pollable = "status IN ('pending', 'running')"
        unleased = "(lease_expires_at IS NULL OR lease_expires_at <= now())"
        due, oldest, claimed, charged, expired, finished = conn.execute(
            f"SELECT count(*) FILTER (WHERE {pollable} AND next_poll_at <= now() AND {unleased}),"
            f" EXTRACT(EPOCH FROM now() - min(next_poll_at) FILTER (WHERE {pollable} AND {unleased}"
            "   AND next_poll_at <= now()))::float8,"
            " count(*) FILTER (WHERE lease_expires_at > now() AND claimed_at IS NOT NULL),"
            " count(*) FILTER (WHERE lease_expires_at > now() AND claimed_at IS NULL),"
            f" count(*) FILTER (WHERE {pollable} AND lease_expires_at <= now()),"
            f" count(*) FILTER (WHERE NOT {pollable})"
            f" FROM {self.operations}"
        ).fetchone()
        waiting, taken = conn.execute(
            "SELECT count(*) FILTER (WHERE lock <= now()), count(*) FILTER (WHERE lock > now()) FROM django_q_ormq"
        ).fetchone()
        beats = {
            kind: {"age": round(age, 1), **(info or {})}
            for kind, age, info in conn.execute(
                f"SELECT kind, EXTRACT(EPOCH FROM now() - last_seen_at)::float8, info FROM {self.heartbeats}"
                " ORDER BY last_seen_at"
            ).fetchall()
        }
        return {
            "due": due,
            "oldest_due": None if oldest is None else round(oldest, 1),
            "claimed": claimed,
            "charged": charged,
            "expired": expired,
            "finished": finished,
            "q_waiting": waiting,
            "q_taken": taken,
            "beats": beats,
        }

    def _processes(self) -> dict[str, Any]:
        found = {}
        for name, root in self.roots.items():
            states = [s for s in (proc_state(pid) for pid in descendants(root)) if s is not None]
            ticks = 0
            for s in states:
                ticks += s.cpu_ticks - self.cpu_before.get(s.pid, s.cpu_ticks)
                self.cpu_before[s.pid] = s.cpu_ticks
            found[name] = {
                "alive": any(s.pid == root for s in states),
                "n": len(states),
                "cpu": round(100 * ticks / CLOCK_TICKS),
                "wchan": " ".join(f"{s.pid}:{s.state}:{s.wchan}" for s in states),
            }
        return found

    def _watch_for_stall(self, sample: dict[str, Any]) -> None:
        """Operations due, the provider silent: after STALL_S seconds, record where everything is."""
        if sample.get("req") == 0 and (sample.get("due") or 0) > 0:
            self.quiet_s += 1
        else:
            self.quiet_s = 0
        if self.quiet_s == STALL_S:
            self.stalls.append(sample["t"] - STALL_S)
            if self.stall_dumps < 3:
                self.stall_dumps += 1
                self.dump(f"no status request for {STALL_S} s while {sample.get('due')} operations were due")

    def dump(self, why: str) -> None:
        """Where every fleet process is: kernel state to stalls.txt, Python stacks to each log (SIGUSR1)."""
        at = round(time.time() - self.started, 1)
        with (self.out / "stalls.txt").open("a") as report:
            report.write(f"===== at {at} s: {why}\n")
            for name, root in self.roots.items():
                for pid in descendants(root):
                    state = proc_state(pid)
                    report.write(
                        f"--- {name} pid {pid} ({cmdline(pid)}): "
                        f"{'gone' if state is None else f'state {state.state}, wchan {state.wchan}'}\n"
                        f"{kernel_stack(pid)}\n"
                    )
                    try:
                        os.kill(pid, signal.SIGUSR1)
                    except ProcessLookupError:
                        pass
        self.event("stacks", why=why)


def load_samples(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def timeline(samples: list[dict[str, Any]]) -> list[str]:
    """One line a minute: what the provider saw, what was due, held, queued, and who was working."""
    by_minute: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for sample in samples:
        by_minute[int(sample["t"] // 60)].append(sample)
    names = sorted({name for sample in samples for name in sample.get("procs", {})})
    header = (
        "min  req/s  due(max) oldest-due  claimed  in-flight  expired  queue-waiting  queue-taken  finished  "
        + "  ".join(f"{name}:alive/procs/cpu%" for name in names)
        + "  load  events"
    )
    lines = [header]
    for minute in sorted(by_minute):
        rows = by_minute[minute]

        def top(key: str, rows: list[dict[str, Any]] = rows) -> float | None:
            values = [row[key] for row in rows if row.get(key) is not None]
            return max(values) if values else None

        requests = [row["req"] for row in rows if row.get("req") is not None]
        procs = []
        for name in names:
            seen = [row["procs"][name] for row in rows if name in row.get("procs", {})]
            alive = sum(1 for p in seen if p["alive"])
            n = min((p["n"] for p in seen), default=0)
            cpu = sum(p["cpu"] for p in seen) / len(seen) if seen else 0
            procs.append(f"{alive:>2}/{len(seen)} {n:>2} {cpu:>4.0f}%")
        events = []
        kills = [event for row in rows for event in row.get("events", []) if event["kind"] == "kill"]
        if kills:
            idle = sum(1 for event in kills if not event.get("leases"))
            events.append(f"{len(kills)} kill{'s' * (len(kills) != 1)} ({idle} of a worker holding no lease)")
        for row in rows:
            for event in row.get("events", []):
                if event["kind"] != "kill":
                    events.append(f"{event['kind']}@{event['t']:.0f}s")
        finished = [row["finished"] for row in rows if row.get("finished") is not None]
        lines.append(
            f"{minute:>3}  {_fmt(sum(requests) / len(requests) if requests else None, '6.1f')}"
            f"  {_fmt(top('due'), '8.0f')}  {_fmt(top('oldest_due'), '9.1f')}"
            f"  {_fmt(top('claimed'), '7.0f')}  {_fmt(top('charged'), '9.0f')}  {_fmt(top('expired'), '7.0f')}"
            f"  {_fmt(top('q_waiting'), '13.0f')}  {_fmt(top('q_taken'), '11.0f')}"
            f"  {_fmt(finished[-1] if finished else None, '8.0f')}  "
            + "  ".join(procs)
            + f"  {_fmt(top('load'), '4.1f')}  {' '.join(events)}"
        )
    return lines
