"""The audit log's database functions resolve no name through the caller's search path (PostgreSQL).

Until now every pollerdash function and trigger named tables, catalogs and functions bare, so they
were looked up through the search path of whoever set them off - and the temporary schema comes
first for tables, and schema public (where PostgreSQL <= 14 lets every role create) is searched
for functions. The application role could plant names there:

- a temporary function `pollerdash_audit_prune()` made the entries' guard (0019), which found the
  prune's owner by name with LIMIT 1, name the application role, so its own DELETE went through;
- a temporary table `pg_roles` saying it is a superuser opened the archive ledger's guard (0026);
- a `public.jsonb_build_object` with exact argument types would have run as the owner inside the
  owner's SECURITY DEFINER prune.

Now every function is `SET search_path = pg_catalog, pg_temp` (the temporary schema explicitly
last, so it can shadow nothing), names every table and function with its schema - the tables' schema
is the one this migration runs in, as Django's tables are - and decides who may act by the OID of the
table the trigger fires on (`TG_RELID`: the table's owner, the role the prune runs as), never by a
name looked up. Operators and type names resolve through that fixed path, i.e. in pg_catalog only.
The functions keep their names, signatures, privileges (EXECUTE on the prune is still revoked from
PUBLIC) and behaviour; the system panel checks the fixed path (operations/audit/health.py).
"""

import importlib

from django.db import migrations

SEARCH_PATH = "SET search_path = pg_catalog, pg_temp"

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION {schema}.pollerdash_audit_append_only() RETURNS trigger
LANGUAGE plpgsql {search_path} AS $pollerdash$
BEGIN
  RAISE EXCEPTION 'pollerdash audit log is append-only: % on % refused', TG_OP, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END
$pollerdash$;
"""

# A DELETE goes through only while `pollerdash.audit_prune` names the log and the current user owns
# the table the trigger fires on - the role the prune (SECURITY DEFINER, the owner's) runs as; the
# application role must not own the tables (the system panel checks it).
ENTRY_GUARD = """
CREATE OR REPLACE FUNCTION {schema}.pollerdash_audit_entry_guard() RETURNS trigger
LANGUAGE plpgsql {search_path} AS $pollerdash$
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.seq IS NULL AND NEW.seq IS NOT NULL
     AND NEW.id = OLD.id AND NEW.log = OLD.log AND NEW.prev_hash IS NOT DISTINCT FROM OLD.prev_hash
     AND NEW.entry_hash = OLD.entry_hash AND NEW.body = OLD.body AND NEW.at = OLD.at
     AND NEW.type = OLD.type AND NEW.operation_id = OLD.operation_id THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'DELETE' AND OLD.seq IS NOT NULL
     AND pg_catalog.current_setting('pollerdash.audit_prune', true) = OLD.log
     AND current_user = (SELECT pg_catalog.pg_get_userbyid(c.relowner) FROM pg_catalog.pg_class c
                          WHERE c.oid = TG_RELID) THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'pollerdash audit log is append-only: % on % refused', TG_OP, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END
$pollerdash$;
"""

ARCHIVE_GUARD = """
CREATE OR REPLACE FUNCTION {schema}.pollerdash_audit_archive_guard() RETURNS trigger
LANGUAGE plpgsql {search_path} AS $pollerdash$
DECLARE
  owner name;
  previous bigint;
