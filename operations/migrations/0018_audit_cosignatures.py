"""Witness cosignatures: append-only like the checkpoints they sign (PostgreSQL triggers)."""

import django.db.models.deletion
from django.db import migrations, models

TABLE = "operations_auditcosignature"


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in (
        f"CREATE TRIGGER {TABLE}_no_change BEFORE UPDATE OR DELETE ON {TABLE} "
        "FOR EACH ROW EXECUTE FUNCTION pollerdash_audit_append_only()",
        f"CREATE TRIGGER {TABLE}_no_truncate BEFORE TRUNCATE ON {TABLE} "
        "FOR EACH STATEMENT EXECUTE FUNCTION pollerdash_audit_append_only()",
        f"ALTER TABLE {TABLE} ENABLE ALWAYS TRIGGER {TABLE}_no_change",
        f"ALTER TABLE {TABLE} ENABLE ALWAYS TRIGGER {TABLE}_no_truncate",
    ):
        schema_editor.execute(statement, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_no_change ON {TABLE}")
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_no_truncate ON {TABLE}")


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0017_audit_tree"),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditCosignature",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("witness", models.CharField(max_length=200)),
                ("key_id", models.CharField(max_length=16)),
                ("signed_at", models.DateTimeField()),
                ("line", models.TextField()),
                (
                    "checkpoint",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="cosignatures",
                        to="operations.auditcheckpoint",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("checkpoint", "witness"), name="audit_unique_cosignature")
                ],
            },
        ),
        migrations.RunPython(forwards, backwards),
    ]
