"""The RQ job functions (stable import paths); each takes ids only."""

from __future__ import annotations

import logging

from django.db import close_old_connections

from ..exceptions import WorkflowRunNotFoundError
from ..runtime import step_worker
from ..runtime.orchestrator import drive_queued
from . import rq

logger = logging.getLogger("pikku_workflows.worker")


def orchestrate(run_id: str) -> str:
    """One orchestrator pass of a run, then whatever scheduling its outcome needs.

    A job for a run that does not exist (deleted since, or a forged id) does nothing.
    """
    close_old_connections()
    try:
        return str(drive_queued(run_id).kind)  # a plain string in RQ's results
    except WorkflowRunNotFoundError:
        logger.warning("orchestrator job for run %r, which does not exist: ignored", run_id)
        return "missing"
    finally:
        close_old_connections()


def wake_due(queue: str) -> str:
    """Carry on every run of the orchestrator queue ``queue`` whose wait is over."""
    close_old_connections()
    try:
        return f"{rq.wake_due(queue)} woken"
    finally:
        close_old_connections()


def run_passes(queue: str) -> str:
    """Run the passes of the runs woken on the orchestrator queue ``queue``."""
    from rq import get_current_job

    close_old_connections()
    job = get_current_job()
    try:
        return f"{rq.run_passes(queue, job_id=job.id if job else '')} passes"
    finally:
        close_old_connections()


def run_queued_steps(run_id: str, rpc_names: list[str]) -> str:
    """Drain a fan-out: run its queued steps (of these functions) until none is left."""
    close_old_connections()
    try:
        return step_worker.run_queued_steps(run_id, rpc_names)
    finally:
        close_old_connections()


def run_queued_step(run_id: str, step_name: str, rpc_name: str) -> str:
    """Run one queued step (claimed by a status-guarded UPDATE) and carry the run on."""
    close_old_connections()
    try:
        return step_worker.run_queued_step(run_id, step_name, rpc_name)
    finally:
        close_old_connections()
