"""The ledger of the fault suite: one row per atomic step invocation, never two."""

from django.db import models


class FaultLedger(models.Model):
    """Written by atomic steps in the step's own transaction; unique per invocation."""

    invocation_id = models.CharField(max_length=64, unique=True)
    run_key = models.CharField(max_length=64, db_index=True)
    step = models.CharField(max_length=100)

    def __str__(self) -> str:
        return f"{self.run_key}/{self.step}"
