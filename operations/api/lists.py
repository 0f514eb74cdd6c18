"""The open list (docs/DESIGN.md section 9), shared by the JSON API and the MCP tools.

"Open" is what an agent must still look at: operations not done, and done ones it has not
acknowledged, a human-deciding first. Pages are keyset-paginated behind opaque signed cursors.
"""

from __future__ import annotations

from operations import selectors
from operations.api import selectors as api_selectors
from operations.api.parsing import cursor_decode, cursor_encode
from operations.representation import list_object

LIMIT_DEFAULT, LIMIT_MAX = 50, 100


def open_list(*, agent_id: int, limit: int, cursor: str | None) -> dict:
    """One page of the agent's open operations, as the list object. A bad cursor is an ApiProblem."""
    after = cursor_decode(cursor, agent_id=agent_id) if cursor is not None else None
    page = api_selectors.open_page(agent_id=agent_id, limit=limit, after=after)
    next_cursor = None
    if page.next_position is not None:
        rank, created_at, operation_id = page.next_position
        next_cursor = cursor_encode(agent_id=agent_id, rank=rank, created_at=created_at, operation_id=operation_id)
    return list_object(
        operations=page.operations,
        escalations=selectors.open_escalations(operations=page.operations),
        counts=api_selectors.open_counts(agent_id=agent_id),
        limit=limit,
        next_cursor=next_cursor,
    )
