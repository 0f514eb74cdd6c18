"""Agent API: GET latency and throughput, and hundreds of concurrent waits on one uvicorn process.

    .venv/bin/python bench/api.py [--quick]

Runs one uvicorn process (the production ASGI app) on a scratch PostgreSQL database and prints:

- GET /api/v1/operations/{id}: p50/p95 latency and requests/s with a few concurrent keep-alive
  clients, next to an unauthenticated request through the same stack (framework + ninja, no
  database) as the reference measured in the same run;
- N concurrent waits held by that one process: its RSS and thread count idle and with every wait
  parked, and the time from each operation finishing (its row committed) to its wait returning
  (p50/p95/max; the target is p95 <= 1 s).

Figures only; nothing is asserted. The load generator runs in this process, on the same machine:
GETs with httpx keep-alive clients, the waits on plain sockets (one connection each, no client
pool, so the figure is the server's), finishing the operations in 10 batches of N/10, one UPDATE
each, over 2 s (`--finish-over`: a burst of N completions; a longer time spreads them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._setup import django_on_scratch_postgres, percentile
from bench.loadgen import CLIENTS, RawConnection, load_line, loop_requests, proc_status, setup_data, start_web


async def bench_get(url: str, token: str, path: str, *, seconds: float) -> tuple[list[float], float]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def get(connection: RawConnection) -> None:
        status, answer = await connection.exchange("GET", path, headers)
        assert status in (200, 401), (status, answer[:300])

    return await loop_requests(url, get, seconds=seconds)


async def raw_get(host: str, port: int, path: str, token: str) -> tuple[int, bytes]:
    """One HTTP/1.1 GET on its own connection, with no client-side pool: 500 of these at once
    measure the server, not a client library's connection bookkeeping."""
    connection = RawConnection(host, port)
    try:
        return await connection.exchange("GET", path, {"Authorization": f"Bearer {token}", "Connection": "close"})
    finally:
        connection.close()


async def bench_waits(
    url: str, token: str, ids: list[str], web_pid: int, *, batch: int, every_s: float, settle_s: float
) -> dict[str, object]:
    from asgiref.sync import sync_to_async
    from django.db.models import F
    from django.utils import timezone

    from operations.models import Operation

    host, port = url.removeprefix("http://").split(":")
    returned: dict[str, float] = {}
    finished: dict[str, float] = {}

    async def wait(operation_id: str) -> None:
        status, body = await raw_get(host, int(port), f"/api/v1/operations/{operation_id}/wait?timeout_s=50", token)
        returned[operation_id] = time.monotonic()
        assert status == 200 and b'"done":true' in body, body[:200]

    def finish(chunk: list[str]) -> float:
        Operation.objects.filter(pk__in=chunk).update(
            status="succeeded",
            result={"values": {"result.output_url": "https://example.com/out"}, "counts": None},
            completed_at=timezone.now(),
            next_poll_at=None,
            sequence=F("sequence") + 1,
        )
        return time.monotonic()

    idle = proc_status(web_pid)
    tasks = [asyncio.ensure_future(wait(operation_id)) for operation_id in ids]
    # Give the server time to take every wait in (they hold until their operation finishes): a
    # wait still queued when its operation finishes would count the server's intake as wake-up time.
    await asyncio.sleep(settle_s)
    parked = proc_status(web_pid)
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        at = await sync_to_async(finish, thread_sensitive=False)(chunk)
        finished.update(dict.fromkeys(chunk, at))
        await asyncio.sleep(every_s)
    await asyncio.gather(*tasks)
    delays = [returned[i] - finished[i] for i in ids]
    return {"idle": idle, "parked": parked, "delays": delays}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 s of GETs and 100 waits (smoke run)")
    parser.add_argument("--waits", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument(
        "--finish-over", type=float, default=2.0, help="seconds over which the awaited operations finish (10 batches)"
    )
    parser.add_argument("--settle", type=float, default=None, help="seconds to let every wait park (3 + waits/50)")
    args = parser.parse_args()
    waits = args.waits or (100 if args.quick else 1000)  # the target: 1,000 concurrent waits
    seconds = args.seconds or (3.0 if args.quick else 10.0)

    db_url = django_on_scratch_postgres("bench_api")
    token, ids = setup_data(waits, deadline_s=3600, max_requests=10)
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "SECRET_KEY": os.environ["SECRET_KEY"],
        # Django logs every 4xx at WARNING; the reference requests are 401s.
        "LOG_LEVEL": "ERROR",
        # One agent holds every wait here; the per-agent cap (default 200) would refuse the rest.
        "API_WAIT_MAX_PER_AGENT": str(waits + 10),
    }
    web, url = start_web(env)
    try:
        print(f"machine: {os.cpu_count()} CPUs, {load_line()}")
        print(f"uvicorn pid {web.pid}, 1 process, PostgreSQL scratch database; {CLIENTS} concurrent clients")
        reference, reference_rate = asyncio.run(bench_get(url, "", f"/api/v1/operations/{ids[0]}", seconds=seconds))
        latencies, rate = asyncio.run(bench_get(url, token, f"/api/v1/operations/{ids[0]}", seconds=seconds))
        print(
            f"GET operation:               p50 {percentile(latencies, 50) * 1000:6.1f} ms  "
            f"p95 {percentile(latencies, 95) * 1000:6.1f} ms  {rate:7.0f} req/s"
        )
        print(
            f"401 without token (ref):     p50 {percentile(reference, 50) * 1000:6.1f} ms  "
            f"p95 {percentile(reference, 95) * 1000:6.1f} ms  {reference_rate:7.0f} req/s"
            f"  (ratio GET / reference {rate / reference_rate:.2f})"
        )
        result = asyncio.run(
            bench_waits(
                url,
                token,
                ids[1:],
                web.pid,
                batch=max(10, waits // 10),
                every_s=args.finish_over / 10,
                settle_s=args.settle if args.settle is not None else 3 + waits / 50,
            )
        )
        idle, parked, delays = result["idle"], result["parked"], result["delays"]
        per_wait_kb = (parked["VmRSS"] - idle["VmRSS"]) / waits
        print(
            f"{waits} concurrent waits:       RSS {idle['VmRSS'] / 1024:6.1f} MiB idle -> "
            f"{parked['VmRSS'] / 1024:6.1f} MiB parked ({per_wait_kb:5.1f} KiB per wait); "
            f"threads {idle['Threads']} -> {parked['Threads']}"
        )
        print(
            f"finish -> wait returns:      p50 {percentile(delays, 50):.2f} s  p95 {percentile(delays, 95):.2f} s  "
            f"max {max(delays):.2f} s  (target p95 <= 1 s; watcher interval 0.25 s; {waits} operations finished"
            f" over {args.finish_over:g} s, in 10 batches)"
        )
    finally:
        web.terminate()
        web.wait(timeout=20)


if __name__ == "__main__":
    main()
