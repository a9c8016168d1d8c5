"""The probes' import graph (issue 10): no cycle, and nothing below the rules imports the rules, the engine,
the report or the CLI. Built with `ast` from module-level and function-local imports alike."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "precision_doctor"
HIGHER = ("engine", "checks", "derive", "report", "cli", "diagnose", "collect")


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    return {m for m in found if m in modules and m != name}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def lower_layer(module: str) -> bool:
    return module.startswith("precision_doctor.probes") or module in (
        "precision_doctor.call_kinds", "precision_doctor.facts", "precision_doctor.dtypes")


def test_no_probe_imports_a_higher_layer():
    g = graph()
    bad = [(m, i) for m, targets in g.items() if lower_layer(m) for i in targets
           if (i.split(".") + [""])[1] in HIGHER]
    assert not bad


def test_the_probes_and_the_facts_have_no_import_cycle():
    g = {m: {i for i in targets if lower_layer(i)} for m, targets in graph().items() if lower_layer(m)}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for nxt in sorted(g.get(m, ())):
            if nxt == m.rsplit(".", 1)[0]:
                continue  # a submodule's own package (handlers/x.py -> handlers) is loaded first, not a cycle
            assert state.get(nxt) != 1, " -> ".join(path + [nxt])
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [m])


def test_call_kinds_stand_alone():
    assert imports_of(PACKAGE / "call_kinds.py") == set()
