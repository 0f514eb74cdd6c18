# On-call's one vocabulary (operations.notify.kinds): the target kinds and channels (Microsoft
# Teams among them: teams_webhook), the check constraint generated from the kinds; and messages
# about no card (a callback that gave up, a business deadline near) as outbox rows naming their
# operation.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('auth', '0012_alter_user_first_name_max_length'),
        ('operations', '0029_slack_interaction_seen'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='policytarget',
            name='target_fields_match_kind',
        ),
        migrations.AddField(
            model_name='notificationdelivery',
            name='operation',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='notices', to='operations.operation'),
        ),
        migrations.AlterField(
            model_name='notificationdelivery',
            name='channel',
            field=models.CharField(choices=[('email', 'email'), ('slack_webhook', 'slack_webhook'), ('slack_channel', 'slack_channel'), ('pagerduty', 'pagerduty'), ('teams_webhook', 'teams_webhook'), ('slack_reply', 'slack_reply')], max_length=16),
        ),
        migrations.AlterField(
            model_name='notificationdelivery',
            name='escalation',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='notifications', to='operations.escalation'),
        ),
        migrations.AlterField(
            model_name='notificationdelivery',
            name='event',
            field=models.CharField(choices=[('level', 'level'), ('acknowledged', 'acknowledged'), ('ended', 'ended'), ('reassigned', 'reassigned'), ('taken_over', 'taken_over'), ('awaiting_second', 'awaiting_second'), ('slack_reply', 'slack_reply'), ('callback_failed', 'callback_failed'), ('business_deadline_near', 'business_deadline_near')], max_length=32),
        ),
        migrations.AlterField(
            model_name='policytarget',
            name='kind',
            field=models.CharField(choices=[('user', 'user'), ('group', 'group'), ('email', 'email'), ('slack_webhook', 'slack_webhook'), ('slack_channel', 'slack_channel'), ('pagerduty', 'pagerduty'), ('teams_webhook', 'teams_webhook')], max_length=16),
        ),
        migrations.AddConstraint(
            model_name='notificationdelivery',
            constraint=models.UniqueConstraint(condition=models.Q(('escalation__isnull', True)), fields=('operation', 'event', 'repetition', 'channel', 'address'), name='one_notice_per_slot'),
        ),
        migrations.AddConstraint(
            model_name='notificationdelivery',
            constraint=models.CheckConstraint(condition=models.Q(('escalation__isnull', False), ('operation__isnull', False), _connector='OR'), name='notification_has_a_subject'),
        ),
        migrations.AddConstraint(
            model_name='policytarget',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('kind__in', ['user']), ('group__isnull', True), ('email', ''), ('env', ''), ('channel', ''), ('user__isnull', False)), models.Q(('kind__in', ['group']), ('user__isnull', True), ('email', ''), ('env', ''), ('channel', ''), ('group__isnull', False)), models.Q(('kind__in', ['email']), ('user__isnull', True), ('group__isnull', True), ('env', ''), ('channel', ''), models.Q(('email', ''), _negated=True)), models.Q(('kind__in', ['pagerduty', 'slack_webhook', 'teams_webhook']), ('user__isnull', True), ('group__isnull', True), ('email', ''), ('channel', ''), models.Q(('env', ''), _negated=True)), models.Q(('kind__in', ['slack_channel']), ('user__isnull', True), ('group__isnull', True), ('email', ''), ('env', ''), models.Q(('channel', ''), _negated=True)), _connector='OR'), name='target_fields_match_kind'),
        ),
    ]
