"""Start-up checks of what the domain will do with stored configuration (`manage.py check`, and every
command at start: the dispatcher, the workers, `migrate`): a stored profile whose requests the
workers would refuse is named with its field and variable, so a deployment that lacks
PROVIDER_CREDENTIAL_ORIGINS (after an upgrade) hears it at once, not one card per operation."""

from __future__ import annotations

from django.core.checks import CheckMessage, Warning, register
from django.db import DatabaseError

HINT = (
    "Its operations stop with a card “Destination not allowed” and nothing is sent to the provider. Bind the "
    "credential in the environment of every pollerdash process, PROVIDER_CREDENTIAL_ORIGINS="
    "NAME=https://api.provider.example[,origin…][;NAME2=…] (docs/DESIGN.md section 2), or correct the profile."
)


@register("pollerdash")
def provider_destinations(**_: object) -> list[CheckMessage]:
    # Imported here: start-up loads no more than every process needs (docs/architecture.md).
    from operations.models import ProviderProfile
    from operations.provider_targets import binding_problem, destination_problem

    try:
        rows = list(ProviderProfile.objects.values_list("slug", "credential_env", "status_url", "cancel_url"))
    except DatabaseError:
        return []  # not migrated yet: no profile is stored
    found: list[CheckMessage] = []
    for slug, credential_env, status_url, cancel_url in rows:
        unbound = binding_problem(credential_env=credential_env)
        if unbound is not None:
            found.append(Warning(f"profile {slug}: credential_env: {unbound}", hint=HINT, id="pollerdash.W201"))
            continue
        for field, url in (("status_url", status_url), ("cancel_url", cancel_url)):
            problem = destination_problem(credential_env=credential_env, url=url) if url else None
            if problem is not None:
                found.append(Warning(f"profile {slug}: {field}: {problem}", hint=HINT, id="pollerdash.W202"))
    return found
