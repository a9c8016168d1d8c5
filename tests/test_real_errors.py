"""The errors the rules declare are the ones the real libraries raise: reproduced on the CPU with tiny
models built from a config (never a hub download), then the doctor's prediction is checked against them."""

import os
import warnings

import pytest

from precision_doctor.rules.catalog import get_rule

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

os.environ["HF_HUB_OFFLINE"] = "1"


def declared(rule_id):
    return get_rule(rule_id).error.split(": ", 1)[1]


def test_pd201_fp16_weights_under_grad_scaler(tiny_llama, run_check):
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cpu")
    ids = torch.randint(0, 128, (2, 8))
    scaler.scale(model(input_ids=ids, labels=ids).loss).backward()
    with pytest.raises(ValueError) as err:
        scaler.unscale_(opt)
    assert str(err.value) == declared("PD201")

    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM\n"
        f"model = AutoModelForCausalLM.from_pretrained({str(tiny_llama)!r}, dtype=torch.float16)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-4)\nscaler = torch.amp.GradScaler('cuda')\n"
        "for ids in loader:\n    scaler.scale(model(input_ids=ids, labels=ids).loss).backward()\n"
        "    scaler.unscale_(opt)\n    scaler.step(opt)\n    scaler.update()\n"
    )
    result, _ = run_check(code)
    assert "PD201" in {f.rule_id for f in result.findings}


def test_pd201_twin_fp32_weights_unscale_fine(tiny_llama, run_check):
    """The correct twin: fp32 weights under fp16 autocast and a GradScaler train a real step, and the doctor
    stays quiet on the same script."""
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu")
    ids = torch.randint(0, 128, (2, 8))
    before = [p.detach().clone() for p in model.parameters()]
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(input_ids=ids, labels=ids).loss
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=False))  # the step really ran

    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM\n"
        f"model = AutoModelForCausalLM.from_pretrained({str(tiny_llama)!r}, dtype=torch.float32)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-4)\nscaler = torch.amp.GradScaler('cuda')\n"
        "for ids in loader:\n    with torch.autocast('cuda', dtype=torch.float16):\n"
        "        loss = model(input_ids=ids, labels=ids).loss\n    scaler.scale(loss).backward()\n"
        "    scaler.unscale_(opt)\n    scaler.step(opt)\n    scaler.update()\n"
    )
    result, _ = run_check(code)
    assert not {f.rule_id for f in result.findings} & {"PD201", "PD202", "PD204"}


def test_pd203_cast_after_the_optimizer(run_check):
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    model.to(torch.bfloat16)
    model(torch.randn(2, 8, dtype=torch.bfloat16)).sum().backward()
    with pytest.raises(RuntimeError) as err:
        opt.step()
    assert str(err.value) == declared("PD203")
    example = get_rule("PD203").fires[0]
    result, _ = run_check(example.code)
    assert "PD203" in {f.rule_id for f in result.findings}


def test_pd203_twin_a_cast_before_the_first_step_trains(run_check):
    """AdamW creates its state at the first step, in the parameters' dtype of that moment: a cast between building
    the optimizer and its first step trains (seen on an H200 with torch 2.11 as on the CPU), and so does a cast
    after the last step. PD203 stays silent on both."""
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    model.to(torch.bfloat16)
    for _ in range(3):
        model(torch.randn(2, 8, dtype=torch.bfloat16)).sum().backward()
        opt.step()
    assert opt.state[model.weight]["exp_avg"].dtype == torch.bfloat16
    for example in get_rule("PD203").silent[1:3]:
        result, _ = run_check(example.code)
        assert "PD203" not in {f.rule_id for f in result.findings}, example.note
    # it trains in the cast's dtype: bf16 with no fp32 master copy (PD212), fp16 with no loss scaling (PD204); so
    # does a model cast in the loop, unconditionally, before each step
    in_loop, _ = run_check(
        _PD203_HEAD + "for x in loader:\n    model.half()\n    model(x.half()).sum().backward()\n    opt.step()\n"
    )
    assert ("PD204", "error") in {(f.rule_id, f.severity) for f in in_loop.findings}
    before_first_step = get_rule("PD203").silent[1].code
    assert "PD212" in {f.rule_id for f in run_check(before_first_step)[0].findings}
    half, _ = run_check(before_first_step.replace("model = model.to(torch.bfloat16)", "model.half()"))
    assert ("PD204", "error") in {(f.rule_id, f.severity) for f in half.findings}


def test_pd208_half_model_float_input():
    model = torch.nn.Linear(16, 4).half()
    with pytest.raises(RuntimeError) as err:
        model(torch.randn(8, 16))
    assert str(err.value) == declared("PD208")


def test_pd209_both_flags_refused_by_training_arguments(tmp_path):
    with pytest.raises(ValueError) as err:
        transformers.TrainingArguments(output_dir=str(tmp_path), fp16=True, bf16=True, use_cpu=True)
    assert str(err.value) == declared("PD209")


def test_pd213_deprecation_warning_text():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.amp.GradScaler()
    messages = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert declared("PD213") in messages


def test_fp16_trainer_on_cpu_creates_no_scaler(tiny_llama, tmp_path, run_check):
    """Why PD201 stays silent on --target cpu (and PD204 speaks): accelerate skips the GradScaler there."""
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float16)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), fp16=True, use_cpu=True, report_to=[])
    ids = torch.randint(0, 128, (8,))
    data = [{"input_ids": ids, "labels": ids} for _ in range(2)]
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    assert trainer.accelerator.scaler is None
    code = get_rule("PD201").fires[0].code
    result, _ = run_check(code, target="cpu")
    fired = {f.rule_id for f in result.findings}
    assert "PD201" not in fired and "PD204" in fired


def test_pd216_trainer_rejects_tokenizer_keyword(tiny_llama, tmp_path):
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    with pytest.raises(TypeError) as err:
        transformers.Trainer(model=model, args=args, tokenizer=None)
    assert str(err.value) == declared("PD216")


def test_pd102_mirrors_torchs_is_bf16_supported():
    """The installed torch still emulates: the default asks only whether a bf16 tensor can be created."""
    import inspect

    sig = inspect.signature(torch.cuda.is_bf16_supported)
    assert sig.parameters["including_emulation"].default is True
    source = inspect.getsource(torch.cuda.is_bf16_supported)
    assert "major >= 8" in source and "_check_bf16_tensor_supported" in source


def test_pd403_reentrant_checkpointing_over_frozen_inputs():
    """Reproduced with torch alone: a frozen embedding feeds a reentrant checkpointed block."""
    from torch.utils.checkpoint import checkpoint

    emb = torch.nn.Embedding(16, 8).requires_grad_(False)
    block = torch.nn.Linear(8, 8)
    ids = torch.randint(0, 16, (2, 4))
    with pytest.raises(RuntimeError) as err:
        checkpoint(block, emb(ids), use_reentrant=True).sum().backward()
    assert str(err.value) == declared("PD403")
    emb.requires_grad_(True)  # what enable_input_require_grads() / prepare_model_for_kbit_training arrange
    checkpoint(block, emb(ids), use_reentrant=True).sum().backward()


