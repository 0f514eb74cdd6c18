"""The status-request chart: one mark per request, coloured (and shaped) by why it was sent then."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from escalations.chart import render_svg, request_chart

T = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def check(seconds: int, source: str, *, status: int | None = 200, state: str = "running", error: str = ""):  # noqa: ANN201
    at = T + timedelta(seconds=seconds)
    return SimpleNamespace(
        sent_at=at,
        http_status=status,
        transport_error=error,
        provider_state=state,
        delay_source=source,
        next_poll_at=at + timedelta(seconds=5),
    )


def auth(number: int, seconds: int, deadline_min: int, budget: int, by: str = "operator:test"):  # noqa: ANN201
    return SimpleNamespace(
        number=number,
        granted_at=T + timedelta(seconds=seconds),
        deadline_at=T + timedelta(minutes=deadline_min),
        max_status_requests=budget,
        kind="initial" if number == 1 else "extension",
        granted_by_label=by,
    )


def test_each_request_is_a_mark_explained_by_the_wait_before_it() -> None:
    checks = [
        check(0, "local_backoff"),
        check(5, "provider_retry_after", status=503),
        check(125, "local_backoff", state="<script>x</script>"),
        check(400, "local_backoff", status=None, error="timeout"),
    ]
    chart = request_chart(
        checks=checks,
        authorizations=[auth(1, 0, 5, 4), auth(2, 300, 20, 8, by="user:alice")],
        created_at=T,
        deadline_at=T + timedelta(minutes=20),
        business_deadline_at=T + timedelta(minutes=15),
        now=T + timedelta(minutes=7),
    )
    assert [m.source for m in chart.marks] == ["first", "local_backoff", "provider_retry_after", "manual_extension"]
    assert [m.shape for m in chart.marks] == ["ring", "circle", "square", "diamond"]
    assert [m.error for m in chart.marks] == [False, True, False, True]
    assert [m.x for m in chart.marks] == sorted(m.x for m in chart.marks)
    assert {line.kind for line in chart.lines} == {"deadline", "old-deadline", "business", "grant", "now"}
    assert any(line.label == "#2 extension by alice" for line in chart.lines)
    assert chart.budget_path.startswith("M") and [label for *_, label in chart.budget_labels] == [
        "budget 4",
        "budget 8",
    ]
    svg = str(render_svg(chart))
    assert svg.count("<title>request ") == 4
    assert "&lt;script&gt;x&lt;/script&gt;" in svg and "<script>" not in svg
    assert "business deadline 10:15:00" in svg and ">deadline 10:20:00<" in svg


def test_a_far_budget_is_named_instead_of_squashing_the_marks() -> None:
    chart = request_chart(
        checks=[check(0, "local_backoff"), check(5, "local_backoff")],
        authorizations=[auth(1, 0, 60, 10_000)],
        created_at=T,
        deadline_at=T + timedelta(hours=1),
        business_deadline_at=None,
        now=T,
        first_number=41,
    )
    assert chart.budget_path == "" and "budget 10000 requests" in chart.budget_note
    assert "request 42 ·" in chart.marks[1].tooltip
    assert min(m.y for m in chart.marks) > chart.top


def test_time_ticks_fall_on_round_times_a_reader_can_count() -> None:
    created = T + timedelta(seconds=8)  # registered at 10:00:08
    chart = request_chart(
        checks=[check(10, "first")],
        authorizations=[auth(1, 8, 60, 10)],
        created_at=created,
        deadline_at=T + timedelta(minutes=60),
        business_deadline_at=None,
        now=T + timedelta(seconds=20),
    )
    labels = [tick.label for tick in chart.x_ticks]
    assert labels == ["10:15", "10:30", "10:45", "11:00"]
    positions = [tick.pos for tick in chart.x_ticks]
    assert positions == sorted(positions) and chart.left < positions[0] and positions[-1] <= chart.right
    short = request_chart(
        checks=[check(10, "first")],
        authorizations=[auth(1, 0, 2, 10)],
        created_at=T,
        deadline_at=T + timedelta(seconds=110),
        business_deadline_at=None,
        now=T + timedelta(seconds=20),
    )
    assert [tick.label for tick in short.x_ticks] == ["10:00:00", "10:00:30", "10:01:00", "10:01:30", "10:02:00"]


def test_the_checks_still_to_come_in_an_extensions_window_are_hollow_marks_after_the_last_request() -> None:
    checks = [check(0, "local_backoff"), check(5, "local_backoff"), check(300, "manual_extension")]
    planned = [T + timedelta(seconds=s) for s in (500, 725, 950)]
    chart = request_chart(
        checks=checks,
        authorizations=[auth(1, 0, 5, 2), auth(2, 300, 20, 6, by="user:alice")],
        created_at=T,
        deadline_at=T + timedelta(minutes=20),
        business_deadline_at=None,
        now=T + timedelta(seconds=400),
        planned=planned,
        check_spacing_s=225.0,
    )
    assert len(chart.planned) == 3
    xs = [x for x, _, _ in chart.planned]
    assert xs == sorted(xs) and xs[0] > chart.marks[-1].x
    # Each stands where its request will count: 4, 5 and 6 of the budget of 6.
    ys = [y for _, y, _ in chart.planned]
    assert ys == sorted(ys, reverse=True) and ys[0] < chart.marks[-1].y
    assert chart.planned[0][2].startswith("planned check 1 of 3 (request 4) · by about 2026-12-01 10:08:20 UTC")
    assert "paced about every 4 min" in chart.planned[0][2]
    svg = render_svg(chart)
    assert svg.count('class="mark planned"') == 3
    # Outside a window nothing is planned.
    assert (
        request_chart(
            checks=checks,
            authorizations=[auth(1, 0, 5, 12)],
            created_at=T,
            deadline_at=T + timedelta(minutes=5),
            business_deadline_at=None,
            now=T,
        ).planned
        == []
    )
