"""What the domain announces to the layers above it, without importing them.

The lifecycle sends these inside the transaction that made the change; a receiver (the dashboard's
notifications, connected in `escalations.apps`) may enqueue django-q2 tasks there, which commit with the
change through the ORM broker or not at all. A receiver must not do I/O of its own: it runs under
the transaction's row locks.
"""

from __future__ import annotations

from django.dispatch import Signal

# A decision card opened: kwargs `escalation` (with its operation loaded).
card_opened = Signal()
# A responder acknowledged a card ("I'm on it"): kwargs `escalation`, `user`, and `previous` (the
# user who held the card before and was taken over from, or None).
card_acknowledged = Signal()
# The acknowledgement was withdrawn: kwargs `escalation`, `user`.
card_unacknowledged = Signal()
# A responder snoozed a card's reminders: kwargs `escalation`, `user`, `until` (aware datetime).
card_snoozed = Signal()
# A card was handed to a named responder: kwargs `escalation`, `by` (user), `to` (user).
card_reassigned = Signal()
# A card stopped needing anyone (decided, or superseded when the operation ended another way):
# kwargs `escalation`, `how` ("decided" | "superseded").
card_closed = Signal()
# An acceptance waits for a second, different responder: kwargs `escalation`, `first` (the Decision).
card_awaiting_second = Signal()
# An operation's business deadline is near (its profile's business_deadline_warning_s) while its job
# is still running: kwargs `operation` (with its provider loaded). Sent once per operation.
business_deadline_near = Signal()
# A completion callback could not be delivered and gave up: kwargs `delivery`, `reason`.
callback_undeliverable = Signal()
# Sent by every pass of `dispatch_polls`, outside any transaction, after the domain's own steps: a
# layer above does its own due work here (the human layer steps escalation policies and hands due
# notifications to workers), each item in a short transaction of its own, no I/O. kwargs `now`, `limit`;
# a receiver returns how many items it handled, and returning `limit` or more says more are waiting
# (the dispatcher then goes round again at once).
dispatcher_pass = Signal()