@pytest.mark.parametrize(
    "rule_id,module",
    [
        ("PD401", "transformers/modeling_utils.py"),
        ("PD404", "transformers/trainer_utils.py"),
        ("PD502", "transformers/integrations/accelerate.py"),
        ("PD302", "accelerate/accelerator.py"),
        ("PD209", "transformers/training_args.py"),
        ("PD103", "transformers/training_args.py"),
    ],
)
def test_declared_errors_are_in_the_installed_library_source(rule_id, module):
    import importlib.util
    import re as _re

    root = importlib.util.find_spec(module.split("/")[0]).submodule_search_locations[0]
    source = open(f"{root}/{module.split('/', 1)[1]}", encoding="utf-8").read()
    flat = _re.sub(r'"\s*\n\s*(f?)"', "", source)  # join implicitly concatenated string literals
    message = declared(rule_id).split(" Please ")[0].split("{{")[0]
    assert message[:60] in flat, f"{rule_id}: {message[:60]!r} not in {module}"


@pytest.mark.parametrize(
    "model_type,cls,config,impl",
    [
        (
            "t5",
            "T5ForConditionalGeneration",
            dict(d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=64),
            "flash_attention_2",
        ),
        (
            "gemma2",
            "Gemma2ForCausalLM",
            dict(
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=1,
                head_dim=8,
                vocab_size=64,
            ),
            "sdpa",
        ),
    ],
)
def test_pd218_an_unsupported_attention_kernel_is_refused_at_load(run_check, model_type, cls, config, impl):
    from precision_doctor.knowledge.families import attention_support

    klass = getattr(transformers, cls)
    cfg = klass.config_class(**config)
    with pytest.raises(ValueError) as err:
        klass._from_config(cfg, attn_implementation=impl)
    assert str(err.value).startswith(f"{cls} does not support")
    # the shipped support table agrees with the installed class's own declaration
    assert bool(getattr(klass, "_supports_flash_attn" if impl.startswith("flash") else "_supports_sdpa")) is False
    assert impl not in attention_support(model_type)
    model_id = {"t5": "google/flan-t5-base", "gemma2": "google/gemma-2-2b"}[model_type]
    loader = "AutoModelForSeq2SeqLM" if model_type == "t5" else "AutoModelForCausalLM"
    code = (
        f"import torch\nfrom transformers import {loader}, Trainer, TrainingArguments\n"
        f"model = {loader}.from_pretrained('{model_id}', dtype=torch.bfloat16, attn_implementation='{impl}')\n"
        "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n"
    )
    result, _ = run_check(code, target="a100", versions={"transformers": transformers.__version__})
    hit = [f for f in result.findings if f.rule_id == "PD218"]
    assert hit and hit[0].severity == "error" and cls.split("For")[0] in hit[0].message + hit[0].error


_PD203_HEAD = (
    "import torch\nmodel = torch.nn.Linear(16, 4)\nopt = torch.optim.AdamW(model.parameters(), foreach=True)\n"
    "loader = [torch.randn(4, 16) for _ in range(2)]\n"
)
_TRAINER_CLASS = (
    "class Loop:\n    def __init__(self):\n        self.model = torch.nn.Linear(16, 4)\n"
    "        self.optimizer = torch.optim.AdamW(self.model.parameters(), foreach=True)\n"
    "    def step(self, x):\n        self.model(x.to(self.model.weight.dtype)).sum().backward()\n"
    "        self.optimizer.step()\n        self.optimizer.zero_grad()\n"
    "    def train_epoch(self):\n        for x in loader:\n            self.step(x)\n"
    "    def evaluate(self):\n{evaluate}"
    "    def fit(self):\n        for epoch in range(2):\n            self.train_epoch()\n"
    "            self.evaluate()\nLoop().fit()\n"
)
PD203_SHAPES = {
    "a loop function called twice, a cast between": (
        "def train():\n    for x in loader:\n        model(x.to(model.weight.dtype)).sum().backward()\n"
        "        opt.step()\n        opt.zero_grad()\ntrain()\nmodel.to(torch.bfloat16)\ntrain()\n"
    ),
    "a cast under a condition in the epoch loop, before the step": (
        "for epoch in range(3):\n    if epoch == 1:\n        model.to(torch.bfloat16)\n    for x in loader:\n"
        "        model(x.to(model.weight.dtype)).sum().backward()\n        opt.step()\n"
    ),
    "the optimizer passed to a helper that steps it, twice": (
        "def train_one_epoch(m, optimizer):\n    for x in loader:\n        m(x.to(m.weight.dtype)).sum().backward()\n"
        "        optimizer.step()\ntrain_one_epoch(model, opt)\nmodel.to(torch.bfloat16)\ntrain_one_epoch(model, opt)\n"
    ),
    "a helper that only builds the scheduler, then a cast before the first step": (
        "def make_sched(o):\n    return torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0)\nsched = make_sched(opt)\n"
        "model.to(torch.bfloat16)\nfor x in loader:\n    model(x.bfloat16()).sum().backward()\n    opt.step()\n"
        "    sched.step()\n"
    ),
    "an unconditional cast in the loop, before the step": (
        "for x in loader:\n    model.to(torch.bfloat16)\n    model(x.bfloat16()).sum().backward()\n    opt.step()\n"
    ),
    "a cast in an evaluation loop after training": (
        "for x in loader:\n    model(x).sum().backward()\n    opt.step()\nfor x in loader:\n"
        "    model.to(torch.bfloat16)\n    model(x.bfloat16())\n"
    ),
    "a cast in the epoch loop after the batch loop that steps": (
        "for epoch in range(2):\n    for x in loader:\n        model(x.to(model.weight.dtype)).sum().backward()\n"
        "        opt.step()\n    model.to(torch.bfloat16)\n"
    ),
    "a cast under a condition that holds on the first iteration only": (
        "for step, x in enumerate(loader):\n    if step == 0:\n        model.to(torch.bfloat16)\n"
        "    model(x.to(model.weight.dtype)).sum().backward()\n    opt.step()\n"
    ),
    "accelerate hands the optimizer back renamed; a warmup scheduler steps after a cast after training": (
        "from accelerate import Accelerator\nacc = Accelerator(cpu=True)\n"
        "warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)\nnet, optimizer = acc.prepare(model, opt)\n"
        "for x in loader:\n    acc.backward(net(x).sum())\n    optimizer.step()\nnet.to(torch.bfloat16)\n"
        "warmup.step()\n"
    ),
    "accelerate hands the optimizer back renamed; a cast between its steps": (
        "from accelerate import Accelerator\nacc = Accelerator(cpu=True)\nnet, optimizer = acc.prepare(model, opt)\n"
        "for x in loader:\n    acc.backward(net(x.to(net.weight.dtype)).sum())\n    optimizer.step()\n"
        "    net.to(torch.bfloat16)\n"
    ),
    "a trainer class whose evaluate() casts the model between epochs": _TRAINER_CLASS.format(
        evaluate="        self.model.to(torch.bfloat16)\n"
    ),
    "a trainer class whose evaluate() casts a copy": _TRAINER_CLASS.format(
        evaluate="        import copy\n        copy.deepcopy(self.model).to(torch.bfloat16)\n"
    ),
    "a trainer class whose evaluate(), inherited, casts the model between epochs": _TRAINER_CLASS.format(
        evaluate="        pass\n"
    )
    .replace("    def evaluate(self):\n        pass\n", "")
    .replace(
        "class Loop:\n",
        "class Base:\n    def evaluate(self):\n        self.model.to(torch.bfloat16)\nclass Loop(Base):\n",
    ),
    "a trainer class whose train_epoch() ends with evaluate(), which casts": _TRAINER_CLASS.format(
        evaluate="        self.model.to(torch.bfloat16)\n"
    )
    .replace("            self.step(x)\n", "            self.step(x)\n        self.evaluate()\n")
    .replace("            self.evaluate()\nLoop", "\nLoop"),
    "another class's save() casts its own copy of the model": (
        "import copy, io\nclass Exporter:\n    def __init__(self, m):\n        self.model = copy.deepcopy(m)\n"
        "    def save(self):\n        self.model.to(torch.bfloat16)\n"
        "        torch.save(self.model.state_dict(), io.BytesIO())\n"
        + _TRAINER_CLASS.format(evaluate="        torch.save(self.model.state_dict(), io.BytesIO())\n")
        .replace("def evaluate(", "def save(")
        .replace("self.evaluate()", "self.save()")
        .replace("Loop().fit()\n", "loop = Loop()\nloop.fit()\nExporter(loop.model).save()\n")
    ),
    "accelerate's prepare_model/prepare_optimizer rename them; a cast in the epoch loop": (
        "from accelerate import Accelerator\nacc = Accelerator(cpu=True)\nnet = acc.prepare_model(model)\n"
        "optimizer = acc.prepare_optimizer(opt)\nfor epoch in range(2):\n    for x in loader:\n"
        "        acc.backward(net(x.to(net.weight.dtype)).sum())\n        optimizer.step()\n"
        "    net.to(torch.bfloat16)\n"
    ),
    "a gym-style env.step() in the rollout, the policy cast after training": (
        "class Env:\n    def step(self, action):\n        return float(action.sum())\n"
        "def rollout(env, policy):\n    return [env.step(policy(torch.randn(16, dtype=policy.weight.dtype))) "
        "for _ in range(2)]\nenv = Env()\n"
        "for it in range(2):\n    r = rollout(env, model)\n    (model(torch.randn(2, 16)).sum() * sum(r)).backward()\n"
        "    opt.step()\n    opt.zero_grad()\nmodel.to(torch.bfloat16)\nwith torch.no_grad():\n"
        "    rollout(env, model)\n"
    ),
}
CONDITIONAL = {
    "a cast under a condition in the epoch loop, before the step",
    "a cast under a condition that holds on the first iteration only",
}


