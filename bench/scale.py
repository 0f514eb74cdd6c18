"""The 100,000-operation data set of issue 29 item 5, built with set-based SQL (INSERT ... SELECT over
generate_series), for bench/dashboard.py and bench/dispatch.py's `--operations` mode.

Python makes one template row of each kind; PostgreSQL copies it `count` times with a few columns
computed from the copy's number `n`. Rows are never sent one by one: 10,000,000 audit entries take
minutes, not hours. The audit entries' chain hashes are placeholders (the pages never check them;
bench/audit_big.py builds a verifiable log when proofs are what is measured).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

# Rows per INSERT statement, each its own transaction (progress is visible; a stopped build keeps
# whole batches).
BATCH = 1_000_000
# The finished operations' ids: 'op_01JSCALE' + 18 digits (29 characters, as a ULID id is).
SCALE_ID = "'op_01JSCALE' || lpad(({n})::text, 18, '0')"
LOG = "pollerdash/audit"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} CPUs"


def insert_select(model: type, template_pk: object, count: int, overrides: dict[str, str]) -> None:
    """`count` copies of one template row, `n` (1..count) numbering them; `overrides` are SQL
    expressions of `n` and of the template `t` for some columns (the rest copied from the template)."""
    from django.db import connection

    pk = model._meta.pk.column
    columns = [f.column for f in model._meta.concrete_fields if f.column != pk or pk in overrides]
    select = [overrides.get(column, f"t.{connection.ops.quote_name(column)}") for column in columns]
    table = model._meta.db_table
    quoted = ", ".join(connection.ops.quote_name(column) for column in columns)
    with connection.cursor() as cursor:
        for first in range(1, count + 1, BATCH):
            last = min(count, first + BATCH - 1)
            cursor.execute(
                f"INSERT INTO {table} ({quoted}) SELECT {', '.join(select)}"  # our own columns
                f" FROM {table} AS t, generate_series(%s::bigint, %s::bigint) AS n WHERE t.{pk} = %s",
                [first, last, template_pk],
            )


def finished_operations(*, profile: object, count: int, decided_every: int = 10) -> None:
    """`count` finished operations spread over the last 30 days, 5 status checks and one
    authorization each; every `decided_every`-th was escalated and decided (a card closed, one decision)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from operations.models import Authorization, Decision, Escalation, Operation, StatusCheck

    now = timezone.now()
    done = now - timedelta(days=1)
    template = Operation.objects.create(
        id="op_01JSCALETEMPLATE000000000000",
        registered_by="agent:bench",
        provider=profile,
        account=profile.account,
        provider_job_id="template",
        purpose="template",
        status="succeeded",
        deadline_at=done + timedelta(minutes=40),
        max_status_requests=12,
        max_transport_failures=3,
        status_requests_used=5,
        last_provider_state="succeeded",
        last_http_status=200,
        result={"output_url": "https://example.invalid/output/template"},
        created_at=done - timedelta(minutes=6),
        updated_at=done,
        completed_at=done,
    )
    # n seconds back from a day ago: 100,000 operations cover about 28 hours, the newest a day old.
    back = "t.{col} - n * interval '1 second'"
    statuses = "(ARRAY['succeeded','succeeded','failed','closed','partially_succeeded','cancelled'])[mod(n, 6) + 1]"
    insert_select(
        Operation,
        template.pk,
        count,
        {
            "id": SCALE_ID.format(n="n"),
            "provider_job_id": "'scale-job-' || n",
            "purpose": "'Bench export ' || n || ' for customer ' || mod(n, 97)",
            "metadata": "jsonb_build_object('customer', mod(n, 97)::text)",
            "status": statuses,
            **{col: back.format(col=col) for col in ("created_at", "updated_at", "completed_at", "deadline_at")},
        },
    )
    check = StatusCheck.objects.create(
        operation=template,
        account=template.account,
        fence=1,
        due_at=done,
        started_at=done,
        sent_at=done,
        received_at=done + timedelta(milliseconds=40),
        http_status=200,
        provider_state="running",
        interpreted_state="pending",
        decision="wait",
        reason="provider state 'running' is pending",
        delay_source="local_backoff",
        delay_ms=5000,
        next_poll_at=done,
    )
    op = SCALE_ID.format(n="(n - 1) / 5 + 1")
    at = "t.{col} - ((n - 1) / 5) * interval '1 second' - (5 - mod(n - 1, 5)) * interval '1 minute'"
    insert_select(
        StatusCheck,
        check.pk,
        count * 5,
        {
            "operation_id": op,
            "fence": "mod(n - 1, 5) + 1",
            **{col: at.format(col=col) for col in ("due_at", "started_at", "sent_at", "received_at", "next_poll_at")},
        },
    )
    auth = Authorization.objects.create(
        operation=template,
        number=1,
        kind="initial",
        granted_by_label="agent:bench",
        granted_at=template.created_at,
        deadline_at=template.deadline_at,
        max_status_requests=12,
        max_transport_failures=3,
    )
    insert_select(Authorization, auth.pk, count, {"operation_id": SCALE_ID.format(n="n")})
    user = get_user_model().objects.get_or_create(username="bench-responder")[0]
    card = Escalation.objects.create(
        operation=template,
        reason="deadline_exceeded",
        detail="the deadline passed",
        state="decided",
        version=2,
        opened_at=done - timedelta(minutes=3),
        closed_at=done,
        closed_reason="closed by bench-responder",
    )
    decided = count // decided_every
    op = SCALE_ID.format(n=f"n * {decided_every}")
    shifted = f"t.{{col}} - n * {decided_every} * interval '1 second'"
    insert_select(
        Escalation,
        card.pk,
        decided,
        {"operation_id": op, **{col: shifted.format(col=col) for col in ("opened_at", "closed_at")}},
    )
    decision = Decision.objects.create(
        escalation=card,
        operation=template,
        user=user,
        username=user.get_username(),
        decided_at=done,
        option="close",
        outcome="applied",
        card_version=1,
        card_snapshot={"version": 1, "reason": "deadline_exceeded", "options": [{"id": "close"}]},
    )
    _decisions_for_cards(decision_pk=decision.pk, template_card=card.pk)
    decision.delete()
    card.delete()
    auth.delete()
    check.delete()
    template.delete()


