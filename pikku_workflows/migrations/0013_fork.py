"""Forks (``fork_run``): a run records the run it reruns, the step it reruns from, why,
who asked and which of its steps it kept; the ``fork_workflowrun`` permission."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('pikku_workflows', '0012_approval_index_condition'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='workflowrun',
            options={'ordering': ['-created_at'], 'permissions': [('start_workflowrun', 'Can start workflow runs from the console'), ('resume_workflowrun', 'Can resume suspended workflow runs'), ('cancel_workflowrun', 'Can cancel workflow runs'), ('retry_workflowrun', 'Can retry failed workflow runs'), ('approve_workflowrun', 'Can answer approvals of workflow runs'), ('fork_workflowrun', 'Can rerun workflow runs from a step (fork them)')], 'verbose_name': 'workflow run', 'verbose_name_plural': 'workflow runs'},
        ),
        migrations.AddField(
            model_name='workflowrun',
            name='fork_kept_through',
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name='workflowrun',
            name='fork_reason',
            field=models.TextField(blank=True, db_default='', default='', verbose_name='fork reason'),
        ),
        migrations.AddField(
            model_name='workflowrun',
            name='fork_step',
            field=models.CharField(blank=True, db_default='', default='', help_text='The step key the fork reruns from (empty: from the start).', max_length=300, verbose_name='fork step'),
        ),
        migrations.AddField(
            model_name='workflowrun',
            name='forked_by',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='forked by'),
        ),
        migrations.AddField(
            model_name='workflowrun',
            name='forked_from',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='forks', to='pikku_workflows.workflowrun', verbose_name='forked from'),
        ),
    ]