BEGIN
  SELECT pg_catalog.pg_get_userbyid(c.relowner) INTO owner FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID;
  IF current_user <> owner AND NOT coalesce(
       (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), false) THEN
    RAISE EXCEPTION 'pollerdash audit archive ledger: only the owner (%) records archives, not %', owner, current_user
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  -- Two archivers at once: the second waits here and then sees the first's row.
  PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pollerdash/archive-ledger/' || NEW.log));
  SELECT pg_catalog.max(a.last_seq) INTO previous FROM {schema}.operations_auditarchive a WHERE a.log = NEW.log;
  IF NEW.first_seq <> coalesce(previous, 0) + 1 OR NEW.last_seq < NEW.first_seq THEN
    RAISE EXCEPTION 'pollerdash audit archive ledger: entries %-% do not continue the archives of % (which end at %)',
      NEW.first_seq, NEW.last_seq, NEW.log, coalesce(previous, 0)
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END
$pollerdash$;
"""

ENTRY_DATA = """
CREATE OR REPLACE FUNCTION {schema}.pollerdash_audit_entry_data(p_body bytea) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE {search_path} AS $pollerdash$
BEGIN
  RETURN pg_catalog.convert_from(p_body, 'UTF8')::jsonb -> 'data';
EXCEPTION WHEN others THEN
  RETURN NULL;
END
$pollerdash$;
"""

PRUNE = """
CREATE OR REPLACE FUNCTION {schema}.pollerdash_audit_prune(p_log text, p_upto bigint, p_after bigint DEFAULT 0)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER {search_path} AS $pollerdash$
DECLARE
  signed bigint;
  covered bigint := p_after;
  a record;
  removed bigint;
BEGIN
  SELECT pg_catalog.max(k.size) INTO signed FROM {schema}.operations_auditcheckpoint k WHERE k.log = p_log AND k.tree;
  FOR a IN SELECT r.first_seq, r.last_seq, r.name, r.sha256, r.size_bytes, r.root
             FROM {schema}.operations_auditarchive r
            WHERE r.log = p_log AND r.last_seq > p_after ORDER BY r.first_seq LOOP
    EXIT WHEN covered >= p_upto OR a.first_seq > covered + 1;
    IF NOT EXISTS (
      SELECT 1 FROM {schema}.operations_auditentry e
       WHERE e.log = p_log AND e.type = 'audit.archived' AND e.seq IS NOT NULL
         AND e.seq > a.last_seq AND e.seq <= signed
         AND {schema}.pollerdash_audit_entry_data(e.body) = pg_catalog.jsonb_build_object(
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
  PERFORM pg_catalog.set_config('pollerdash.audit_prune', p_log, true);
  DELETE FROM {schema}.operations_auditentry e
   WHERE e.log = p_log AND e.seq IS NOT NULL AND e.seq > p_after AND e.seq <= p_upto;
  GET DIAGNOSTICS removed = ROW_COUNT;
  PERFORM pg_catalog.set_config('pollerdash.audit_prune', '', true);
  RETURN removed;
END
$pollerdash$;
"""

FUNCTIONS = (APPEND_ONLY, ENTRY_GUARD, ARCHIVE_GUARD, ENTRY_DATA, PRUNE)


def _schema(schema_editor) -> str:  # noqa: ANN001
    """The schema Django created the tables in (the migrating connection's current schema), quoted."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT pg_catalog.quote_ident(pg_catalog.current_schema())")
        return cursor.fetchone()[0]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema = _schema(schema_editor)
    for function in FUNCTIONS:
        schema_editor.execute(function.format(schema=schema, search_path=SEARCH_PATH), params=None)
    # CREATE OR REPLACE keeps the privileges; said again so the migration alone states them.
    schema_editor.execute(f"REVOKE ALL ON FUNCTION {schema}.pollerdash_audit_prune(text, bigint, bigint) FROM PUBLIC")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return

    def earlier(migration: str, name: str) -> str:
        text = getattr(importlib.import_module(f"operations.migrations.{migration}"), name)
        return text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)

    for statement in (
        earlier("0003_audit_append_only", "FUNCTION"),
        earlier("0019_audit_archive", "ENTRY_GUARD"),
        earlier("0026_audit_archive_ledger", "GUARD"),
        earlier("0026_audit_archive_ledger", "ARCHIVED_DATA"),
        earlier("0026_audit_archive_ledger", "PRUNE"),
    ):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0035_oncall_one_vocabulary"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
