# Live operations re-keyed on the expanded status URL (review F5), and found by key.

import importlib

from django.db import migrations, models


def rekey_live_operations(apps, schema_editor):
    """The key of every live operation again, with the function the application keys new ones with:
    (credential variable, the status URL with the job id filled in). Two live agent watches that now
    turn out to reach one URL (through templates that differ) are refused by name, as in 0027."""
    earlier = importlib.import_module("operations.migrations.0027_provider_job_watch_key")
    earlier.backfill_watch_keys(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0039_snooze_and_ack_timeout"),
    ]

    operations = [
        migrations.RunPython(rekey_live_operations, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(
                condition=models.Q(("status__in", ["needs_attention", "pending", "running"])),
                fields=["watch_key"],
                name="operation_watch_key_idx",
            ),
        ),
    ]
