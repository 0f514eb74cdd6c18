from __future__ import annotations

from django.db import models


class ExportSlot(models.Model):
    """One streaming audit export's place under a cap (escalations/export_slots.py).

    A row, not a session advisory lock, so the cap holds through PgBouncer's transaction pooling
    (a lock would stay with whichever server connection the pooler handed out). A process killed
    mid-export leaves its row: the lease, renewed while the export streams, lets it go.
    """

    # e.g. "pollerdash/audit-export/slot/0" or "pollerdash/audit-export/user/7/0"
    key = models.CharField(max_length=120, primary_key=True)
    # host/pid/thread/nonce of the export that holds it: only that export renews or frees it.
    holder = models.CharField(max_length=200)
    lease_until = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.key} held by {self.holder} until {self.lease_until:%Y-%m-%d %H:%M:%S}"
