"""PD404 quantized-model-without-adapters: Training a 4/8-bit model with no trainable adapters attached."""

from __future__ import annotations

from ...derive import Setup, call_evidence
from ...derive.checkpoint import checkpoint_of
from ...model.facts import MachineFacts, ScriptFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, rule
from ._quantization import HEAD, LORA, qlora

# checkpoints stored quantized by these methods load quantized on any GPU and cannot train without adapters: their
# quantizers are not QAT-trainable (transformers quantizers/base.py `is_qat_trainable` False; trainer_utils.py
# validate_quantization_for_training). MXFP4 is left out: it dequantizes where its kernels are missing
# (quantizer_mxfp4.py).
STAYS_QUANTIZED = frozenset(
    {"gptq", "awq", "aqlm", "eetq", "hqq", "bitsandbytes", "quanto", "vptq", "spqr", "higgs", "auto-round"}
)


def _stays_quantized(value: object, machine: MachineFacts) -> bool:
    if value in ("4bit", "8bit") or value in STAYS_QUANTIZED:
        return True
    # FP8 stays quantized on GPUs with fp8 (8.9+); below, transformers dequantizes it to bf16
    # (quantizer_finegrained_fp8.py:49-57)
    gpus = machine.gpus if machine.known else ()
    return value == "fp8" and bool(gpus) and all(g.fp8 for g in gpus)


_ADAPTERS_TRAIN = "    Trainer(model=model, args=TrainingArguments('o')).train()\n"


_BUILD = (
    HEAD + "def build(name, use_lora):\n"
    "    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)\n"
    "    model = AutoModelForCausalLM.from_pretrained(name, quantization_config=q)\n"
    "    if use_lora:\n"
    "        model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
    "    return model\n\n"
    "model = build('meta-llama/Llama-3.2-1B', use_lora={lora})\n"
    "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n"
)
_ADAPTERS_ON_SOME_PATHS = (
    HEAD + "def run(method):\n"
    "    q = BitsAndBytesConfig(load_in_4bit=True)\n"
    "    model = AutoModelForCausalLM.from_pretrained('gpt2', quantization_config=q)\n"
    "    if method == 'a':\n"
    "        model = get_peft_model(model, LoraConfig(r=8))\n"
    "    elif method == 'b':\n"
    "        model = get_peft_model(model, LoraConfig(r=16))\n" + _ADAPTERS_TRAIN + "import sys\nrun(sys.argv[1])\n"
)


