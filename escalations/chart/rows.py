"""What the chart reads of the database rows it is given (plain protocols, so the chart stays pure)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class CheckRow(Protocol):
    """What the chart reads of a status check (a StatusCheck row)."""

    @property
    def sent_at(self) -> datetime: ...
    @property
    def http_status(self) -> int | None: ...
    @property
    def transport_error(self) -> str: ...
    @property
    def provider_state(self) -> str | None: ...
    @property
    def delay_source(self) -> str | None: ...
    @property
    def next_poll_at(self) -> datetime | None: ...


class GrantRow(Protocol):
    """What the chart reads of an authorization (an Authorization row)."""

    @property
    def number(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def granted_at(self) -> datetime: ...
    @property
    def deadline_at(self) -> datetime: ...
    @property
    def max_status_requests(self) -> int: ...
