"""Static analysis of a DSL workflow body (never executed): step graph, plan and version hash."""

from __future__ import annotations

import ast
import copy
import hashlib
import inspect
import json
import logging
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_STEP_CALLS = frozenset({"do", "sleep", "suspend", "approval", "parallel", "cancel",
                         "wait_for_event", "recv"})
# Reading run metadata or state records no step, so these uses of `wf` need no node
# (``patched`` records a marker, not a step: the branch it decides is drawn).
_HARMLESS = frozenset({"get_state", "set_state", "get_run", "run_id", "name", "owner_id",
                       "patched"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# Code that runs later (or never): a `return` inside it does not end the workflow.
_SCOPES = (*_FUNCTIONS, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_SIMPLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Assert, ast.Delete,
           ast.Pass, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal)
# A literal ``description`` is the node's too: the console shows it in the tooltip.
_DO_OPTIONS = ("retries", "retry_delay", "timeout", "description")
_APPROVAL_OPTIONS = ("expiry", "approvers", "approver_permission", "timeout")

# A dangling edge waiting for the next node: (source id, label, kind).
Exit = tuple[str, str | None, str]

logger = logging.getLogger("pikku_workflows.analysis")


@dataclass(frozen=True)
class WorkflowAnalysis:
    """What the analysis learned about a workflow body."""

    graph_hash: str
    deterministic: bool = False
    planned_steps: list[dict[str, Any]] = field(default_factory=list)
    graph: dict[str, Any] = field(default_factory=lambda: {"nodes": [], "edges": []})


def _locate(fn: Callable[..., object]) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, int] | None:
    """The function's AST node and the file line its source starts on, if readable."""
    try:
        lines, first_line = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, ValueError, RecursionError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, _FUNCTIONS) and node.name == getattr(fn, "__name__", None):
            return node, max(first_line, 1)
    return None


def _normalized(fn: Callable[..., object],
                node: ast.FunctionDef | ast.AsyncFunctionDef | None) -> str:
    if node is None:
        # No source (built in a REPL or by exec): fall back to the compiled code.
        code = getattr(fn, "__code__", None)
        return repr((code.co_code, code.co_consts, code.co_names)) if code else repr(fn)
    stripped = copy.copy(node)
    stripped.decorator_list = []
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        stripped.body = body[1:] or [ast.Pass()]
    return ast.dump(stripped, annotate_fields=True, include_attributes=False)


def normalized_source(fn: Callable[..., object]) -> str:
    """Return the function's AST without decorators, docstring or positions, as text.

    Args:
        fn: The workflow function.

    Returns:
        A dump of the AST, or a representation of the compiled code if no source exists.
    """
    located = _locate(fn)
    return _normalized(fn, located[0] if located else None)


def _node(kind: str, node_id: str, label: str, line: int, *, step_name: str | None = None,
          rpc_name: str | None = None, dynamic: bool = False, **extra: Any) -> dict[str, Any]:
    node = {"id": node_id, "kind": kind, "label": label, "step_name": step_name,
            "rpc_name": rpc_name, "dynamic": dynamic, "line": line}
    node.update({key: value for key, value in extra.items() if value is not None})
    return node


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _literal(expr: ast.AST | None) -> Any:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str | int | float | bool):
        return expr.value
    return None


def _callee(expr: ast.AST | None) -> str | None:
    """The registered name a function argument refers to, when the code shows it."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.Name):
        return expr.id
    return expr.attr if isinstance(expr, ast.Attribute) else None


def _name_text(expr: ast.AST | None) -> tuple[str, bool]:
    """A step name as text, and whether it is a literal (else a ``{expr}`` template)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value, True
    if isinstance(expr, ast.JoinedStr):
        parts, literal = [], True
        for part in expr.values:
            if isinstance(part, ast.FormattedValue):
                parts.append("{" + ast.unparse(part.value) + "}")
                literal = False
            elif isinstance(part, ast.Constant):
                parts.append(str(part.value))
        return "".join(parts), literal
    return "{" + (ast.unparse(expr) if expr is not None else "?") + "}", False


