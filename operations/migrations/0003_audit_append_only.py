"""Refuse UPDATE, DELETE and TRUNCATE on the audit tables (PostgreSQL).

The triggers are ENABLE ALWAYS, so `session_replication_role = replica` cannot skip them. A table
owner or superuser can still drop them: that is why the chain is hashed and checkpoints are signed.
"""

from django.db import migrations

TABLES = ("operations_auditentry", "operations_auditcheckpoint")

FUNCTION = """
CREATE OR REPLACE FUNCTION pollerdash_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'pollerdash audit log is append-only: % on % refused', TG_OP, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END
$$;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    statements = [FUNCTION]
    for table in TABLES:
        statements += [
            f"CREATE TRIGGER {table}_no_change BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION pollerdash_audit_append_only()",
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION pollerdash_audit_append_only()",
            f"ALTER TABLE {table} ENABLE ALWAYS TRIGGER {table}_no_change",
            f"ALTER TABLE {table} ENABLE ALWAYS TRIGGER {table}_no_truncate",
        ]
    for statement in statements:
        schema_editor.execute(statement, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_change ON {table}")
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS pollerdash_audit_append_only()")


class Migration(migrations.Migration):
    dependencies = [("operations", "0002_heartbeat_callback_endpoint")]

    operations = [migrations.RunPython(forwards, backwards)]
