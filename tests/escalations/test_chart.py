"""The status-request chart: one mark per request, coloured (and shaped) by why it was sent then."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from escalations.chart.axis import time_axis
from escalations.chart.labels import LABEL_GAP, text_width
from escalations.chart.requests import request_chart
from escalations.chart.svg import render_svg

T = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def check(seconds: int, source: str, *, status: int | None = 200, state: str = "running", error: str = ""):
    at = T + timedelta(seconds=seconds)
    return SimpleNamespace(
        sent_at=at,
        http_status=status,
        transport_error=error,
        provider_state=state,
        delay_source=source,
        next_poll_at=at + timedelta(seconds=5),
    )


def auth(number: int, seconds: int, deadline_min: int, budget: int, by: str = "operator:test"):
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
        now=T + timedelta(minutes=30),
    )
    labels = [tick.label for tick in chart.x_ticks]
    assert labels == ["10:15", "10:30", "10:45", "11:00"]
    positions = [tick.pos for tick in chart.x_ticks]
    assert positions == sorted(positions) and chart.left < positions[0] and positions[-1] <= chart.right
    short = request_chart(
        checks=[check(10, "first")],
        authorizations=[auth(1, 0, 2, 10)],
        created_at=T,
        deadline_at=T + timedelta(seconds=120),
        business_deadline_at=None,
        now=T + timedelta(seconds=20),
    )
    assert [tick.label for tick in short.x_ticks] == ["10:00:00", "10:00:30", "10:01:00", "10:01:30", "10:02:00"]


# --- the time axis: the requests and the nearest deadline; a far deadline is a marker at the edge ----


def test_a_far_business_deadline_becomes_an_edge_marker_and_the_requests_use_the_width() -> None:
    # 40 minutes of polling, stopped at the deadline; the business deadline is 6 hours out.
    axis = time_axis(
        start=T,
        data_end=T + timedelta(minutes=41),
        deadline_at=T + timedelta(minutes=40),
        business_deadline_at=T + timedelta(hours=6),
        live=True,
    )
    assert (axis.start, axis.end) == (T, T + timedelta(minutes=41))
    assert axis.beyond == ((T + timedelta(hours=6), "business"),)

    checks = [check(seconds, "local_backoff") for seconds in range(0, 2400, 200)]
    chart = request_chart(
        checks=checks,
        authorizations=[auth(1, 0, 40, 12)],
        created_at=T,
        deadline_at=T + timedelta(minutes=40),
        business_deadline_at=T + timedelta(hours=6),
        now=T + timedelta(minutes=41),
    )
    assert [edge.kind for edge in chart.edges] == ["business"]
    assert "business" not in {line.kind for line in chart.lines}
    assert max(m.x for m in chart.marks) > chart.left + 0.85 * chart.plot_width
    svg = str(render_svg(chart))
    assert 'class="edge-label edge-label-business"' in svg and ">business deadline Dec 01 16:00<" in svg


def test_while_watched_the_axis_reaches_the_nearest_deadline_and_a_nearby_second_one() -> None:
    # Seven minutes in: the business deadline (15 min) and the deadline (20 min) are both shown.
    axis = time_axis(
        start=T,
        data_end=T + timedelta(minutes=7),
        deadline_at=T + timedelta(minutes=20),
        business_deadline_at=T + timedelta(minutes=15),
        live=True,
    )
    assert axis.end == T + timedelta(minutes=20) and axis.beyond == ()
    # Two minutes in, a 10-minute deadline is where polling stops: on the axis.
    soon = time_axis(
        start=T,
        data_end=T + timedelta(minutes=2),
        deadline_at=T + timedelta(minutes=10),
        business_deadline_at=None,
        live=True,
    )
    assert soon.end == T + timedelta(minutes=10)
    # Two minutes in, a deadline 3 days out would squash the requests: a marker instead.
    far = time_axis(
        start=T,
        data_end=T + timedelta(minutes=2),
        deadline_at=T + timedelta(days=3),
        business_deadline_at=None,
        live=True,
    )
    assert far.end == T + timedelta(minutes=2) and far.beyond == ((T + timedelta(days=3), "deadline"),)


def test_a_finished_operation_fits_what_happened() -> None:
    # Succeeded after 3 minutes; the 40-minute deadline never came into play.
    axis = time_axis(
        start=T,
        data_end=T + timedelta(minutes=3),
        deadline_at=T + timedelta(minutes=40),
        business_deadline_at=None,
        live=False,
    )
    assert axis.end == T + timedelta(minutes=3) and axis.beyond == ((T + timedelta(minutes=40), "deadline"),)
    chart = request_chart(
        checks=[check(0, "local_backoff"), check(60, "local_backoff"), check(180, "local_backoff")],
        authorizations=[auth(1, 0, 40, 12)],
        created_at=T,
        deadline_at=T + timedelta(minutes=40),
        business_deadline_at=None,
        now=T + timedelta(hours=2),
        completed_at=T + timedelta(minutes=3),
    )
    assert "now" not in {line.kind for line in chart.lines}
    assert [edge.kind for edge in chart.edges] == ["deadline"]
    assert max(m.x for m in chart.marks) > chart.left + 0.9 * chart.plot_width


def _boxes(chart):
    """Estimated boxes (x0, x1, y) of the labels above the plot, as render_svg draws them."""
    boxes = []
    for line in chart.lines:
        width = text_width(line.label)
        x0 = line.label_x if line.anchor == "start" else line.label_x - width
        boxes.append((x0, x0 + width, line.label_y))
    for edge in chart.edges:
        width = text_width(edge.label)
        boxes.append((chart.right - width, chart.right, edge.label_y))
    return boxes


def test_crowded_labels_take_more_rows_and_never_overlap() -> None:
    # Five extensions a minute apart, the deadlines they replaced, the business deadline and now.
    authorizations = [auth(1, 0, 5, 4)] + [auth(n, 60 * n, 5 + 5 * n, 4 + 4 * n, by="user:alice") for n in range(2, 7)]
    chart = request_chart(
        checks=[check(seconds, "local_backoff") for seconds in range(0, 400, 30)],
        authorizations=authorizations,
        created_at=T,
        deadline_at=T + timedelta(minutes=35),
        business_deadline_at=T + timedelta(minutes=31),
        now=T + timedelta(minutes=12),
    )
    boxes = _boxes(chart)
    assert len(boxes) == 13 and not chart.edges
    for index, (a0, a1, ay) in enumerate(boxes):
        assert 0 <= a0 and a1 <= chart.width
        for b0, b1, by in boxes[index + 1 :]:
            assert ay != by or a1 + LABEL_GAP <= b0 or b1 + LABEL_GAP <= a0, (a0, a1, b0, b1, ay)
    # Each label sits beside its line.
    for line, (x0, x1, _) in zip(chart.lines, boxes, strict=False):
        assert x0 - 4 <= line.x <= x1 + 4
    # More than three rows of labels: the band above the plot grew, the plot kept its height.
    assert chart.top > 40 and chart.plot_height == 250 - 40 - 34
    assert max(line.label_y for line in chart.lines) < chart.top - 4


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