@pytest.mark.parametrize("shape", PD203_SHAPES, ids=list(PD203_SHAPES))
def test_pd203_says_what_the_real_run_does(run_check, shape):
    """Each way of writing a cast next to a training loop is run for real on the CPU (foreach AdamW raises the
    same error as on a GPU): PD203 fires exactly where the run raises."""
    code = _PD203_HEAD + PD203_SHAPES[shape]
    try:
        exec(compile(code, "train.py", "exec"), {})
        raised = False
    except RuntimeError as exc:
        assert str(exc) == declared("PD203")
        raised = True
    result, _ = run_check(code)
    found = {(f.rule_id, f.severity) for f in result.findings}
    if shape in CONDITIONAL:  # whether it raises depends on the condition: said at lower severity, both ways
        assert ("PD203", "warning") in found and ("PD203", "error") not in found
    else:
        assert ("PD203", "error") in found if raised else not any(rule == "PD203" for rule, _ in found)


def test_a_trainer_without_precision_flags_takes_the_launchs(run_check, tiny_llama, tmp_path, monkeypatch):
    """TrainingArguments with neither fp16 nor bf16 (fp16=False written out included) hands accelerate
    ACCELERATE_MIXED_PRECISION, which `accelerate launch --mixed_precision` sets: the Trainer runs in AMP. So fp16
    weights under `accelerate launch --mixed_precision fp16` meet GradScaler (PD201), and under `python` train in
    pure fp16 (PD204)."""
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], fp16=False)
    ids = torch.randint(0, 128, (8,))
    trainer = transformers.Trainer(model=model, args=args, train_dataset=[{"input_ids": ids, "labels": ids}])
    assert args.mixed_precision == "bf16" and trainer.accelerator.mixed_precision == "bf16"
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION")
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', dtype=torch.float16)\n"
        "args = TrainingArguments(output_dir='out', fp16=False, per_device_train_batch_size=1)\n"
        "Trainer(model=model, args=args, train_dataset=ds).train()\n"
    )
    launched, _ = run_check(code, target="a100", launcher="accelerate launch --mixed_precision fp16 train.py")
    pd201 = [f for f in launched.findings if f.rule_id == "PD201"]
    assert pd201 and any("mixed_precision=fp16" in e.note for e in pd201[0].evidence)
    # the fix sets bf16=True (the arguments win over the launch) and adds no fp16=False, which changes nothing
    unset, _ = run_check(
        _TRAINER_NO_FLAGS.format(extra=""), target="a100", launcher="accelerate launch --mixed_precision fp16 train.py"
    )
    fix = next(f for f in unset.findings if f.rule_id == "PD201").fix
    assert {(e.name, e.new) for e in fix.edits if e.kind == "set_kwarg"} == {("bf16", "True")}
    assert any(n.startswith("Do not launch without fp16 mixed precision") for n in fix.notes)  # not "turn it off"
    plain, _ = run_check(code, target="a100", launcher="python train.py")
    assert {"PD204"} <= {f.rule_id for f in plain.findings} and "PD201" not in {f.rule_id for f in plain.findings}


def test_before_4_30_a_trainer_read_only_its_flags(run_check):
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', dtype=torch.float16)\n"
        "args = TrainingArguments(output_dir='out', per_device_train_batch_size=1)\n"
        "Trainer(model=model, args=args, train_dataset=ds).train()\n"
    )
    launcher = "accelerate launch --mixed_precision fp16 train.py"
    old, _ = run_check(code, target="a100", launcher=launcher, versions={"transformers": "4.29.2"})
    new, _ = run_check(code, target="a100", launcher=launcher, versions={"transformers": "4.30.0"})
    assert "PD201" not in {f.rule_id for f in old.findings} and "PD201" in {f.rule_id for f in new.findings}


_TRAINER_NO_FLAGS = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', dtype=torch.float16)\n"
    "args = TrainingArguments(output_dir='out', per_device_train_batch_size=1{extra})\n"
    "Trainer(model=model, args=args, train_dataset=ds).train()\n"
)


