"""PD504 fsdp-mixed-dtype-flatten: An FSDP unit would flatten parameters of several dtypes (half base + fp32 LoRA, or
4-bit storage)."""

from __future__ import annotations

from ...derive import Setup, decide, evidence_of
from ...knowledge import dtypes
from ...model.facts import ABSENT, KNOWN, LaunchFacts, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from .._common import only_on_some_paths, path_severity, present, set_kwarg
from ..registry import Example, LogSignature, rule
from ._distributed import in_script_first


def _fsdp_on(setup: Setup) -> Evidence | None:
    sharding = setup.sharding
    return (sharding.evidence[0] if sharding.evidence else None) if sharding.kind == "fsdp" else None


# torch's own policies group a block's parameters whatever their dtype: with fp32 adapters inside half blocks
# every unit mixes dtypes. A policy the script builds itself is not judged (it may wrap trainable leaves apart).
_MIXING_POLICIES = ("transformer_auto_wrap_policy", "size_based_auto_wrap_policy", "ModuleWrapPolicy")


# the fix for a hand-written accelerate loop under an FSDP1 config: peft's policy, which Trainer installs itself
_PEFT_POLICY_BEFORE_PREPARE = (
    "before accelerator.prepare: accelerator.state.fsdp_plugin.auto_wrap_policy = "
    "fsdp_auto_wrap_policy(model) (from peft.utils.other)"
)


_ACC_FSDP_LORA = (
    "import torch\nfrom accelerate import Accelerator\nfrom peft import LoraConfig, get_peft_model\n"
    "{imports}from transformers import AutoModelForCausalLM\naccelerator = Accelerator()\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16)\n"
    "model = get_peft_model(model, LoraConfig(r=8, target_modules=['c_attn']))\n{policy}"
    "model = accelerator.prepare(model)\n"
    "opt = accelerator.prepare(torch.optim.AdamW(model.parameters()))\n"
    "for batch in loader:\n    accelerator.backward(model(**batch).loss)\n    opt.step()\n"
)


