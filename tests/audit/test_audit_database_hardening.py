"""The audit log's database functions cannot be steered by names the application role plants
(PostgreSQL): a temporary function or table that shadows a catalog or a pollerdash name, or a
function planted in schema public where the role may create there (PostgreSQL <= 14's default).

Every attack runs as the application role of docs/deployment.md (`app_role`: exactly its grants),
first with PostgreSQL's defaults - PUBLIC may create temporary objects - because the functions must
hold whatever the grants; then the documented revokes, which the system panel checks, take the
temporary schema away altogether. One attack also runs over its own connection as a LOGIN role,
as an attacker holding the application's credentials would.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.core.files.storage import FileSystemStorage
from django.db import connection

from operations.audit import archive, checkpoints, database, health, integrate
from operations.models import AuditArchive, AuditEntry
from tests.audit.conftest import DEPLOYMENT_GRANTS, DEPLOYMENT_REVOKES, AppRole
from tests.audit.helpers import append_entries
from tests.support import T0

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

LOG = "pollerdash/audit"
DEPLOYMENT_DOC = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"
FORGED_ROW = (
    "INSERT INTO operations_auditarchive(log, first_seq, last_seq, name, sha256, size_bytes, root, archived_at) "
    "VALUES ('pollerdash/audit', 1, 10, 'nothing.jsonl', repeat('0', 64), 0, repeat('0', 64), now())"
)
DELETE_1_TO_10 = "DELETE FROM operations_auditentry WHERE log = 'pollerdash/audit' AND seq BETWEEN 1 AND 10"
PRUNE_SETTING = "SELECT set_config('pollerdash.audit_prune', 'pollerdash/audit', true)"


def stored_seqs() -> list[int]:
    return list(AuditEntry.objects.exclude(seq=None).order_by("seq").values_list("seq", flat=True))


# --- F1: the entries' guard, which lets a DELETE through only inside the owner's prune --------------------


def test_a_temporary_function_named_like_the_prune_does_not_let_the_application_role_delete(
    sample_export, app_role: AppRole
):
    # The review's repro, word for word: the guard looked the prune's owner up by name, LIMIT 1,
    # and found the application role's own temporary function first.
    refusal = app_role.script(
        "CREATE FUNCTION pg_temp.pollerdash_audit_prune() RETURNS bigint LANGUAGE sql AS 'select 0::bigint'",
        PRUNE_SETTING,
        DELETE_1_TO_10,
    )
    assert "append-only" in refusal, refusal
    # The same with the real function's signature, and with a temporary pg_proc naming the role.
    refusal = app_role.script(
        "CREATE FUNCTION pg_temp.pollerdash_audit_prune(text, bigint, bigint) RETURNS bigint "
        "LANGUAGE sql AS 'select 0::bigint'",
        PRUNE_SETTING,
        DELETE_1_TO_10,
    )
    assert "append-only" in refusal, refusal
    refusal = app_role.script(
        "CREATE TEMP TABLE pg_proc(proname name, proowner oid)",
        "INSERT INTO pg_proc VALUES ('pollerdash_audit_prune', current_user::regrole::oid)",
        PRUNE_SETTING,
        DELETE_1_TO_10,
    )
    assert "append-only" in refusal, refusal
    assert stored_seqs() == list(range(1, 12))


# --- F2: the archive ledger's guard, which lets only the owner (or a superuser) add a row -----------------


def test_a_temporary_pg_roles_or_pg_class_does_not_open_the_archive_ledger_to_the_application_role(
    sample_export, app_role: AppRole
):
    refusal = app_role.script(
        "CREATE TEMP TABLE pg_roles(rolname name, rolsuper bool)",
        "INSERT INTO pg_roles VALUES (current_user, true)",
        FORGED_ROW,
    )
    assert "only the owner" in refusal, refusal
    refusal = app_role.script(
        "CREATE TEMP TABLE pg_class(oid oid, relowner oid)",
        "INSERT INTO pg_class VALUES ('operations_auditarchive'::regclass, current_user::regrole::oid)",
        FORGED_ROW,
    )
    assert "only the owner" in refusal, refusal
    assert not AuditArchive.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_reviewers_attack_over_a_login_role_of_its_own_removes_nothing(settings):
    # The attack script (forge_ledger.py) as the review ran it: its own connection, logged in as the
    # application role, with PUBLIC's default right to create temporary objects.
    settings.AUDIT_LOG_NAME = LOG
    append_entries(11)
    integrate.integrate_all()
    with login_role() as attacker, attacker.cursor() as cursor:
        cursor.execute("SELECT current_user, rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user")
        assert cursor.fetchone()[1] is False
        cursor.execute("CREATE TEMP TABLE pg_roles(rolname name, rolsuper bool)")
        cursor.execute("INSERT INTO pg_roles VALUES (current_user, true)")
        attacker.commit()
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="only the owner"):
            cursor.execute(FORGED_ROW)
        attacker.rollback()
        cursor.execute(
            "CREATE FUNCTION pg_temp.pollerdash_audit_prune() RETURNS bigint LANGUAGE sql AS 'select 0::bigint'"
        )
        cursor.execute(PRUNE_SETTING)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            cursor.execute(DELETE_1_TO_10)
        attacker.rollback()
    assert stored_seqs() == list(range(1, 12)) and not AuditArchive.objects.exists()


# --- F3: the owner's prune (SECURITY DEFINER) runs nothing the application role planted ------------------


def test_a_function_planted_in_schema_public_never_runs_inside_the_owners_prune(sample_export, tmp_path):
    # PostgreSQL <= 14 lets every role create in schema public: the application role plants a
    # jsonb_build_object whose exact argument types beat pg_catalog's VARIADIC "any" one. (Created
    # here by the test's superuser; what the role could do there.)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE public.planted_ran (who name)")
        cursor.execute(
            "CREATE FUNCTION public.jsonb_build_object(text, bigint, text, bigint, text, varchar, text, varchar, "
            "text, bigint, text, varchar) RETURNS jsonb LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO public.planted_ran VALUES (current_user); RAISE NOTICE 'planted function ran'; "
            "RETURN pg_catalog.jsonb_build_object($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12); END $$"
        )
        # And one the entry data function would meet: convert_from with the literal's type.
        cursor.execute(
            "CREATE FUNCTION public.convert_from(bytea, text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO public.planted_ran VALUES (current_user); "
            "RETURN pg_catalog.convert_from($1, $2::name); END $$"
        )
        # And an overload the owner's own call would pick if it passed plain integers.
        cursor.execute(
            "CREATE FUNCTION public.pollerdash_audit_prune(text, integer, integer) RETURNS bigint LANGUAGE plpgsql "
            "AS $$ BEGIN INSERT INTO public.planted_ran VALUES (current_user); RETURN 0; END $$"
        )
    archive.archive_before(before=T0 + timedelta(minutes=1), storage=FileSystemStorage(location=tmp_path))
    checkpoints.sign_checkpoint()  # the audit.archived entry, signed
    assert database.prune(log=LOG, after=0, upto=4) == 4  # the owner's prune still works...
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM public.planted_ran")
        assert cursor.fetchone()[0] == 0  # ...and ran nothing planted


# --- every function, and the system panel ------------------------------------------------------------------


def pollerdash_functions() -> dict[str, tuple[bool, list[str] | None]]:
    """Every function pollerdash's migrations define and every function a trigger on its tables
    calls: signature -> (SECURITY DEFINER, proconfig)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.oid::regprocedure::text, p.prosecdef, p.proconfig FROM pg_catalog.pg_proc p "
            "WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'pollerdash%' "
            "UNION SELECT t.tgfoid::regprocedure::text, p.prosecdef, p.proconfig FROM pg_catalog.pg_trigger t "
            "JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid WHERE NOT t.tgisinternal"
        )
        return {name: (definer, config) for name, definer, config in cursor.fetchall()}


