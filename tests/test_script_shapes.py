"""The shapes real scripts give their values: each resolves to the effective value, or says unknown."""

from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.derive import derive_setup
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.probes.collect import gather

from .conftest import machine_probes

SHAPES = Path(__file__).resolve().parents[1] / "fixtures" / "shapes"


def run(name, target=None, args=()):
    facts = gather(
        [str(SHAPES / name)], target=target, script_args=tuple(args), stack_overrides=CURRENT, **machine_probes()
    )
    return engine.run(facts), derive_setup(facts.scripts[0], facts), facts


def _precision_ids(result) -> set[str]:
    """The findings these shapes are about; the memory preflight (PD6xx) judges the assumed batch apart."""
    return {f.rule_id for f in result.findings if not f.rule_id.startswith("PD6")}


@pytest.mark.parametrize(
    "args,weights,amp,fired",
    [
        ((), "float32", "no", set()),
        (("--fp16", "--torch_dtype", "float16"), "float16", "fp16", {"PD201"}),
        (("--bf16", "True", "--torch_dtype", "bfloat16"), "bfloat16", "bf16", {"PD212"}),
        (("--fp16", "--torch_dtype=bfloat16"), "bfloat16", "fp16", {"PD202"}),
        (("--fp16", "true", "--bf16", "1"), "float32", None, {"PD209"}),
    ],
)
def test_hf_argument_parser(args, weights, amp, fired):
    result, setup, _ = run("hf_argparser.py", args=args)
    assert setup.weights.value == weights
    assert setup.amp.value == amp
    assert _precision_ids(result) == fired
    if args:
        origins = [e.origin for f in result.findings for e in f.evidence]
        assert not fired or "script-arg" in origins


@pytest.mark.parametrize(
    "args,weights,amp,fired",
    [
        ((), "float32", "no", set()),
        (("--precision", "fp16", "--half-weights"), "float16", "fp16", {"PD201"}),
        (("--precision", "bf16", "--half-weights"), "float16", "bf16", {"PD204"}),
        (("--precision", "bf16"), "float32", "bf16", set()),
    ],
)
def test_argparse_dict_kwargs_and_attribute_override(args, weights, amp, fired):
    result, setup, _ = run("argparse_and_kwargs.py", args=args)
    assert (setup.weights.value, setup.amp.value) == (weights, amp)
    assert _precision_ids(result) == fired


@pytest.mark.parametrize(
    "target,weights,amp,fired",
    [
        (None, None, None, set()),
        ("t4", "float16", "fp16", {"PD201"}),
        ("a100", "bfloat16", "bf16", {"PD212"}),
        ("cpu", "float16", "fp16", {"PD204", "PD105"}),
    ],
)
def test_hardware_branches_are_decided_against_the_target(target, weights, amp, fired):
    result, setup, facts = run("hardware_branches.py", target=target)
    assert setup.weights.value == weights
    assert setup.amp.value == amp
    assert _precision_ids(result) == fired
    hardware_unknowns = [u for u in facts.scripts[0].unknowns if u.hardware]
    assert len(hardware_unknowns) == 3  # dtype, bf16, fp16 all hang on the GPU


def test_hardware_branch_evidence_names_the_gpu_answer():
    result, _, _ = run("hardware_branches.py", target="t4")
    pd201 = next(f for f in result.findings if f.rule_id == "PD201")
    assert any(e.origin == "profile" and "Tesla T4" in e.note for e in pd201.evidence)


def test_runtime_values_are_unknown_and_silent():
    result, setup, facts = run("runtime_values.py", target="a100")
    assert not result.findings
    whats = {u.what for u in facts.scripts[0].unknowns}
    assert {"dtype= of from_pretrained()", "fp16= of TrainingArguments()", "bf16= of TrainingArguments()"} <= whats
    assert setup.weights.value is None and "run time" in setup.weights.unknown


def test_trl_config_turns_bf16_on_by_default():
    result, setup, _ = run("sft_trl_defaults.py")
    assert setup.trl and setup.amp.value == "bf16" and setup.bf16.inferred
    assert {f.rule_id for f in result.findings} == {"PD204"}


