"""The derivation layer against what the libraries really do: Trainer's DataParallel decision read from the
installed transformers, the hardware predicates scripts ask, the live losses and the live exception."""

import inspect
from pathlib import Path

import pytest

from precision_doctor.derive import evaluate
from precision_doctor.knowledge.versions import TRAINER_SKIPS_DP_FOR_4BIT
from precision_doctor.model.facts import MachineFacts, Predicate, StackFacts
from precision_doctor.probes.stack import installed_behaviours, probe_stack
from precision_doctor.probes.target import machine_from_target

from .conftest import check_code

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


def test_the_stack_probe_reads_the_installed_trainers_4bit_exemption():
    stack = probe_stack()
    read = stack.behaviours[TRAINER_SKIPS_DP_FOR_4BIT]
    wrap = inspect.getsource(transformers.Trainer._wrap_model)
    assert read.value == ("is_loaded_in_4bit" in wrap)
    path, line = read.evidence.split()[2].split(":")
    source = Path(inspect.getsourcefile(transformers.Trainer)).read_text().split("\n")
    assert path == "trainer.py" and "is_loaded_in_4bit" in source[int(line) - 1]


def test_a_trainer_without_the_exemption_is_read_as_such(tmp_path, monkeypatch):
    fake = tmp_path / "transformers"
    fake.mkdir()
    (fake / "trainer.py").write_text(
        "class Trainer:\n    def _wrap_model(self, model):\n"
        "        if self.args.n_gpu > 1 and not getattr(model, 'is_loaded_in_8bit', 0):\n"
        "            model = nn.DataParallel(model)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_behaviours("4.57.1")[TRAINER_SKIPS_DP_FOR_4BIT].value is False


def _real_wrap(model, n_gpu: int) -> str:
    """What the installed Trainer does with `model` when it sees n_gpu GPUs (on the CPU DataParallel wraps
    without moving anything)."""
    args = transformers.TrainingArguments("out", report_to=[], use_cpu=True)
    args._n_gpu = n_gpu
    trainer = transformers.Trainer(model=model, args=args)
    trainer.args._n_gpu = n_gpu  # Trainer.__init__ resets it for model-parallel models: keep what it decided
    if trainer.is_model_parallel:
        trainer.args._n_gpu = 1
    wrapped = trainer._wrap_model(trainer.model, training=True)
    return "DataParallel" if isinstance(wrapped, torch.nn.DataParallel) else "none"


def _tiny():
    cfg = transformers.LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=64,
    )
    return transformers.LlamaForCausalLM(cfg)


@pytest.mark.parametrize(
    "device_map,marker",
    [
        ("{'': 'cpu'}", None),
        ("{'model': 0, 'lm_head': 1}", None),
        (None, "is_loaded_in_8bit"),
        (None, "is_loaded_in_4bit"),
        (None, None),
    ],
)
def test_predicted_trainer_wrap_matches_the_installed_trainer(tmp_path, monkeypatch, device_map, marker):
    monkeypatch.chdir(tmp_path)
    model = _tiny()
    if device_map:
        model.hf_device_map = eval(device_map)
    if marker:
        setattr(model, marker, True)
    real = _real_wrap(model, 2)
    load = "device_map=" + device_map if device_map else ""
    quant = {
        "is_loaded_in_8bit": "quantization_config=BitsAndBytesConfig(load_in_8bit=True)",
        "is_loaded_in_4bit": "quantization_config=BitsAndBytesConfig(load_in_4bit=True)",
    }.get(marker, "")
    kwargs = ", ".join(x for x in ("dtype=torch.float32", load, quant) if x)
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, "
        "TrainingArguments\n"
        f"model = AutoModelForCausalLM.from_pretrained('gpt2', {kwargs})\n"
        "Trainer(model=model, args=TrainingArguments('out')).train()\n"
    )
    _, facts = check_code(
        tmp_path, code, target="a100:2", launcher="python train.py", versions={"transformers": transformers.__version__}
    )
    from precision_doctor.derive import derive

    setup = derive(facts).setups[facts.scripts[0].path]
    assert setup.placement.trainer_wrap == real


A100, T4 = machine_from_target("a100:2"), machine_from_target("t4")


