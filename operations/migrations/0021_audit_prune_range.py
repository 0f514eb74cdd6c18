"""Retention prunes in bounded chunks: `pollerdash_audit_prune(log, upto, after)` (PostgreSQL).

The archiver removes an archived range in many short transactions (operations/audit/archive.py
`prune_archived`) rather than one statement over a million rows. Each chunk names its lower bound,
so its DELETE reads only its own index range instead of walking the dead index entries the chunks
before it left (until vacuum). The guard is unchanged: the range must lie within what an
AuditArchive row covers, EXECUTE is revoked from PUBLIC, and the entries' trigger lets a DELETE
through only inside this function (migration 0019). `after` defaults to 0, so the two-argument
call of 0019 still means "everything up to `upto`".
"""

from django.db import migrations

PRUNE = """
CREATE FUNCTION pollerdash_audit_prune(p_log text, p_upto bigint, p_after bigint DEFAULT 0) RETURNS bigint
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
  DELETE FROM operations_auditentry
   WHERE log = p_log AND seq IS NOT NULL AND seq > p_after AND seq <= p_upto;
  GET DIAGNOSTICS removed = ROW_COUNT;
  PERFORM set_config('pollerdash.audit_prune', '', true);
  RETURN removed;
END
$$;
"""

PRUNE_0019 = """
CREATE FUNCTION pollerdash_audit_prune(p_log text, p_upto bigint) RETURNS bigint
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


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    # One function of that name: the trigger finds its owner by name (migration 0019).
    for statement in (
        "DROP FUNCTION IF EXISTS pollerdash_audit_prune(text, bigint)",
        PRUNE,
        "REVOKE ALL ON FUNCTION pollerdash_audit_prune(text, bigint, bigint) FROM PUBLIC",
    ):
        schema_editor.execute(statement, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in (
        "DROP FUNCTION IF EXISTS pollerdash_audit_prune(text, bigint, bigint)",
        PRUNE_0019,
        "REVOKE ALL ON FUNCTION pollerdash_audit_prune(text, bigint) FROM PUBLIC",
    ):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0020_profile_backoff_multiplier"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
    ]
