"""Where one authenticated request's time goes: `GET /api/v1/operations/{id}` and `tasks/get`, in-process.

    .venv/bin/python bench/mcp_profile.py [--requests N] [--top N]

Calls the production ASGI application (pollerdash.asgi) directly, with no HTTP server and no
client, on a scratch PostgreSQL database, and prints for each kind of request (and the 401 of each
door, for reference): the SQL statements one request runs, the wall and CPU time per request (this process: the
server, as there is no client), and the
functions that cost the most CPU under cProfile (the event loop's thread and the one database
thread, API_DB_THREADS=1, profiled together).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

# The project root instead of bench/, whose mcp.py would shadow the MCP SDK.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._setup import django_on_scratch_postgres  # noqa: E402 - after the path is set
from bench.loadgen import setup_data, tasks_get_request  # noqa: E402

Call = tuple[dict, bytes]


def request(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> Call:
    raw = [(b"host", b"127.0.0.1")] + [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    if body:
        raw.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    return scope, body


async def call(app, scope: dict, body: bytes) -> tuple[int, bytes]:
    sent: list[dict] = []
    done = asyncio.Event()
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        if messages:
            return messages.pop()
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests of each kind (default 2000)")
    parser.add_argument("--top", type=int, default=25, help="functions listed per profile")
    args = parser.parse_args()
    # One database thread, so that its profile and its queries are those of every request.
    os.environ["API_DB_THREADS"] = "1"
    django_on_scratch_postgres("bench_mcp_profile")
    token, ids = setup_data(1)

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from operations.api import wait
    from pollerdash.asgi import application

    def on_db_thread(fn, *a):
        """Run `fn` on the API's one database thread (API_DB_THREADS=1 here)."""
        return wait._pool().submit(fn, *a).result()

    auth = {"Authorization": f"Bearer {token}"}
    body, headers = tasks_get_request(ids[0], None)
    loop = asyncio.new_event_loop()
    first = loop.run_until_complete(call(application, *request("POST", "/mcp", {**headers, **auth}, body)))
    import json

    state = json.loads(first[1])["result"]["requestState"]
    body, headers = tasks_get_request(ids[0], state)
    kinds = {
        "401 API": (request("GET", f"/api/v1/operations/{ids[0]}", {}), 401),
        "401 /mcp": (request("POST", "/mcp", headers, body), 401),
        "GET operation": (request("GET", f"/api/v1/operations/{ids[0]}", auth), 200),
        "tasks/get": (request("POST", "/mcp", {**headers, **auth}, body), 200),
    }
    for name, ((scope, payload), expected) in kinds.items():
        for _ in range(50):  # warm
            status, answer = loop.run_until_complete(call(application, dict(scope), payload))
            assert status == expected, (name, status, answer[:300])
        queries = CaptureQueriesContext(connection)
        on_db_thread(queries.__enter__)
        loop.run_until_complete(call(application, dict(scope), payload))
        on_db_thread(queries.__exit__, None, None, None)
        # Read on that thread: each thread has its own connection and its own query log.
        captured = on_db_thread(lambda q=queries: list(q.captured_queries))
        started, cpu_started = time.perf_counter(), time.process_time()
        for _ in range(args.requests):
            loop.run_until_complete(call(application, dict(scope), payload))
        per = (time.perf_counter() - started) / args.requests * 1000
        cpu = (time.process_time() - cpu_started) / args.requests * 1000
        # CPU time of each thread (waits on the database or the other thread are left out).
        profile, db_profile = cProfile.Profile(time.thread_time), cProfile.Profile(time.thread_time)
        on_db_thread(db_profile.enable)
        profile.enable()
        for _ in range(args.requests):
            loop.run_until_complete(call(application, dict(scope), payload))
        profile.disable()
        on_db_thread(db_profile.disable)
        stats = pstats.Stats(profile).add(db_profile)
        print(f"=== {name}: {len(captured)} SQL statements, {per:.3f} ms per request, {cpu:.3f} ms CPU (unprofiled)")
        for query in captured:
            print(f"    SQL: {query['sql'][:160]}")
        out = io.StringIO()
        stats.stream = out
        stats.sort_stats("tottime").print_stats(args.top)
        print("\n".join(out.getvalue().splitlines()[6:]))
        out = io.StringIO()
        stats.stream = out
        stats.sort_stats("cumulative").print_stats(args.top)
        print("\n".join(out.getvalue().splitlines()[6:]))


if __name__ == "__main__":
    main()
