"""The architecture's rules, enforced (docs/architecture.md):

1. the domain (operations) never imports the human layer (escalations) or the demo: import-linter's
   contracts in pyproject.toml, run here as in `make lint`;
2. only the lifecycle (operations/lifecycle/) writes an operation's status, fence, lease, bounds or
   sequence, or a card's state and version: a scan of every module's syntax tree; inside it, only
   its transitions (lifecycle/transitions.py) write the status and the claim, and every one of its
   functions is keyword-only;
3. what PostgreSQL and SQLite do differently is written in one module per concern, never as a
   backend branch in application code: a scan for `.vendor` and `IS_POSTGRES`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP_PACKAGES = ("operations", "escalations", "demo", "pollerdash")
LIFECYCLE = ROOT / "operations" / "lifecycle"
# The fields only the lifecycle may write: the operation's state, claim and bounds, a card's state.
OWNED = frozenset(
    {
        "status",
        "fence",
        "lease_owner",
        "lease_expires_at",
        "claimed_at",
        "deadline_at",
        "max_status_requests",
        "max_transport_failures",
        "status_requests_used",
        "sequence",
        "next_poll_at",
        "version",
        # The authority a person gave: a window's pacing, polling past the business deadline.
        "check_spacing_s",
        "business_deadline_waived_at",
    }
)
# Names whose `.update(...)` / `.create(...)` writes rows of the owned models.
OWNED_MODELS = ("Operation", "Escalation")


def _modules() -> list[Path]:
    found = []
    for package in APP_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts or LIFECYCLE in path.parents:
                continue
            found.append(path)
    return found


def _writes(tree: ast.AST, *, owned: frozenset[str] = OWNED) -> list[tuple[int, str]]:
    """(line, what) for every write of an owned field found in a module's syntax tree."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        # op.status = ..., op.fence += 1, escalation.version = ...
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            elements = target.elts if isinstance(target, ast.Tuple) else [target]
            for element in elements:
                # `self.status` in a class of its own (an HTTP client's error) is not a model row.
                is_self = isinstance(element, ast.Attribute) and ast.unparse(element.value) == "self"
                if isinstance(element, ast.Attribute) and element.attr in owned and not is_self:
                    found.append((node.lineno, f"assigns .{element.attr}"))
        # Operation.objects....update(status=...), Escalation.objects.create(version=...)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("update", "create")
        ):
            chain = ast.unparse(node.func.value)
            if chain.startswith(OWNED_MODELS):
                written = sorted(kw.arg for kw in node.keywords if kw.arg in owned)
                if written:
                    found.append((node.lineno, f"{chain.split('.')[0]}.{node.func.attr}({', '.join(written)})"))
    return found


def test_only_the_lifecycle_writes_an_operations_state_claim_and_bounds():
    offenders = []
    for path in _modules():
        for line, what in _writes(ast.parse(path.read_text(), filename=str(path))):
            offenders.append(f"{path.relative_to(ROOT)}:{line} {what}")
    assert offenders == [], "write these through operations.lifecycle:\n" + "\n".join(offenders)


def test_the_scan_sees_each_kind_of_write():
    # The rule above must be able to fail: each form of write is recognised.
    source = """
op.status = Status.CLOSED
op.fence += 1
op.lease_owner, op.lease_expires_at = "", None
Operation.objects.filter(pk=pk).update(deadline_at=now, purpose="x")
Escalation.objects.create(operation=op, version=2)
op.purpose = "not owned"
"""
    assert [what for _, what in _writes(ast.parse(source))] == [
        "assigns .status",
        "assigns .fence",
        "assigns .lease_owner",
        "assigns .lease_expires_at",
        "Operation.update(deadline_at)",
        "Escalation.create(version)",
    ]


def test_the_domain_never_imports_the_dashboard():
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports"))], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout[-3000:]


# Every request pollerdash sends goes through operations.infrastructure.outbound, which applies its purpose's rules
# (address policy, no redirects, identity encoding, a read cap, timeouts). The agent's own client is
# a standalone library; tests, benchmarks and the demo's fakes are no part of pollerdash's sending.
HTTP_CLIENT_MODULES = ("httpx", "httpcore")
MAY_IMPORT_THE_HTTP_CLIENT = frozenset(
    {
        ROOT / "operations" / "infrastructure" / "outbound.py",
        ROOT / "pollerdash" / "client.py",
        ROOT / "pollerdash" / "mcp_bridge.py",
    }
)