def _display_name(reason: str) -> str:
    """A gate's label: its reason as the user typed it ("Manager sign-off"), the same
    text as the step's ``label`` in the API (punctuation and case kept)."""
    return reason


def _arg(call: ast.Call, index: int, name: str) -> ast.expr | None:
    if len(call.args) > index:
        return call.args[index]
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def _returns(node: ast.AST) -> bool:
    """Whether a ``return`` of this scope (not of a nested function) sits in ``node``."""
    stack = [] if isinstance(node, _SCOPES) else [node]
    while stack:
        sub = stack.pop()
        if isinstance(sub, ast.Return):
            return True
        stack.extend(child for child in ast.iter_child_nodes(sub)
                     if not isinstance(child, _SCOPES))
    return False


def _region_label(node: ast.AST) -> str:
    """The header of a statement (``while x``, ``try``, ``def f()``) or an expression."""
    lines = [line for line in ast.unparse(node).splitlines() if not line.startswith("@")]
    return _short(lines[0].rstrip(":") if lines else type(node).__name__.lower())


class _GraphBuilder:
    """Walks a workflow body once, in source order, emitting nodes and edges."""

    def __init__(self, func: ast.FunctionDef | ast.AsyncFunctionDef, first_line: int) -> None:
        params = [*func.args.posonlyargs, *func.args.args]
        self.func = func
        self.wf = params[0].arg if params else None
        self.offset = first_line - 1
        self.nodes: list[dict[str, Any]] = []
        self.edges: list[dict[str, Any]] = []
        self.graph = {"nodes": self.nodes, "edges": self.edges}
        self.ids = {"start", "end"}
        self.counters: dict[str, int] = {}
        self.ordinals: dict[str, int] = {}
        self.planned: list[dict[str, Any]] = []
        self.flags: set[str] = set()  # of "branch", "loop", "unknown", "dynamic"
        self.depth = 0  # > 0 inside loops, fan-outs and unknown regions: keys vary there
        self.loops: list[tuple[str, list[Exit]]] = []  # (loop id, its break exits)
        self.closures = {sub.name for sub in ast.walk(func)
                         if isinstance(sub, _FUNCTIONS) and sub is not func}
        self.closures |= {target.id for sub in ast.walk(func)
                          if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Lambda)
                          for target in sub.targets if isinstance(target, ast.Name)}

    def build(self) -> None:
        self.nodes.append(_node("start", "start", "start", self.offset + self.func.lineno))
        self._connect(self._block(self.func.body, [("start", None, "next")]), "end")
        end_line = self.offset + (self.func.end_lineno or self.func.lineno)
        self.nodes.append(_node("end", "end", "end", end_line))

    # --- graph primitives ---------------------------------------------------------------

    def _connect(self, exits: list[Exit], target: str, kind: str | None = None) -> None:
        for source, label, exit_kind in exits:
            edge = {"source": source, "target": target, "label": label,
                    "kind": kind or exit_kind}
            if edge not in self.edges:
                self.edges.append(edge)

    def _add(self, exits: list[Exit], kind: str, at: ast.AST, label: str, *,
             key: str | None = None, literal: bool = True, **extra: Any) -> str:
        """Add a node, attach the dangling exits to it and return its id."""
        node_id = key if key is not None and literal and key not in self.ids else ""
        while not node_id or node_id in self.ids:
            self.counters[kind] = self.counters.get(kind, 0) + 1
            node_id = f"{kind}_{self.counters[kind]}"
        if not literal:
            self.flags.add("dynamic")
        self.ids.add(node_id)
        line = self.offset + getattr(at, "lineno", self.func.lineno)
        self.nodes.append(_node(kind, node_id, label, line, step_name=key,
                                dynamic=not literal or self.depth > 0, **extra))
        self._connect(exits, node_id)
        return node_id

    def _step(self, exits: list[Exit], kind: str, at: ast.AST, name: str, literal: bool,
              label: str | None = None, **extra: Any) -> str:
        """Add a node for a step the run records under its physical key (``name#N``)."""
        key = name
        if literal:
            seen = self.ordinals.get(name, 0)
            self.ordinals[name] = seen + 1
            key = f"{name}#{seen}" if seen else name
        entry = {"step_name": key}
        if kind in ("suspend", "approval"):
            entry["display_name"] = label or key
        self.planned.append(entry)
        return self._add(exits, kind, at, label or key, key=key, literal=literal, **extra)

    def _is_wf(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == self.wf

    def _method(self, call: ast.Call) -> str | None:
        func = call.func
        return func.attr if isinstance(func, ast.Attribute) and self._is_wf(func.value) else None

    def _relevant(self, node: ast.AST) -> bool:
        """Whether a construct can record steps or end the run, so it must be drawn."""
        receivers: set[int] = set()
        for sub in ast.walk(node):  # breadth first: an attribute comes before its receiver
            if isinstance(sub, ast.Attribute) and self._is_wf(sub.value):
                receivers.add(id(sub.value))
                if sub.attr not in _HARMLESS:
                    return True
            elif self._is_wf(sub) and id(sub) not in receivers:
                return True
        return _returns(node)

    # --- statements -----------------------------------------------------------------------

    def _block(self, body: list[ast.stmt], exits: list[Exit]) -> list[Exit]:
        for stmt in body:
            if not exits:  # after return, cancel, raise, break or continue: dead code
                break
            exits = self._stmt(stmt, exits)
        return exits

    def _stmt(self, stmt: ast.stmt, exits: list[Exit]) -> list[Exit]:
        if isinstance(stmt, _SIMPLE):
            return self._visit(stmt, exits)
        if isinstance(stmt, ast.Return | ast.Raise):
            value = stmt.value if isinstance(stmt, ast.Return) else stmt.exc
            exits = self._visit(value, exits) if value is not None else exits
            label = "return" if isinstance(stmt, ast.Return) else _short(ast.unparse(stmt))
            return self._terminal(exits, "return", stmt, label)
        if isinstance(stmt, ast.Break | ast.Continue) and self.loops:
            loop, breaks = self.loops[-1]
            if isinstance(stmt, ast.Break):
                breaks.extend(exits)
            else:
                self._connect(exits, loop, "loop")
            return []
        if not self._relevant(stmt):
            return exits
        if isinstance(stmt, ast.If):
            return self._if(stmt, exits)
        if isinstance(stmt, ast.For | ast.AsyncFor):
            loop, breaks = self._loop(stmt, stmt.target, stmt.iter, exits,
                                      lambda entry: self._block(stmt.body, entry))
            return self._block(stmt.orelse, [(loop, None, "next")]) + breaks
        # try, while, with, match, nested definitions: they run as written, drawn opaque.
        return self._region(stmt, exits, _region_label(stmt))

    def _terminal(self, exits: list[Exit], kind: str, at: ast.AST, label: str,
                  **extra: Any) -> list[Exit]:
        node_id = self._add(exits, kind, at, label, **extra)
        self._connect([(node_id, None, "next")], "end")
        return []

    def _if(self, stmt: ast.If, exits: list[Exit]) -> list[Exit]:
        exits = self._visit(stmt.test, exits)
        condition = ast.unparse(stmt.test)
        branch = self._add(exits, "branch", stmt, _short(condition), condition=condition)
        self.flags.add("branch")
        arms, current = [(condition, stmt.body)], stmt
        # An elif whose test records steps stays a nested branch: it only runs on that path.
        while len(current.orelse) == 1 and isinstance(current.orelse[0], ast.If) \
                and not self._relevant(current.orelse[0].test):
            current = current.orelse[0]
            arms.append((f"elif {ast.unparse(current.test)}", current.body))
        arms.append(("else", current.orelse))
        before, out = self.ordinals, []
        merged: dict[str, int] = {}
        for label, body in arms:
            self.ordinals = dict(before)  # only one arm runs: each counts from the fork
            out += self._block(body, [(branch, label, "branch")])
            for name, seen in self.ordinals.items():
                merged[name] = max(seen, merged.get(name, 0))
        self.ordinals = merged
        return out

    def _loop(self, at: ast.AST, target: ast.expr, iterable: ast.expr, exits: list[Exit],
              body: Callable[[list[Exit]], list[Exit]]) -> tuple[str, list[Exit]]:
        """A loop node, its body entered by a loop edge and closed by a back edge."""
        exits = self._visit(iterable, exits)
        text = ast.unparse(iterable)
        loop = self._add(exits, "loop", at, _short(f"for {ast.unparse(target)} in {text}"),
                         iterable=text)
        self.flags.add("loop")
        self.depth += 1
        self.loops.append((loop, []))
        self._connect(body([(loop, None, "loop")]), loop, "loop")
        self.depth -= 1
        return self.loops.pop()

    def _region(self, node: ast.AST, exits: list[Exit], label: str) -> list[Exit]:
        """An opaque region: its step calls are chained in source order, all dynamic."""
        region = self._add(exits, "unknown", node, label, literal=False)
        self.flags.add("unknown")
        self.depth += 1
        inner: list[Exit] = [(region, None, "next")]
        calls = [sub for sub in ast.walk(node)
                 if isinstance(sub, ast.Call) and self._method(sub) in _STEP_CALLS]
        # Arguments run before the call holding them, so order calls by where they end.
        for call in sorted(calls, key=lambda c: (c.end_lineno or 0, c.end_col_offset or 0)):
            inner = self._call(call, self._method(call) or "", inner) or inner
        self.depth -= 1
        if _returns(node):
            self._connect([(region, "return", "next")], "end")
        return inner

    # --- expressions ----------------------------------------------------------------------

    def _visit(self, node: ast.AST, exits: list[Exit]) -> list[Exit]:
        """Emit the steps an expression (or simple statement) records, in evaluation order."""
        children: list[ast.AST] = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.Call):
            method = self._method(node)
            arguments = [*node.args, *(kw.value for kw in node.keywords)]
            if method in _STEP_CALLS:
                # A step's function and parallel's calls are the steps: they don't run first.
                steps_arg = {"do": (1, "fn_or_name"), "parallel": (0, "calls")}.get(method or "")
                own = _arg(node, *steps_arg) if steps_arg else None
                exits = self._visit_all([arg for arg in arguments if arg is not own], exits)
                return self._call(node, method or "", exits)
            if (method is not None and method not in _HARMLESS) \
                    or any(self._is_wf(arg) for arg in arguments):
                # `wf` handed to a helper or an unknown method: steps may happen in there.
                return self._region(node, exits, _region_label(node))
        elif isinstance(node, ast.Attribute) and self._is_wf(node.value):
            if node.attr not in _HARMLESS:  # `f = wf.do` and the like: calls are out of sight
                return self._region(node, exits, _region_label(node))
            return exits
        elif self._is_wf(node):
            return self._region(node, exits, _region_label(node))
        elif isinstance(node, _COMPREHENSIONS) and self._relevant(node):
            first = node.generators[0]
            children = [part for gen in node.generators for part in gen.ifs]
            children += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            loop, _ = self._loop(node, first.target, first.iter, exits,
                                 lambda entry: self._visit_all(children, entry))
            return [(loop, None, "next")]
        elif isinstance(node, ast.Lambda | ast.IfExp | ast.BoolOp) and self._relevant(node):
            # Runs later, conditionally or not at all: which steps happen is unknown here.
            return self._region(node, exits, _region_label(node))
        return self._visit_all(children, exits)

    def _visit_all(self, nodes: list[Any], exits: list[Exit]) -> list[Exit]:
        for node in nodes:
            exits = self._visit(node, exits)
        return exits

    def _call(self, call: ast.Call, method: str, exits: list[Exit]) -> list[Exit]:
        if method == "do":
            return self._do(_arg(call, 0, "step_name"), _arg(call, 1, "fn_or_name"),
                            call.keywords, exits, call)
        if method == "parallel":
            return self._parallel(call, exits)
        if method == "cancel":
            reason = _literal(_arg(call, 0, "reason"))
            label = "cancel" if reason is None else _short(f"cancel: {reason}")
            return self._terminal(exits, "cancel", call, label, reason=reason)
        if method == "sleep":
            name, literal = _name_text(_arg(call, 0, "step_name"))
            duration = _literal(_arg(call, 1, "duration"))
            return [(self._step(exits, "sleep", call, name, literal, duration=duration),
                     None, "next")]
        if method == "wait_for_event":
            name, literal = _name_text(_arg(call, 0, "step_name"))
            return [(self._step(exits, "event", call, name, literal,
                                event=_literal(_arg(call, 1, "event")),
                                event_key=_literal(_arg(call, 2, "key")),
                                timeout=_literal(_arg(call, 3, "timeout"))), None, "next")]
        if method == "recv":
            name, literal = _name_text(_arg(call, 0, "step_name"))
            topic = _arg(call, 1, "topic")
            return [(self._step(exits, "message", call, name, literal,
                                topic="default" if topic is None else _literal(topic),
                                timeout=_literal(_arg(call, 2, "timeout"))), None, "next")]
        reason, literal = _name_text(_arg(call, 0, "reason"))
        options = {kw.arg: _literal(kw.value) for kw in call.keywords
                   if kw.arg in _APPROVAL_OPTIONS}
        node_id = self._step(exits, method, call, f"__workflow_{method}:{reason}", literal,
                             _display_name(reason), reason=reason if literal else None,
                             **options)
        return [(node_id, None, "next")]

    def _do(self, name_expr: ast.expr | None, fn: ast.expr | None,
            keywords: list[ast.keyword], exits: list[Exit], at: ast.AST) -> list[Exit]:
        inline = isinstance(fn, ast.Lambda) or (isinstance(fn, ast.Name) and fn.id in self.closures)
        on_error = next((_callee(kw.value) for kw in keywords if kw.arg == "on_error"), None)
        options = {kw.arg: _literal(kw.value) for kw in keywords if kw.arg in _DO_OPTIONS}
        name, literal = _name_text(name_expr)
        node_id = self._step(exits, "inline" if inline else "step", at, name, literal,
                             rpc_name=None if inline else _callee(fn), on_error=on_error,
                             **options)
        if on_error is not None:
            key = f"{self.nodes[-1]['step_name']}:onError"
            compensation = self._add([(node_id, "on error", "on_error")], "step", at, key,
                                     key=key, literal=literal, rpc_name=on_error)
            self._connect([(compensation, "failed", "next")], "end")
        return [(node_id, None, "next")]

    def _parallel(self, call: ast.Call, exits: list[Exit]) -> list[Exit]:
        calls = _arg(call, 0, "calls")
        options = [kw for kw in call.keywords if kw.arg != "calls"]
        label, iterable, items = "parallel", None, []
        if isinstance(calls, ast.List | ast.Tuple):
            items = calls.elts
        else:  # a comprehension, or calls built elsewhere: as many steps as the data says
            self.flags.add("loop")
        if isinstance(calls, ast.ListComp | ast.GeneratorExp):
            items, first = [calls.elt], calls.generators[0]
            iterable = ast.unparse(first.iter)
            label = _short(f"parallel for {ast.unparse(first.target)} in {iterable}")
        fan_out = not isinstance(calls, ast.List | ast.Tuple)
        node_id = self._add(exits, "parallel", call, label, fan_out=fan_out or None,
                            iterable=iterable)
        out: list[Exit] = []
        self.depth += int(fan_out)
        for item in items:
            if isinstance(item, ast.Tuple | ast.List) and 2 <= len(item.elts) <= 3 \
                    and not any(isinstance(part, ast.Starred) for part in item.elts):
                out += self._do(item.elts[0], item.elts[1], options,
                                [(node_id, None, "next")], item)
            else:
                self.flags.add("dynamic")  # a call built elsewhere: its name is unknown
        self.depth -= int(fan_out)
        return out or [(node_id, None, "next")]


