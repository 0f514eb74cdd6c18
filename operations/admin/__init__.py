"""Django admin for the operations app.

Profiles are edited here through the same validation as `loadprofiles`. Everything that is a
record of what happened (operations, status checks, authorizations, the audit chain, callbacks)
is view-only: changes to those go through the services, which bump sequences and append to the
audit chain, never through a form. Secrets (token hashes, webhook secrets) are never shown.

django-q2's own models (schedules, tasks, the queue) are view-only too: a schedule's `func` is any
importable callable run on a worker, so a writable Schedule form is code execution on the hosts
that hold the credentials. pollerdash writes the schedules it needs itself (task_registry.py).

The root URLconf imports this package (admin.autodiscover: pollerdash/apps.py), not every process's
start-up; importing the modules registers their admins:
`configuration` (what an operator edits: profiles, escalation policies, account pauses), `records`
(what happened, view-only), `queue` (django-q2's models, view-only), all on `base.ViewOnlyAdmin`.
"""

from __future__ import annotations

from operations.admin import configuration, queue, records

__all__ = ["configuration", "queue", "records"]
