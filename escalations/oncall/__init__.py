"""Reaching on-call (docs/DESIGN.md "Reaching on-call"): each card's escalation policy run, the
notification outbox the dispatcher hands to workers, and the channels (email, Slack, PagerDuty).

The tables and the pure rules live in the domain (operations.models.notify, operations.notify);
what is said to people, and when, is decided here. Nothing in operations imports this package: it
is driven by the domain's card events (connected in escalations.apps) and by the dispatcher's
`events.dispatcher_pass` hook.
"""
