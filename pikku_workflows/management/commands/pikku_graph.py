"""``manage.py pikku_graph NAME [--run ID] [--format json|mermaid|svg]``: print a graph."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...admin.graph_svg import definition_svg, run_svg
from ...engine import store
from ...exceptions import WorkflowError
from ...registry import registry


class Command(BaseCommand):
    help = "Print the step graph of a workflow (DSL or graph), optionally with a run's steps."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the registered workflow name")
        parser.add_argument("--run", help="overlay this run's step statuses")
        parser.add_argument("--format", choices=["json", "mermaid", "svg"], default="json",
                            help="svg: the drawing of the admin console's run page")

    def handle(self, *args: Any, **options: Any) -> None:
        run = None
        try:
            definition = registry.workflow(options["name"])
            statuses = {}
            if options["run"]:
                run = store.load_run(options["run"])
                if run.workflow != definition.name:
                    raise CommandError(f"run {run.pk} is a run of '{run.workflow}'")
                statuses = {s.step_name: s.status for s in store.load_steps(run.pk).values()}
        except WorkflowError as exc:
            raise CommandError(str(exc)) from None
        if options["format"] == "svg":
            self.stdout.write(run_svg(run) if run is not None else definition_svg(definition))
            return
        graph = definition.analysis.graph
        if options["format"] == "json":
            nodes = [{**n, "status": statuses.get(n.get("step_name") or "")}
                     if statuses else n for n in graph["nodes"]]
            self.stdout.write(json.dumps({"nodes": nodes, "edges": graph["edges"]}, indent=2))
        else:
            self.stdout.write(to_mermaid(graph, statuses))


def _label(text: str) -> str:
    return '"' + text.replace('"', "'") + '"'


def to_mermaid(graph: dict[str, Any], statuses: dict[str, str]) -> str:
    """The graph as a Mermaid flowchart; node classes carry the run's step statuses."""
    ids = {node["id"]: f"n{index}" for index, node in enumerate(graph["nodes"])}
    lines = ["flowchart TD"]
    for node in graph["nodes"]:
        shape = ("((", "))") if node["kind"] in ("start", "end") else ("[", "]")
        lines.append(f"  {ids[node['id']]}{shape[0]}{_label(node['label'])}{shape[1]}")
        status = statuses.get(node.get("step_name") or "")
        if status:
            lines.append(f"  class {ids[node['id']]} {status}")
    for edge in graph["edges"]:
        arrow = "-.->" if edge["kind"] in ("on_error", "loop") else "-->"
        label = f"|{_label(edge['label'])}|" if edge.get("label") else ""
        lines.append(f"  {ids[edge['source']]} {arrow}{label} {ids[edge['target']]}")
    return "\n".join(lines)
