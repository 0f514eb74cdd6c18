"""Who may decide on cards, as the domain sees it (docs/DESIGN.md section 7, "Roles").

Roles are Django groups: `viewer` reads, `responder` decides; a superuser is both. The dashboard's
request checks live in escalations/roles.py; the domain needs the same answer where a card is handed
to someone by name (reassign), so the group names and the one query live here.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

VIEWER = "viewer"
RESPONDER = "responder"


def responders() -> QuerySet:
    """Active accounts that may decide: in the responder group, or superusers."""
    return (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(groups__name=RESPONDER) | Q(is_superuser=True))
        .distinct()
        .order_by("username")
    )


def is_responder(user: object) -> bool:
    """Whether this account may decide now (read from the database, not a cached request user)."""
    pk = getattr(user, "pk", None)
    return pk is not None and responders().filter(pk=pk).exists()
