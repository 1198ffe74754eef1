"""``output_serializer``: the validated output is what a run records; invalid output fails
the run with ``INVALID_OUTPUT`` and a message naming the fields. DSL and graph workflows,
inline (on the rq executor: tests/integration/test_output_serializer_on_rq.py)."""

from __future__ import annotations

import pytest
from rest_framework import serializers

import pikku_workflows as pw
from pikku_workflows.registry import registry


class OrderOutput(serializers.Serializer):
    status = serializers.ChoiceField(choices=["paid", "refunded"])
    total = serializers.IntegerField(min_value=0)
    note = serializers.CharField(required=False, default="none")


class Exploding(serializers.Serializer):
    total = serializers.IntegerField()

    def validate(self, attrs):
        raise RuntimeError("serializer bug")


@pytest.fixture
def workflows():
    """A DSL and a graph workflow, each with ``OrderOutput``, returning ``data["out"]``."""
    with registry.isolated():
        @pw.function(name="os_emit")
        def os_emit(data):
            return data

        @pw.function(name="os_emit_queued", queued=True)
        def os_emit_queued(data):
            return data

        @pw.workflow(name="os_dsl", output_serializer=OrderOutput)
        def os_dsl(wf, data):
            fn = "os_emit_queued" if data.get("queued") else "os_emit"
            return wf.do("Emit", fn, data["out"])

        pw.graph_workflow("os_graph", nodes={"emit": "os_emit", "again": "os_emit"},
                          config={"emit": {"next": "again"},  # gets the whole run input
                                  "again": {"input": {"status": pw.ref("emit", "out.status"),
                                                      "total": pw.ref("emit", "out.total")}}},
                          output="again", output_serializer=OrderOutput)

        @pw.workflow(name="os_exploding", output_serializer=Exploding)
        def os_exploding(wf, data):
            return {"total": 1}

        yield


def _check_valid(run):
    run.refresh_from_db()
    assert run.status == "completed", run.error
    # The validated data: "total" coerced to an int, the default "note" filled in.
    assert run.output == {"status": "paid", "total": 12, "note": "none"}
    assert pw.get_run_status(run.pk)["output"] == run.output


def _check_invalid(run):
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error["code"] == "INVALID_OUTPUT"
    message = run.error["message"]
    assert message.startswith(f"the output of workflow '{run.workflow}' is invalid "
                              "(OrderOutput): ")
    assert "status: " in message and "is not a valid choice" in message
    assert "total: Ensure this value is greater than or equal to 0." in message
    assert "ErrorDetail" not in message and "[" not in message
    assert run.output is None


GOOD = {"status": "paid", "total": "12"}
BAD = {"status": "lost", "total": -1}


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["os_dsl", "os_graph"])
def test_inline_output_is_the_validated_data(workflows, name):
    _check_valid(pw.start_workflow(name, {"out": GOOD}))
    assert pw.run_to_completion(name, {"out": GOOD}) == {"status": "paid", "total": 12,
                                                         "note": "none"}


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["os_dsl", "os_graph"])
def test_inline_invalid_output_fails_the_run_naming_the_fields(workflows, name):
    _check_invalid(pw.start_workflow(name, {"out": BAD}))
    with pytest.raises(pw.WorkflowRunFailedError):
        pw.run_to_completion(name, {"out": BAD})


@pytest.mark.django_db
def test_a_serializer_that_raises_fails_the_run_with_invalid_output(workflows):
    run = pw.start_workflow("os_exploding", {})
    assert run.status == "failed" and run.error["code"] == "INVALID_OUTPUT"
    assert "Exploding" in run.error["message"] and "serializer bug" in run.error["message"]


@pytest.mark.django_db
def test_the_rest_api_answers_the_validated_output_or_422(workflows, admin_client):
    ok = admin_client.post("/api/workflows/workflows/os_dsl/run/", {"data": {"out": GOOD}},
                           content_type="application/json")
    assert ok.status_code == 200 and ok.json()["output"]["total"] == 12
    bad = admin_client.post("/api/workflows/workflows/os_graph/run/", {"data": {"out": BAD}},
                            content_type="application/json")
    assert bad.status_code == 422, bad.content
    assert bad.json()["code"] == "INVALID_OUTPUT"


def test_a_serializer_must_be_a_class():
    with registry.isolated():
        with pytest.raises(pw.WorkflowDefinitionError, match="output_serializer must be a "
                                                             "serializer class"):
            @pw.workflow(name="os_bad_decl", output_serializer=OrderOutput())
            def os_bad_decl(wf, data):
                return None
        with pytest.raises(pw.WorkflowDefinitionError, match="input_serializer"):
            pw.graph_workflow("os_bad_graph", nodes={"a": "os_emit"},
                              input_serializer="OrderInput")


@pytest.mark.django_db
def test_graph_input_serializer_is_applied(workflows):
    class GraphInput(serializers.Serializer):
        out = serializers.DictField()

    with registry.isolated():
        pw.graph_workflow("os_graph_in", nodes={"emit": "os_emit"},
                          input_serializer=GraphInput)
        with pytest.raises(pw.WorkflowInputError) as refused:
            pw.start_workflow("os_graph_in", {"out": 3})
        assert "out" in refused.value.errors
        assert pw.run_to_completion("os_graph_in", {"out": {"a": 1}}) == {"emit": {"out": {"a": 1}}}


class Booking(serializers.Serializer):
    day = serializers.DateField()
    price = serializers.DecimalField(max_digits=6, decimal_places=2)


@pytest.mark.django_db
def test_serializers_with_dates_and_decimals_store_their_representation():
    """JSON holds no date or Decimal: the run keeps what the serializer shows of them."""
    with registry.isolated():
        @pw.workflow(name="os_booking", input_serializer=Booking, output_serializer=Booking)
        def os_booking(wf, data):
            assert data == {"day": "2026-12-04", "price": "12.50"}  # what replays see
            return {"day": "2026-12-05", "price": 3}

        run = pw.start_workflow("os_booking", {"day": "2026-12-04", "price": "12.5"},
                                inline=True)
    run.refresh_from_db()
    assert run.status == "completed", run.error
    assert run.input == {"day": "2026-12-04", "price": "12.50"}
    assert run.output == {"day": "2026-12-05", "price": "3.00"}
