from __future__ import annotations

import pytest

from operations.providers import http
from operations.providers.credentials import credential_current, credential_publish, credentials_publish_all


def test_a_credential_can_come_from_a_file_and_rotates_without_a_restart(tmp_path, monkeypatch):
    path = tmp_path / "acme-token"
    path.write_text("first-secret-value\n")
    monkeypatch.setenv("PROVIDER_ACME_TOKEN_FILE", str(path))
    assert http.credential_headers(credential_env="PROVIDER_ACME_TOKEN", auth_scheme="Bearer") == {
        "Authorization": "Bearer first-secret-value"
    }
    before = http.credential_fingerprint(credential_env="PROVIDER_ACME_TOKEN")
    path.write_text("rotated-secret-value\n")
    assert http.credential_fingerprint(credential_env="PROVIDER_ACME_TOKEN") not in {before, ""}


def test_a_missing_credential_file_sends_no_authorization(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVIDER_ACME_TOKEN_FILE", str(tmp_path / "absent"))
    assert http.credential_headers(credential_env="PROVIDER_ACME_TOKEN", auth_scheme="Bearer") == {}


@pytest.mark.django_db
def test_workers_publish_the_fingerprint_of_what_they_hold(profile, monkeypatch):
    assert credential_current(credential_env="PROVIDER_FAKE_TOKEN") is None
    assert credentials_publish_all() >= 1
    first = credential_current(credential_env="PROVIDER_FAKE_TOKEN")
    assert first and first == http.credential_fingerprint(credential_env="PROVIDER_FAKE_TOKEN")
    monkeypatch.setenv("PROVIDER_FAKE_TOKEN", "a-rotated-credential")
    assert credential_publish(credential_env="PROVIDER_FAKE_TOKEN") != first
    assert credential_current(credential_env="PROVIDER_FAKE_TOKEN") not in {first, None}
