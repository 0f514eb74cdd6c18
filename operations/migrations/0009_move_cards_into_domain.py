"""Escalation and Decision move from the dashboard app into the domain: state only.

The tables, their rows, indexes and constraints stay exactly as they are (`escalations_escalation`,
`escalations_decision`); only Django's model state and the content types change app.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models




def move_content_types(apps, schema_editor):
    # Admin log entries and permissions point at content types: they follow the models.
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in ("escalation", "decision"):
        if not ContentType.objects.filter(app_label="operations", model=model).exists():
            ContentType.objects.filter(app_label="escalations", model=model).update(app_label="operations")


def restore_content_types(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="operations", model__in=("escalation", "decision")).update(
        app_label="escalations"
    )


class Migration(migrations.Migration):

    dependencies = [
        ('escalations', '0006_notification_caps_and_repeated_refusals'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('operations', '0008_rate_window'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='Escalation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('reason', models.CharField(choices=[('deadline_exceeded', 'deadline_exceeded'), ('request_budget_exhausted', 'request_budget_exhausted'), ('rate_limited', 'rate_limited'), ('unknown_state', 'unknown_state'), ('authorization_denied', 'authorization_denied'), ('provider_failure', 'provider_failure'), ('integration_failure', 'integration_failure'), ('per_call_approval', 'per_call_approval')], max_length=32)),
                        ('detail', models.TextField()),
                        ('state', models.CharField(choices=[('open', 'Open'), ('decided', 'Decided'), ('superseded', 'Superseded')], default='open', max_length=16)),
                        ('version', models.PositiveIntegerField(default=1)),
                        ('opened_at', models.DateTimeField()),
                        ('closed_at', models.DateTimeField(blank=True, null=True)),
                        ('credential_fingerprint', models.CharField(blank=True, max_length=32)),
                        ('context', models.JSONField(blank=True, default=dict)),
                        ('last_notified_at', models.DateTimeField(blank=True, null=True)),
                        ('notifications_sent', models.PositiveIntegerField(default=0)),
                        ('notifications_skipped', models.PositiveIntegerField(default=0)),
                        ('cancel_response', models.JSONField(blank=True, null=True)),
                        ('closed_reason', models.CharField(blank=True, max_length=300)),
                        ('assignee', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('operation', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='escalations', to='operations.operation')),
                    ],
                    options={
                        'db_table': 'escalations_escalation',
                        'ordering': ['-opened_at'],
                    },
                ),
                migrations.CreateModel(
                    name='Decision',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('username', models.CharField(editable=False, max_length=150)),
                        ('decided_at', models.DateTimeField()),
                        ('option', models.CharField(max_length=100)),
                        ('outcome', models.CharField(choices=[('applied', 'Applied'), ('refused', 'Refused'), ('awaiting_second', 'Awaiting Second'), ('recorded', 'Recorded')], max_length=16)),
                        ('refusal_reason', models.CharField(blank=True, max_length=300)),
                        ('comment', models.TextField(blank=True)),
                        ('card_version', models.PositiveIntegerField(blank=True, null=True)),
                        ('card_snapshot', models.JSONField(blank=True, default=dict)),
                        ('new_deadline_at', models.DateTimeField(blank=True, null=True)),
                        ('new_max_status_requests', models.PositiveIntegerField(blank=True, null=True)),
                        ('provider_response', models.JSONField(blank=True, null=True)),
                        ('audit_seq', models.BigIntegerField(blank=True, null=True)),
                        ('repeat_count', models.PositiveIntegerField(default=0)),
                        ('last_repeated_at', models.DateTimeField(blank=True, null=True)),
                        ('authorization', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='decisions', to='operations.authorization')),
                        ('confirms', models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='confirmed_by', to='operations.decision')),
                        ('operation', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='decisions', to='operations.operation')),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('escalation', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='decisions', to='operations.escalation')),
                    ],
                    options={
                        'db_table': 'escalations_decision',
                        'ordering': ['-decided_at'],
                    },
                ),
                migrations.AlterField(
                    model_name='authorization',
                    name='escalation',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='authorizations', to='operations.escalation'),
                ),
                migrations.AddIndex(
                    model_name='escalation',
                    index=models.Index(fields=['state', 'opened_at'], name='escalation_state_idx'),
                ),
                migrations.AddIndex(
                    model_name='escalation',
                    index=models.Index(fields=['assignee', 'state'], name='escalation_assignee_idx'),
                ),
                migrations.AddConstraint(
                    model_name='escalation',
                    constraint=models.UniqueConstraint(condition=models.Q(('state', 'open')), fields=('operation',), name='one_open_escalation_per_operation'),
                ),
                migrations.AddIndex(
                    model_name='decision',
                    index=models.Index(fields=['decided_at'], name='decision_time_idx'),
                ),
                migrations.AddIndex(
                    model_name='decision',
                    index=models.Index(fields=['operation', 'decided_at'], name='decision_operation_idx'),
                ),
                migrations.AddIndex(
                    model_name='decision',
                    index=models.Index(fields=['user', 'decided_at'], name='decision_user_idx'),
                ),
                migrations.AddIndex(
                    model_name='decision',
                    index=models.Index(fields=['username', 'decided_at'], name='decision_username_idx'),
                ),
            ],
        ),
        migrations.RunPython(move_content_types, restore_content_types),
    ]