def _build(func: ast.FunctionDef | ast.AsyncFunctionDef, first_line: int) -> _GraphBuilder | None:
    try:
        builder = _GraphBuilder(func, first_line)
        builder.build()
    except Exception:  # a bug here must never stop a workflow from registering or running
        logger.exception("the step graph of %s (line %d) could not be drawn; its runs are "
                         "not affected (please report this)", func.name, first_line)
        return None
    return builder


def _opaque_graph(fn: Callable[..., object]) -> dict[str, Any]:
    line = getattr(getattr(fn, "__code__", None), "co_firstlineno", 0)
    nodes = [_node("start", "start", "start", line),
             _node("unknown", "unknown_1", "source unavailable", line, dynamic=True),
             _node("end", "end", "end", line)]
    edges = [{"source": source, "target": target, "label": None, "kind": "next"}
             for source, target in (("start", "unknown_1"), ("unknown_1", "end"))]
    return {"nodes": nodes, "edges": edges}


def _graph_hash(source: str, graph: dict[str, Any]) -> str:
    # Lines are left out so that moving a function in its file keeps its version.
    nodes = [{key: value for key, value in node.items() if key != "line"}
             for node in graph["nodes"]]
    canonical = json.dumps({"nodes": nodes, "edges": graph["edges"]}, sort_keys=True,
                           separators=(",", ":"))
    return hashlib.sha256((source + canonical).encode()).hexdigest()[:12]


