"""Workers publish the fingerprints of the provider credentials they hold, every minute.

A django-q2 Schedule runs in a worker (which holds the credentials), so a rotated credential is
seen within a minute or so even when every operation of that provider is stopped.
"""

from django.db import migrations

NAME = "pollerdash: credential fingerprints"


def forwards(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={
            "func": "operations.tasks.publish_credential_fingerprints",
            "schedule_type": "I",
            "minutes": 1,
            "repeats": -1,
        },
    )


def backwards(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0004_credential_fingerprint"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
