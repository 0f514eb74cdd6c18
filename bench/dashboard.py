"""Dashboard pages at scale: SQL queries per page and server time, on PostgreSQL.

    .venv/bin/python bench/dashboard.py      # 10,000 ops: 1,000 open cards + a group of 1,000; 1,000,000 audit entries
    .venv/bin/python bench/dashboard.py --ops 2000 --open 200 --group 200 --audit 100000 --runs 20   # a quick smoke run
    .venv/bin/python bench/dashboard.py --operations 100000   # issue 29: 10,000 live, 10,000,000 entries

Seeds a scratch database fast (bulk_create; the audit entries with COPY - their bodies are real
JSON entries but the chain hashes are placeholders, which the pages never check), then requests
each page through Django's full handler stack (middleware, session, auth, templates) in this
process and prints, per page: SQL queries, p50 / p95 / max server time, and the response size.
The targets (DESIGN / issue 5): <= 15 queries per page whatever the row counts, p95 <= 150 ms.
Then one bulk decision (issue 11) extends 100 cards of the group through operations.decisions.bulk,
each member under its own locks with its own decision and audit entry: target <= 2 s.
Figures are printed, never asserted; the query bound is asserted in tests/operations/test_views_queries.py.

`--operations N` (scale mode, issue 29 item 5): N/10 live operations seeded as above (900 single open
cards and a group of 100), the other 90 % finished ones and the audit entries (default 10,000,000)
made by set-based SQL (bench/scale.py), then VACUUM ANALYZE; /system/ is measured too, beside a
same-run reference: a redirect through the same middleware, session and sign-in (the stack's floor).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._setup import django_on_scratch_postgres, percentile
from bench.scale import load

BATCH = 2000


def seed(
    *,
    ops: int,
    open_cards: int,
    group: int,
    audit: int,
    target_checks: int,
    target_audit: int,
    running: int | None = None,
) -> tuple[object, str]:
    """Returns (a responder user, the id of the busiest operation).

    The first `open_cards` operations wait on single cards; the next `group` wait on cards of one
    group (one provider account, one reason, opened within minutes: an outage); the next `running`
    (by default 30 % of `ops`) are watched; the rest finished."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import connection
    from django.utils import timezone

    from operations.lifecycle.registration import new_operation_id
    from operations.models import (
        AuditHead,
        Authorization,
        CardGroup,
        Decision,
        Escalation,
        Operation,
        ProviderAccount,
        ProviderProfile,
        StatusCheck,
    )

    rng = random.Random(5)
    now = timezone.now()
    profiles = []
    for index in range(4):
        slug = f"bench-{index}"
        ProviderAccount.objects.create(name=slug)
        profiles.append(
            ProviderProfile.objects.create(
                slug=slug,
                name=f"Bench provider {index}",
                account=slug,
                status_url="https://provider.invalid/v1/jobs/{job_id}",
                job_id_pattern=r"^[A-Za-z0-9_.:=+-]{1,200}$",
                state_field="state",
                pending_states=["queued", "running"],
                success_states=["succeeded"],
                failure_states=["failed"],
                cancelled_states=["cancelled"],
                cancel_method="POST" if index % 2 == 0 else "",
                cancel_url="https://provider.invalid/v1/jobs/{job_id}/cancel" if index % 2 == 0 else "",
                console_url="https://console.invalid/{job_id}",
                extension_options=[{"minutes": 15, "checks": 4}, {"minutes": 60, "checks": 8}],
            )
        )
    user = get_user_model().objects.create_user(username="bench-responder", password="x")
    user.groups.add(Group.objects.get_or_create(name="responder")[0])

    reasons = [r for r, _ in Escalation._meta.get_field("reason").choices]
    rows, auths = [], []
    for index in range(ops):
        created = now - timedelta(minutes=rng.randrange(1, 7 * 24 * 60))
        if index < open_cards + group:
            status = "needs_attention"
        elif index < open_cards + group + (ops * 3 // 10 if running is None else running):
            status = "running"
        else:
            status = rng.choice(["succeeded", "succeeded", "failed", "closed", "partially_succeeded", "cancelled"])
        profile = profiles[0] if open_cards <= index < open_cards + group else profiles[index % len(profiles)]
        used = rng.randrange(1, 12)
        op = Operation(
            id=new_operation_id(),
            registered_by="agent:bench",
            provider=profile,
            account=profile.account,
            provider_job_id=f"bench-job-{index}",
            purpose=f"Bench export {index} for customer {index % 97}",
            metadata={"customer": str(index % 97)},
            status=status,
            deadline_at=created + timedelta(minutes=40),
            business_deadline_at=created + timedelta(minutes=rng.randrange(30, 600)) if index % 3 else None,
            max_status_requests=12,
            max_transport_failures=3,
            status_requests_used=used,
            last_provider_state="running",
            last_http_status=200,
            last_polled_at=created + timedelta(minutes=5),
            next_poll_at=now + timedelta(seconds=rng.randrange(1, 120)) if status == "running" else None,
            delay_source="local_backoff",
            created_at=created,
            updated_at=created + timedelta(minutes=5),
            completed_at=created + timedelta(minutes=6) if status not in ("running", "needs_attention") else None,
        )
        rows.append(op)
        auths.append(
            Authorization(
                operation=op,
                number=1,
                kind="initial",
                granted_by_label="agent:bench",
                granted_at=created,
                deadline_at=op.deadline_at,
                max_status_requests=12,
                max_transport_failures=3,
            )
        )
    Operation.objects.bulk_create(rows, batch_size=BATCH)
    Authorization.objects.bulk_create(auths, batch_size=BATCH)
    target = rows[0]
    Operation.objects.filter(pk=target.pk).update(
        status_requests_used=target_checks, max_status_requests=target_checks + 4
    )

    checks = []
    for op in rows:
        count = target_checks if op is target else 5
        for n in range(count):
            sent = op.created_at + timedelta(seconds=5 * n)
            checks.append(
                StatusCheck(
                    operation=op,
                    account=op.account,
                    fence=n,
                    started_at=sent,
                    sent_at=sent,
                    received_at=sent + timedelta(milliseconds=40),
                    http_status=503 if n % 17 == 5 else 200,
                    provider_state="running",
                    interpreted_state="pending",
                    decision="wait",
                    reason="provider state 'running' is pending",
                    delay_source="provider_retry_after" if n % 17 == 5 else "local_backoff",
                    delay_ms=5000,
                    next_poll_at=sent + timedelta(seconds=5),
                )
            )
        if len(checks) >= BATCH * 5:
            StatusCheck.objects.bulk_create(checks, batch_size=BATCH)
            checks = []
    StatusCheck.objects.bulk_create(checks, batch_size=BATCH)

    escalations = [
        Escalation(
            operation=op,
            reason=reasons[index % len(reasons)],
            detail="the deadline passed; no request was sent",
            opened_at=op.updated_at,
            context={"http_status": 200},
        )
        for index, op in enumerate(rows[:open_cards])
    ]
    outage = CardGroup.objects.create(
        account=profiles[0].account, reason="deadline_exceeded", opened_at=now - timedelta(minutes=10)
    )
    escalations += [
        Escalation(
            operation=op,
            reason="deadline_exceeded",
            detail="the deadline passed; no request was sent",
            opened_at=now - timedelta(seconds=rng.randrange(1, 600)),
            context={"http_status": 200},
            group=outage,
        )
        for op in rows[open_cards : open_cards + group]
    ]
    decided_ops = rows[open_cards + group : open_cards * 3 + group]
    escalations += [
        Escalation(
            operation=op,
            reason="deadline_exceeded",
            detail="the deadline passed",
            state="decided",
            version=2,
            opened_at=op.updated_at,
            closed_at=op.updated_at + timedelta(minutes=1),
            closed_reason="closed by bench-responder",
        )
        for op in decided_ops
    ]
    Escalation.objects.bulk_create(escalations, batch_size=BATCH)
    decided = [e for e in escalations if e.state == "decided"]
    Decision.objects.bulk_create(
        [
            Decision(
                escalation=esc,
                operation=esc.operation,
                user=user,
                username=user.get_username(),
                decided_at=esc.closed_at,
                option="close",
                outcome="applied",
                card_version=1,
                card_snapshot={"version": 1, "reason": esc.reason, "options": [{"id": "close"}]},
            )
            for esc in decided
        ],
        batch_size=BATCH,
    )
    # Entries the seed itself appended (the accounts created) come first; the copied ones follow.
    first = (AuditHead.objects.filter(log="pollerdash/audit").values_list("seq", flat=True).first() or 0) + 1
    _copy_audit(connection, rows=rows, first=first, total=audit, target=target, target_audit=target_audit, rng=rng)
    last = first + audit - 1
    AuditHead.objects.update_or_create(log="pollerdash/audit", defaults={"seq": last, "head_hash": f"{last:064x}"})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return user, target.pk


def _copy_audit(connection, *, rows, first, total, target, target_audit, rng) -> None:
    """COPY `total` entry bodies (controller decisions and a few human ones), `target_audit` for one operation."""
    from operations.audit.entries import iso

    columns = "log, seq, prev_hash, entry_hash, body, at, type, operation_id"
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY operations_auditentry ({columns}) FROM STDIN") as copy,
    ):
        for seq in range(first, first + total):
            op = target if seq < first + target_audit else rows[rng.randrange(len(rows))]
            at = op.created_at + timedelta(seconds=seq % 3600)
            entry_type = "controller.decision" if seq % 50 else "human.inspect"
            data = (
                {
                    "state": "running",
                    "next_poll_at": iso(at + timedelta(seconds=5)),
                    "delay_source": "local_backoff",
                    "delay_ms": 5000,
                    "request_count": seq % 12,
                    "max_requests": 12,
                    "transport_failures": 0,
                    "max_transport_failures": 3,
                    "deadline": iso(op.deadline_at),
                    "http_status": 200,
                    "provider_state": "running",
                    "provider_request_id": None,
                    "retry_after": None,
                    "interpreted_state": "pending",
                    "decision": "wait",
                    "reason": "provider state 'running' is pending",
                }
                if entry_type == "controller.decision"
                else {"escalation_id": 1, "decision_id": seq, "card_version": 1, "console_url": None}
            )
            actor = (
                {"kind": "system", "id": "controller"}
                if entry_type == "controller.decision"
                else {"kind": "user", "id": "bench"}
            )
            body = json.dumps(
                {
                    "v": 1,
                    "log": "pollerdash/audit",
                    "seq": seq,
                    "prev": f"{seq - 1:064x}",
                    "at": iso(at),
                    "type": entry_type,
                    "actor": actor,
                    "operation_id": op.pk,
                    "data": data,
                },
                separators=(",", ":"),
                sort_keys=True,
            ).encode()
            copy.write_row(("pollerdash/audit", seq, f"{seq - 1:064x}", f"{seq:064x}", body, at, entry_type, op.pk))