def analyse_workflow(fn: Callable[..., object]) -> WorkflowAnalysis:
    """Analyse a DSL workflow body without running it.

    Args:
        fn: The workflow function ``fn(wf, data)``.

    Returns:
        The step graph, the planned steps, whether that plan is deterministic, and the
        version hash (first 12 hex digits of a sha256). Odd or unreadable code never
        raises: what cannot be modelled becomes an ``unknown`` node.
    """
    located = _locate(fn)
    source = _normalized(fn, located[0] if located else None)
    builder = _build(*located) if located else None
    if builder is None:
        graph, flags, steps = _opaque_graph(fn), {"unknown"}, []
    else:
        graph, flags, steps = builder.graph, builder.flags, builder.planned
    planned: list[dict[str, Any]] = []
    for step in steps if not flags & {"loop", "unknown", "dynamic"} else []:
        if all(step["step_name"] != seen["step_name"] for seen in planned):
            planned.append(step)  # arms naming the same step plan it once
    return WorkflowAnalysis(graph_hash=_graph_hash(source, graph), deterministic=not flags,
                            planned_steps=planned, graph=graph)


def patch_ids(fn: Callable[..., object]) -> list[str]:
    """The patch ids a DSL workflow body names literally in ``wf.patched("...")`` calls.

    Args:
        fn: The workflow function ``fn(wf, data)``.

    Returns:
        The ids, each once; none when the source
        cannot be read.
    """
    located = _locate(fn)
    if located is None:
        return []
    found: list[str] = []
    for node in ast.walk(located[0]):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "patched" and node.args:
            value = _literal(node.args[0])
            if isinstance(value, str) and value not in found:
                found.append(value)
    return found