def test_the_launch_precision_stays_out_where_the_library_keeps_it_out(run_check):
    """A Trainer's own deepspeed= config with "auto" precision is filled from its flags before accelerate sees the
    launch's (and accelerate fills only "auto"); under `accelerate launch` a variable in the shell is overwritten by
    the launcher's own value."""
    ds = run_check(
        _TRAINER_NO_FLAGS.format(extra=", deepspeed={'fp16': {'enabled': 'auto'}, 'zero_optimization': {'stage': 2}}"),
        target="a100",
        launcher="accelerate launch --mixed_precision fp16 train.py",
    )[0]
    assert "PD201" not in {f.rule_id for f in ds.findings}
    shell = {"ACCELERATE_MIXED_PRECISION": "fp16"}
    under_launch = run_check(
        _TRAINER_NO_FLAGS.format(extra=""), machine="h100_8x", environ=shell, launcher="accelerate launch train.py"
    )[0]
    plain = run_check(_TRAINER_NO_FLAGS.format(extra=""), machine="h100_8x", environ=shell, launcher="python train.py")[
        0
    ]
    assert "PD201" not in {f.rule_id for f in under_launch.findings}
    assert "PD201" in {f.rule_id for f in plain.findings}


def test_fp16_from_the_launch_on_a_cpu_is_fixed_in_the_launch(run_check):
    result, _ = run_check(
        _TRAINER_NO_FLAGS.format(extra="").replace("float16)", "float32)"),
        target="cpu",
        launcher="accelerate launch --mixed_precision fp16 train.py",
    )
    pd105 = next(f for f in result.findings if f.rule_id == "PD105")
    assert "--mixed_precision fp16" in pd105.fix.description and not pd105.fix.edits


def test_a_clash_with_the_launchs_precision_names_the_launch(run_check):
    code = (
        "import torch\nfrom accelerate import Accelerator\n"
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "accelerator = Accelerator(mixed_precision='bf16')\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', dtype=torch.float32)\n"
        "Trainer(model=model, args=TrainingArguments('out', per_device_train_batch_size=1), "
        "train_dataset=ds).train()\n"
    )
    result, _ = run_check(code, target="a100", launcher="accelerate launch --mixed_precision fp16 train.py")
    pd209 = next(f for f in result.findings if f.rule_id == "PD209")
    assert "the launch gives the Trainer 'fp16'" in pd209.message and "flags" not in pd209.message


@pytest.fixture(scope="module")
def tiny_bf16_config(tmp_path_factory):
    """A config.json that says bfloat16, as Llama-3's and Qwen's do (only the config: from_config needs no weights)."""
    cfg = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=128,
        dtype="bfloat16",
    )
    path = tmp_path_factory.mktemp("tiny-bf16-config")
    cfg.save_pretrained(path)
    return path


_FROM_CONFIG_SCRIPT = (
    "import torch\nfrom transformers import AutoConfig, AutoModelForCausalLM\n"
    "config = AutoConfig.from_pretrained({path!r})\n"
    "model = AutoModelForCausalLM.from_config(config{dtype})\n"
    "opt = torch.optim.AdamW(model.parameters(), lr=1e-4)\nscaler = torch.amp.GradScaler('cuda')\n"
    "for ids in loader:\n    with torch.autocast('cuda', dtype=torch.float16):\n"
    "        loss = model(input_ids=ids, labels=ids).loss\n    scaler.scale(loss).backward()\n"
    "    scaler.step(opt)\n    scaler.update()\n"
)


def test_from_config_builds_in_the_configs_dtype(tiny_bf16_config, run_check):
    """`from_config(AutoConfig.from_pretrained(...))` builds the model in the dtype config.json names, not float32:
    pretraining a Llama-3-shaped model from scratch under fp16 AMP meets PD202's bf16 gradients (the unscale error
    is CUDA's; the CPU kernel takes bf16, so the dtype is what is reproduced). Passing dtype= overrides it."""
    config = transformers.AutoConfig.from_pretrained(tiny_bf16_config)
    built = transformers.AutoModelForCausalLM.from_config(config)
    assert {p.dtype for p in built.parameters()} == {torch.bfloat16}
    pinned = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.from_pretrained(tiny_bf16_config), dtype=torch.float32
    )
    assert {p.dtype for p in pinned.parameters()} == {torch.float32}
    direct = transformers.LlamaForCausalLM(transformers.AutoConfig.from_pretrained(tiny_bf16_config))
    assert {p.dtype for p in direct.parameters()} == {torch.float32}  # the constructor ignores the config's dtype

    result, _ = run_check(_FROM_CONFIG_SCRIPT.format(path=str(tiny_bf16_config), dtype=""), target="a100")
    pd202 = [f for f in result.findings if f.rule_id == "PD202"]
    assert pd202 and "from_config" in pd202[0].evidence[0].note and "bfloat16" in pd202[0].message
    assert "PD211" not in {f.rule_id for f in result.findings}  # not transformers 5's from_pretrained change

    as_config = transformers.AutoConfig.from_pretrained(tiny_bf16_config, dtype=torch.float32)
    assert {p.dtype for p in transformers.AutoModelForCausalLM.from_config(as_config).parameters()} == {torch.float32}
    at_build = _FROM_CONFIG_SCRIPT.format(path=str(tiny_bf16_config), dtype=", dtype=torch.float32")
    at_config = _FROM_CONFIG_SCRIPT.format(path=str(tiny_bf16_config), dtype="").replace(
        "AutoConfig.from_pretrained(" + repr(str(tiny_bf16_config)),
        "AutoConfig.from_pretrained(" + repr(str(tiny_bf16_config)) + ", dtype=torch.float32",
    )
    for twin_code in (at_build, at_config):
        twin, _ = run_check(twin_code, target="a100")
        assert not {f.rule_id for f in twin.findings} & {"PD201", "PD202", "PD204", "PD212"}, twin_code


