"""Which provider credential the workers hold now, published as a keyed fingerprint.

A provider that refused a credential (401/403) gets a card whose only retry, retry_after_rotation,
must appear only once the credential really changed. The credential lives in the workers'
environment (or a file they read), not in the web process, so the workers publish its fingerprint
and the dashboard compares the published one with the one recorded at the denial.
"""

from __future__ import annotations

import threading

from django.utils import timezone

from operations.models import CredentialFingerprint, ProviderProfile
from operations.providers import http

# Per process: what this process last published, so an unchanged credential costs no write.
_published: dict[str, str] = {}
_lock = threading.Lock()


def credential_publish(*, credential_env: str) -> str:
    """Publish this process's fingerprint of one credential (a write only when it changed)."""
    fingerprint = http.credential_fingerprint(credential_env=credential_env)
    with _lock:
        if _published.get(credential_env) == fingerprint:
            return fingerprint
    CredentialFingerprint.objects.update_or_create(
        credential_env=credential_env, defaults={"fingerprint": fingerprint, "seen_at": timezone.now()}
    )
    with _lock:
        _published[credential_env] = fingerprint
    return fingerprint


def credentials_publish_all() -> int:
    """Publish every profile's credential; run periodically by the workers. Returns how many."""
    names = sorted(set(ProviderProfile.objects.exclude(credential_env="").values_list("credential_env", flat=True)))
    for name in names:
        credential_publish(credential_env=name)
    return len(names)


def credential_current(*, credential_env: str) -> str | None:
    """The fingerprint the workers last published, or None when none has been published."""
    return (
        CredentialFingerprint.objects.filter(credential_env=credential_env)
        .values_list("fingerprint", flat=True)
        .first()
    )


def forget_published() -> None:
    """Forget what this process published (tests that roll the table back need this)."""
    with _lock:
        _published.clear()
