"""A large stored audit log built in SQL, for bench/audit.py: proofs and an operation export at scale.

`build_log` writes `size` realistic controller-decision entries (canonical bytes, the same shape
as audit.append writes) straight into the entries table with INSERT ... SELECT, their leaf hashes
into the tree-node table with PostgreSQL's sha256() in the same statement, then every complete
subtree level by level - the rows the integrator would have written, in minutes instead of hours -
and signs the switch and a checkpoint at `size` with the bench's key (the signer would first
replay all of it: that verification is what a bench of this size skips).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench._setup import percentile

DecisionData = Callable[[int, str], dict[str, object]]

# Entries per INSERT statement (each its own transaction, so progress is visible and a failed
# build leaves whole batches).
BUILD_BATCH = 1_000_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# Operations the synthetic entries belong to, round robin: 100 entries each at 10,000,000.
OPERATIONS = 100_000
_MARKERS = {
    "at": "@@AT@@",
    "op": "op_01JMARKERMARKERMARKERMARKE",
    "req": "req_@@REQ@@",
    "delay": 987_654_321,
    "count": 123_456_789,
}


@dataclass(frozen=True)
class BigLog:
    log: str
    size: int
    root: bytes
    build_s: float


def _body_sql(log: str, decision_data: DecisionData) -> tuple[str, list[str]]:
    """A SQL expression of `n` (the entry number) giving its canonical entry bytes, and its
    parameters: one Python-made canonical encoding with markers, the markers replaced by SQL."""
    from operations.audit import verify as av

    data = decision_data(0, str(_MARKERS["at"]))
    data.update(delay_ms=_MARKERS["delay"], request_count=_MARKERS["count"], provider_request_id=_MARKERS["req"])
    entry = {
        "v": 2,
        "log": log,
        "at": _MARKERS["at"],
        "type": "controller.decision",
        "actor": {"kind": "system", "id": "controller"},
        "operation_id": _MARKERS["op"],
        "data": data,
    }
    text = av.compact_json(entry).decode()
    pieces = {
        _MARKERS["at"]: "at_text",
        _MARKERS["op"]: "op",
        "@@REQ@@": "lpad(n::text, 8, '0')",
        str(_MARKERS["delay"]): "(5000 + n %% 1000)::text",
        str(_MARKERS["count"]): "(n %% 12)::text",
    }
    parts: list[str] = []
    params: list[str] = []
    while text:
        found = [(text.find(marker), marker) for marker in pieces if marker in text]
        if not found:
            parts.append("%s")
            params.append(text)
            break
        position, marker = min(found)
        parts.append("%s")
        params.append(text[:position])
        parts.append(pieces[marker])
        text = text[position + len(marker) :]
    # psycopg placeholders: a literal % in the SQL is written %%.
    return "convert_to(" + " || ".join(parts) + ", 'UTF8')", params


def build_log(*, log: str, size: int, decision_data: DecisionData, say: Callable[[str], object] = print) -> BigLog:
    """Entries 1..size of `log`, their tree, and a signed checkpoint at `size`."""
    from django.db import connection

    from operations.audit import tree

    body, params = _body_sql(log, decision_data)
    insert = f"""
        WITH made AS (
            INSERT INTO operations_auditentry (log, seq, prev_hash, entry_hash, body, at, type, operation_id)
            SELECT %s, n, NULL, encode(sha256('\\x00'::bytea || body), 'hex'), body, at, 'controller.decision', op
            FROM (
                SELECT n, at, op, {body} AS body
                FROM (
                    SELECT n, at, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at_text,
                           'op_01JBENCH' || lpad((n %% {OPERATIONS})::text, 17, '0') AS op
                    FROM (SELECT n, %s::timestamptz + n * interval '1 millisecond' AS at
                          FROM generate_series(%s::bigint, %s::bigint) AS n) AS numbered
                ) AS fields
            ) AS entries
            RETURNING seq, entry_hash
        )
        INSERT INTO operations_audittreenode (log, level, index, hash)
        SELECT %s, 0, seq - 1, decode(entry_hash, 'hex') FROM made
    """
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SET work_mem = '256MB'")
        for first in range(1, size + 1, BUILD_BATCH):
            last = min(size, first + BUILD_BATCH - 1)
            cursor.execute(insert, [log, *params, T0, first, last, log])
            say(f"  entries and leaves 1..{last:,} ({time.perf_counter() - started:.0f} s)")
        level, count = 0, size
        while count > 1:
            # Each complete pair of level-L subtrees makes one level L+1 subtree.
            cursor.execute(
                """
                INSERT INTO operations_audittreenode (log, level, index, hash)
                SELECT %s, %s, index / 2, sha256('\\x01'::bytea || string_agg(hash, ''::bytea ORDER BY index))
                FROM operations_audittreenode WHERE log = %s AND level = %s
                GROUP BY index / 2 HAVING count(*) = 2
                """,
                [log, level + 1, log, level],
            )
            level, count = level + 1, count // 2
        say(f"  tree levels 1..{level} ({time.perf_counter() - started:.0f} s)")
        cursor.execute("ANALYZE operations_auditentry")
        cursor.execute("ANALYZE operations_audittreenode")
    build_s = time.perf_counter() - started
    root = tree.root_at(log=log, size=size)
    _sign_setup_checkpoints(log=log, size=size, root=root)
    return BigLog(log=log, size=size, root=root, build_s=build_s)


def existing_log(*, log: str, size: int) -> BigLog | None:
    """The log a kept database (--keep, then --reuse) already holds, if it reaches `size`; its
    integrated size (a kept log also holds the earlier runs' operation entries)."""
    from operations.audit import tree
    from operations.models import AuditTree

    held = AuditTree.objects.filter(log=log).values_list("size", flat=True).first()
    if held is None or held < size:
        return None
    return BigLog(log=log, size=held, root=tree.root_at(log=log, size=held), build_s=0.0)


def _sign_setup_checkpoints(*, log: str, size: int, root: bytes) -> None:
    """The switch (an empty chain) and a tree checkpoint at `size`, signed with the bench's key as
    the signer would after replaying the log; the tree row at that size."""
    from django.utils import timezone

    from operations.audit import checkpoints
    from operations.audit import verify as av
    from operations.audit.verify import merkle
    from operations.models import AuditCheckpoint, AuditTree

    key = checkpoints.load_signing_key()
    kid = av.key_id_for(checkpoints.key_name(), checkpoints.public_raw(key))
    now = timezone.now()
    for at, tree_size, head, chain in (
        (T0, 0, merkle.EMPTY_ROOT.hex(), av.GENESIS_PREV),
        (now - timedelta(seconds=1), size, root.hex(), None),
    ):
        body = av.note_body(origin=log, size=tree_size, head=head, time=at, chain=chain)
        signature = av.signature_line(name=checkpoints.key_name(), key_id=kid, signature=key.sign(body.encode()))
        AuditCheckpoint.objects.create(
            log=log,
            size=tree_size,
            head_hash=head,
            tree=True,
            chain_head=chain or "",
            signed_at=at,
            key_id=kid.hex(),
            note=body + "\n" + signature,
        )
    AuditTree.objects.update_or_create(log=log, defaults={"size": size, "root": root.hex(), "integrated_at": now})


@dataclass(frozen=True)
class ProofTimes:
    median_ms: float
    p99_ms: float
    hashes: int
    query_median_ms: float  # tree.nodes: the one query, round trip and fetch (warm)
    query_p99_ms: float
    server_median_ms: float  # EXPLAIN ANALYZE's execution time of that query (planning excluded)
    server_p99_ms: float
    planning_median_ms: float  # and its planning time, which a prepared statement pays once
    buffers: int  # pages the EXPLAIN ANALYZE samples touched, and of them read from outside shared buffers
    buffers_read: int
    prepared_median_ms: float  # the same query as a server-side prepared statement (planned once)
    prepared_p99_ms: float


def time_proofs(big: BigLog, samples: int = 500) -> ProofTimes:
    """tree.inclusion_proof for random entries of the big log, every proof checked against the
    signed root with the entry's stored leaf hash; then where the time goes: the node query alone
    (as tree.nodes sends it), its server-side execution, and the same query prepared once."""
    import psycopg
    from django.db import connection

    from operations.audit import tree
    from operations.audit.verify import merkle
    from operations.models import AuditEntry

    rng = random.Random(14)
    seqs = [rng.randrange(1, big.size + 1) for _ in range(samples)]
    timings, query, length = [], [], 0
    for seq in seqs:
        began = time.perf_counter()
        proof = tree.inclusion_proof(log=big.log, seq=seq, size=big.size)
        timings.append(time.perf_counter() - began)
        leaf = bytes.fromhex(AuditEntry.objects.get(log=big.log, seq=seq).entry_hash)
        assert merkle.verify_inclusion(index=seq - 1, size=big.size, leaf=leaf, proof=proof, root=big.root)
        length = max(length, len(proof))
    other = random.Random(15)
    wanted_sets = []
    for _ in range(samples):
        seq = other.randrange(1, big.size + 1)
        wanted = sorted({n for a, b in merkle.inclusion_ranges(seq - 1, big.size) for n in merkle.aligned_nodes(a, b)})
        wanted_sets.append(wanted)
    for wanted in wanted_sets:  # a first touch of each set's pages, so both passes below read them warm
        tree.nodes(log=big.log, wanted=wanted)
    query, prepared = [], []
    for wanted in wanted_sets:
        began = time.perf_counter()
        tree.nodes(log=big.log, wanted=wanted)
        query.append(time.perf_counter() - began)
    # The same query as a server-side prepared statement on the same connection (planned once).
    # Django opens its connections with preparing off (prepare_threshold None), under which
    # psycopg ignores prepare=True, and its cursor binds on the client, which cannot prepare: so
    # psycopg's own Cursor, with preparing allowed for this measurement only.
    connection.ensure_connection()
    raw_connection = connection.connection
    threshold = raw_connection.prepare_threshold
    raw_connection.prepare_threshold = 0
    try:
        with psycopg.Cursor(raw_connection) as raw:
            for wanted in wanted_sets:
                levels, indexes = zip(*wanted, strict=True)
                began = time.perf_counter()
                raw.execute(tree.NODES_SQL, [big.log, list(levels), list(indexes)], prepare=True)
                raw.fetchall()
                prepared.append(time.perf_counter() - began)
    finally:
        raw_connection.prepare_threshold = threshold
    server, planning, buffers, read = [], [], 0, 0
    with connection.cursor() as cursor:
        for wanted in wanted_sets[:100]:
            levels, indexes = zip(*wanted, strict=True)
            explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + tree.NODES_SQL
            cursor.execute(explain, [big.log, list(levels), list(indexes)])
            (plan,) = cursor.fetchone()
            plan = plan[0] if isinstance(plan, list) else plan
            server.append(plan["Execution Time"] / 1000)
            planning.append(plan["Planning Time"] / 1000)
            buffers += plan["Plan"].get("Shared Hit Blocks", 0) + plan["Plan"].get("Shared Read Blocks", 0)
            read += plan["Plan"].get("Shared Read Blocks", 0)
    return ProofTimes(
        median_ms=percentile(timings, 50) * 1000,
        p99_ms=percentile(timings, 99) * 1000,
        hashes=length,
        query_median_ms=percentile(query, 50) * 1000,
        query_p99_ms=percentile(query, 99) * 1000,
        server_median_ms=percentile(server, 50) * 1000,
        server_p99_ms=percentile(server, 99) * 1000,
        planning_median_ms=percentile(planning, 50) * 1000,
        buffers=buffers,
        buffers_read=read,
        prepared_median_ms=percentile(prepared, 50) * 1000,
        prepared_p99_ms=percentile(prepared, 99) * 1000,
    )


def spread_operation(residue: int) -> str:
    """The id of the synthetic operation of entries n with n % OPERATIONS == residue: one entry
    every OPERATIONS across the whole log, the worst case for an operation export's proof."""
    return f"op_01JBENCH{residue % OPERATIONS:017d}"


def append_operation(*, operation_id: str, entries: int, decision_data: DecisionData) -> None:
    """`entries` real entries of one operation through audit.append, one transaction each (as the
    controller writes them), left pending for the export's own checkpoint to integrate."""
    from django.db import transaction

    from operations.audit import entries as audit

    now = audit.iso(datetime.now(UTC))
    for n in range(entries):
        with transaction.atomic():
            audit.append(
                entry_type="controller.decision",
                actor=audit.SYSTEM_CONTROLLER,
                operation_id=operation_id,
                data=decision_data(n, now),
            )


def count_lines(path: Path, prefix: bytes) -> int:
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.startswith(prefix))
