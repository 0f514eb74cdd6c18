"""`manage.py check --deploy` is clean with production settings (docs/deployment.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PRODUCTION_ENV = {
    "SECRET_KEY": "k3Qp9zR2mW8vL5tY1nB6cJ4hF0dS-x7!k3Qp9zR2mW8vL5tY1nB6cJ4hF0dS",
    "ALLOWED_HOSTS": "pollerdash.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://pollerdash.example.com",
    "SITE_URL": "https://pollerdash.example.com",
    "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
    "SECURE_SSL_REDIRECT": "1",
    "SECURE_HSTS_SECONDS": "31536000",
    # Single sign-on only; the issuer is never contacted at start-up (discovery is read on first use).
    "PASSWORD_LOGIN_ENABLED": "0",
    "OIDC_ENABLED": "1",
    "OIDC_ISSUER": "https://id.example.com/realms/oncall",
    "OIDC_CLIENT_ID": "pollerdash",
    "OIDC_CLIENT_SECRET": "not-a-real-secret-but-long-enough",
    "OIDC_RESPONDER_GROUPS": "oncall",
    "OIDC_VIEWER_GROUPS": "watchers",
}


def test_check_deploy_is_clean_with_production_settings(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "DATABASE_URL": f"sqlite:///{tmp_path / 'deploy.sqlite3'}",
        "POLLERDASH_VAR_DIR": str(tmp_path),
        **PRODUCTION_ENV,
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_names_what_is_missing_without_them(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "DATABASE_URL": f"sqlite:///{tmp_path / 'deploy.sqlite3'}",
        "POLLERDASH_VAR_DIR": str(tmp_path),
        "SECRET_KEY": PRODUCTION_ENV["SECRET_KEY"],
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "security.W004" in result.stderr + result.stdout and "security.W008" in result.stderr + result.stdout
