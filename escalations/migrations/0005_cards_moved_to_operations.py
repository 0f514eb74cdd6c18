"""Escalation and Decision now live in the operations app (operations 0007): state only, the
tables stay."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('escalations', '0004_roles_and_reminders'),
        ('operations', '0007_move_cards_into_domain'),
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