def test_script_is_never_executed(tmp_path, monkeypatch):
    sentinel = tmp_path / "ran"
    monkeypatch.setenv("PD_SENTINEL", str(sentinel))
    result, _, _ = run("import_side_effects.py")
    assert not sentinel.exists() and not Path(str(sentinel) + ".system").exists()
    assert not result.findings


def test_loops_and_branches_do_not_invent_values(run_check):
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "for attempt in range(3):\n    dtype = torch.float16\n"
        "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=dtype)\n"
        "try:\n    fp16 = True\nexcept Exception:\n    fp16 = False\n"
        "Trainer(model=m, args=TrainingArguments('o', fp16=fp16)).train()\n"
    )
    result, facts = run_check(code)
    assert not [f for f in result.findings if f.severity == "error"]
    assert len([u for u in facts.scripts[0].unknowns if not u.hardware]) >= 2


def test_function_parameters_follow_their_call_site(run_check):
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "def build(dtype, use_fp16=False):\n"
        "    model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=dtype)\n"
        "    Trainer(model=model, args=TrainingArguments('o', fp16=use_fp16)).train()\n"
        "build(torch.float16, use_fp16=True)\n"
    )
    result, _ = run_check(code)
    assert "PD201" in {f.rule_id for f in result.findings}


@pytest.mark.parametrize(
    "args,fired",
    [
        ((), set()),  # no --model_name_or_path: the from_config branch (built from a config that names no checkpoint)
        (("--model_name_or_path", "meta-llama/Llama-3.2-1B"), {"PD211", "PD212"}),  # no --dtype: None, the library
        # default (the checkpoint's dtype, bf16, on transformers 5)
        (("--model_name_or_path", "meta-llama/Llama-3.2-1B", "--fp16"), {"PD211", "PD202"}),
        (("--model_name_or_path", "gpt2", "--fp16", "--dtype", "float16"), {"PD201"}),
        (("--model_name_or_path", "gpt2", "--fp16", "--dtype", "auto"), set()),  # a hub checkpoint's dtype: unknown
        (("config.json",), set()),  # the sys.argv switch takes the JSON branch: values from a file, unknown
    ],
)
def test_transformers_example_layout(args, fired):
    result, _, facts = run("hf_example_style.py", target="a100", args=args)
    assert _precision_ids(result) == fired
    if args == ("config.json",):
        assert any("run-time" in u.reason for u in facts.scripts[0].unknowns)


@pytest.mark.parametrize(
    "args,fired",
    [
        ((), set()),
        (("--dtype", "float16"), {"PD204"}),  # SFTConfig turns bf16 on; fp16 weights get no loss scaling
        (("--dtype", "float16", "--use_peft"), set()),  # get_peft_config: fp32 LoRA adapters on a frozen fp16 base
        (("--dtype", "bfloat16", "--fp16"), {"PD202"}),
    ],
)
def test_trl_example_layout(args, fired):
    result, setup, _ = run("trl_parser_style.py", target="a100", args=args)
    assert _precision_ids(result) == fired
    assert setup.trl


_HELD = (
    "import sys\nimport torch\nfrom transformers import ({imports}, Trainer, TrainingArguments)\n"
    "{held}\nmodel = cls.from_pretrained('gpt2', dtype=torch.float16)\n"
    "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n"
)


