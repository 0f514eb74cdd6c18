"""The fixed reminder schedule gives way to escalation policies, stepped by the dispatcher.

Cards already open are adopted after migrating (escalations.oncall.runs.adopt_open_cards, a
post_migrate receiver): each starts the policy its profile follows now (the implicit "settings"
policy keeps NOTIFY_EMAILS / NOTIFY_WEBHOOK_URL / NOTIFY_REMINDER_S working), so nobody who was
being reminded stops hearing about an undecided card.
"""

from django.db import migrations

NAME = "pollerdash: escalation reminders"


def forwards(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(name=NAME).delete()


def backwards(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={"func": "escalations.tasks.send_due_reminders", "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0011_escalation_policies"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
