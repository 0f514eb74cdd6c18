"""`manage.py audit_integrate`: give pending audit entries their seq and add them to the tree.

Every dispatcher pass integrates already; this command is for a deployment without a dispatcher
running, for catching up after an outage, and for operators. Safe beside other integrators on any
host (operations.audit.integrate). Prints how many entries it integrated and what is pending.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError
from django.utils import timezone

from operations.audit import integrate


class Command(BaseCommand):
    help = "Integrate pending audit entries into the Merkle tree (what every dispatcher pass does)."

    def handle(self, *args: object, **options: object) -> None:
        try:
            done = integrate.integrate_all()
            lag = integrate.lag()
        except integrate.IntegrationError as exc:
            raise CommandError(str(exc)) from None
        except DatabaseError as exc:
            raise CommandError(f"database error: {exc}") from None
        self.stdout.write(f"integrated {done}; pending {lag.pending} (oldest {lag.seconds(timezone.now()):.1f} s)")