def test_every_pollerdash_function_runs_with_a_fixed_search_path_and_only_the_prune_as_its_owner():
    functions = pollerdash_functions()
    assert set(functions) == {
        "pollerdash_audit_append_only()",
        "pollerdash_audit_entry_guard()",
        "pollerdash_audit_archive_guard()",
        "pollerdash_audit_entry_data(bytea)",
        "pollerdash_audit_prune(text,bigint,bigint)",
    }
    for name, (definer, config) in functions.items():
        assert config == ["search_path=pg_catalog, pg_temp"], name
        assert definer == (name == "pollerdash_audit_prune(text,bigint,bigint)"), name
    assert set(health.PINNED_FUNCTIONS) == set(functions)


# SQL words written like a call, which are not functions to qualify.
NOT_FUNCTIONS = {"coalesce", "exists", "in", "any"}


def test_the_function_bodies_name_every_table_and_function_with_its_schema():
    # Belt and braces beside the fixed search_path: a body that names a table or a function bare
    # would resolve it through the path again if a function ever lost its setting.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.proname, p.prosrc FROM pg_catalog.pg_proc p "
            "WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'pollerdash%'"
        )
        bodies = dict(cursor.fetchall())
    assert len(bodies) == 5
    for name, source in bodies.items():
        code = re.sub(r"'(?:[^']|'')*'", "''", source)  # messages and settings are not names
        for table in re.findall(r"\b(?:FROM|JOIN|UPDATE|INSERT\s+INTO)\s+([\w.\"]+)", code, flags=re.IGNORECASE):
            assert "." in table, f"{name} names the table {table} without its schema"
        for called in re.findall(r"([\w.]+)\s*\(", code):
            assert "." in called or called.lower() in NOT_FUNCTIONS, f"{name} calls {called} without its schema"


