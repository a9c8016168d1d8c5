"""The resolver's library handlers, its symbols and the declarations they read (issue 10: a resolver split by
library, real symbol classes, no sentinel and no hard-coded bool names)."""

import ast
import types
from pathlib import Path

import pytest

from precision_doctor.model.facts import CONDITIONAL, DYNAMIC
from precision_doctor.probes import handlers, symbols
from precision_doctor.probes.handlers import REGISTRY, Registry, discover
from precision_doctor.probes.resolve import Imports, Resolver
from precision_doctor.probes.scopes import ScopeIndex
from precision_doctor.probes.script import probe_script
from precision_doctor.probes.symbols import Context, DictSym, GpuQuery, Known, Multi, Namespace, Seq

ROOT = Path(__file__).resolve().parents[1]


def resolver_for(source: str, args: tuple[str, ...] = ()) -> tuple[Resolver, ast.AST]:
    """A resolver over `source` and the expression of its last line."""
    tree = ast.parse(source)
    nodes = list(ast.walk(tree))
    r = Resolver("t.py", source, tree, ScopeIndex(tree), Imports(nodes), args, nodes)
    return r, tree.body[-1].value


def sym_of_last(source: str, args: tuple[str, ...] = ()):
    r, node = resolver_for(source, args)
    return r.sym(node, r.scope_of(node), Context(args)), r, node


def kwarg(tmp_path: Path, source: str, name: str, args: tuple[str, ...] = (), kind: str = "training_args"):
    path = tmp_path / "train.py"
    path.write_text(source)
    facts = probe_script(path, args)
    return next(c for c in facts.calls if c.kind == kind).kwarg(name)


# --- the registry -----------------------------------------------------------------------------


def test_every_handler_module_is_discovered_and_declares_what_it_reads():
    folder = Path(handlers.__file__).parent
    modules = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    assert modules == [
        "argparse_args",
        "builtins",
        "config_loaders",
        "environment",
        "hardware",
        "hf_args",
        "torch_values",
    ]
    owners = {
        fn.__module__.rsplit(".", 1)[-1]
        for table in (REGISTRY.calls, REGISTRY.call_names, REGISTRY.methods, REGISTRY.values, REGISTRY.compares)
        for fn in table.values()
    }
    assert owners == set(modules)


def test_a_key_claimed_by_two_handlers_is_refused():
    first = types.SimpleNamespace(__name__="first", CALLS={"yaml.safe_load"}, resolve=lambda *a: None)
    second = types.SimpleNamespace(__name__="second", CALLS={"yaml.safe_load"}, resolve=lambda *a: None)
    registry = Registry()
    registry.add(first)
    with pytest.raises(RuntimeError, match="yaml.safe_load"):
        registry.add(second)


def test_a_new_handler_module_is_all_it_takes_to_read_a_new_library(tmp_path, monkeypatch):
    """A library read by a module of its own (yaml/json/OmegaConf were added this way): declared callee in,
    symbol out."""

    def resolve(r, node, scope, ctx, depth):
        return DictSym({"bf16": Known(True)}, r.loc(node))

    fake = types.SimpleNamespace(__name__="toml_config", CALLS={"toml.load"}, resolve=resolve)
    registry = discover()
    registry.add(fake)
    monkeypatch.setattr("precision_doctor.probes.resolve.REGISTRY", registry)
    source = (
        "import toml\nfrom transformers import TrainingArguments\ncfg = toml.load(open('c.toml'))\n"
        "TrainingArguments(output_dir='o', bf16=cfg['bf16'])\n"
    )
    assert kwarg(tmp_path, source, "bf16").is_(True)


def test_discovery_builds_the_same_registry_every_time():
    again = discover()
    assert again.calls.keys() == REGISTRY.calls.keys() and again.methods.keys() == REGISTRY.methods.keys()


# --- handlers, through the probe ---------------------------------------------------------------


def test_environment_values_are_dynamic_with_the_variable_named(tmp_path):
    source = (
        "import os\nfrom transformers import TrainingArguments\n"
        "TrainingArguments(output_dir='o', bf16=os.environ['USE_BF16'], fp16=os.getenv('USE_FP16'),\n"
        "                  tf32=os.environ.get('USE_TF32'))\n"
    )
    for name, var in (("bf16", "USE_BF16"), ("fp16", "USE_FP16"), ("tf32", "USE_TF32")):
        value = kwarg(tmp_path, source, name)
        assert value.state == DYNAMIC and value.reason.startswith(f"environment variable {var} (")


