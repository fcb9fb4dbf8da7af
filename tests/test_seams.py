"""Module seams, checked on the source: no reach-ins to another module's private attributes and
no import cycle among trainmon's modules at import time.

Rule for private attributes: ``x._name`` is fine on ``self``/``cls``, and inside the module whose
classes define ``_name`` (a class's own module may use its internals, e.g. a closure built by a
method, or a module-level hook calling ``monitor._forked()``). Anything else goes through a public,
documented interface (``Monitor.emit_checked``, ``Monitor.progress``, ``Monitor.add_observer``),
except the third-party private APIs allowed below, each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "trainmon"

# (module path relative to src/trainmon, expression) -> why trainmon may use it.
THIRD_PARTY_PRIVATE = {
    (
        "collect/instrument/gradnorm.py",
        "torch._foreach_norm",
    ): "torch's fused multi-tensor norm (no public API)",
    ("collect/meters.py", "torch._foreach_norm"): "torch's fused multi-tensor norm (no public API)",
    (
        "collect/layer_stats.py",
        "torch._foreach_norm",
    ): "torch's fused multi-tensor norm (no public API)",
    (
        "collect/layer_stats.py",
        "torch._foreach_mul",
    ): "torch's fused multi-tensor ops (no public API)",
    (
        "collect/layer_stats.py",
        "torch._foreach_sub_",
    ): "torch's fused multi-tensor ops (no public API)",
    ("core/values.py", "torch._C"): "torch's C extension types (_TensorBase) for fast type checks",
    (
        "integrations/engine.py",
        "_utils._flatten_dense_tensors",
    ): "torch._utils bucket flattening, as DDP does",
    (
        "integrations/engine.py",
        "_utils._unflatten_dense_tensors",
    ): "torch._utils bucket flattening, as DDP does",
    (
        "collect/comms.py",
        "sys._getframe",
    ): "caller name for debug comms records, cheaper than inspect",
    ("alerts/watchdog.py", "sys._current_frames"): "stack dump of the stalled training thread",
    ("alerts/hang.py", "sys._current_frames"): "the stalled training thread's innermost frames",
    (
        "alerts/sinks/webhook.py",
        "parts._replace",
    ): "namedtuple's documented _replace (urllib SplitResult)",
    ("integrations/deepspeed.py", "engine._config"): "DeepSpeed engine's parsed config (no getter)",
    (
        "writers/wandb.py",
        "term._silent",
    ): "wandb's console switch, to keep its banner off rank logs",
    ("logging.py", "base._trainmon_configured"): "trainmon's own marker on a stdlib logger",
}


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(SRC).as_posix(), ast.parse(path.read_text(), str(path)))
        for path in sorted(SRC.rglob("*.py"))
        if "vendor" not in path.parts
    ]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _owned_names(tree: ast.Module) -> set[str]:
    """Private names the module's own classes define: methods, class attributes, ``self._x``."""
    owned: set[str] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != cls.name:
                owned.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in ("self", "cls"):
                    owned.add(node.attr)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                owned.update(t.id for t in targets if isinstance(t, ast.Name))
        slots = [n for n in cls.body if isinstance(n, ast.Assign)]
        for node in slots:
            if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
                owned.update(
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
    return {name for name in owned if _private(name)}


def test_no_module_reads_another_modules_private_attributes() -> None:
    reach_ins = []
    used_allowances = set()
    for rel, tree in _modules():
        owned = _owned_names(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            key = (rel, ast.unparse(node))
            if key in THIRD_PARTY_PRIVATE:
                used_allowances.add(key)
                continue
            if node.attr in owned:
                continue
            reach_ins.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not reach_ins, "private attributes read across modules:\n" + "\n".join(reach_ins)
    stale = set(THIRD_PARTY_PRIVATE) - used_allowances
    assert not stale, f"allow-list entries no longer used (remove them): {sorted(stale)}"


def _module_name(rel: str) -> str:
    parts = ["trainmon", *rel[: -len(".py")].split("/")]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_nodes(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements run at import: the module body, into if/try blocks, minus TYPE_CHECKING ones."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.If):
            if not _is_type_checking(stmt.test):
                out += _import_time_nodes(stmt.body)
            out += _import_time_nodes(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                out += _import_time_nodes(block)
        elif isinstance(stmt, ast.With):
            out += _import_time_nodes(stmt.body)
        else:
            out.append(stmt)
    return out


def import_graph(every: bool = False) -> dict[str, set[str]]:
    """trainmon module -> trainmon modules it imports at import time (explicit imports only);
    with ``every``, also under ``TYPE_CHECKING`` and inside functions (lazy imports)."""
    modules = {_module_name(rel): (rel, tree) for rel, tree in _modules()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (rel, tree) in modules.items():
        package = name if rel.endswith("__init__.py") else name.rpartition(".")[0]
        nodes = ast.walk(tree) if every else _import_time_nodes(tree.body)
        for stmt in nodes:
            targets: list[str] = []
            if isinstance(stmt, ast.Import):
                targets = [alias.name for alias in stmt.names]
            elif isinstance(stmt, ast.ImportFrom):
                base = stmt.module or ""
                if stmt.level:
                    anchor = package.split(".")[: len(package.split(".")) - stmt.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in stmt.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_trainmon_modules() -> None:
    graph = import_graph()
    assert graph["trainmon.monitor"], "the import graph found no imports: the walker is broken"
    cycles = _cycles(graph)
    assert not cycles, "import cycles at import time:\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_no_import_cycle_even_counting_type_checking_and_lazy_imports() -> None:
    """A type-only or in-function import is still a dependency: none of them closes a cycle
    (the composition root hands layers below it the Monitor as core's MonitorHandle)."""
    cycles = _cycles(import_graph(every=True))
    assert not cycles, "import cycles (type-checking and lazy imports included):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_core_imports_nothing_above_it() -> None:
    """core is the floor: it imports only core and the shared top-level modules, even lazily."""
    graph = import_graph(every=True)
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        if name.startswith("trainmon.core")
        for target in targets
        if (target.split(".")[1:2] and target.split(".")[1] in LAYERS - {"core"})
        or target == "trainmon.monitor"
    )
    assert not upward, "core imports upward:\n" + "\n".join(upward)


def test_cycle_finder_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


# ---- layers ----------------------------------------------------------------------------------

#: What each layer package may import from trainmon besides itself and the shared top-level
#: modules (config, errors, logging, journal, redact, extras, version). A prefix allows a
#: package or one module. ``cli`` and the package's own ``__init__`` may import anything.
LAYER_MAY_IMPORT = {
    "core": ("core",),  # the floor: contracts, values, the pipeline and the writer lanes
    "collect": ("collect", "core"),
    "writers": ("writers", "core"),
    "alerts": ("alerts", "core", "writers"),
    "integrations": ("integrations", "collect", "core", "writers"),
    "report": ("report", "core.aggregate", "core.records", "core.alert", "writers.console"),
}

#: (module, import) -> why this module may reach across the rule above.
LAYER_EXCEPTIONS = {
    ("alerts/engine.py", "collect.layer_stats"): "alerts name the layers whose norms moved",
}

LAYERS = {"core", "collect", "writers", "alerts", "integrations", "report", "cli"}


def _trainmon_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """Every ``trainmon.*`` import (lazy ones too), without the ``trainmon.`` prefix."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "trainmon":
                found += [(node.lineno, alias.name) for alias in node.names]
            elif node.module.startswith("trainmon."):
                found.append((node.lineno, node.module.removeprefix("trainmon.")))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, alias.name.removeprefix("trainmon."))
                for alias in node.names
                if alias.name.startswith("trainmon.")
            ]
    return found


def _allowed(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def test_each_layer_imports_only_the_layers_below_it() -> None:
    """Each layer imports only what LAYER_MAY_IMPORT allows: none reaches up to a driver or a
    producer, except the listed facade imports."""
    crossings = []
    used = set()
    for rel, tree in _modules():
        layer = rel.split("/")[0]
        if layer not in LAYER_MAY_IMPORT:
            continue
        for line, target in _trainmon_imports(tree):
            if target.split(".")[0] not in LAYERS or _allowed(target, LAYER_MAY_IMPORT[layer]):
                continue
            allowance = next(
                (key for key in LAYER_EXCEPTIONS if key[0] == rel and _allowed(target, (key[1],))),
                None,
            )
            if allowance:
                used.add(allowance)
                continue
            crossings.append(f"{rel}:{line}: imports trainmon.{target}")
    assert not crossings, "imports across the layers:\n" + "\n".join(crossings)
    stale = set(LAYER_EXCEPTIONS) - used
    assert not stale, f"layer exceptions no longer used (remove them): {sorted(stale)}"


def test_only_drivers_and_the_command_line_import_the_drivers() -> None:
    """Nothing in the library depends on a framework driver (``integrations/``) or on ``cli/``."""
    reaching = [
        f"{rel}:{line}: imports trainmon.{target}"
        for rel, tree in _modules()
        if rel.split("/")[0] not in ("integrations", "cli", "__init__.py", "__main__.py")
        for line, target in _trainmon_imports(tree)
        if target.split(".")[0] in ("integrations", "cli")
    ]
    assert not reaching, "\n".join(reaching)


# ---- sizes -----------------------------------------------------------------------------------

MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    """One idea per module: a module past 600 lines is split along its seams, not grown."""
    package = Path(__file__).resolve().parents[1] / "src" / "trainmon"
    sizes = {
        str(path.relative_to(package)): len(path.read_text(encoding="utf-8").splitlines())
        for path in package.rglob("*.py")
    }
    assert sizes, "no modules found: the path is wrong"
    over = sorted(f"{name}: {lines}" for name, lines in sizes.items() if lines > MAX_MODULE_LINES)
    assert not over, "modules over 600 lines:\n" + "\n".join(over)
