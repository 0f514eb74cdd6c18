"""Escalation and Decision now live in the operations app (operations 0009): state only, the
tables stay."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('escalations', '0006_notification_caps_and_repeated_refusals'),
        ('operations', '0009_move_cards_into_domain'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.RemoveField(model_name='escalation', name='assignee'),
                migrations.RemoveField(model_name='escalation', name='operation'),
                migrations.DeleteModel(name='Decision'),
                migrations.DeleteModel(name='Escalation'),
            ],
        ),
    ]