def test_from_config_reads_what_the_script_does_to_its_config(tiny_bf16_config, run_check):
    """A dtype set on the config object is what from_config builds in (`torch_dtype` before transformers 4.56: a
    `dtype=` given to AutoConfig there is kept aside and never read); a config whose shape the script changes is
    not the checkpoint's size."""
    config = transformers.AutoConfig.from_pretrained(tiny_bf16_config)
    config.dtype = torch.float32
    assert {p.dtype for p in transformers.AutoModelForCausalLM.from_config(config).parameters()} == {torch.float32}
    base = _FROM_CONFIG_SCRIPT.format(path=str(tiny_bf16_config), dtype="")
    attribute = base.replace(
        f"config = AutoConfig.from_pretrained({str(tiny_bf16_config)!r})\n",
        f"config = AutoConfig.from_pretrained({str(tiny_bf16_config)!r})\nconfig.dtype = torch.float32\n",
    )
    assert attribute != base
    assert "PD202" not in {f.rule_id for f in run_check(attribute, target="a100")[0].findings}
    keyword = base.replace(repr(str(tiny_bf16_config)) + ")", repr(str(tiny_bf16_config)) + ", dtype=torch.float32)", 1)
    assert "PD202" not in {f.rule_id for f in run_check(keyword, target="a100")[0].findings}
    assert "PD202" in {
        f.rule_id for f in run_check(keyword, target="a100", versions={"transformers": "4.55.0"})[0].findings
    }
    reshaped = (
        "import torch\nfrom transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "config = AutoConfig.from_pretrained('meta-llama/Meta-Llama-3-8B', num_hidden_layers=8, "
        "hidden_size=512, intermediate_size=2048, dtype=torch.float32)\n"
        "model = AutoModelForCausalLM.from_config(config)\n"
        "Trainer(model=model, args=TrainingArguments('out', bf16=True, per_device_train_batch_size=8), "
        "train_dataset=ds).train()\n"
    )
    full = reshaped.replace("num_hidden_layers=8, hidden_size=512, intermediate_size=2048, ", "")
    assert "PD601" in {f.rule_id for f in run_check(full, target="t4")[0].findings}  # 8B in fp32 on a T4
    assert not {f.rule_id for f in run_check(reshaped, target="t4")[0].findings} & {"PD601", "PD602", "PD603"}


def test_from_config_before_it_took_the_configs_dtype(tiny_bf16_config, run_check):
    """Before FROM_CONFIG_TAKES_CONFIG_DTYPE, from_config built in torch's default dtype: the same script trains."""
    from precision_doctor.derive.setup import FROM_CONFIG_TAKES_CONFIG_DTYPE

    major, minor = map(int, FROM_CONFIG_TAKES_CONFIG_DTYPE.split(".")[:2])
    before = f"{major}.{minor - 1}.0"
    code = _FROM_CONFIG_SCRIPT.format(path=str(tiny_bf16_config), dtype="")
    at_boundary = run_check(code, target="a100", versions={"transformers": FROM_CONFIG_TAKES_CONFIG_DTYPE + ".0"})[0]
    assert "PD202" in {f.rule_id for f in at_boundary.findings}
    earlier = run_check(code, target="a100", versions={"transformers": before})[0]
    assert "PD202" not in {f.rule_id for f in earlier.findings}


@pytest.mark.parametrize("version,keyword", [("4.50.0", "torch_dtype"), ("4.56.0", "dtype"), ("5.24.0", "dtype")])
def test_dtype_fix_uses_the_keyword_the_release_takes(tiny_bf16_config, run_check, version, keyword):
    """A fix that pins the load's dtype writes `dtype=` only where the release takes it (4.56 on): before, a
    `dtype=` reaches the model's __init__ and raises TypeError, and `torch_dtype=` is the keyword."""
    code = _FROM_CONFIG_SCRIPT.format(path=str(tiny_bf16_config), dtype="")
    result, _ = run_check(code, target="t4", versions={"transformers": version})
    pd202 = next(f for f in result.findings if f.rule_id == "PD202")
    assert [(e.call, e.name) for e in pd202.fix.edits] == [("from_config", keyword)]


def test_pd404_the_trainer_given_the_base_that_get_peft_model_wrapped_elsewhere(tiny_llama, tmp_path, run_check):
    """`peft_model = get_peft_model(model, cfg)`, then `Trainer(model=model)`: the adapters are injected into
    `model`'s modules, but the Trainer is given the quantized base, not a PeftModel, and refuses it. Reproduced
    with a real 4-bit model on the CPU; the twin gives the Trainer peft_model."""
    pytest.importorskip("bitsandbytes")
    peft = pytest.importorskip("peft")
    quant = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float32)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tiny_llama, quantization_config=quant, device_map={"": "cpu"}
    )
    model = peft.prepare_model_for_kbit_training(model)
    peft_model = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    with pytest.raises(ValueError) as err:
        transformers.Trainer(model=model, args=args)
    assert str(err.value).startswith(declared("PD404"))
    transformers.Trainer(model=peft_model, args=args)  # the twin: accepted

    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments\n"
        "from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
        "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', quantization_config=q)\n"
        "model = prepare_model_for_kbit_training(model)\n"
        "peft_model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
        "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n"
    )
    result, _ = run_check(code, target="a100")
    pd404 = [f for f in result.findings if f.rule_id == "PD404"]
    assert pd404 and pd404[0].severity == "error" and "peft_model" in pd404[0].message
    twin, _ = run_check(code.replace("Trainer(model=model", "Trainer(model=peft_model"), target="a100")
    assert "PD404" not in {f.rule_id for f in twin.findings}


def test_get_peft_model_injects_into_the_model_it_is_given(tiny_llama, run_check):
    """Unquantized, `peft_model = get_peft_model(model, cfg)` then `Trainer(model=model)` trains fp32 adapters:
    peft injects them into `model` in place and freezes its fp16 base, so fp16 AMP's GradScaler is fine."""
    peft = pytest.importorskip("peft")
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float16)
    peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}
    code = (
        "import torch\nfrom peft import LoraConfig, get_peft_model\n"
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('facebook/opt-125m', dtype=torch.float16)\n"
        "peft_model = get_peft_model(model, LoraConfig(r=16, task_type='CAUSAL_LM'))\n"
        "Trainer(model=model, args=TrainingArguments('out', fp16=True), train_dataset=ds).train()\n"
    )
    result, _ = run_check(code, target="t4")
    assert not {f.rule_id for f in result.findings} & {"PD201", "PD204", "PD404"}


def test_pd303_mirrors_trainers_find_unused_parameters_default():
    """Trainer turns find_unused_parameters off only for a checkpointing PreTrainedModel; a PeftModel is none, so it
    stays on (the else branch), which reentrant checkpointing under DDP cannot take."""
    import inspect

    peft = pytest.importorskip("peft")
    assert not issubclass(peft.PeftModel, transformers.PreTrainedModel)
    source = inspect.getsource(transformers.Trainer)
    default = source[source.index("if self.args.ddp_find_unused_parameters is not None:") :]
    default = default[: default.index("ddp_kwargs")]
    assert (
        "elif isinstance(self.model, PreTrainedModel):" in default
        and "else:\n            find_unused = True" in default
    )


_DDP_PEFT = (
    "import sys, torch\nfrom peft import LoraConfig, get_peft_model\n"
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)\n"
    "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={{'use_reentrant': True}})\n"
    "model.enable_input_require_grads()\n"
    "model = get_peft_model(model, LoraConfig(r=4, target_modules=['q_proj', 'v_proj']))\n"
    "ids = torch.randint(0, 128, (8, 16))\n"
    "Trainer(model=model, args=TrainingArguments(sys.argv[2], use_cpu=True, max_steps=2, report_to=[], "
    "per_device_train_batch_size=2, save_strategy='no'{args}), "
    "train_dataset=[{{'input_ids': i, 'labels': i}} for i in ids]).train()\n"
    # ranks leave together: one exiting while the other still talks to it can abort gloo (SIGABRT) after training
    "torch.distributed.barrier()\ntorch.distributed.destroy_process_group()\n"
)