def _http_client_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) for every import of httpx or httpcore, at any depth (a function's own import too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "__import__"):
            names = [arg.value for arg in node.args[:1] if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
        found += [(node.lineno, name) for name in names if name.split(".")[0] in HTTP_CLIENT_MODULES]
    return found


def test_only_the_outbound_module_imports_the_http_client():
    offenders = []
    for package in ("operations", "escalations", "accounts", "pollerdash"):
        for path in (ROOT / package).rglob("*.py"):
            if path in MAY_IMPORT_THE_HTTP_CLIENT:
                continue
            for line, name in _http_client_imports(ast.parse(path.read_text(), filename=str(path))):
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert offenders == [], "send requests through operations.infrastructure.outbound:\n" + "\n".join(offenders)


def test_the_http_client_scan_sees_each_kind_of_import():
    source = """
import httpx
import httpcore as core
from httpx import Client
def later():
    import httpx._transports
    importlib.import_module("httpx")
import json
from operations.infrastructure import outbound
"""
    assert [name for _, name in _http_client_imports(ast.parse(source))] == [
        "httpx",
        "httpcore",
        "httpx",
        "httpx._transports",
        "httpx",
    ]


# Inside the lifecycle, the fields a transition owns (operations.lifecycle.transitions).
TRANSITION_OWNED = frozenset({"status", "fence", "lease_owner", "lease_expires_at", "claimed_at", "claim_due_at"})


def test_inside_the_lifecycle_only_its_transitions_write_the_status_and_the_claim():
    offenders = []
    for path in sorted(LIFECYCLE.glob("*.py")):
        if path.name == "transitions.py":
            continue
        for line, what in _writes(ast.parse(path.read_text(), filename=str(path)), owned=TRANSITION_OWNED):
            offenders.append(f"{path.relative_to(ROOT)}:{line} {what}")
    assert offenders == [], "write these through operations.lifecycle.transitions:\n" + "\n".join(offenders)


def _positional(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of each public module-level function that takes a positional parameter."""
    return [
        (node.lineno, node.name)
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and not node.name.startswith("_")
        and (node.args.posonlyargs or node.args.args or node.args.vararg)
    ]


def test_every_public_lifecycle_function_is_keyword_only():
    offenders = []
    for path in sorted(LIFECYCLE.glob("*.py")):
        for line, name in _positional(ast.parse(path.read_text(), filename=str(path))):
            offenders.append(f"{path.relative_to(ROOT)}:{line} {name}")
    assert offenders == [], "make these keyword-only (def f(*, ...)):\n" + "\n".join(offenders)


# The modules where PostgreSQL and SQLite may differ, one per concern: everywhere else a statement
# is written once, or asks one of these (as Django keeps its backends' differences in connection.ops).
DIALECT_MODULES = {
    # statements: lock clauses, named locks, many rows in one statement (arrays or lists), a second
    # write in the first one's round trip, the bound cursor
    "operations/infrastructure/fastsql.py",
    # the quantiles of a duration: percentile_cont on PostgreSQL, ranked here on SQLite
    "operations/infrastructure/sql_quantiles.py",
    # the task queue: django-q2's ORM broker, one statement per step on PostgreSQL
    "operations/infrastructure/queue_broker.py",
    # the audit log: its guards in the database (roles, owners, triggers, the prune function) and
    # its bulk writes
    "operations/audit/database.py",
    # configuration: which backend's connection options apply
    "pollerdash/settings.py",
}
SCANNED = ("operations", "escalations", "accounts", "demo", "pollerdash")


def _backend_branches(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every question of which database this is."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("vendor", "IS_POSTGRES"):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Name) and node.id == "IS_POSTGRES":
            found.append((node.lineno, node.id))
    return sorted(found, key=lambda item: item[0])


def test_database_differences_live_in_their_modules():
    found: dict[str, list[int]] = {}
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            lines = [line for line, _ in _backend_branches(ast.parse(path.read_text(), filename=str(path)))]
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    offenders = [f"{module}:{lines}" for module, lines in sorted(found.items()) if module not in DIALECT_MODULES]
    assert offenders == [], (
        "a backend branch outside the modules that hold them (put the statement in one of "
        f"{sorted(DIALECT_MODULES)}):\n" + "\n".join(offenders)
    )
    # An entry with no branch left is stale: the list says where the differences are.
    assert sorted(DIALECT_MODULES - found.keys()) == []


def test_the_scans_see_a_backend_branch_and_a_positional_parameter():
    source = """
if connection.vendor == "postgresql": pass
lock = "" if connections["default"].vendor != "postgresql" else " FOR UPDATE"
if settings.IS_POSTGRES or IS_POSTGRES: pass
def finish(operation, *, status): pass
def fine(*, operation): pass
def _private(operation): pass
"""
    tree = ast.parse(source)
    assert [what for _, what in _backend_branches(tree)] == [
        "connection.vendor",
        "connections['default'].vendor",
        "settings.IS_POSTGRES",
        "IS_POSTGRES",
    ]
    assert _positional(tree) == [(5, "finish")]
