"""The channels on-call is reached through, one module each, registered in `registry`.

A channel (`base.Channel`) renders a message for an event from the facts (`base.Message`: a card's
facts, or a message's about no card), sends it through operations.infrastructure.outbound (or the mail backend),
and says what the receiver's answer means: sent, retry or failed. It may declare follow-ups (events
sent after a level on the same stream) and update its own messages in place (`Outcome.provider_ref`
is handed back to its follow-ups as `Message.updates`).

    email.py          EmailChannel    one email per address (text and HTML)
    slack_webhook.py  SlackWebhook    Block Kit to an incoming webhook
    slack_channel.py  SlackChannel    the Slack app: chat.postMessage, updated by chat.update; users.info
    slack_reply.py    SlackReply      the answer to a click, through its response_url
    pagerduty.py      PagerDuty       Events API v2: trigger, then acknowledge and resolve
    teams_webhook.py  TeamsWebhook    an Adaptive Card to a Teams Workflows webhook

A new channel: its kind in operations/notify/kinds.py (and, for a policy target, the kind of value it
names there, which the policy loader checks), its module here, one line in `registry`, a migration for
the model's choices, and its tests (docs/architecture.md, "Where does a new … go?").
"""