def open_cards(*, profile: object, count: int) -> None:
    """`count` operations waiting on an open card each (the deadline passed), opened over the last
    `count` minutes; they are not polled while they wait."""
    from django.utils import timezone

    from operations.models import Escalation, Operation

    now = timezone.now()
    template = Operation.objects.create(
        id="op_01JCARDTEMPLATE0000000000000",
        registered_by="agent:bench",
        provider=profile,
        account=profile.account,
        provider_job_id="card-template",
        purpose="card template",
        status="needs_attention",
        deadline_at=now,
        max_status_requests=12,
        max_transport_failures=3,
        status_requests_used=6,
        last_provider_state="running",
        last_http_status=200,
        created_at=now - timedelta(minutes=40),
        updated_at=now,
    )
    card_id = "'op_01JCARD' || lpad(({n})::text, 19, '0')"
    back = "t.{col} - n * interval '1 minute'"
    insert_select(
        Operation,
        template.pk,
        count,
        {
            "id": card_id.format(n="n"),
            "provider_job_id": "'card-job-' || n",
            "purpose": "'Bench export ' || n || ' waiting on a card'",
            **{col: back.format(col=col) for col in ("created_at", "updated_at", "deadline_at")},
        },
    )
    card = Escalation.objects.create(
        operation=template,
        reason="deadline_exceeded",
        detail="the deadline passed; no request was sent",
        opened_at=now,
        context={"http_status": 200},
    )
    insert_select(
        Escalation, card.pk, count, {"operation_id": card_id.format(n="n"), "opened_at": back.format(col="opened_at")}
    )
    card.delete()
    template.delete()


def _decisions_for_cards(*, decision_pk: int, template_card: int) -> None:
    """One decision per decided card of the scale set, copied from a template decision (a join, not a series)."""
    from django.db import connection

    from operations.models import Decision, Escalation

    columns = [f.column for f in Decision._meta.concrete_fields if f.column != "id"]
    table, cards = Decision._meta.db_table, Escalation._meta.db_table
    overrides = {"escalation_id": "e.id", "operation_id": "e.operation_id", "decided_at": "e.closed_at"}
    select = ", ".join(overrides.get(column, f't."{column}"') for column in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select}"  # our own columns
            f" FROM {table} AS t, {cards} AS e"
            " WHERE t.id = %s AND e.state = 'decided' AND e.id <> %s AND e.operation_id LIKE 'op_01JSCALE%%'",
            [decision_pk, template_card],
        )


def audit_entries(*, count: int, operations: int, log: str = LOG, say=print) -> int:
    """`count` entries appended after the log's head, round robin over the `operations` finished
    operations of the scale set (an operation's entries are spread over the whole log: the
    operation page's worst case). Returns the new head's seq.

    pollerdash's own log only while no integrator runs (the head is moved past the entries, whose
    tree nodes are not built); beside running processes, another `log`: the same table and indexes."""
    from django.db import connection

    from operations.models import AuditHead

    first = (AuditHead.objects.filter(log=log).values_list("seq", flat=True).first() or 0) + 1
    body = (
        "convert_to(jsonb_build_object('v', 1, 'log', %s, 'seq', seq, 'prev', lpad(to_hex(seq - 1), 64, '0'),"
        " 'at', at, 'type', 'controller.decision', 'actor', jsonb_build_object('kind', 'system', 'id', 'controller'),"
        " 'operation_id', op, 'data', jsonb_build_object('state', 'running', 'delay_source', 'local_backoff',"
        " 'delay_ms', 5000, 'request_count', mod(seq, 12), 'max_requests', 12, 'http_status', 200,"
        " 'provider_state', 'running', 'interpreted_state', 'pending', 'decision', 'wait',"
        " 'reason', 'provider state ''running'' is pending'))::text, 'UTF8')"
    )
    insert = (
        "INSERT INTO operations_auditentry (log, seq, prev_hash, entry_hash, body, at, type, operation_id)"
        f" SELECT %s, seq, lpad(to_hex(seq - 1), 64, '0'), lpad(to_hex(seq), 64, '0'), {body}, at,"
        " 'controller.decision', op FROM ("
        f"  SELECT n + %s - 1 AS seq, now() - (%s - n) * interval '10 milliseconds' AS at,"
        f"   {SCALE_ID.format(n=f'mod(n, {operations}) + 1')} AS op"
        "  FROM generate_series(%s::bigint, %s::bigint) AS n) AS rows"
    )
    started = time.perf_counter()
    with connection.cursor() as cursor:
        for lo in range(1, count + 1, BATCH):
            hi = min(count, lo + BATCH - 1)
            cursor.execute(insert, [log, log, first, count, lo, hi])
            say(f"  audit entries {hi:,} of {count:,} ({time.perf_counter() - started:.0f} s; {load()})")
    last = first + count - 1
    if log == LOG:
        AuditHead.objects.update_or_create(log=log, defaults={"seq": last, "head_hash": f"{last:064x}"})
    return last


def analyze() -> None:
    """The planner statistics a running deployment has (autovacuum's analyze, done now)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
