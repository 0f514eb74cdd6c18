# Snooze and acknowledgement timeout (issue 28 item 3): a card snoozed by a responder until a time,
# the policy run holding its steps until then, a policy's ack_timeout_s and the run's ack_expires_at,
# and the card activity of both acts.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('operations', '0038_channel_of_every_act_pagerduty_webhooks'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='cardactivity',
            name='until',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='escalation',
            name='snoozed_by',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='escalation',
            name='snoozed_until',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='escalationpolicy',
            name='ack_timeout_s',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='policyrun',
            name='ack_expires_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='policyrun',
            name='snoozed_until',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='cardactivity',
            name='kind',
            field=models.CharField(choices=[('acknowledged', 'Acknowledged'), ('unacknowledged', 'Unacknowledged'), ('reassigned', 'Reassigned'), ('note', 'Note'), ('snoozed', 'Snoozed'), ('ack_expired', 'Ack Expired')], max_length=16),
        ),
        migrations.AddIndex(
            model_name='policyrun',
            index=models.Index(condition=models.Q(('status', 'acknowledged')), fields=['ack_expires_at'], name='policy_run_ack_due_idx'),
        ),
    ]