@rule(
    "PD404",
    "quantized-model-without-adapters",
    severity="error",
    phase="wrap",
    summary="Training a 4/8-bit model with no trainable adapters attached.",
    what="Trainer/SFTTrainer given a bitsandbytes-quantized model, or a checkpoint stored quantized (GPTQ, AWQ, a "
    "saved 4-bit model, FP8 on a GPU with fp8: its config.json's `quantization_config`, which a quantization_config "
    "given at load does not undo), without `get_peft_model` / `peft_config` (or after `merge_and_unload()`).",
    why="Quantized weights cannot be trained; transformers refuses a purely quantized model.",
    error="ValueError: You cannot perform fine-tuning on purely quantized models. Please attach trainable adapters on "
    "top of the quantized model to correctly perform fine-tuning.",
    fix="Attach adapters (`get_peft_model(model, LoraConfig(...))` or SFTTrainer `peft_config=`), or load without "
    "quantization.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    fires=[
        Example(
            qlora(middle="").replace(LORA, LORA + "model = model.merge_and_unload()\n"),
            note="adapters merged away before training",
        ),
        Example(qlora(lora=False)),
        Example(
            _ADAPTERS_ON_SOME_PATHS, note="a warning: adapters on the if and elif branches only, training on every path"
        ),
        Example(
            qlora().replace(LORA, LORA.replace("model = ", "peft_model = ", 1)),
            note="the adapters are bound to peft_model; the Trainer is given the quantized base",
        ),
        Example(_BUILD.format(lora="False"), note="the only call passes use_lora=False: the branch never runs"),
    ],
    silent=[
        Example(qlora()),
        Example(
            qlora()
            .replace(LORA, LORA.replace("model = ", "peft_model = ", 1))
            .replace("Trainer(model=model", "Trainer(model=peft_model")
        ),
        Example(
            _ADAPTERS_ON_SOME_PATHS.replace(
                "    if method == 'a':\n",
                "    if method == 'a':\n"
                "        model = get_peft_model(model, LoraConfig(r=8))\n"
                "        Trainer(model=model, args=TrainingArguments('o')).train()\n"
                "    if False:\n",
            ),
            note="training only on the branch that attaches adapters",
        ),
        Example(
            qlora(middle="") + "model.merge_and_unload().save_pretrained('merged')\n",
            note="merged after training, to save",
        ),
        Example(_BUILD.format(lora="True"), note="every call passes use_lora=True: adapters on every run"),
    ],
)
def quantized_model_without_adapters(script: ScriptFacts, setup: Setup, machine: MachineFacts):
    if setup.style != "trainer" or not _stays_quantized(setup.quantized.value, machine):
        return
    stored = checkpoint_of(setup.model_load, script)
    if script.recipe is not None and script.recipe.family == "LLaMA-Factory" and stored and stored.quantization:
        return  # LLaMA-Factory refuses a PTQ model it would train in full itself, first (PD701, adapter.py:330)
    wrapper = setup.peft.call if setup.peft.value else None
    if (
        wrapper is not None
        and wrapper.kind == "get_peft_model"
        and setup.followed
        and wrapper not in setup.chain
        and wrapper.target
        and wrapper.target not in setup.model_names
    ):
        # `peft_model = get_peft_model(model, cfg)`, then `Trainer(model=model)`: the adapters are in `model`'s
        # modules, but the Trainer is given the quantized base, not a PeftModel, and refuses it
        yield Draft(
            f"the model is {setup.quantized.value}-quantized and the Trainer is given it without its PeftModel "
            f"wrapper: get_peft_model's result is {wrapper.target}, not what the Trainer trains",
            evidence=setup.quantized.evidence
            + (
                call_evidence(wrapper, f"adapters: {wrapper.target}"),
                call_evidence(setup.trainer, "given the quantized base"),
            ),
            fix=Fix(f"give the Trainer {wrapper.target} (model={wrapper.target})", applicability=Applicability.UNSAFE),
        )
        return
    if setup.peft.value:
        return
    merge = setup.peft.call if setup.peft.call is not None and setup.peft.call.kind == "merge_adapters" else None
    if merge is not None:
        method = merge.callee.rsplit(".", 1)[-1]
        yield Draft(
            f"the model is {setup.quantized.value}-quantized and {method}() folds its adapters in and removes them "
            "before training: the Trainer gets the quantized base alone",
            evidence=setup.quantized.evidence + setup.peft.evidence + (call_evidence(setup.trainer, "given the base"),),
            fix=Fix(
                f"train the PeftModel and call {method}() after trainer.train() (to save a merged model)",
                applicability=Applicability.UNSAFE,
            ),
        )
        return
    attached = [
        c
        for c in script.of("get_peft_model")
        if c.branches and not c.never_runs and (c.target in setup.model_names or not c.target)
    ]
    trained_on = {(br.line, br.taken) for br in setup.trainer.branches}
    if any((c.branches[-1].line, c.branches[-1].taken) in trained_on for c in attached):
        return  # training happens only on a path that attached adapters
    if attached:  # some paths attach adapters: the others are the finding, at most a warning
        where = "; ".join(c.branches[-1].describe() for c in attached[:3])
        yield Draft(
            f"the model is {setup.quantized.value}-quantized and adapters are attached only when {where}: "
            f"on any other path that reaches training it is trained as it is",
            severity="warning",
            evidence=setup.quantized.evidence
            + tuple(call_evidence(c, "adapters on this branch only") for c in attached[:3]),
            fix=Fix(
                "attach adapters on every path that trains (or train only where they are attached)",
                applicability=Applicability.UNSAFE,
            ),
        )
        return
    yield Draft(
        f"the model is {setup.quantized.value}-quantized and no adapters are attached before training",
        evidence=setup.quantized.evidence + (call_evidence(setup.trainer, "trained as it is"),),
        fix=Fix(
            "model = get_peft_model(model, LoraConfig(...)) before the Trainer (or peft_config=)",
            applicability=Applicability.UNSAFE,
        ),
    )
