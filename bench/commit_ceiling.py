"""The machine's commit rate: one-row INSERT + COMMIT loops from separate processes, no Django.

    .venv/bin/python bench/commit_ceiling.py [--seconds 5] [--processes 1,4,8,16]

The ceiling under any append that commits on its own (issue 14 asks 3,000 audit appends/s at 8
writers): each process has its own connection and inserts a 700-byte row per transaction into a
scratch database, which is dropped at the end. Prints rows/s per process count and the load average.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

BASE = os.environ.get("BENCH_PG", "postgres://root@127.0.0.1:5432")
NAME = "bench_commit_ceiling"


def writer(seconds: float, counts: multiprocessing.Queue) -> None:
    with psycopg.connect(f"{BASE}/{NAME}", autocommit=True) as connection:
        cursor, body, done = connection.cursor(), b"x" * 700, 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            cursor.execute("BEGIN")
            cursor.execute("INSERT INTO bare (body) VALUES (%s)", [body])
            cursor.execute("COMMIT")
            done += 1
    counts.put(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--processes", default="1,4,8,16")
    args = parser.parse_args()
    with psycopg.connect(f"{BASE}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {NAME}")
        admin.execute(f"CREATE DATABASE {NAME}")
    try:
        with psycopg.connect(f"{BASE}/{NAME}", autocommit=True) as connection:
            connection.execute("CREATE TABLE bare (id bigserial PRIMARY KEY, body bytea)")
        for count in (int(n) for n in args.processes.split(",")):
            counts: multiprocessing.Queue = multiprocessing.Queue()
            workers = [multiprocessing.Process(target=writer, args=(args.seconds, counts)) for _ in range(count)]
            for process in workers:
                process.start()
            total = sum(counts.get() for _ in workers)
            for process in workers:
                process.join()
            one, five, _ = os.getloadavg()
            rate = total / args.seconds
            print(f"{count:>3} processes: {rate:>8,.0f} INSERT+COMMIT/s  (load average {one:.2f} / {five:.2f})")
    finally:
        with psycopg.connect(f"{BASE}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {NAME}")


if __name__ == "__main__":
    main()
