"""MCP at /mcp: `tasks/get` beside `GET /api/v1/operations/{id}`, and 1,000 tasks polled at their own pace.

    .venv/bin/python bench/mcp.py [--quick]

Runs one uvicorn process (the production ASGI app, as the Procfile starts it) on a scratch PostgreSQL
database and prints:

- `tasks/get` (a 2026-07-28 request with the Tasks extension and the task's requestState) and
  `GET /api/v1/operations/{id}`, each with 8 concurrent keep-alive clients on plain sockets (the
  load generator's own CPU kept small: bench/loadgen.py `loop_requests`): p50/p95 latency and
  requests/s, next to the reference measured in the same run — a request without a token through
  the API's stack (`GET /api/v1/operations/{id}` answered 401, the reference of bench/api.py) — and
  their ratio to it (targets: >= 0.5 of the reference, p95 <= 25 ms); the 401 of /mcp is shown too;
- N pending tasks (1,000 by default), each polled over its own connection (plain sockets, so the
  figure is the server's) at the `pollIntervalMilliseconds` the server answers, while a stand-in for
  the dispatcher moves every due operation's next check 5-30 s ahead (as a poll would): tasks/get
  per second, p50/p95 latency (each task's first request, which opens its connection, apart), and
  the web process's CPU time per tasks/get (user + system, from /proc).

Figures only; nothing is asserted. The load generator runs in this process, on the same machine, so
on a small or busy machine it competes with the server for CPU: the load average is printed first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._setup import django_on_scratch_postgres, percentile
from bench.loadgen import (
    CLIENTS,
    RawConnection,
    cpu_seconds,
    figure_line,
    load_line,
    measure,
    setup_data,
    start_web,
    tasks_get_request,
)


async def bench_throughput(url: str, token: str, operation_id: str, state: str, pid: int, *, seconds: float) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    body, headers = tasks_get_request(operation_id, state)
    path = f"/api/v1/operations/{operation_id}"

    async def api_401(connection: RawConnection) -> None:
        status, _ = await connection.exchange("GET", path, {})
        assert status == 401, status

    async def mcp_401(connection: RawConnection) -> None:
        status, _ = await connection.exchange("POST", "/mcp", headers, body)
        assert status == 401, status

    async def api_get(connection: RawConnection) -> None:
        status, answer = await connection.exchange("GET", path, auth)
        assert status == 200, answer[:200]

    async def tasks_get(connection: RawConnection) -> None:
        status, answer = await connection.exchange("POST", "/mcp", {**headers, **auth}, body)
        assert status == 200 and b'"status":"working"' in answer, answer[:300]

    reference = await measure(url, api_401, pid, seconds=seconds)
    mcp_ref = await measure(url, mcp_401, pid, seconds=seconds)
    gets = await measure(url, api_get, pid, seconds=seconds)
    tasks = await measure(url, tasks_get, pid, seconds=seconds)
    print(figure_line("401 without token, API (reference)", reference))
    print(figure_line("401 without token, /mcp", mcp_ref, reference[1]))
    print(figure_line("GET /api/v1/operations/{id}", gets, reference[1]))
    print(figure_line("tasks/get", tasks, reference[1]))


def move_due_checks(stop: threading.Event) -> None:
    """Stand-in for the dispatcher and workers: each due operation is "polled" (still running) and its
    next check set 5-30 s ahead, with a new sequence, as a real poll would."""
    from django.db import DatabaseError, connection

    while not stop.wait(0.5):
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE operations_operation SET next_poll_at = now() + (5 + random() * 25) * interval '1 second',"
                    " status = 'running', status_requests_used = status_requests_used + 1, sequence = sequence + 1,"
                    " updated_at = now() WHERE next_poll_at < now()"
                )
        except DatabaseError:
            # The shared PostgreSQL restarting under the benchmark: reconnect on the next pass.
            connection.close()
    connection.close()


async def bench_pending(
    url: str, token: str, ids: list[str], states: dict[str, str], pid: int, *, seconds: float, spread: float = 10.0
) -> None:
    latencies: list[float] = []
    first: list[float] = []
    intervals: list[int] = []
    errors: list[str] = []
    stop_at = time.monotonic() + seconds
    host, port = url.removeprefix("http://").split(":")
    auth = {"Authorization": f"Bearer {token}"}

    async def poller(index: int, task_id: str) -> None:
        state = states[task_id]
        connection = RawConnection(host, int(port))
        # Spread the first requests over the first 10 s, as tasks created over time would be.
        await asyncio.sleep(spread * index / len(ids))
        opened = False
        try:
            while time.monotonic() < stop_at:
                body, headers = tasks_get_request(task_id, state)
                started = time.perf_counter()
                _status, raw = await connection.exchange("POST", "/mcp", {**auth, **headers}, body)
                answer = json.loads(raw)
                # The first request of each task opens its connection; the rest are the steady state.
                (latencies if opened else first).append(time.perf_counter() - started)
                opened = True
                if "result" not in answer:
                    # An outage (503 or -32603 unavailable) is counted, and asked again a second later.
                    errors.append(str(answer.get("code") or answer.get("error", {}).get("data")))
                    await asyncio.sleep(1)
                    continue
                result = answer["result"]
                state = result["requestState"]
                interval = result.get("pollIntervalMilliseconds", 1000)
                intervals.append(interval)
                await asyncio.sleep(min(interval / 1000, max(0.0, stop_at - time.monotonic())))
        finally:
            connection.close()

    cpu_before, started = cpu_seconds(pid), time.monotonic()
    await asyncio.gather(*(poller(index, task_id) for index, task_id in enumerate(ids)))
    elapsed, cpu = time.monotonic() - started, cpu_seconds(pid) - cpu_before
    count = len(latencies) + len(first)
    print(
        f"{len(ids)} pending tasks polled at their own interval for {elapsed:.0f} s (first requests spread over "
        f"{spread:.0f} s): {count} tasks/get ({count / elapsed:.0f}/s); web process CPU {cpu:.1f} s = "
        f"{cpu / count * 1000:.2f} ms per tasks/get" + (f"; {len(errors)} answered unavailable" if errors else "")
    )
    print(
        f"  latency, each task's first request (new connection): p50 {percentile(first, 50) * 1000:.1f} ms, "
        f"p95 {percentile(first, 95) * 1000:.1f} ms; later requests: p50 {percentile(latencies, 50) * 1000:.1f} ms, "
        f"p95 {percentile(latencies, 95) * 1000:.1f} ms"
    )
    print(
        f"  intervals answered: p50 {percentile(intervals, 50) / 1000:.1f} s "
        f"(min {min(intervals) / 1000:.1f} s, max {max(intervals) / 1000:.1f} s)"
    )


def first_states(url: str, token: str, ids: list[str]) -> dict[str, str]:
    import httpx

    states = {}
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as client:
        for task_id in ids:
            body, headers = tasks_get_request(task_id, None)
            states[task_id] = client.post("/mcp", content=body, headers=headers).json()["result"]["requestState"]
    return states


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 s per loop and 100 pending tasks for 20 s")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None, help="seconds per throughput loop")
    parser.add_argument("--pending-seconds", type=float, default=None, help="seconds the pending tasks are polled")
    args = parser.parse_args()
    tasks = args.tasks or (100 if args.quick else 1000)
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    pending_seconds = args.pending_seconds or (20.0 if args.quick else 90.0)

    db_url = django_on_scratch_postgres("bench_mcp")
    token, ids = setup_data(tasks, deadline_s=86_400, max_requests=1000)
    env = {**os.environ, "DATABASE_URL": db_url, "SECRET_KEY": os.environ["SECRET_KEY"], "LOG_LEVEL": "ERROR"}
    web, url = start_web(env, lifespan=False)
    try:
        print(f"machine: {os.cpu_count()} CPUs, {load_line()}")
        print(f"uvicorn pid {web.pid}, 1 process, PostgreSQL scratch database; {CLIENTS} concurrent clients")
        states = first_states(url, token, ids)
        asyncio.run(bench_throughput(url, token, ids[0], states[ids[0]], web.pid, seconds=seconds))
        stop = threading.Event()
        mover = threading.Thread(target=move_due_checks, args=(stop,), daemon=True)
        mover.start()
        try:
            asyncio.run(bench_pending(url, token, ids[1:], states, web.pid, seconds=pending_seconds))
        finally:
            stop.set()
            mover.join(timeout=10)
        print(f"after: {load_line()}")
    finally:
        web.terminate()
        web.wait(timeout=20)


if __name__ == "__main__":
    main()