def seed_scale(args: argparse.Namespace) -> tuple[object, str]:
    """The live tenth seeded as usual (every live one watched or waiting on a card), then the
    finished operations and the audit log in set-based SQL."""
    from bench import scale
    from operations.models import ProviderProfile

    live = args.operations // 10
    user, target = seed(
        ops=live,
        open_cards=args.open_cards,
        group=args.group,
        audit=args.target_audit,
        target_checks=args.target_checks,
        target_audit=args.target_audit,
        running=live - args.open_cards - args.group,
    )
    finished = args.operations - live
    step = time.perf_counter()
    scale.finished_operations(profile=ProviderProfile.objects.get(slug="bench-1"), count=finished)
    print(f"  {finished:,} finished operations in {time.perf_counter() - step:.0f} s; {scale.load()}")
    scale.audit_entries(count=args.audit - args.target_audit, operations=finished)
    step = time.perf_counter()
    scale.analyze()
    print(f"  VACUUM ANALYZE in {time.perf_counter() - step:.0f} s; {scale.load()}")
    return user, target


def measure(client, url: str, *, runs: int, headers: dict[str, str] | None = None) -> dict[str, float]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(3):
        client.get(url, headers=headers or {})
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, headers=headers or {})
    queries = len(captured.captured_queries)  # now: the next request resets the query log
    assert response.status_code in (200, 301), (url, response.status_code)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        client.get(url, headers=headers or {})
        times.append((time.perf_counter() - start) * 1000)
    return {
        "queries": queries,
        "p50": percentile(times, 50),
        "p95": percentile(times, 95),
        "max": max(times),
        "kb": len(response.content) / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument(
        "--operations", type=int, help="scale mode: this many operations, a tenth live, the rest finished in SQL"
    )
    parser.add_argument("--open", type=int, dest="open_cards", help="open cards outside groups (1,000; 900 at scale)")
    parser.add_argument("--group", type=int, help="open cards of one group, an outage (1,000; 100 at scale)")
    parser.add_argument("--bulk", type=int, default=100, help="cards of the group in the one bulk decision")
    parser.add_argument("--db", default="h_esc_bench_dashboard", help="scratch database name (dropped first)")
    parser.add_argument("--audit", type=int, help="audit entries (1,000,000; 10,000,000 at scale)")
    parser.add_argument(
        "--target-checks", type=int, default=1_000, help="status checks of the operation page's operation"
    )
    parser.add_argument("--target-audit", type=int, default=1_000, help="audit entries of that operation")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--keep", action="store_true", help="reuse the seeded database of a previous run")
    args = parser.parse_args()
    scale = args.operations is not None
    if args.open_cards is None:
        args.open_cards = 900 if scale else 1_000
    if args.group is None:
        args.group = 100 if scale else 1_000
    if args.audit is None:
        args.audit = 10_000_000 if scale else 1_000_000

    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    name = args.db
    if args.keep:
        os.environ["DATABASE_URL"] = f"{os.environ.get('BENCH_PG', 'postgres://root@127.0.0.1:5432')}/{name}"
        os.environ.setdefault("SECRET_KEY", "bench-only")
        os.environ.setdefault("LOG_LEVEL", "WARNING")
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pollerdash.settings")
        import django

        django.setup()
    else:
        django_on_scratch_postgres(name)
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    from operations.models import AuditEntry, Operation

    started = time.perf_counter()
    if args.keep:
        user = get_user_model().objects.get(username="bench-responder")
        target = Operation.objects.order_by("-status_requests_used").values_list("pk", flat=True).first()
    elif scale:
        user, target = seed_scale(args)
    else:
        user, target = seed(
            ops=args.ops,
            open_cards=args.open_cards,
            group=args.group,
            audit=args.audit,
            target_checks=args.target_checks,
            target_audit=args.target_audit,
        )
    seeded = time.perf_counter() - started
    client = Client()
    client.force_login(user)
    pages = [
        ("inbox", reverse("inbox"), None),
        ("inbox live fragment", reverse("inbox"), {"HX-Request": "true", "HX-Target": "inbox-rows"}),
        ("inbox ?reason=deadline_exceeded", reverse("inbox") + "?reason=deadline_exceeded", None),
        ("operations list", reverse("operation_list"), None),
        (
            "operations list ?tab=needs_attention&page=5",
            reverse("operation_list") + "?tab=needs_attention&page=5",
            None,
        ),
        ("operations list ?q=customer 42", reverse("operation_list") + "?q=customer+42", None),
        ("operation page", reverse("operation_detail", args=[target]), None),
        ("card (htmx)", None, {"HX-Request": "true"}),
        ("history", reverse("decision_history"), None),
        ("/system/", reverse("system"), None),
        # The same-run reference: what any request costs here (middleware, session, sign-in), no page.
        ("reference: /favicon.ico redirect", "/favicon.ico", None),
    ]
    from operations.models import CardGroup, Escalation

    outage = CardGroup.objects.order_by("pk").values_list("pk", flat=True).first()
    if outage is not None:
        pages.insert(3, ("group page (100 members a page)", reverse("card_group", args=[outage]), None))

    card = Escalation.objects.filter(state="open").values_list("pk", flat=True).first()
    open_count = Escalation.objects.filter(state="open").count()
    print(
        f"data: {Operation.objects.count():,} operations, {open_count:,} open cards, "
        f"{AuditEntry.objects.count():,} audit entries (seeded in {seeded:.0f} s); {args.runs} runs per page"
    )
    print(f"{'page':<46} {'queries':>7} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'KiB':>7}")
    for label, url, headers in pages:
        if url is None:
            url = reverse("escalation_card", args=[card])
        figures = measure(client, url, runs=args.runs, headers=headers)
        print(
            f"{label:<46} {figures['queries']:>7} {figures['p50']:>8.1f} {figures['p95']:>8.1f} "
            f"{figures['max']:>8.1f} {figures['kb']:>7.0f}"
        )
    print("targets: <= 15 queries per page whatever the row counts; p95 <= 150 ms server time (50 ms at scale)")
    print(load())
    if outage is not None and args.bulk:
        bulk_decision(user=user, group_id=outage, count=args.bulk)


def bulk_decision(*, user: object, group_id: int, count: int) -> None:
    """One bulk extension over `count` open cards of the group, timed end to end (checks included)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from operations.cards.signin import PASSWORD, SignIn
    from operations.decisions.bulk import Member, decide_bulk
    from operations.models import Escalation

    members = [
        Member(pk, version)
        for pk, version in Escalation.objects.filter(group_id=group_id, state="open")
        .order_by("pk")
        .values_list("pk", "version")[:count]
    ]
    started = time.perf_counter()
    with CaptureQueriesContext(connection) as captured:
        result = decide_bulk(
            group_id=group_id,
            user=user,
            # The responder signed in with a password just now (the path a fresh sign-in takes).
            sign_in=SignIn(method=PASSWORD, at=timezone.now()),
            option_id="extend:15m:4",
            members=members,
            comment="bench: provider incident resolved",
            confirmed_count=len(members),
        )
    elapsed = time.perf_counter() - started
    print(
        f"bulk decision: extend:15m:4 over {len(members)} cards of a group of "
        f"{Escalation.objects.filter(group_id=group_id).count():,}: {result.bulk.applied} applied, "
        f"{len(result.refused)} refused, {elapsed:.2f} s, {len(captured.captured_queries)} queries "
        f"({len(captured.captured_queries) / max(1, len(members)):.0f} per card); target <= 2 s"
    )


if __name__ == "__main__":
    main()
