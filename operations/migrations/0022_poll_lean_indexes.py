"""Fewer index writes per poll (docs/DESIGN.md section 4, "What a poll writes").

A poll updates its operation row three times (the dispatcher's claim, the charge, the outcome)
and inserts one status check. An update that changes no indexed column can be HOT (no index
entry written) only if the new row version fits on the same page: the operations table keeps 30 %
of each page free for that, so the claim and the charge are HOT; the outcome moves next_poll_at
(operation_due_idx) and still writes every index. The two foreign-key indexes dropped here were
covered by a composite index starting with the same column.

The fillfactor applies to pages written from now on; `VACUUM FULL operations_operation` applies
it to an existing table's rows (it locks the table while it rewrites it).
"""

import django.db.models.deletion
from django.db import migrations, models

FILLFACTOR = 70


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE operations_operation SET (fillfactor = {FILLFACTOR})")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE operations_operation RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0021_audit_prune_range"),
    ]

    operations = [
        migrations.AlterField(
            model_name="operation",
            name="agent",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="operations",
                to="operations.agent",
            ),
        ),
        migrations.AlterField(
            model_name="statuscheck",
            name="operation",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="checks",
                to="operations.operation",
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