def _two_gloo_ranks(tmp_path, code: str, *args: str, env: dict | None = None):
    """`code` saved as train.py and run by torchrun as two gloo ranks on the CPU, given these arguments and the
    output folder last."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(code)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            str(script),
            *args,
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})},
        cwd=tmp_path,
    )


def _dies_as_pd303_says(run, dies: bool) -> None:
    # a rank that aborts leaves its reason far above torchrun's summary: keep the lines that say why
    why = [line for line in run.stderr.splitlines() if any(w in line for w in ("Error", "error", "terminate", "abort"))]
    assert (run.returncode != 0) is dies, "\n".join(why[:40]) + "\n...\n" + run.stderr[-1500:]
    if dies:
        assert declared("PD303").split(". ")[0] in run.stderr


@pytest.mark.parametrize("args,dies", [("", True), (", ddp_find_unused_parameters=False", False)])
def test_pd303_a_peft_model_under_trainer_ddp_with_reentrant_checkpointing(tiny_llama, tmp_path, run_check, args, dies):
    """Reentrant checkpointing switched on on the model (as peft's k-bit preparation does on transformers 4), then
    a PeftModel under Trainer DDP: with ddp_find_unused_parameters unset the Trainer turns it on for a model that is
    no PreTrainedModel, and two real gloo ranks on the CPU die marking parameters ready twice; with it off they
    train. The doctor says the same of the same script."""
    _dies_as_pd303_says(_two_gloo_ranks(tmp_path, _DDP_PEFT.format(args=args), str(tiny_llama)), dies)
    result, _ = run_check(
        _DDP_PEFT.format(args=args),
        launcher="torchrun --nproc_per_node 2 train.py",
        target="a100:2",
        versions={"transformers": transformers.__version__},
    )
    assert ("PD303" in {f.rule_id for f in result.findings}) is dies


_OLD_FORMAT_MODELING = """import torch.utils.checkpoint
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from .configuration_tiny_remote import TinyRemoteConfig


class TinyOldForCausalLM(PreTrainedModel):
    config_class = TinyRemoteConfig
    supports_gradient_checkpointing = True

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.block = nn.Linear(config.hidden_size, config.hidden_size)
        self.head = nn.Linear(config.hidden_size, config.vocab_size)
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self):
        return self.embed

    def _set_gradient_checkpointing(self, module, value=False):
        if isinstance(module, TinyOldForCausalLM):
            module.gradient_checkpointing = value

    def forward(self, input_ids=None, labels=None, **kwargs):
        hidden = self.embed(input_ids)
        if self.gradient_checkpointing and self.training:
            hidden = torch.utils.checkpoint.checkpoint(self.block, hidden{reentrant})
        else:
            hidden = self.block(hidden)
        logits = self.head(hidden)
        loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
        return CausalLMOutput(loss=loss, logits=logits)
"""
_DDP_OLD_FORMAT = (
    "import sys, torch\nfrom peft import LoraConfig, get_peft_model\n"
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('./ckpt', trust_remote_code=True)\n"
    "model = get_peft_model(model, LoraConfig(r=4, target_modules=['block']))\n"
    "ids = torch.randint(0, 64, (8, 16))\n"
    "Trainer(model=model, args=TrainingArguments(sys.argv[1], use_cpu=True, max_steps=2, report_to=[], "
    "per_device_train_batch_size=2, save_strategy='no', gradient_checkpointing=True, "
    "gradient_checkpointing_kwargs={'use_reentrant': False}), "
    "train_dataset=[{'input_ids': i, 'labels': i} for i in ids]).train()\n"
    "torch.distributed.barrier()\ntorch.distributed.destroy_process_group()\n"
)


@pytest.mark.parametrize("reentrant,dies", [("", True), (", use_reentrant=False", False)])
def test_pd303_an_old_format_class_checkpoints_as_its_own_code_says(
    tmp_path, tmp_path_factory, monkeypatch, run_check, reentrant, dies
):
    """A checkpoint whose class keeps the pre-4.35 `_set_gradient_checkpointing(module, value)` (ChatGLM2-6B's
    way) calls torch's checkpoint itself: transformers ignores gradient_checkpointing_kwargs for it, so
    use_reentrant=False in the script changes nothing. Two real gloo ranks on the CPU, LoRA under Trainer DDP: with
    the class's own call reentrant (no use_reentrant: torch's default) they die marking parameters ready twice, as
    PD303 says; where its own call passes use_reentrant=False they train, and PD303 is silent."""
    import json

    from transformers import dynamic_module_utils

    monkeypatch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(tmp_path_factory.getbasetemp() / "hf_modules"))
    code = tmp_path / ("code_old" + ("_nonreentrant" if reentrant else ""))
    code.mkdir()
    (code / "configuration_tiny_remote.py").write_text(_REMOTE_CONFIGURATION)
    (code / "modeling_tiny_old.py").write_text(_OLD_FORMAT_MODELING.replace("{reentrant}", reentrant))
    auto_map = {
        "AutoConfig": "configuration_tiny_remote.TinyRemoteConfig",
        "AutoModelForCausalLM": "modeling_tiny_old.TinyOldForCausalLM",
    }
    (code / "config.json").write_text(json.dumps({"model_type": "tiny-remote", "auto_map": auto_map}))
    config = transformers.AutoConfig.from_pretrained(code, trust_remote_code=True)
    transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=True).save_pretrained(tmp_path / "ckpt")

    env = {"HF_MODULES_CACHE": str(tmp_path / "mods")}
    _dies_as_pd303_says(_two_gloo_ranks(tmp_path, _DDP_OLD_FORMAT, env=env), dies)
    result, _ = run_check(
        _DDP_OLD_FORMAT,
        launcher="torchrun --nproc_per_node 2 train.py",
        target="a100:2",
        versions={"transformers": transformers.__version__},
    )
    found = [f for f in result.findings if f.rule_id == "PD303"]
    assert bool(found) is dies
    if dies:
        assert "ddp_find_unused_parameters=False" in found[0].fix.description.replace("`", "")


def test_pd604_bitsandbytes_refuses_a_device_map_with_cpu_modules():
    """transformers' 4-bit quantizer checks the device map accelerate inferred: CPU modules are refused unless
    llm_int8_enable_fp32_cpu_offload=True. PD604 predicts the same error and the same escape."""
    from transformers import BitsAndBytesConfig
    from transformers.quantizers.quantizer_bnb_4bit import Bnb4BitHfQuantizer

    from precision_doctor.rules.pd6_memory.pd604_device_map_auto_offloads import BNB_REFUSES_OFFLOAD

    spilled = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": "cpu", "lm_head": "cpu"}
    with pytest.raises(ValueError) as refused:
        Bnb4BitHfQuantizer(BitsAndBytesConfig(load_in_4bit=True)).validate_environment(device_map=spilled)
    assert BNB_REFUSES_OFFLOAD.startswith(f"ValueError: {str(refused.value)[:200]}")
    allowed = BitsAndBytesConfig(load_in_4bit=True, llm_int8_enable_fp32_cpu_offload=True)
    Bnb4BitHfQuantizer(allowed).validate_environment(device_map=spilled)  # accepted: the slow path PD604 warns of


def test_pd505_trainer_refuses_fsdp_in_one_plain_process(tiny_llama, run_check, tmp_path):
    """Trainer checks FSDP against the launch in its constructor: one plain python process has no process group,
    and it refuses with the message PD505 gives for the same script launched that way."""
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama)
    args = transformers.TrainingArguments(str(tmp_path / "out"), fsdp="full_shard", use_cpu=True, report_to=[])
    with pytest.raises(ValueError) as err:
        transformers.Trainer(model=model, args=args)
    code = (
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        f"model = AutoModelForCausalLM.from_pretrained({str(tiny_llama)!r})\n"
        "args = TrainingArguments('out', fsdp='full_shard')\nTrainer(model=model, args=args).train()\n"
    )
    result, _ = run_check(code, target="a100:2", launcher="python train.py")
    finding = next(f for f in result.findings if f.rule_id == "PD505")
    assert finding.error == f"ValueError: {err.value}"
    clean, _ = run_check(code, target="a100:2", launcher="torchrun --nproc_per_node 2 train.py")
    assert "PD505" not in {f.rule_id for f in clean.findings}


def test_pd401_deepspeeds_fp16_cast_of_a_quantized_model(tiny_llama, run_check):
    """DeepSpeed's fp16 engine calls `module.half()` on the model it is given (0.18.0 runtime/engine.py:1306-1309);
    a real 4-bit model on the CPU refuses it with the message PD401 gives, and a PeftModel over it is cast by torch
    without complaint (the twin)."""
    pytest.importorskip("bitsandbytes")
    peft = pytest.importorskip("peft")
    quant = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float16)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tiny_llama, quantization_config=quant, device_map={"": "cpu"}
    )
    with pytest.raises(ValueError) as err:
        model.half()
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    wrapped.half()  # the twin: torch casts the PeftModel's floating tensors one by one

    code = get_rule("PD401").fires[2].code
    result, _ = run_check(code, target="a100:2", launcher="deepspeed --num_gpus 2 train.py")
    finding = next(f for f in result.findings if f.rule_id == "PD401")
    assert finding.error == f"ValueError: {err.value}"


def test_pd207_a_second_unscale_before_update_raises_as_its_fix_says(run_check):
    """PD207 leaves a partly unscaled loop (`if step % 2 == 0: scaler.unscale_(opt)`) to the user instead of adding a
    second unscale_ before the later clip, because GradScaler refuses two in one step."""
    from .conftest import check_example

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.ones(2, 4)).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match=r"unscale_\(\) has already been called on this optimizer"):
        scaler.unscale_(opt)
    result, _ = check_example(run_check, get_rule("PD207").fires[1])
    (finding,) = [f for f in result.findings if f.rule_id == "PD207"]
    assert "a second call before update() raises" in finding.fix.description and not finding.fix.edits


def test_pd217_llamafactory_recipe_key_refused_as_hfargumentparser_refuses_it(run_check):
    """LLaMA-Factory's get_train_args hands the recipe to HfArgumentParser.parse_dict (hparams/parser.py): a key
    its TrainingArguments' transformers base no longer has (transformers 5 dropped
    `fsdp_transformer_layer_cls_to_wrap`, which LLaMA-Factory's own fp8 FSDP example still writes) is refused with
    the message the doctor predicts."""
    from transformers import HfArgumentParser, Seq2SeqTrainingArguments

    key = "fsdp_transformer_layer_cls_to_wrap"
    with pytest.raises(ValueError) as raised:
        HfArgumentParser(Seq2SeqTrainingArguments).parse_dict({"output_dir": "o", key: "LlamaDecoderLayer"})
    recipe = (
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: full\n"
        f"dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\n{key}: LlamaDecoderLayer\n"
    )
    result, _ = run_check(recipe, name="train.yaml", versions={"llamafactory": "0.9.5", "transformers": "5.23.0"})
    [finding] = [f for f in result.findings if f.rule_id == "PD217"]
    assert finding.severity == "error" and finding.error == f"ValueError: {raised.value}"


_REMOTE_CONFIGURATION = """from transformers import PretrainedConfig


