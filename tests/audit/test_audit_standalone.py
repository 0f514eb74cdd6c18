"""The offline verifier is one file that runs where only Python and `cryptography` are installed:
what an incident reviewer gets, on a machine that has never seen pollerdash."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import operations.audit.verify

pytestmark = pytest.mark.django_db


def test_the_verifier_runs_in_a_fresh_venv_with_only_cryptography(tmp_path, sample_export, keys_file):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "cryptography"],
        check=True,
        timeout=300,
    )
    installed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    names = {package["name"].lower() for package in json.loads(installed.stdout)}
    assert "django" not in names and "rfc8785" not in names and "cryptography" in names

    alone = tmp_path / "reviewer"
    alone.mkdir()
    shutil.copytree(
        Path(operations.audit.verify.__file__).parent,
        alone / "audit_verify",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    export = alone / "incident.jsonl"
    export.write_bytes(sample_export.data)
    keys = alone / "pollerdash-audit.keys"
    keys.write_text(keys_file.read_text())

    def run(*args: str) -> subprocess.CompletedProcess:
        # -I: isolated mode, so nothing from this project's checkout or environment leaks in.
        return subprocess.run(
            [str(python), "-I", str(alone / "audit_verify"), *args], capture_output=True, cwd=alone, timeout=60
        )

    ok = run(str(export), "--keys", str(keys), "--strict")
    assert ok.returncode == 0, ok.stderr.decode()
    result = json.loads(ok.stdout)
    assert result["ok"] is True and result["entries"] == 11
    export.write_bytes(sample_export.data.replace(b'"http_status":503', b'"http_status":200', 1))
    tampered = run(str(export), "--keys", str(keys))
    assert tampered.returncode == 1 and json.loads(tampered.stdout)["reason"] == "HASH_MISMATCH"
    assert run(str(export)).returncode == 2
