"""Reaching on-call (docs/DESIGN.md "Reaching on-call"), one package in the human layer:

    receivers.py   the domain's events turned into rows, inside their transactions (no I/O)
    runs.py        each card's escalation policy run: started, stepped, stopped, ended
    outbox_rows.py a card's outbox rows written; the messages outside the levels (tell, a Slack reply)
    notices.py     the messages about no card (a callback that gave up, a business deadline near)
    updates.py     Slack-app posts updated in place after every act on a card
    outbox.py      due rows handed to workers, one attempt at a time; caps.py the hourly caps
    send.py        the one sending path: a row checked, built into a Message (messages.py, from
                   the facts of facts.py) and handed to its channel
    channels/      one module per channel behind one interface, registered in channels/registry.py
    slack*.py      the Slack app's clicks: what a click is, refused and replayed requests

The tables, the vocabulary and the pure rules live in the domain (operations.models.notify,
operations.notify); what is said to people, and when, is decided here. Nothing in operations imports
this package: it is driven by the domain's events (connected in escalations.apps) and by the
dispatcher's `events.dispatcher_pass` hook. The import contract "On-call in the human layer" in
pyproject.toml keeps the layers of this list.
"""
