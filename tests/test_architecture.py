"""The package's import graph, read with `ast` (module-level and function-local imports alike): no cycle, and no
arrow from a lower layer to a higher one. The layers are the README's Architecture diagram."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "precision_doctor"

# Lowest first. A module may import its own layer and those below, never above.
LAYERS = (
    ("facts", ("_util", "errors", "facts", "findings", "dtypes", "families", "redact", "call_kinds", "version",
                "typed", "strict_json", "signatures")),
    ("probes", ("probes", "collect", "config", "walk", "sources", "pool", "live", "live_child", "supervisor",
                "safe_io", "programs")),
    ("derivation", ("derive",)),
    ("rules", ("registry", "checks", "catalog", "diagnose")),
    ("engine", ("engine",)),
    ("report", ("report", "ruledoc", "fixer", "fix_command", "undo")),
    ("cli", ("cli", "__main__")),
)


def _layer(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else "__init__"
    if top == "__init__":
        return 0  # the package's own __init__ holds only the version
    for rank, (_, members) in enumerate(LAYERS):
        if top in members:
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and to the README's Architecture section")


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("precision_doctor",) + path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
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
        else:
            continue
        found |= {t for t in targets if t in modules and t != name}
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


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
                return stack[stack.index(nxt):] + [nxt]
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


def test_a_package_importing_its_own_modules_counts():
    """The reader sees function-local and relative imports (a cycle hidden inside a function is still one)."""
    graph = _graph()
    assert "precision_doctor.derive.setup" in graph["precision_doctor.derive"]
    assert "precision_doctor.rules.catalog" in graph["precision_doctor.cli"]  # imported inside functions only
