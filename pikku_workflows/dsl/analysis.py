"""Static analysis of a DSL workflow body (never executed): its version hash."""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class WorkflowAnalysis:
    """What the analysis learned about a workflow body."""

    graph_hash: str
    deterministic: bool = False
    planned_steps: list[dict[str, Any]] = field(default_factory=list)
    graph: dict[str, Any] = field(default_factory=lambda: {"nodes": [], "edges": []})


def _function_node(fn: Callable) -> ast.AST | None:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == fn.__name__:
            return node
    return None


def normalized_source(fn: Callable) -> str:
    """The function's AST without decorators, docstring or positions, as text."""
    node = _function_node(fn)
    if node is None:
        # No source (built in a REPL or by exec): fall back to the compiled code.
        code = getattr(fn, "__code__", None)
        return repr((code.co_code, code.co_consts, code.co_names)) if code else repr(fn)
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    node.decorator_list = []
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        node.body = body[1:] or [ast.Pass()]
    return ast.dump(node, annotate_fields=True, include_attributes=False)


def analyse_workflow(fn: Callable) -> WorkflowAnalysis:
    """Analyse a DSL workflow body and return its hash (first 12 hex of sha256)."""
    digest = hashlib.sha256(normalized_source(fn).encode()).hexdigest()[:12]
    return WorkflowAnalysis(graph_hash=digest)
