"""Roles as Django groups (viewer reads, responder decides) and the reminder schedule.

Reminders for undecided cards run as a django-q2 Schedule: django-q2's scheduler ticks about
every 30 s, plenty for reminders counted in minutes (NOTIFY_REMINDER_S), and needs no process of
our own. The scheduled function only enqueues one notification task per due card.
"""

from django.db import migrations

ROLES = ("viewer", "responder")
REMINDER_NAME = "pollerdash: escalation reminders"


def forwards(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    for name in ROLES:
        Group.objects.get_or_create(name=name)
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=REMINDER_NAME,
        defaults={
            "func": "escalations.tasks.send_due_reminders",
            "schedule_type": "I",
            "minutes": 1,
            "repeats": -1,
        },
    )


def backwards(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(name=REMINDER_NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("escalations", "0003_card_cancel_response"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
