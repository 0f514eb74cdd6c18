"""Decisions keep the username they were taken under (what the audit chain records).

Existing rows are filled from their user's current name: before this migration a rename rewrote
every page and export at once, so the current name is all that is left to copy.
"""

from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def backfill(apps, schema_editor):
    Decision = apps.get_model("escalations", "Decision")
    User = apps.get_model(settings.AUTH_USER_MODEL)
    name_field = getattr(User, "USERNAME_FIELD", "username")
    current = User.objects.filter(pk=OuterRef("user_id")).values(name_field)[:1]
    Decision.objects.filter(username="").update(username=Subquery(current))


class Migration(migrations.Migration):
    dependencies = [
        ("escalations", "0004_roles_and_reminders"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="decision",
            name="username",
            field=models.CharField(default="", editable=False, max_length=150),
            preserve_default=False,
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="decision",
            index=models.Index(fields=["username", "decided_at"], name="decision_username_idx"),
        ),
    ]