class TinyRemoteConfig(PretrainedConfig):
    model_type = "tiny-remote"

    def __init__(self, vocab_size=64, hidden_size=16, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        super().__init__(**kwargs)
"""
_REMOTE_MODELING = """from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from .configuration_tiny_remote import TinyRemoteConfig


class TinyRemotePreTrainedModel(PreTrainedModel):
    config_class = TinyRemoteConfig
{supports}

class TinyRemoteForCausalLM(TinyRemotePreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.head = nn.Linear(config.hidden_size, config.vocab_size)
{flag}        self.post_init()

    def forward(self, input_ids=None, labels=None, **kwargs):
        logits = self.head(self.embed(input_ids))
        loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
        return CausalLMOutput(loss=loss, logits=logits)
"""


def _tiny_remote_checkpoint(tmp_path, tmp_path_factory, monkeypatch, name: str, supports: str, flag: str):
    """A saved tiny checkpoint whose model class is its own code (auto_map), at tmp_path/ckpt_NAME."""
    import json

    from transformers import dynamic_module_utils

    # one modules folder for the session: Python keeps the `transformers_modules` package it first imported
    monkeypatch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(tmp_path_factory.getbasetemp() / "hf_modules"))
    code = tmp_path / f"code_{name}"  # a folder name of its own: Python keeps each module it imported
    code.mkdir()
    (code / "configuration_tiny_remote.py").write_text(_REMOTE_CONFIGURATION)
    (code / "modeling_tiny_remote.py").write_text(_REMOTE_MODELING.format(supports=supports, flag=flag))
    auto_map = {
        "AutoConfig": "configuration_tiny_remote.TinyRemoteConfig",
        "AutoModelForCausalLM": "modeling_tiny_remote.TinyRemoteForCausalLM",
    }
    (code / "config.json").write_text(json.dumps({"model_type": "tiny-remote", "auto_map": auto_map}))
    config = transformers.AutoConfig.from_pretrained(code, trust_remote_code=True)
    built = transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=True)
    built.save_pretrained(tmp_path / f"ckpt_{name}")
    return tmp_path / f"ckpt_{name}"


_GC_SCRIPT = (
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('./ckpt_{name}', trust_remote_code=True)\n"
    "args = TrainingArguments('out', gradient_checkpointing=True, max_steps=1)\n"
    "Trainer(model=model, args=args, train_dataset=data).train()\n"
)


def _one_step_with_checkpointing(model, tmp_path):
    """A Trainer that switches gradient checkpointing on and trains `model` one step on the CPU."""
    ids = torch.randint(0, 64, (8,))
    args = transformers.TrainingArguments(
        str(tmp_path / "out"), gradient_checkpointing=True, max_steps=1, use_cpu=True, report_to=[]
    )
    return transformers.Trainer(model=model, args=args, train_dataset=[{"input_ids": ids, "labels": ids}] * 2)


SUPPORTS = "    supports_gradient_checkpointing = True\n"
FLAG = "        self.gradient_checkpointing = False  # what transformers switches (modeling_utils.py:3235-3249)\n"


@pytest.mark.parametrize(
    "name,supports,flag",
    [("lacks", "", FLAG), ("sets", SUPPORTS, FLAG), ("noflag", SUPPORTS, "")],
)
def test_pd307_a_remote_class_without_checkpointing_support_is_refused(
    tmp_path, tmp_path_factory, monkeypatch, run_check, name, supports, flag
):
    """A checkpoint with its own model code (auto_map, trust_remote_code=True) whose class never sets
    supports_gradient_checkpointing, or sets it with no module flag to switch: the Trainer's first step dies as
    PD307 says; the class that sets both trains."""
    saved = _tiny_remote_checkpoint(tmp_path, tmp_path_factory, monkeypatch, name, supports, flag)
    model = transformers.AutoModelForCausalLM.from_pretrained(saved, trust_remote_code=True)
    assert type(model).__name__ == "TinyRemoteForCausalLM"  # the checkpoint's own class, not a library one
    trainer = _one_step_with_checkpointing(model, tmp_path)

    script = _GC_SCRIPT.format(name=name)
    result, _ = run_check(script)
    predicted = [f for f in result.findings if f.rule_id == "PD307"]
    if supports and flag:
        trainer.train()  # trains
        assert not predicted
        return
    with pytest.raises(ValueError) as err:
        trainer.train()
    assert [f.error for f in predicted] == [f"ValueError: {err.value}"]
    assert predicted[0].severity == "error"


@pytest.mark.parametrize(
    "signature,dies",
    [("self, gradient_checkpointing_kwargs=None", True), ("self, gradient_checkpointing_kwargs=None, **kwargs", False)],
)
def test_pd307_an_own_enable_method_that_takes_fewer_keywords_than_the_trainer_passes(
    tmp_path, tmp_path_factory, monkeypatch, run_check, signature, dies
):
    """A checkpoint's class overrides gradient_checkpointing_enable with the signature of transformers 4.35-5.15:
    from 5.16 the Trainer passes every_n_layers (and from 5.23 offload), and the job dies on the keyword; an
    override that takes **kwargs trains. PD307 predicts the TypeError word for word."""
    override = (
        SUPPORTS + f"\n    def gradient_checkpointing_enable({signature}):\n"
        "        super().gradient_checkpointing_enable(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs)\n"
    )
    name = "narrow" if dies else "wide"
    saved = _tiny_remote_checkpoint(tmp_path, tmp_path_factory, monkeypatch, name, override, FLAG)
    model = transformers.AutoModelForCausalLM.from_pretrained(saved, trust_remote_code=True)
    trainer = _one_step_with_checkpointing(model, tmp_path)
    script = _GC_SCRIPT.format(name=name)
    predicted = [
        f
        for f in run_check(script, versions={"transformers": transformers.__version__})[0].findings
        if f.rule_id == "PD307"
    ]
    if not dies:
        trainer.train()
        assert not predicted
        return
    with pytest.raises(TypeError) as err:
        trainer.train()
    assert [(f.severity, f.error) for f in predicted] == [("error", f"TypeError: {err.value}")]
    before = run_check(script, versions={"transformers": "5.15.0"})[0]
    assert not [f for f in before.findings if f.rule_id == "PD307"]  # the Trainer passed only the kwargs then


_CALLBACK = (
    "from transformers import TrainerCallback\n\n\n"
    "class Patch(TrainerCallback):\n"
    "    def on_train_begin(self, args, state, control, model=None, **kwargs):\n"
    "        model.supports_gradient_checkpointing = True\n\n\n"
)


@pytest.mark.parametrize(
    "where,trains",
    [("on-the-base-before-the-wrap", True), ("on-the-peft-wrapper", False), ("in-a-callback", False)],
)
def test_pd307_the_workaround_works_only_where_the_model_reads_it(
    tmp_path, tmp_path_factory, monkeypatch, run_check, where, trains
):
    """`supports_gradient_checkpointing = True` set by the script: on the model before peft wraps it, the job
    trains; on peft's wrapper (the base model's gradient_checkpointing_enable reads its own class) or in a
    callback's on_train_begin (after the Trainer switched checkpointing on), it dies as PD307 says."""
    import peft

    saved = _tiny_remote_checkpoint(tmp_path, tmp_path_factory, monkeypatch, where.replace("-", "_"), "", FLAG)
    lora = peft.LoraConfig(r=2, target_modules=["head"])
    model = transformers.AutoModelForCausalLM.from_pretrained(saved, trust_remote_code=True)
    callbacks = []
    if where == "on-the-base-before-the-wrap":
        model.supports_gradient_checkpointing = True
    model = peft.get_peft_model(model, lora)
    if where == "on-the-peft-wrapper":
        model.supports_gradient_checkpointing = True
    if where == "in-a-callback":

        class Patch(transformers.TrainerCallback):
            def on_train_begin(self, args, state, control, model=None, **kwargs):
                model.supports_gradient_checkpointing = True

        callbacks.append(Patch())
    ids = torch.randint(0, 64, (8,))
    args = transformers.TrainingArguments(
        str(tmp_path / "out"), gradient_checkpointing=True, max_steps=1, use_cpu=True, report_to=[]
    )
    data = [{"input_ids": ids, "labels": ids}] * 2
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)

    patch = "model.supports_gradient_checkpointing = True\n"
    script = (
        "from peft import LoraConfig, get_peft_model\n"
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        + (_CALLBACK if where == "in-a-callback" else "")
        + f"model = AutoModelForCausalLM.from_pretrained('./ckpt_{where.replace('-', '_')}', trust_remote_code=True)\n"
        + (patch if where == "on-the-base-before-the-wrap" else "")
        + "model = get_peft_model(model, LoraConfig(r=2, target_modules=['head']))\n"
        + (patch if where == "on-the-peft-wrapper" else "")
        + "args = TrainingArguments('out', gradient_checkpointing=True, max_steps=1)\n"
        + "Trainer(model=model, args=args, train_dataset=data"
        + (", callbacks=[Patch()]" if where == "in-a-callback" else "")
        + ").train()\n"
    )
    predicted = [f for f in run_check(script)[0].findings if f.rule_id == "PD307"]
    if trains:
        trainer.train()
        assert not predicted
        return
    with pytest.raises(ValueError) as err:
        trainer.train()
    assert [(f.severity, f.error) for f in predicted] == [("error", f"ValueError: {err.value}")]


