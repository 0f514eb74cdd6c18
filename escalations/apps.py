from __future__ import annotations

from django.apps import AppConfig


class EscalationsConfig(AppConfig):
    """The human layer: the dashboard, exports and notifications, above the operations domain."""

    name = "escalations"
    verbose_name = "Escalations (dashboard and notifications)"

    def ready(self) -> None:
        from escalations import notifications
        from operations import events

        events.card_opened.connect(notifications.on_card_opened, dispatch_uid="notify-card-opened")
        events.card_reassigned.connect(notifications.on_card_reassigned, dispatch_uid="notify-card-reassigned")
        events.card_acknowledged.connect(notifications.on_card_acknowledged, dispatch_uid="notify-card-taken-over")
        events.card_awaiting_second.connect(
            notifications.on_card_awaiting_second, dispatch_uid="notify-card-awaiting-second"
        )
        events.business_deadline_near.connect(
            notifications.on_business_deadline_near, dispatch_uid="notify-business-deadline-near"
        )
        events.callback_undeliverable.connect(
            notifications.on_callback_undeliverable, dispatch_uid="notify-callback-undeliverable"
        )
