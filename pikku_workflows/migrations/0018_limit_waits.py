"""When a run queued for a workflow concurrency slot began waiting (the Limits page)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("pikku_workflows", "0017_step_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflowrun",
            name="waiting_since",
            field=models.DateTimeField(blank=True, editable=False, null=True,
                                       verbose_name="waiting since"),
        ),
    ]