def test_pd308_a_checkpoints_own_code_without_trust_is_refused_at_load(
    tmp_path, tmp_path_factory, monkeypatch, run_check
):
    """transformers has no class of its own for the model type, and the load does not trust the checkpoint's code:
    with no terminal to ask, the load dies as PD308 says; with trust_remote_code=True it loads."""
    _tiny_remote_checkpoint(tmp_path, tmp_path_factory, monkeypatch, "untrusted", SUPPORTS, FLAG)
    monkeypatch.chdir(tmp_path)

    script = (
        "from transformers import AutoModelForCausalLM\n"
        "model = AutoModelForCausalLM.from_pretrained('./ckpt_untrusted')\n"
    )
    (finding,) = [f for f in run_check(script)[0].findings if f.rule_id == "PD308"]
    with pytest.raises(ValueError) as err:
        transformers.AutoModelForCausalLM.from_pretrained("./ckpt_untrusted")
    assert f"ValueError: {err.value}".startswith(finding.error)
    trusted = transformers.AutoModelForCausalLM.from_pretrained("./ckpt_untrusted", trust_remote_code=True)
    assert type(trusted).__name__ == "TinyRemoteForCausalLM"
    assert not [
        f for f in run_check(script.replace("')", "', trust_remote_code=True)"))[0].findings if f.rule_id == "PD308"
    ]
