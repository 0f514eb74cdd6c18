"""The archive ledger is the owner's and append-only; a prune needs the log's own record (PostgreSQL).

Until now the application role could INSERT an AuditArchive row for entries never archived, and
`pollerdash_audit_prune` - which believed any row - then removed them when the owner next ran
`manage.py archive` (issue 24). Now:

- `operations_auditarchive` refuses UPDATE, DELETE and TRUNCATE for everyone (triggers ENABLE
  ALWAYS, like the entries), and an INSERT unless the current user owns the table (or is a
  superuser, who could drop the triggers anyway) and the row continues the ledger: it starts
  right after the last archived entry and ends no earlier than it starts. The README's grants
  (INSERT on every table) do not matter: a trigger decides, whatever the privileges.
- `pollerdash_audit_prune(log, upto, after)` deletes a range only where every archive covering it
  is recorded in the log itself: an integrated `audit.archived` entry after the range with exactly
  the row's range, name, digest, size and root, at or below the largest tree checkpoint's size.
  SQL cannot check an Ed25519 signature, so "signed" here is the checkpoint rows' word; the
  archiver (operations/audit/archive.py) checks the signature, the entry's inclusion proof and the
  stored archive itself before it calls the function, which only its owner may call.
- a partial index finds the `audit.archived` entries without reading the log.
"""

from django.db import migrations, models

GUARD = """
CREATE FUNCTION pollerdash_audit_archive_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  owner name;
  previous bigint;
BEGIN
  SELECT pg_get_userbyid(c.relowner) INTO owner FROM pg_class c WHERE c.oid = TG_RELID;
  IF current_user <> owner AND NOT coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) THEN
    RAISE EXCEPTION 'pollerdash audit archive ledger: only the owner (%) records archives, not %', owner, current_user
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  -- Two archivers at once: the second waits here and then sees the first's row.
  PERFORM pg_advisory_xact_lock(hashtext('pollerdash/archive-ledger/' || NEW.log));
  SELECT max(last_seq) INTO previous FROM operations_auditarchive WHERE log = NEW.log;
  IF NEW.first_seq <> coalesce(previous, 0) + 1 OR NEW.last_seq < NEW.first_seq THEN
    RAISE EXCEPTION 'pollerdash audit archive ledger: entries %-% do not continue the archives of % (which end at %)',
      NEW.first_seq, NEW.last_seq, NEW.log, coalesce(previous, 0)
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END
$$;
"""

# The `data` of an entry's canonical JSON bytes; NULL for bytes that are not JSON (anyone who may
# append entries can append junk typed `audit.archived`: it must not make the prune fail).
ARCHIVED_DATA = """
CREATE FUNCTION pollerdash_audit_entry_data(p_body bytea) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  RETURN convert_from(p_body, 'UTF8')::jsonb -> 'data';
EXCEPTION WHEN others THEN
  RETURN NULL;
END
$$;
"""

PRUNE = """
CREATE OR REPLACE FUNCTION pollerdash_audit_prune(p_log text, p_upto bigint, p_after bigint DEFAULT 0) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
  signed bigint;
  covered bigint := p_after;
  a record;
  removed bigint;
BEGIN
  SELECT max(size) INTO signed FROM operations_auditcheckpoint WHERE log = p_log AND tree;
  FOR a IN SELECT first_seq, last_seq, name, sha256, size_bytes, root FROM operations_auditarchive
            WHERE log = p_log AND last_seq > p_after ORDER BY first_seq LOOP
    EXIT WHEN covered >= p_upto OR a.first_seq > covered + 1;
    IF NOT EXISTS (
      SELECT 1 FROM operations_auditentry e
       WHERE e.log = p_log AND e.type = 'audit.archived' AND e.seq IS NOT NULL
         AND e.seq > a.last_seq AND e.seq <= signed
         AND pollerdash_audit_entry_data(e.body) = jsonb_build_object(
               'first_seq', a.first_seq, 'last_seq', a.last_seq, 'name', a.name,
               'sha256', a.sha256, 'bytes', a.size_bytes, 'root', a.root)
    ) THEN
      RAISE EXCEPTION 'pollerdash audit: the archive of entries %-% of % (%) has no integrated, signed audit.archived entry',
        a.first_seq, a.last_seq, p_log, a.name
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    covered := a.last_seq;
  END LOOP;
  IF covered < p_upto THEN
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

# Migration 0021's function, for going back.
PRUNE_0021 = """
CREATE OR REPLACE FUNCTION pollerdash_audit_prune(p_log text, p_upto bigint, p_after bigint DEFAULT 0) RETURNS bigint
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

TABLE = "operations_auditarchive"


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in (
        GUARD,
        ARCHIVED_DATA,
        PRUNE,
        "REVOKE ALL ON FUNCTION pollerdash_audit_prune(text, bigint, bigint) FROM PUBLIC",
        f"CREATE TRIGGER {TABLE}_owner_only BEFORE INSERT ON {TABLE} "
        "FOR EACH ROW EXECUTE FUNCTION pollerdash_audit_archive_guard()",
        f"CREATE TRIGGER {TABLE}_no_change BEFORE UPDATE OR DELETE ON {TABLE} "
        "FOR EACH ROW EXECUTE FUNCTION pollerdash_audit_append_only()",
        f"CREATE TRIGGER {TABLE}_no_truncate BEFORE TRUNCATE ON {TABLE} "
        "FOR EACH STATEMENT EXECUTE FUNCTION pollerdash_audit_append_only()",
        f"ALTER TABLE {TABLE} ENABLE ALWAYS TRIGGER {TABLE}_owner_only",
        f"ALTER TABLE {TABLE} ENABLE ALWAYS TRIGGER {TABLE}_no_change",
        f"ALTER TABLE {TABLE} ENABLE ALWAYS TRIGGER {TABLE}_no_truncate",
    ):
        schema_editor.execute(statement, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in (
        f"DROP TRIGGER IF EXISTS {TABLE}_owner_only ON {TABLE}",
        f"DROP TRIGGER IF EXISTS {TABLE}_no_change ON {TABLE}",
        f"DROP TRIGGER IF EXISTS {TABLE}_no_truncate ON {TABLE}",
        PRUNE_0021,
        "REVOKE ALL ON FUNCTION pollerdash_audit_prune(text, bigint, bigint) FROM PUBLIC",
        "DROP FUNCTION IF EXISTS pollerdash_audit_entry_data(bytea)",
        "DROP FUNCTION IF EXISTS pollerdash_audit_archive_guard()",
    ):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0025_profile_backoff_multiplier_range"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="auditentry",
            index=models.Index(
                condition=models.Q(("type", "audit.archived")), fields=["log", "seq"], name="audit_archived_idx"
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
