from __future__ import annotations

from django.apps import AppConfig


class EscalationsConfig(AppConfig):
    """The human layer: the dashboard, exports and notifications, above the operations domain."""

    name = "escalations"
    verbose_name = "Escalations (dashboard and notifications)"

    def ready(self) -> None:
        from django.conf import settings
        from django.db.models.signals import post_migrate

        from escalations.oncall import receivers
        from operations import events
        from operations.infrastructure.redaction import register_secret

        # Escalation policies (escalations.oncall): started, stopped, restarted and ended by the
        # card's own events, inside the transactions that change the card; the messages about no
        # card (escalations.oncall.notices) written in the transaction that records their event.
        for signal, receiver, uid in (
            (events.card_opened, receivers.on_card_opened, "oncall-card-opened"),
            (events.card_acknowledged, receivers.on_card_acknowledged, "oncall-card-acknowledged"),
            (events.card_unacknowledged, receivers.on_card_unacknowledged, "oncall-card-unacknowledged"),
            (events.card_closed, receivers.on_card_closed, "oncall-card-closed"),
            (events.card_snoozed, receivers.on_card_snoozed, "oncall-card-snoozed"),
            (events.card_reassigned, receivers.on_card_reassigned, "oncall-card-reassigned"),
            (events.card_awaiting_second, receivers.on_card_awaiting_second, "oncall-card-awaiting-second"),
            (events.dispatcher_pass, receivers.on_dispatcher_pass, "oncall-dispatcher-pass"),
            (events.callback_undeliverable, receivers.on_callback_undeliverable, "notify-callback-undeliverable"),
            (events.business_deadline_near, receivers.on_business_deadline_near, "notify-business-deadline-near"),
        ):
            signal.connect(receiver, dispatch_uid=uid)
        post_migrate.connect(receivers.adopt_open_cards, sender=self, dispatch_uid="oncall-adopt-open-cards")
        # Secrets of the notification settings: scrubbed from every log line of every process.
        for secret in (
            settings.NOTIFY_WEBHOOK_URL,
            settings.SLACK_SIGNING_SECRET,
            settings.SLACK_BOT_TOKEN,
            *settings.PAGERDUTY_WEBHOOK_SECRETS,
        ):
            register_secret(secret)
