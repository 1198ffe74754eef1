"""A model the atomic-step tests write to."""

from django.db import models


class Ledger(models.Model):
    invocation_id = models.CharField(max_length=64)
    note = models.CharField(max_length=200, default="")

    def __str__(self) -> str:
        return self.note
