"""The README's shell examples run as typed: every variable they use is set first, every command
and make target exists, `manage.py` is always run with the venv's Python, and the audit example
runs for real against a demo database in a copy of the checkout. (The API example runs against a
running demo in tests/integration/test_make_demo.py.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import get_commands

from demo import envfile
from tests.support import readme_shell_blocks

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SOURCES_DEMO_ENV = "set -a; . var/demo.env; set +a"
SHELL_BUILTINS = {"set", ".", "cd", "export"}


def logical_lines(block: str) -> list[str]:
    """Lines with backslash continuations joined and comments dropped."""
    joined = block.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]


def all_lines() -> list[str]:
    return [
        line for blocks in readme_shell_blocks(README).values() for block in blocks for line in logical_lines(block)
    ]


def test_the_readme_has_the_examples_this_test_checks() -> None:
    blocks = readme_shell_blocks(README)
    assert {"Two commands", "Try the API", "Verify the audit log"} <= set(blocks)
    assert len(README.splitlines()) <= 160, "the README introduces; the reference lives in docs/"


def test_every_variable_an_example_uses_is_set_before_it_in_the_same_block() -> None:
    demo_env = envfile.demo_env(previous={}, given={}, new_secret=lambda name: "x")
    for heading, blocks in readme_shell_blocks(README).items():
        for block in blocks:
            defined = {"HOME", "PATH"}
            for line in logical_lines(block):
                if line.startswith(SOURCES_DEMO_ENV):
                    defined |= set(demo_env)
                # Single-quoted text is not expanded by the shell.
                expanded = re.sub(r"'[^']*'", "", line)
                used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expanded))
                assert used <= defined, f"{heading}: {line!r} uses {sorted(used - defined)} before setting it"
                defined |= set(re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)=", line))


def test_every_command_and_make_target_an_example_names_exists() -> None:
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), flags=re.M))
    commands = set(get_commands())
    for line in all_lines():
        for match in re.finditer(r"\bmake ([a-z][a-z-]*)", line):
            assert match.group(1) in targets, line
        assert not re.search(r"(?<!\.venv/bin/python )manage\.py", line), f"run manage.py with .venv/bin/python: {line}"
        for match in re.finditer(r"manage\.py ([a-z_]+)", line):
            assert match.group(1) in commands, line
        for match in re.finditer(r"\.venv/bin/([A-Za-z0-9_.-]+)", line):
            assert (ROOT / ".venv" / "bin" / match.group(1)).exists(), line
        unquoted = re.sub(r'"(?:\\.|[^"\\])*"', '""', re.sub(r"'[^']*'", "''", line))
        for segment in re.split(r"\||;|&&|\$\(", unquoted):
            words = segment.strip().split()
            if not words or "=" in words[0] or words[0] in SHELL_BUILTINS or words[0].startswith((".venv/", "make")):
                continue
            assert shutil.which(words[0]), f"{words[0]} is not a command here: {line}"


@pytest.mark.sqlite
def test_the_audit_example_runs_as_typed_against_a_demo_database(tmp_path: Path) -> None:
    checkout = tmp_path / "pollerdash"
    shutil.copytree(
        ROOT, checkout, ignore=shutil.ignore_patterns(".venv", "var", ".git", "test-artifacts", "node_modules")
    )
    (checkout / ".venv").symlink_to(ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SECRET_KEY", "POLLERDASH_VAR_DIR")}
    # What `make demo` does before its processes start, then the demo's logins (audit entries).
    prepare = (
        ".venv/bin/python -m demo.envfile var/demo.env > /dev/null && set -a && . ./var/demo.env && set +a && "
        ".venv/bin/python manage.py migrate --no-input -v 0 && "
        '.venv/bin/python manage.py audit_keys --generate "$AUDIT_SIGNING_KEY_FILE" > /dev/null && '
        ".venv/bin/python manage.py demo --no-scenarios > /dev/null"
    )
    subprocess.run(["bash", "-c", prepare], cwd=checkout, env=env, check=True, timeout=300)
    (example,) = readme_shell_blocks(README)["Verify the audit log"]
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", example], cwd=checkout, env=env, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert '"ok": true' in ran.stdout.replace('"ok":true', '"ok": true'), ran.stdout