def test_sys_argv_is_the_command_line_the_doctor_was_given(tmp_path):
    source = (
        "import sys\nfrom transformers import TrainingArguments\n"
        "TrainingArguments(output_dir='o', bf16=sys.argv[1] == '--bf16')\n"
    )
    assert kwarg(tmp_path, source, "bf16", ("--bf16",)).is_(True)
    assert kwarg(tmp_path, source, "bf16", ("--fp16",)).is_(False)


@pytest.mark.parametrize(
    "test, number",
    [
        ("torch.cuda.get_device_capability()[0] >= 8", (8, 0)),
        ("torch.cuda.get_device_capability() >= (8, 0)", (8, 0)),
        ("torch.cuda.get_device_capability()[0] > 7", (8, 0)),
    ],
)
def test_capability_comparisons_are_hardware_predicates(tmp_path, test, number):
    source = (
        f"import torch\nfrom transformers import TrainingArguments\nTrainingArguments(output_dir='o', bf16={test})\n"
    )
    value = kwarg(tmp_path, source, "bf16")
    assert value.state == CONDITIONAL
    assert value.predicate.kind == "capability_at_least" and value.predicate.number == number


def test_the_capability_is_a_symbol_of_its_own_not_a_sentinel_reason():
    found, r, node = sym_of_last("import torch\ntorch.cuda.get_device_capability()[0]\n")
    assert isinstance(found, GpuQuery) and found.what == "capability_major"
    assert "capability_major" not in r.to_value(found, node).reason


def test_a_capability_kept_in_a_variable_is_still_a_hardware_question(tmp_path):
    source = (
        "import torch\nfrom transformers import TrainingArguments\n"
        "major = torch.cuda.get_device_capability()[0]\nTrainingArguments(output_dir='o', bf16=major >= 8)\n"
    )
    value = kwarg(tmp_path, source, "bf16")
    assert value.state == CONDITIONAL and value.predicate.number == (8, 0)


def test_device_count_comparison_is_a_gpu_count_predicate(tmp_path):
    source = (
        "import torch\nfrom transformers import TrainingArguments\n"
        "TrainingArguments(output_dir='o', fp16=torch.cuda.device_count() > 1)\n"
    )
    value = kwarg(tmp_path, source, "fp16")
    assert value.state == CONDITIONAL and value.predicate.kind == "gpu_count_at_least"
    assert value.predicate.number == (2,)


HF_SCRIPT = """
from dataclasses import dataclass, field
from typing import Optional
from transformers import HfArgumentParser, TrainingArguments

@dataclass
class ScriptArguments:
    fused: Optional[bool] = None
    label: Optional[str] = None

parser = HfArgumentParser((ScriptArguments, TrainingArguments))
script_args, training_args = parser.parse_args_into_dataclasses()
TrainingArguments(output_dir='o', tf32=training_args.tf32, fp16=script_args.fused, bf16=script_args.label,
                  ddp_find_unused_parameters=training_args.ddp_find_unused_parameters)
"""


@pytest.mark.parametrize(
    "args, name, expected",
    [
        (("--tf32", "False"), "tf32", False),  # a library field declared bool with default None
        (("--tf32",), "tf32", True),
        (("--ddp_find_unused_parameters", "False"), "ddp_find_unused_parameters", False),
        (("--fused", "false"), "fp16", False),  # a script field annotated Optional[bool]
        (("--fused",), "fp16", True),
        (("--label", "false"), "bf16", "false"),  # an Optional[str] field keeps the word
    ],
)
def test_which_fields_are_bool_comes_from_their_declarations(tmp_path, args, name, expected):
    value = kwarg(tmp_path, HF_SCRIPT, name, args, kind="training_args")
    assert value.is_(expected), value


def test_parse_known_args_is_a_sequence_symbol_whose_first_item_is_the_options():
    found, _, _ = sym_of_last(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--fp16', "
        "action='store_true')\np.parse_known_args()\n",
        ("--fp16",),
    )
    assert isinstance(found, Seq) and isinstance(found.items[0], Namespace)
    assert found.items[0].fields["fp16"].value is True


def test_a_list_with_run_time_parts_keeps_its_known_items():
    found, _, _ = sym_of_last("import torch\nx = [torch.float16, load()]\nx[0]\n")
    assert isinstance(found, Known) and found.value == "torch.float16"
    seq, r, node = sym_of_last("import torch\n[torch.float16, load()]\n")
    assert isinstance(seq, Seq) and r.to_value(seq, node).reason.endswith("has parts computed at run time")