@rule(
    "PD504",
    "fsdp-mixed-dtype-flatten",
    severity="error",
    phase="wrap",
    summary="An FSDP unit would flatten parameters of several dtypes (half base + fp32 LoRA, or 4-bit storage).",
    what="FSDP over a PEFT model whose base is fp16/bf16 and whose adapters are fp32 (peft >= 0.12) wrapped by a "
    "plain auto-wrap policy (a hand-written `FSDP(...)`, or `accelerate launch` with an FSDP1 config, which "
    "unlike Trainer installs no peft policy), or QLoRA under FSDP with the default `bnb_4bit_quant_storage` "
    "(uint8).",
    why="FSDP(1) flattens each unit's parameters into one FlatParameter, which must have one dtype and cannot be an "
    "integer type.",
    error="ValueError: Must flatten tensors with uniform dtype but got torch.bfloat16 and torch.float32",
    fix="Wrap LoRA leaves as their own units with peft's `fsdp_auto_wrap_policy(model)` (Trainer installs it for "
    "PeftModels), or create adapters in the base dtype (`autocast_adapter_dtype=False`); for FSDP-QLoRA set "
    "`bnb_4bit_quant_storage` equal to the model dtype.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    log=LogSignature(
        patterns=(
            r"Must flatten tensors with uniform dtype",
            r"requires uniform dtype",
            r"Must flatten tensors with uniform `requires_grad`",
            r"Cannot flatten integer dtype tensors",
            r"Integer parameters are unsupported",
        )
    ),
    fires=[
        Example(
            "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
            "from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy\n"
            "from peft import LoraConfig, get_peft_model\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16)\n"
            "model = get_peft_model(model, LoraConfig(r=8, target_modules=['c_attn']))\n"
            "model = FSDP(model, auto_wrap_policy=transformer_auto_wrap_policy)\n"
            "opt = torch.optim.AdamW(model.parameters())\n"
        ),
        Example(
            "import torch\nfrom peft import LoraConfig\n"
            "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, TrainingArguments\n"
            "from trl import SFTTrainer\n"
            "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)\n"
            "model = AutoModelForCausalLM.from_pretrained('m', quantization_config=q, dtype=torch.bfloat16)\n"
            "args = TrainingArguments('o', bf16=True, fsdp='full_shard auto_wrap')\n"
            "SFTTrainer(model=model, args=args, peft_config=LoraConfig(r=8)).train()\n"
        ),
        Example(
            _ACC_FSDP_LORA.format(imports="", policy=""),
            launcher="accelerate launch --use_fsdp --fsdp_version 1 --num_processes 2 train.py",
            note="accelerate installs no peft wrap policy (Trainer does), and use_orig_params is off by default: "
            "frozen and trainable parameters in one unit",
        ),
        Example(
            _ACC_FSDP_LORA.format(imports="", policy=""),
            launcher="accelerate launch --use_fsdp --fsdp_version 1 --fsdp_use_orig_params true "
            "--num_processes 2 train.py",
            note="use_orig_params on: bf16 base and fp32 adapters",
        ),
    ],
    silent=[
        Example(
            _ACC_FSDP_LORA.format(imports="", policy="model = model.to(torch.bfloat16)\n"),
            launcher="accelerate launch --use_fsdp --fsdp_version 1 --fsdp_use_orig_params true "
            "--num_processes 2 train.py",
            note="the adapters cast to the base's dtype",
        ),
        Example(
            _ACC_FSDP_LORA.format(
                imports="from peft.utils.other import fsdp_auto_wrap_policy\n",
                policy="accelerator.state.fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model)\n",
            ),
            launcher="accelerate launch --use_fsdp --fsdp_version 1 --num_processes 2 train.py",
        ),
        Example(
            "import torch, functools\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
            "from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy\n"
            "from peft import LoraConfig, get_peft_model\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16)\n"
            "model = get_peft_model(model, LoraConfig(r=8, target_modules=['c_attn']))\n"
            "trainable_leaves = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: "
            "not list(m.children()) and m.weight.requires_grad)\n"
            "model = FSDP(model, auto_wrap_policy=trainable_leaves)\n"
            "opt = torch.optim.AdamW(model.parameters())\n",
            note="the project's own policy: each trainable leaf is its own unit",
        ),
        Example(
            "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
            "from peft import LoraConfig, get_peft_model\nfrom peft.utils.other import fsdp_auto_wrap_policy\n"
            "from transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16)\n"
            "model = get_peft_model(model, LoraConfig(r=8, target_modules=['c_attn']))\n"
            "model = FSDP(model, auto_wrap_policy=fsdp_auto_wrap_policy(model))\n"
            "opt = torch.optim.AdamW(model.parameters())\n"
        ),
        Example(
            "import torch\nfrom peft import LoraConfig\n"
            "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, TrainingArguments\n"
            "from trl import SFTTrainer\n"
            "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16, "
            "bnb_4bit_quant_storage=torch.bfloat16)\n"
            "model = AutoModelForCausalLM.from_pretrained('m', quantization_config=q, dtype=torch.bfloat16)\n"
            "args = TrainingArguments('o', bf16=True, fsdp='full_shard auto_wrap')\n"
            "SFTTrainer(model=model, args=args, peft_config=LoraConfig(r=8)).train()\n"
        ),
    ],
)
def fsdp_mixed_dtype_flatten(
    script: ScriptFacts, setup: Setup, machine: MachineFacts, launch: LaunchFacts, stack: StackFacts
):
    on = _fsdp_on(setup)
    if on is None:
        return
    if setup.quantized.value == "4bit":
        cfg = setup.quantized.call if setup.quantized.call and setup.quantized.call.kind == "bnb_config" else None
        storage = decide(cfg.kwarg("bnb_4bit_quant_storage"), machine, stack) if cfg else None
        stored = dtypes.from_string(storage.value) if storage is not None and storage.state == KNOWN else None
        if stored != setup.weights.value or stored is None:
            left = stored is None
            yield Draft(
                "QLoRA under FSDP with bnb_4bit_quant_storage left at uint8: FSDP cannot flatten the "
                "quantized integer storage with the model's float parameters"
                if left
                else f"QLoRA under FSDP with bnb_4bit_quant_storage={stored} beside {setup.weights.value} "
                f"weights: FSDP flattens only tensors of one dtype",
                evidence=in_script_first(
                    (on,)
                    + setup.quantized.evidence
                    + (() if left else (evidence_of(storage, "bnb_4bit_quant_storage", cfg),)),
                    script,
                ),
                error="ValueError: Cannot flatten integer dtype tensors"
                if left
                else f"ValueError: Must flatten tensors with uniform dtype but got torch.{setup.weights.value} "
                f"and torch.{stored}",
                fix=Fix(
                    f"bnb_4bit_quant_storage=torch.{setup.weights.value or 'bfloat16'} in the BitsAndBytesConfig",
                    applicability=Applicability.SAFE,
                    edits=present(
                        set_kwarg(cfg, "bnb_4bit_quant_storage", f"torch.{setup.weights.value or 'bfloat16'}")
                    )
                    if cfg
                    else (),
                ),
            )
        return
    raw = script.of("fsdp")
    launched = (
        not raw
        and setup.peft.value
        and setup.style == "accelerate"
        and setup.sharding.source == "launch"
        and setup.sharding.fsdp_version in (None, 1)
        and not script.of("peft_wrap_policy")
    )
    if launched and not setup.sharding.use_orig_params:
        # FSDP1 without use_orig_params flattens a unit's parameters into one that must also share requires_grad:
        # a frozen base and trainable adapters in one block fail whatever their dtypes
        yield Draft(
            "FSDP (from the accelerate config, use_orig_params off) wraps frozen base weights and trainable "
            "LoRA adapters into the same units: accelerate installs no peft policy",
            evidence=(on,) + setup.peft.evidence,
            error="ValueError: Must flatten tensors with uniform `requires_grad` when `use_orig_params=False`",
            fix=Fix(
                f"{_PEFT_POLICY_BEFORE_PREPARE}, or fsdp_use_orig_params: true with the adapters in the base's dtype",
                applicability=Applicability.UNSAFE,
            ),
        )
        return
    if (
        not setup.peft.value
        or not dtypes.is_half(setup.weights.value)
        or setup.adapter_dtype.value == setup.weights.value
    ):
        return
    attach = setup.peft.call
    recast = attach is not None and any(
        (c.location.path, c.location.line) > (attach.location.path, attach.location.line) for c in setup.casts
    )  # `model.to(torch.bfloat16)` after the adapters
    if launched and not recast:
        # accelerate's FSDP1 plugin wraps with the config's policy (or none): unlike Trainer it installs no peft
        # policy for a PeftModel, so the half base and fp32 adapters of a block share a unit
        yield Draft(
            f"FSDP (from the accelerate config) wraps {setup.weights.value} base weights and "
            f"{setup.adapter_dtype.value} LoRA adapters into the same units: accelerate installs no peft policy",
            evidence=(on,) + setup.weights.evidence + setup.adapter_dtype.evidence,
            error=f"ValueError: Must flatten tensors with uniform dtype but got torch.{setup.weights.value} "
            f"and torch.{setup.adapter_dtype.value}",
            fix=Fix(_PEFT_POLICY_BEFORE_PREPARE, applicability=Applicability.UNSAFE),
        )
        return
    if not raw:
        return  # Trainer installs peft's fsdp_auto_wrap_policy for PeftModels itself
    policy = raw[0].kwarg("auto_wrap_policy")
    if "fsdp_auto_wrap_policy" in policy.text:
        return
    if policy.state != ABSENT and not any(p in policy.text for p in _MIXING_POLICIES):
        return  # the project's own policy (or one chosen at run time) may give the LoRA leaves their own units
    path = only_on_some_paths((setup.weights.call,) + setup.casts, raw[0])
    yield Draft(
        f"FSDP wraps {setup.weights.value} base weights and {setup.adapter_dtype.value} LoRA adapters into the "
        f"same units" + (f"; only when {path}" if path else ""),
        severity=path_severity("", path),
        evidence=(on,) + setup.weights.evidence + setup.adapter_dtype.evidence,
        error=f"ValueError: Must flatten tensors with uniform dtype but got torch.{setup.weights.value} and "
        f"torch.{setup.adapter_dtype.value}",
        fix=Fix(
            "auto_wrap_policy=fsdp_auto_wrap_policy(model) (from peft.utils.other)", applicability=Applicability.UNSAFE
        ),
    )
