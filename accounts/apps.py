from __future__ import annotations

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Sign-in (passwords and single sign-on)"

    def ready(self) -> None:
        from axes.signals import user_locked_out
        from django.conf import settings
        from django.contrib.auth.signals import user_logged_in

        from accounts import checks, signins, throttle  # noqa: F401 - checks registers itself
        from operations.infrastructure import redaction

        user_logged_in.connect(signins.on_user_logged_in, dispatch_uid="pollerdash.sign_in_recorded")
        user_locked_out.connect(throttle.on_locked_out, dispatch_uid="pollerdash.lockout_recorded")
        # The client secret is scrubbed from every log line, like a provider credential.
        redaction.register_secret(settings.OIDC_RP_CLIENT_SECRET)
