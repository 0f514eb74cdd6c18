"""The architecture's two rules, enforced (docs/architecture.md):

1. the domain (operations) never imports the human layer (escalations) or the demo: import-linter's
   contracts in pyproject.toml, run here as in `make lint`;
2. only the lifecycle (operations/lifecycle/) writes an operation's status, fence, lease, bounds or
   sequence, or a card's state and version: a scan of every module's syntax tree.
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


def _writes(tree: ast.AST) -> list[tuple[int, str]]:
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
                if isinstance(element, ast.Attribute) and element.attr in OWNED and not is_self:
                    found.append((node.lineno, f"assigns .{element.attr}"))
        # Operation.objects....update(status=...), Escalation.objects.create(version=...)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("update", "create")
        ):
            chain = ast.unparse(node.func.value)
            if chain.startswith(OWNED_MODELS):
                written = sorted(kw.arg for kw in node.keywords if kw.arg in OWNED)
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


# Every request pollerdash sends goes through operations.outbound, which applies its purpose's rules
# (address policy, no redirects, identity encoding, a read cap, timeouts). The agent's own client is
# a standalone library; tests, benchmarks and the demo's fakes are no part of pollerdash's sending.
HTTP_CLIENT_MODULES = ("httpx", "httpcore")
MAY_IMPORT_THE_HTTP_CLIENT = frozenset(
    {
        ROOT / "operations" / "outbound.py",
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
    assert offenders == [], "send requests through operations.outbound:\n" + "\n".join(offenders)


def test_the_http_client_scan_sees_each_kind_of_import():
    source = """
import httpx
import httpcore as core
from httpx import Client
def later():
    import httpx._transports
    importlib.import_module("httpx")
import json
from operations import outbound
"""
    assert [name for _, name in _http_client_imports(ast.parse(source))] == [
        "httpx",
        "httpcore",
        "httpx",
        "httpx._transports",
        "httpx",
    ]