@pytest.mark.parametrize(
    "imports,held,fired",
    [
        ("AutoModelForCausalLM", "cls = AutoModelForCausalLM", True),
        (
            "AutoModelForCausalLM, AutoModelForSeq2SeqLM",
            "cls = AutoModelForSeq2SeqLM if 't5' in sys.argv[1] else AutoModelForCausalLM",
            True,
        ),
        (
            "AutoModelForCausalLM, AutoModelForSeq2SeqLM",
            "if 't5' in sys.argv[1]:\n    cls = AutoModelForSeq2SeqLM\nelse:\n    cls = AutoModelForCausalLM",
            True,
        ),
        # look-alikes: a tokenizer class, a class the script computes, a pick between a model and a tokenizer
        ("AutoTokenizer", "cls = AutoTokenizer", False),
        ("AutoModelForCausalLM", "cls = getattr(sys.modules[__name__], sys.argv[1])", False),
        ("AutoModelForCausalLM, AutoTokenizer", "cls = AutoModelForCausalLM if sys.argv[1] else AutoTokenizer", False),
    ],
)
def test_loader_class_held_in_a_variable(run_check, imports, held, fired):
    """`cls.from_pretrained(...)` loads the model when every assignment of `cls` names a model class."""
    result, facts = run_check(_HELD.format(imports=imports, held=held))
    loads = facts.scripts[0].of("model_load")
    assert bool(loads) is fired and ("PD201" in {f.rule_id for f in result.findings}) is fired
    if fired:
        assert loads[0].callee.startswith("transformers.AutoModelFor") and loads[0].receiver == "cls"


_HELPERS = (
    "import torch\nfrom transformers import AutoModelForSequenceClassification\n"
    "from torch.utils.data import DataLoader\n"
    "def build_model(name):\n    return AutoModelForSequenceClassification.from_pretrained(name)\n"
    "def make_optimizer(model):\n    decay = [p for n, p in model.named_parameters() if 'bias' not in n]\n"
    "    return torch.optim.AdamW([{{'params': decay, 'weight_decay': 0.01}}])\n"
    "def train_one_epoch(model, loader, opt):\n    for batch in loader:\n{move}"
    "        model(**batch).loss.backward()\n        opt.step()\n"
    "def main():\n    device = torch.device('cuda')\n    model = build_model('distilbert-base-uncased').to(device)\n"
    "    opt = make_optimizer(model)\n    loader = DataLoader(ds, batch_size=8)\n"
    "    train_one_epoch(model, loader, opt)\nmain()\n"
)


def test_a_helper_built_model_fed_by_another_helpers_loop(run_check):
    """The load returned by one helper, moved to the GPU where its result is bound, and trained in another
    helper's loop over a DataLoader: PD305 when the batch is never moved, silent when it is."""
    stale, _ = run_check(_HELPERS.format(move=""), target="t4")
    pd305 = [f for f in stale.findings if f.rule_id == "PD305"]
    assert pd305 and "batch comes from the data loader" in pd305[0].message
    moved, _ = run_check(
        _HELPERS.format(move="        batch = {k: v.to('cuda') for k, v in batch.items()}\n"), target="t4"
    )
    assert "PD305" not in {f.rule_id for f in moved.findings}


def test_a_loading_helper_called_for_a_student_and_a_teacher(run_check):
    """The helper's two results: which one trains is the optimizer's, not every name the helper's calls bind, so the
    teacher's fp16 cast is not the trained model's."""
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM\n"
        "def load_model(name):\n    return AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)\n"
        "student = load_model('gpt2').to('cuda')\nteacher = load_model('gpt2-large').to('cuda')\n"
        "teacher.half()\nopt = torch.optim.AdamW(student.parameters())\nscaler = torch.amp.GradScaler('cuda')\n"
        "for batch in loader:\n    with torch.autocast('cuda', dtype=torch.float16):\n"
        "        loss = student(**batch).loss\n    scaler.scale(loss).backward()\n    scaler.step(opt)\n"
        "    scaler.update()\n"
    )
    result, _ = run_check(code, target="a100")
    assert not {f.rule_id for f in result.findings} & {"PD201", "PD204"}


def test_a_parameter_holds_what_its_caller_passes(run_check):
    """`loader` at module level is a model class, but the helper's parameter of the same name is given a tokenizer
    class: the helper's call is no model load."""
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "def load(loader, name):\n    return loader.from_pretrained(name)\n"
        "loader = AutoModelForCausalLM\ntok = load(AutoTokenizer, 'gpt2')\n"
        "model = loader.from_pretrained('gpt2', dtype=torch.float32)\n"
    )
    _, facts = run_check(code)
    assert [c.location.line for c in facts.scripts[0].of("model_load")] == [7]
