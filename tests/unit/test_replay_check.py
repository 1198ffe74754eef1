"""``pikku_replay_check``, ``pikku_export_runs`` and ``testing.assert_replays``: recorded runs
replayed dry through the current code, with no step called and nothing written."""

from __future__ import annotations

import importlib
import io
import json
from xml.etree import ElementTree

import pytest
from django.core.management import CommandError, call_command

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.registry import registry
from pikku_workflows.replay_checks import check_runs, read_exported_runs, runs_to_check
from pikku_workflows.testing import assert_replays
from tests.unit.test_dry_replay import new_code, nothing_called_nor_written

pytestmark = pytest.mark.django_db


def recorded_runs():
    """Runs of DSL and graph workflows, and one of a workflow since removed."""
    with registry.isolated():
        @pw.workflow
        def retired(wf, data):
            return wf.do("Only", "echo", 1)

        gone = pw.start_workflow("retired", {})
    return {
        "seq": pw.start_workflow("sequential", {"x": 1}),
        "seq2": pw.start_workflow("sequential", {"x": 2}),
        "cheap": pw.start_workflow("branching", {"amount": 5}),
        "graph": pw.start_workflow("diamond", {"n": 2, "m": 3}),
        "gated": pw.start_workflow("needs_approval", {}),
        "gone": gone,
    }


def changed_sequential():
    @pw.workflow
    def sequential(wf, data):
        total = wf.do("Add", "add", {"a": data["x"], "b": 1})
        wf.do("Audit", "echo", total)
        return wf.do("Double", "double", total)


def check(*args):
    out = io.StringIO()
    try:
        with nothing_called_nor_written():
            call_command("pikku_replay_check", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), exc.returncode
    return out.getvalue(), 0


def test_every_run_replays_on_unchanged_code_but_the_removed_workflow():
    runs = recorded_runs()
    text, code = check("--workflow", "sequential")
    assert code == 0
    assert text.strip().startswith("checked 2 runs of 1 workflow in ")
    assert text.strip().endswith("2 replay, 0 diverge")
    text, code = check()
    assert code == 1
    lines = text.strip().splitlines()
    assert lines[0].startswith(f"DIVERGES {runs['gone'].pk} retired [completed] "
                               "recorded='Only' asked=none: ")
    assert "not registered" in lines[0]
    assert lines[-1].endswith("5 replay, 1 diverge")


def test_changed_code_diverges_with_the_step_recorded_and_asked_in_text_and_junit():
    runs = recorded_runs()
    with new_code("sequential"):
        changed_sequential()
        text, code = check("--workflow", "sequential")
        assert code == 1
        assert f"DIVERGES {runs['seq'].pk} sequential [completed] recorded='Double' " \
               "asked='Audit': " in text
        assert text.strip().endswith("0 replay, 2 diverge")
        xml, code = check("--format", "junit")
    assert code == 1
    suite = ElementTree.fromstring(xml)
    assert (suite.get("tests"), suite.get("failures")) == ("6", "3")
    failed = {case.get("name"): case.find("failure") for case in suite
              if case.find("failure") is not None}
    assert set(failed) == {str(runs["seq"].pk), str(runs["seq2"].pk), str(runs["gone"].pk)}
    failure = failed[str(runs["seq"].pk)]
    assert failure.get("type") == "STEP_MISMATCH"
    assert "recorded: Double" in failure.text and "asked: Audit" in failure.text


def test_filters_by_status_since_and_limit():
    runs = recorded_runs()
    text, code = check("--status", "suspended")
    assert (code, text.strip().endswith("1 replay, 0 diverge")) == (0, True)
    text, _ = check("--limit", "2")
    assert text.strip().startswith("checked 2 runs")
    text, _ = check("--since", "2999-01-01")
    assert text.strip().startswith("checked 0 runs")
    WorkflowRun.objects.filter(pk=runs["gone"].pk).update(
        created_at="2001-01-01T00:00:00Z")
    text, code = check("--since", "2020-01-01T00:00:00")
    assert code == 0 and "checked 5 runs" in text
    with pytest.raises(CommandError, match="not a date"):
        call_command("pikku_replay_check", "--since", "yesterday")
    with pytest.raises(CommandError, match="at least 1"):
        call_command("pikku_replay_check", "--limit", "0")
    with pytest.raises(CommandError):
        call_command("pikku_replay_check", "--status", "sleeping")


def test_exported_runs_replay_in_a_test_suite_until_the_code_diverges(tmp_path):
    runs = recorded_runs()
    path = tmp_path / "runs.json"
    with nothing_called_nor_written():
        call_command("pikku_export_runs", "--output", str(path), "--workflow", "sequential",
                     stderr=io.StringIO())
    document = json.loads(path.read_text())
    assert document["format"] == "pikku_workflows.runs" and len(document["runs"]) == 2
    assert [s["step_name"] for s in document["runs"][0]["steps"]] == ["Add", "Double"]
    assert not (tmp_path / "runs.json.partial").exists()
    # Replayed from the file alone: the runs need not be in the database.
    WorkflowRun.objects.all().delete()
    with nothing_called_nor_written():
        assert assert_replays(path=str(path)) == 2
    with new_code("sequential"):
        changed_sequential()
        with nothing_called_nor_written(), pytest.raises(AssertionError) as failed:
            assert_replays(path=str(path))
        assert assert_replays(path=str(path), workflow="branching") == 0
    message = str(failed.value)
    assert message.startswith("2 of 2 recorded runs do not replay through the current code")
    assert f"run {runs['seq'].pk} (sequential, completed): recorded 'Double', asked " \
           "'Audit'" in message


def test_assert_replays_reads_the_database_by_workflow_and_run():
    runs = recorded_runs()
    assert assert_replays(workflow="diamond") == 1
    assert assert_replays(run_ids=[runs["seq"].pk, runs["gated"].pk]) == 2
    with pytest.raises(AssertionError, match="retired"):
        assert_replays(run_ids=[runs["gone"].pk])


def test_export_to_stdout_and_bad_exports(tmp_path):
    recorded_runs()
    out = io.StringIO()
    call_command("pikku_export_runs", "--workflow", "diamond", stdout=out)
    document = json.loads(out.getvalue())
    assert [s["step_name"] for s in document["runs"][0]["steps"]] == ["a", "b", "c", "join"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"runs": []}')
    with pytest.raises(ValueError, match="not a runs export"):
        read_exported_runs(str(bad))
    bad.write_text('{"format": "pikku_workflows.runs", "version": 1, "runs": [{"id": 1}]}')
    with pytest.raises(ValueError, match="run number 1 of the export is malformed"):
        read_exported_runs(str(bad))
    with pytest.raises(ValueError, match="cannot read"):
        read_exported_runs(str(tmp_path / "missing.json"))


def test_b12_seeds_runs_whose_check_finds_the_planted_divergences():
    from benchmarks import b12_replay_check

    with registry.isolated():
        importlib.reload(importlib.import_module("benchmarks.benchapp.workflows"))
        expected = b12_replay_check.seed(250)
        with nothing_called_nor_written():
            checked = list(check_runs(runs_to_check()))
    assert len(checked) == 250 and expected == 2
    diverging = [c.divergence for c in checked if c.divergence is not None]
    assert len(diverging) == expected
    assert {(d.step_recorded, d.step_asked) for d in diverging} == {("Old step 9", "Step 9")}
