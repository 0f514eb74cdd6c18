"""Retention: archived ranges, and the one guarded way to delete audit entries (PostgreSQL).

`pollerdash_audit_prune(log, upto)` deletes the entries of `log` up to seq `upto`, and only if an
AuditArchive row already covers them. It is SECURITY DEFINER and EXECUTE is revoked from PUBLIC:
only its owner (the role that ran this migration, which owns the tables) may call it, and the
application role must be another role (the system panel checks it). The entries' trigger lets a
DELETE through only inside that function: when the session setting `pollerdash.audit_prune`
names the log *and* the current user is the function's owner - which, for the application role,
is true only while the function runs. Every other DELETE, UPDATE and TRUNCATE stays refused.
"""

from django.db import migrations, models

PRUNE = """
CREATE OR REPLACE FUNCTION pollerdash_audit_prune(p_log text, p_upto bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
  archived bigint;
  removed bigint;
BEGIN
  SELECT max(last_seq) INTO archived FROM operations_auditarchive WHERE log = p_log;
  IF archived IS NULL OR p_upto > archived THEN
    RAISE EXCEPTION 'pollerdash audit: entries up to % of % are not archived', p_upto, p_log
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  PERFORM set_config('pollerdash.audit_prune', p_log, true);
  DELETE FROM operations_auditentry WHERE log = p_log AND seq IS NOT NULL AND seq <= p_upto;
  GET DIAGNOSTICS removed = ROW_COUNT;
  PERFORM set_config('pollerdash.audit_prune', '', true);
  RETURN removed;
END
$$;
"""

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
  IF TG_OP = 'DELETE' AND OLD.seq IS NOT NULL
     AND current_setting('pollerdash.audit_prune', true) = OLD.log
     AND current_user = (SELECT pg_get_userbyid(p.proowner) FROM pg_proc p
                         WHERE p.proname = 'pollerdash_audit_prune' LIMIT 1) THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'pollerdash audit log is append-only: % on % refused', TG_OP, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END
$$;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in (
        PRUNE,
        "REVOKE ALL ON FUNCTION pollerdash_audit_prune(text, bigint) FROM PUBLIC",
        ENTRY_GUARD,
    ):
        schema_editor.execute(statement, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("DROP FUNCTION IF EXISTS pollerdash_audit_prune(text, bigint)")


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0018_audit_cosignatures"),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditArchive",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("log", models.CharField(max_length=200)),
                ("first_seq", models.BigIntegerField()),
                ("last_seq", models.BigIntegerField()),
                ("name", models.CharField(max_length=500)),
                ("sha256", models.CharField(max_length=64)),
                ("size_bytes", models.BigIntegerField()),
                ("root", models.CharField(max_length=64)),
                ("archived_at", models.DateTimeField()),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("log", "last_seq"), name="audit_unique_archive")],
            },
        ),
        migrations.AlterModelOptions(
            name='auditentry',
            options={'ordering': ['id']},
        ),
        migrations.RunPython(forwards, backwards),
    ]
