"""The one owner of an operation's lifecycle.

Only the functions of this package change an operation's status, bounds (deadline, request and
transport budgets), claim (lease, fence), sequence, and its cards (escalations, decisions,
authorizations). Every other module calls them; `tests/test_architecture.py` fails when code
outside this package writes those fields. Each public function is keyword-only (the same test
holds it), runs inside the caller's transaction or opens its own, and appends its audit entry last
in that transaction.

- `transitions`: each change of status or claim defined once (charge, release, defer, resume,
  escalate, finish, an agent's cancel, a late answer: what it sets and increments, from which
  statuses, under which fence) and the table of allowed status changes; every module below writes
  the status and the claim through it, and only it (the same test);
- `registration`: a validated registration becomes an operation and its first Authorization;
- `claims`: the dispatcher's claims, expired leases, releases, the charge before a request, deferrals;
- `polls`: a poll's outcome (fenced), a late answer after a terminal status, account pauses;
  `poll_groups`: a group's outcomes written together;
- `cards`: opening, superseding and closing decision cards, escalating without a request;
- `humans`: what responders do on a card (closes, acceptances, refusals, inspections); `grants`:
  the decisions that let polling continue (grants, keep waiting); `cancels`: the provider cancel;
- `ownership`: who holds a card (acknowledge, unacknowledge, reassign, snooze) and `notes`: its
  notes and a channel's notices — acts that decide nothing (also importable from `humans`);
- `business`: the business deadline's early warning, recorded once per operation;
- `bulk`: the record of a bulk decision over a group's cards (each member is decided through `humans`);
- `agents`: what agents do (acknowledge, cancel the watch) and what follows (the cancel forward,
  callback warnings).

Lock order, everywhere: provider account rows (sorted by name), then operation rows, then the
escalation row. The audit entry, last in each transaction, is a plain insert that takes no lock
(`operations.audit.entries.append`).
"""
