"""Audit v2: the Merkle tree (docs/DESIGN.md section 8).

Entries are inserted pending and the integrator sets their `seq` once, so on PostgreSQL the
append-only trigger of entries now lets exactly that UPDATE through: `seq` from NULL to a value,
every other column unchanged. DELETE and TRUNCATE stay refused, and tree nodes get the same
triggers as entries and checkpoints. References from decisions and card activity now name the
entry (its pk), known in the decision's transaction, instead of its `seq`, known only later.
"""

from django.db import migrations, models

ENTRY_GUARD = """
CREATE OR REPLACE FUNCTION pollerdash_audit_entry_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.seq IS NULL AND NEW.seq IS NOT NULL
     AND NEW.id = OLD.id AND NEW.log = OLD.log AND NEW.prev_hash IS NOT DISTINCT FROM OLD.prev_hash
     AND NEW.entry_hash = OLD.entry_hash AND NEW.body = OLD.body AND NEW.at = OLD.at
     AND NEW.type = OLD.type AND NEW.operation_id = OLD.operation_id THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'pollerdash audit log is append-only: % on % refused', TG_OP, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END
$$;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    node = "operations_audittreenode"
    for statement in (
        ENTRY_GUARD,
        "DROP TRIGGER operations_auditentry_no_change ON operations_auditentry",
        "CREATE TRIGGER operations_auditentry_no_change BEFORE UPDATE OR DELETE ON operations_auditentry "
        "FOR EACH ROW EXECUTE FUNCTION pollerdash_audit_entry_guard()",
        "ALTER TABLE operations_auditentry ENABLE ALWAYS TRIGGER operations_auditentry_no_change",
        f"CREATE TRIGGER {node}_no_change BEFORE UPDATE OR DELETE ON {node} "
        "FOR EACH ROW EXECUTE FUNCTION pollerdash_audit_append_only()",
        f"CREATE TRIGGER {node}_no_truncate BEFORE TRUNCATE ON {node} "
        "FOR EACH STATEMENT EXECUTE FUNCTION pollerdash_audit_append_only()",
        f"ALTER TABLE {node} ENABLE ALWAYS TRIGGER {node}_no_change",
        f"ALTER TABLE {node} ENABLE ALWAYS TRIGGER {node}_no_truncate",
    ):
        schema_editor.execute(statement, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in (
        "DROP TRIGGER IF EXISTS operations_audittreenode_no_change ON operations_audittreenode",
        "DROP TRIGGER IF EXISTS operations_audittreenode_no_truncate ON operations_audittreenode",
        "DROP TRIGGER operations_auditentry_no_change ON operations_auditentry",
        "CREATE TRIGGER operations_auditentry_no_change BEFORE UPDATE OR DELETE ON operations_auditentry "
        "FOR EACH ROW EXECUTE FUNCTION pollerdash_audit_append_only()",
        "ALTER TABLE operations_auditentry ENABLE ALWAYS TRIGGER operations_auditentry_no_change",
        "DROP FUNCTION IF EXISTS pollerdash_audit_entry_guard()",
    ):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("operations", "0016_merge_20261201_2245")]

    operations = [
        migrations.RenameField("decision", "audit_seq", "audit_entry_id"),
        migrations.RenameField("bulkdecision", "audit_seq", "audit_entry_id"),
        migrations.RenameField("cardactivity", "audit_seq", "audit_entry_id"),
        migrations.CreateModel(
            name="AuditTree",
            fields=[
                ("log", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("size", models.BigIntegerField(default=0)),
                ("root", models.CharField(blank=True, max_length=64)),
                ("integrated_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="AuditTreeNode",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("log", models.CharField(max_length=200)),
                ("level", models.SmallIntegerField()),
                ("index", models.BigIntegerField()),
                ("hash", models.BinaryField(max_length=32)),
            ],
        ),
        migrations.AddField(
            model_name="auditcheckpoint",
            name="chain_head",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="auditcheckpoint",
            name="tree",
            field=models.BooleanField(default=False),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="prev_hash",
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="seq",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="auditentry",
            index=models.Index(
                condition=models.Q(("seq__isnull", True)), fields=["log", "id"], name="audit_pending_idx"
            ),
        ),
        migrations.AddConstraint(
            model_name="audittreenode",
            constraint=models.UniqueConstraint(fields=("log", "level", "index"), name="audit_unique_node"),
        ),
        migrations.RunPython(forwards, backwards),
    ]