@pytest.mark.parametrize(
    "predicate,machine,expected",
    [
        (Predicate("mps_available", "torch.backends.mps.is_available()"), A100, False),
        (Predicate("gpu_count_at_least", "torch.cuda.device_count() > 1", number=(2,)), A100, True),
        (Predicate("gpu_count_at_least", "torch.cuda.device_count() > 1", number=(2,)), T4, False),
        (Predicate("not", "not torch.cuda.is_available()", parts=(Predicate("cuda_available", "c"),)), A100, False),
        (
            Predicate("not", "not is_bf16_supported()", parts=(Predicate("bf16_supported", "b", emulation=False),)),
            T4,
            True,
        ),
        (
            Predicate("not", "not x", parts=(Predicate("cuda_available", "c"),)),
            MachineFacts(known=False, source="", reason="no NVML"),
            None,
        ),
    ],
)
def test_hardware_predicates(predicate, machine, expected):
    assert evaluate(predicate, machine, StackFacts()) == expected


LOSSES_CODE = "import torch\nmodel = torch.nn.Linear(4, 4)\nopt = torch.optim.SGD(model.parameters())\n"


def _live(**kw):
    base = {
        "ended": "steps done",
        "stopped_at": "Optimizer.step",
        "model": {"trainable_dtypes": {"float16": 2}},
        "optimizer_steps": 3,
    }
    return {**base, **kw}


def test_live_nan_with_fp16_weights_and_no_scaler_is_pd204(run_check):
    result, _ = run_check(LOSSES_CODE, live=_live(losses=(2.1, float("nan"), float("nan"))))
    hits = [f for f in result.findings if f.rule_id in ("PD204", "PD210") and "loss became" in f.message]
    assert [f.rule_id for f in hits] == ["PD204"] and "step 2" in hits[0].message


def test_live_nan_with_a_scaler_is_overflow_pd210(run_check):
    live = _live(
        losses=(2.1, float("nan")),
        model={"trainable_dtypes": {"float32": 2}},
        grad_scaler={"enabled": True},
        loss_scales=(65536.0, 0.5, 0.25),
    )
    result, _ = run_check(LOSSES_CODE, live=live)
    messages = [f.message for f in result.findings if f.rule_id == "PD210"]
    assert any("loss became nan" in m for m in messages) and any("loss scale fell" in m for m in messages)
    assert not any(f.rule_id == "PD204" for f in result.findings)


def test_live_exception_maps_to_the_rule_whose_signature_it_matches(run_check):
    error = {
        "type": "RuntimeError",
        "message": "expected dtype float for `end` but got dtype c10::BFloat16",
        "traceback": 'Traceback (most recent call last):\n  File "adamw.py", line 1\nRuntimeError: expected '
        "dtype float for `end` but got dtype c10::BFloat16\n",
        "frames": [{"file": "train.py", "line": 3, "function": "step", "code": "opt.step()"}],
    }
    result, _ = run_check(LOSSES_CODE, live=_live(ended="raised", error=error))
    hit = [f for f in result.findings if f.rule_id == "PD203"]
    assert hit and "after 3 steps" in hit[0].message and hit[0].evidence[0].location.line == 3


def test_pd110_fix_puts_the_port_before_a_script_not_named_train(run_check):
    code = "import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\n"
    result, _ = run_check(
        code,
        machine="l40s_2x_exclusive_stopped",
        launcher="torchrun --nproc_per_node 2 --master_port 29500 finetune_llm.py --lr 1e-4",
    )
    fix = next(f for f in result.findings if f.rule_id == "PD110").fix
    assert fix.commands[0].startswith("torchrun --nproc_per_node 2 --master_port 29")
    assert fix.commands[0].endswith(" finetune_llm.py --lr 1e-4") and "29500" not in fix.commands[0]


def test_live_optimizer_state_of_another_dtype_is_pd203(run_check):
    """The live optimizer's state tensors disagree with their parameters' dtype: the next step fails, whatever
    the script reading said."""
    code = (
        "import torch\nmodel = torch.nn.Linear(4, 4)\nopt = torch.optim.AdamW(model.parameters())\n"
        "for x in loader:\n    model(x).sum().backward()\n    opt.step()\n"
    )
    live = _live(
        model={"trainable_dtypes": {"bfloat16": 2}},
        optimizer={
            "class_name": "AdamW",
            "groups": [{"dtypes": {"bfloat16": 2}, "foreach": True}],
            "state_dtype_mismatches": 4,
        },
    )
    result, _ = run_check(code, live=live)
    hit = [f for f in result.findings if f.rule_id == "PD203"]
    assert hit and "4 state tensors" in hit[0].message
    quiet, _ = run_check(code, live=_live(optimizer={"class_name": "AdamW", "state_dtype_mismatches": 0}))
    assert not [f for f in quiet.findings if f.rule_id == "PD203"]