def names(checks: list[health.HealthCheck]) -> dict[str, tuple[bool, str]]:
    return {check.name: (check.ok, check.message) for check in checks}


def test_the_system_panel_reports_a_role_that_may_create_temporary_objects_or_in_schema_public(
    app_role: AppRole,
):
    database_name = connection.settings_dict["NAME"]
    with app_role.session():
        defaults = names(health.audit_protection_checks())
    ok, message = defaults["temporary objects"]
    assert ok is False and app_role.name in message and "REVOKE TEMPORARY ON DATABASE" in message
    assert defaults["schema CREATE"][0] is True  # PostgreSQL 15's default: PUBLIC may not create in public
    with connection.cursor() as cursor:  # the revokes of docs/deployment.md (rolled back with the test)
        for revoke in DEPLOYMENT_REVOKES:
            cursor.execute(revoke.format(database=connection.ops.quote_name(database_name)))
    with app_role.session():
        hardened = names(health.audit_protection_checks())
    assert hardened["temporary objects"][0] is True and hardened["schema CREATE"][0] is True
    assert "permission denied" in app_role.run("CREATE TEMP TABLE t (x int)")
    assert "permission denied" in app_role.run("CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'select 1'")
    with connection.cursor() as cursor:  # what PostgreSQL <= 14 gives every role by default
        cursor.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    with app_role.session():
        ok, message = names(health.audit_protection_checks())["schema CREATE"]
    assert ok is False and "REVOKE CREATE ON SCHEMA public FROM PUBLIC" in message


def test_the_system_panel_reports_a_pollerdash_function_without_its_fixed_search_path():
    assert names(health.audit_protection_checks())["function search_path"][0] is True
    with connection.cursor() as cursor:
        cursor.execute("ALTER FUNCTION public.pollerdash_audit_entry_guard() RESET search_path")
    ok, message = names(health.audit_protection_checks())["function search_path"]
    assert ok is False and "pollerdash_audit_entry_guard()" in message
    with connection.cursor() as cursor:
        cursor.execute("DROP FUNCTION public.pollerdash_audit_entry_data(bytea)")
    ok, message = names(health.audit_protection_checks())["function search_path"]
    assert ok is False and "missing" in message and "pollerdash_audit_entry_data(bytea)" in message


def test_the_deployment_guide_gives_exactly_the_grants_and_revokes_the_tests_use():
    guide = DEPLOYMENT_DOC.read_text()
    for statement in DEPLOYMENT_GRANTS:
        assert statement.format(role="pollerdash_app") + ";" in guide
    for statement in DEPLOYMENT_REVOKES:
        assert statement.format(database="pollerdash") + ";" in guide


# --- a LOGIN role of its own, for the attack over its own connection ---------------------------------------


@contextmanager
def login_role() -> Iterator[psycopg.Connection]:
    """A LOGIN role with exactly the deployment guide's grants, connected over its own psycopg
    connection. Roles are cluster-wide and this one is committed: a random name, always dropped."""
    name = f"pd_login_{uuid.uuid4().hex[:10]}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {name} LOGIN")
    try:
        with connection.cursor() as cursor:
            for grant in DEPLOYMENT_GRANTS:
                cursor.execute(grant.format(role=name))
        params = connection.settings_dict
        with psycopg.connect(
            host=params["HOST"] or "127.0.0.1", port=params["PORT"] or 5432, dbname=params["NAME"], user=name
        ) as attacker:
            yield attacker
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP OWNED BY {name}")
            cursor.execute(f"DROP ROLE {name}")
