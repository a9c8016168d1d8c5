"""The package's folders are its layers, and the import graph keeps to them. The graph is read with `ast`: module
level and function-local imports alike, and `importlib.import_module` / `__import__` of a named module count as
imports too. The rules, as the README states them:

- one layer per folder, lowest first; a module imports its own layer and those below, never one above, and the graph
  has no cycle;
- a rule never imports another rule (only the registry, the shared helpers of its series and the layers below);
- derive and the rules never import probes: they read facts, and the knowledge layer holds what probes and rules
  both need;
- the report never derives: what it shows of the derived setup comes from the engine's result;
- a module is loaded by name (importlib) only by the two plugin loaders, each over its own folder, and by the
  resident server, which loads the whole doctor once.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "precision_doctor"

# Lowest first. A module may import its own layer and those below, never above.
LAYERS = (
    ("model", ("model",)),
    ("knowledge", ("knowledge",)),
    ("system", ("system",)),
    ("settings", ("settings",)),
    ("probes", ("probes",)),
    ("derive", ("derive",)),
    ("rules", ("rules",)),
    ("engine", ("engine", "diagnose")),
    ("report", ("report",)),
    ("fix", ("fix",)),
    ("cli", ("cli", "__main__")),
)
MAX_LOOSE_MODULES = 10
# the derive entry points that compute a setup, a launch plan or a memory plan: the report takes their results
DERIVING = {"derive", "derive_setup", "plan_launch", "plan_of_script", "plan_memory"}
PLUGIN_LOADERS = {
    "precision_doctor.rules.catalog": "precision_doctor.rules",
    "precision_doctor.probes.handlers": "precision_doctor.probes.handlers",
    "precision_doctor.system.server": "precision_doctor",  # a resident server loads the whole doctor once
}


def _top(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


def _layer(module: str) -> int:
    top = _top(module)
    if top == "__init__":
        return 0  # the package's own __init__ holds only the version
    for rank, (_, members) in enumerate(LAYERS):
        if top in members:
            return rank
    raise AssertionError(f"{module} is in no layer: put it in a layer's folder (and the README's Architecture)")


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("precision_doctor",) + path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _dynamic_target(node: ast.Call) -> tuple[bool, str | None]:
    """(is importlib.import_module / __import__, the module it names when written as a constant)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in ("import_module", "__import__"):
        return False, None
    first = node.args[0] if node.args else None
    return True, first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def _imports(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], list[tuple[str, set[str]]], bool]:
    """(the package modules it imports, [(module, names imported from it)], whether it loads modules by name)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    named: list[tuple[str, set[str]]] = []
    dynamic = False
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
            named.append((base, {a.name for a in node.names}))
        elif isinstance(node, ast.Call):
            is_dynamic, target = _dynamic_target(node)
            if not is_dynamic:
                continue
            dynamic = True
            if target is None:
                continue
            if target.startswith("."):
                target = package + target if target != "." else package
            targets = [target]
        else:
            continue
        found |= {t for t in targets if t in modules and t != name}
    return found, named, dynamic


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules)[0] for name, path in modules.items()}


def _is_rule(module: str) -> bool:
    parts = module.split(".")
    return len(parts) == 4 and parts[1] == "rules" and parts[2].startswith("pd") and parts[3].startswith("pd")


def test_the_top_level_holds_few_loose_modules():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_no_import_reaches_up_a_layer():
    upward = [(a, b) for a, targets in _graph().items() for b in targets if _layer(b) > _layer(a)]
    assert not upward, "imports from a lower layer to a higher one: " + ", ".join(f"{a} -> {b}" for a, b in upward)


def test_the_import_graph_has_no_cycle():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_rule_never_imports_another_rule():
    crossing = [(a, b) for a, targets in _graph().items() if _is_rule(a) for b in targets if _is_rule(b)]
    assert not crossing, ", ".join(f"{a} -> {b}" for a, b in crossing)


def test_derive_and_the_rules_never_import_probes():
    reaching = [
        (a, b)
        for a, targets in _graph().items()
        if _top(a) in ("derive", "rules")
        for b in targets
        if _top(b) == "probes"
    ]
    assert not reaching, "derive/rules -> probes: " + ", ".join(f"{a} -> {b}" for a, b in sorted(reaching))


def test_the_report_never_derives():
    modules = _modules()
    deriving = [
        (name, base, sorted(names & DERIVING))
        for name, path in modules.items()
        if _top(name) == "report"
        for base, names in _imports(name, path, modules)[1]
        if _top(base) == "derive" and names & DERIVING
    ]
    assert not deriving, "the report derives: " + ", ".join(f"{a} imports {n} from {b}" for a, b, n in deriving)


def test_modules_are_loaded_by_name_only_by_the_plugin_loaders():
    modules = _modules()
    loading = sorted(name for name, path in modules.items() if _imports(name, path, modules)[2])
    assert loading == sorted(PLUGIN_LOADERS), loading


def test_the_reader_sees_every_kind_of_import(tmp_path):
    """Function-local, relative and by-name imports are edges: a check that cannot see them passes anything."""
    graph = _graph()
    assert "precision_doctor.derive.setup" in graph["precision_doctor.derive"]
    assert "precision_doctor.rules.catalog" in graph["precision_doctor.cli.rules"]  # imported inside functions only
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import importlib\n\ndef later():\n    from ..probes import script\n"
        "    importlib.import_module('precision_doctor.cli')\n    __import__('precision_doctor.engine')\n"
    )
    modules = _modules()
    found, _, dynamic = _imports("precision_doctor.derive.probe", probe, modules)
    assert {"precision_doctor.probes.script", "precision_doctor.cli", "precision_doctor.engine"} <= found and dynamic