def test_values_assigned_on_run_time_branches_are_kept_as_alternatives():
    source = "import torch\nif args.small:\n    dtype = torch.float16\nelse:\n    dtype = torch.bfloat16\ndtype\n"
    found, r, node = sym_of_last(source)
    assert isinstance(found, Multi)
    assert sorted(o.value for o in found.options) == ["torch.bfloat16", "torch.float16"]
    value = r.to_value(found, node)
    assert value.state == DYNAMIC and "run-time branch" in value.reason


def test_a_parameter_passed_different_values_is_a_multi_of_them():
    source = "def build(dtype):\n    return dtype\nbuild('fp16')\nbuild('bf16')\n"
    tree = ast.parse(source)
    nodes = list(ast.walk(tree))
    r = Resolver("t.py", source, tree, ScopeIndex(tree), Imports(nodes), (), nodes)
    use = tree.body[0].body[0].value
    found = r.sym(use, r.scope_of(use), Context())
    assert isinstance(found, Multi) and {o.value for o in found.options} == {"fp16", "bf16"}
    assert "different values at its 2 call sites" in found.reason


def test_nested_run_time_branches_stay_bounded(monkeypatch):
    """Each branch evaluates both sides: 40 reassignments that read the previous value would take 2**40
    evaluations without the split budget."""
    evaluated = []
    original = Resolver._assignment_value

    def counting(self, *args):
        evaluated.append(1)
        if len(evaluated) > 20_000:
            raise AssertionError("branch evaluation grows exponentially")
        return original(self, *args)

    monkeypatch.setattr(Resolver, "_assignment_value", counting)
    lines = ["x = 0"] + [f"if flag{i}:\n    x = x" for i in range(40)] + ["x"]
    found, _, _ = sym_of_last("\n".join(lines) + "\n")
    assert isinstance(found, Multi) and "run-time branch" in found.reason


def test_symbols_are_frozen_and_slotted():
    classes = [
        symbols.Known,
        symbols.Cond,
        symbols.Dyn,
        symbols.Multi,
        symbols.DictSym,
        symbols.Seq,
        symbols.Namespace,
        symbols.ObjSym,
        symbols.GpuQuery,
    ]
    for cls in classes:
        assert cls.__slots__ and not hasattr(cls.__new__(cls), "__dict__")
        with pytest.raises(AttributeError):
            setattr(cls.__new__(cls), cls.__slots__[0], 1)


def _expressions_of_real_code():
    """Every expression in this repository's code, its fixtures and tests, and an installed pure-Python library."""
    import rich

    files = [
        *ROOT.glob("precision_doctor/**/*.py"),
        *ROOT.glob("fixtures/**/*.py"),
        *ROOT.glob("tests/**/*.py"),
        *Path(rich.__file__).parent.glob("*.py"),
    ]
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        yield from (node for node in ast.walk(tree) if isinstance(node, ast.expr))


def test_plain_text_writes_every_expression_as_ast_unparse_does():
    """The probe renders values and conditions without ast.unparse's visitor where it can; whatever it writes must
    be what ast.unparse writes, parentheses included (`a and b and (c == d)`, `(-1) ** 2`, `(a + b).c`)."""
    from precision_doctor.probes.resolve import plain_text

    tricky = [
        "a and b and c == d",
        "(-1) ** 2",
        "-1 ** 2",
        "(a + b).c",
        "a - (b - c)",
        "(a - b) - c",
        "a ** b ** c",
        "(a ** b) ** c",
        "not a == b",
        "(not a) == b",
        "x if y else z if w else v",
        "(x if y else z) + 1",
        "[*a, *(b or c)]",
        "{**a, 'k': (v := 1) if 0 else 2}",
        "f(*a or b, **c)",
        "x[1:2, 3]",
        "x[::2]",
        "x[a:b][c]",
        "(a, )",
        "()",
        "{1, (2, 3)}",
        "a < b < c",
        "a not in b is not c",
        "~a | b & c ^ d",
        "lambda: 0",
        "a if b else (lambda: c)",
        "(yield)",
        "1 .real",
        "'a' 'b'",
        "u'x'",
        "b'\\x00'",
        "f'{x!r:>{w}}'",
        "1e400",
        "x[...]",
        "a @ b // c % d << e >> f",
    ]
    nodes = [ast.parse(t, mode="eval").body for t in tricky]
    written = same = 0
    for node in [*nodes, *_expressions_of_real_code()]:
        text = plain_text(node)
        if text:
            written += 1
            assert text == ast.unparse(node), (text, ast.unparse(node))
            same += 1
    assert written > 50_000 and same == written  # it covers the common shapes, not just names
