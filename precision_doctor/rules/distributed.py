"""DeepSpeed and FSDP: precision settings that disagree, ZeRO-3 with device maps, fp16 loss-scale collapse, and
FSDP units of mixed dtype (PD501-PD504)."""

from __future__ import annotations


from ..knowledge import dtypes
from ..derive import Setup, decide, evidence_of
from ..derive.sharding import hard_enabled, precision_enabled, zero3_shards_the_load
from .registry import Example, LogSignature, rule
from ..model.facts import ABSENT, KNOWN, Call, LaunchFacts, MachineFacts, ScriptFacts, StackFacts
from ..knowledge.families import overflows_fp16
from ..model.findings import Applicability, Draft, Evidence, Fix
from ._common import only_on_some_paths, path_severity, present, set_kwarg

# accelerate 1.0.0's DeepSpeedPlugin.set_deepspeed_weakref registers the config with transformers whatever
# zero3_init_flag says; before it, only with the flag on (read in v0.34.0 and v1.0.0 utils/dataclasses.py)
_HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"


def _script(ds: str, args: str = "", load: str = ", dtype=torch.float32", model: str = "meta-llama/Llama-3.1-8B",
            order: str = "load-first") -> str:
    load_line = f"model = AutoModelForCausalLM.from_pretrained('{model}'{load})\n"
    args_line = f"args = TrainingArguments('out', deepspeed={ds}{args})\n"
    body = load_line + args_line if order == "load-first" else args_line + load_line
    return _HEAD + body + "Trainer(model=model, args=args).train()\n"


def deepspeed_config(setup: Setup) -> tuple[dict | None, tuple[Evidence, ...], Call | None]:
    """The DeepSpeed config the job runs with, wherever it is set up (derive/sharding.py), and where."""
    sharding = setup.sharding
    if sharding.kind != "deepspeed" or sharding.config is None:
        return None, (), None
    return sharding.config, sharding.evidence, sharding.call


def _in_script_first(evidence: tuple[Evidence, ...], script: ScriptFacts) -> tuple[Evidence, ...]:
    """The script's own lines first (the finding points where its fix goes), then the launch config's."""
    return tuple(sorted(evidence, key=lambda e: e.location is None or e.location.path not in script.files))


def _effective_precision(setup: Setup) -> str:
    """The mixed precision accelerate hands DeepSpeed: Trainer's fp16/bf16, else (Accelerator's, or for a Trainer
    with neither flag) ACCELERATE_MIXED_PRECISION, which `accelerate launch` sets from its flag or config: all of
    it resolved in setup.amp."""
    return str(setup.amp.value) if setup.amp.known else ""


@rule(
    "PD501", "deepspeed-precision-mismatch", severity="error", phase="wrap",
    summary="The DeepSpeed config hard-codes fp16/bf16 against the Trainer's (or the launcher's) precision.",
    what="A DeepSpeed JSON or dict with `\"fp16\": {\"enabled\": true}` or `\"bf16\": {\"enabled\": true}` that "
         "disagrees with `fp16`/`bf16` in TrainingArguments (TRL configs turn bf16 on by default) or with the mixed "
         "precision accelerate runs, or with both on; wherever the config comes from: `deepspeed=`, "
         "`HfDeepSpeedConfig`, or `accelerate launch` (`--deepspeed_config_file`, the accelerate config's "
         "`deepspeed_config_file`).",
    why="transformers checks the DeepSpeed config against TrainingArguments and refuses a mismatch; accelerate's "
        "DeepSpeed plugin refuses a mixed precision whose other mode the config hard-codes; DeepSpeed refuses both "
        "modes at once.",
    error="ValueError: Please correct the following DeepSpeed config values that mismatch TrainingArguments values:\n"
          "- ds fp16.enabled=True vs hf fp16|fp16_full_eval+fp16_backend(amp)=False\nThe easiest method is to set "
          "these DeepSpeed config values to 'auto'.",
    fix="Set `\"enabled\": \"auto\"` in the DeepSpeed config and choose the precision only in TrainingArguments.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: \"auto\" takes the Trainer's value.",
    fires=[Example(_script("{'fp16': {'enabled': True}, 'zero_optimization': {'stage': 2}}", ", bf16=True"))],
    silent=[Example(_script("{'fp16': {'enabled': 'auto'}, 'bf16': {'enabled': 'auto'}, "
                            "'zero_optimization': {'stage': 2}}", ", bf16=True"))],
)
def deepspeed_precision_mismatch(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts,
                                 launch: LaunchFacts):
    config, where, _ = deepspeed_config(setup)
    if config is None:
        return
    ds_fp16, ds_bf16 = hard_enabled(config, "fp16"), hard_enabled(config, "bf16")
    if ds_fp16 and ds_bf16:
        yield Draft("the DeepSpeed config enables both fp16 and bf16", evidence=where,
                    error="ValueError: bfloat16 and fp16 modes cannot be simultaneously enabled",
                    fix=Fix('set both to "enabled": "auto" and choose in TrainingArguments', applicability=Applicability.SAFE))
        return
    # what the job hits first: TrainingArguments checks its own deepspeed= against its flags; accelerate's
    # DeepSpeedPlugin.set_mixed_precision refuses the other mode hard-coded (for a launcher-made plugin, first)
    trainer = list(_trainer_mismatch(setup, config, where))
    accelerate = list(_accelerate_mismatch(setup, launch, config, where))
    yield from (trainer + accelerate if setup.sharding.source != "launch" else accelerate + trainer)[:1]


def _trainer_mismatch(setup: Setup, config: dict, where: tuple[Evidence, ...]):
    if setup.style != "trainer" or not setup.fp16.known or not setup.bf16.known:
        return
    for name, hf in (("fp16", setup.fp16), ("bf16", setup.bf16)):
        if hard_enabled(config, name) and not hf.value:
            hf_text = "fp16|fp16_full_eval+fp16_backend(amp)" if name == "fp16" else "bf16|bf16_full_eval"
            yield Draft(f"the DeepSpeed config hard-codes {name}.enabled=true but the Trainer's {name} is off",
                        evidence=where + hf.evidence,
                        error=f"ValueError: Please correct the following DeepSpeed config values that mismatch "
                              f"TrainingArguments values:\n- ds {name}.enabled=True vs hf {hf_text}=False\nThe easiest "
                              f"method is to set these DeepSpeed config values to 'auto'.",
                        fix=Fix(f'set "{name}": {{"enabled": "auto"}} in the DeepSpeed config',
                                applicability=Applicability.SAFE))


def _accelerate_mismatch(setup: Setup, launch: LaunchFacts, config: dict, where: tuple[Evidence, ...]):
    mode = _effective_precision(setup)
    if mode not in ("fp16", "bf16", "fp8"):
        return
    other = "bf16" if mode == "fp16" else "fp16"
    if not hard_enabled(config, other):
        return
    said = next((e for e in setup.amp.evidence if e.origin not in ("code", "default")), None) or \
        next(iter(setup.amp.evidence), None)
    yield Draft(f"mixed precision {mode} with {other} enabled in the DeepSpeed config: accelerate refuses the pair",
                evidence=where + ((said,) if said else ()),
                error=f"ValueError: `--mixed_precision` arg cannot be set to `{mode}` when `{other}` is set in the "
                      f"DeepSpeed config file.",
                fix=Fix(f'set "{other}": {{"enabled": "auto"}} in the DeepSpeed config',
                        applicability=Applicability.SAFE))


@rule(
    "PD502", "zero3-with-device-map", severity="error", phase="load",
    summary="ZeRO-3 registered before from_pretrained(device_map=... / low_cpu_mem_usage=True / quantization).",
    what="TrainingArguments with a stage-3 DeepSpeed config (or `HfDeepSpeedConfig`) created before the model is "
         "loaded with a `device_map`, `low_cpu_mem_usage=True` or a quantization config.",
    why="Under ZeRO-3 `from_pretrained` shards the weights as it loads them (zero.Init); a device map or low-memory "
        "loading places them itself, and the two cannot be combined.",
    error="ValueError: DeepSpeed Zero-3 is not compatible with passing a `device_map`.",
    fix="Drop `device_map` / `low_cpu_mem_usage` under ZeRO-3 and let DeepSpeed shard at load time.",
    applicability=Applicability.SAFE,
    fix_safety="Safe under ZeRO-3.",
    fires=[Example(_script("{'zero_optimization': {'stage': 3}, 'bf16': {'enabled': 'auto'}}", ", bf16=True",
                           load=", dtype=torch.bfloat16, device_map='auto'", order="args-first")),
           Example(_HEAD + "args = TrainingArguments('out', bf16=True)\n"
                   "model = AutoModelForCausalLM.from_pretrained('m', dtype=torch.bfloat16, device_map='auto')\n"
                   "Trainer(model=model, args=args).train()\n",
                   launcher="accelerate launch --use_deepspeed --zero_stage 3 --num_processes 2 train.py",
                   note="ZeRO-3 from the launcher: TrainingArguments registers it")],
    silent=[Example(_script("{'zero_optimization': {'stage': 3}, 'bf16': {'enabled': 'auto'}}", ", bf16=True",
                            load=", dtype=torch.bfloat16", order="args-first")),
            Example(_HEAD + "args = TrainingArguments('out', bf16=True)\n"
                    "model = AutoModelForCausalLM.from_pretrained('m', dtype=torch.bfloat16, device_map='auto')\n"
                    "Trainer(model=model, args=args).train()\n",
                    launcher="accelerate launch --use_deepspeed --zero_stage 2 --num_processes 2 train.py")],
)
def zero3_with_device_map(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts):
    if not zero3_shards_the_load(setup, stack):
        return  # no ZeRO-3, or registered after loading (zero.Init does not apply to this load)
    where, load = setup.sharding.evidence, setup.model_load
    for name in ("device_map", "low_cpu_mem_usage", "quantization_config", "load_in_4bit", "load_in_8bit"):
        v = decide(load.kwarg(name), machine, stack)
        if v.state == KNOWN and v.value not in (None, False):
            yield Draft(f"ZeRO-3 is registered before from_pretrained(..., {name}=...)",
                        evidence=_in_script_first((evidence_of(v, f"{name}=", load),) + where, script),
                        fix=Fix(f"drop {name}= under ZeRO-3", applicability=Applicability.UNSAFE if name == "quantization_config" else Applicability.SAFE))
            return




@rule(
    "PD503", "deepspeed-fp16-loss-scale-collapse", severity="warning", phase="later-steps",
    summary="DeepSpeed fp16 on a model that overflows fp16: the loss scale collapses to its minimum.",
    what="DeepSpeed fp16 (`\"fp16\": {\"enabled\": true}` or `\"auto\"` with fp16=True) on a model family "
         "pre-trained in bf16 (T5, Gemma, DeepSeek-V2), or with a static `loss_scale`.",
    why="Every step overflows, DeepSpeed halves the scale and skips the step until it reaches min_loss_scale and "
        "aborts.",
    error="Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
    fix="Use bf16 on Ampere or newer (`\"bf16\": {\"enabled\": \"auto\"}` + `bf16=True`); otherwise lower the learning "
        "rate or raise initial_scale_power / min_loss_scale.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: changes the precision.",
    log=LogSignature(patterns=(r"Current loss scale already at minimum",), tells=(r"Gradient overflow\. +Skipping step",),
                 proven=0.9, tells_alone=0.6, tells_needed=5),
    related=('PD210',),
    fires=[Example(_script("{'fp16': {'enabled': 'auto'}, 'zero_optimization': {'stage': 2}}", ", fp16=True",
                           model="google/gemma-2-9b"))],
    silent=[Example(_script("{'bf16': {'enabled': 'auto'}, 'zero_optimization': {'stage': 2}}", ", bf16=True",
                            model="google/gemma-2-9b"))],
)
def deepspeed_fp16_loss_scale_collapse(script: ScriptFacts, setup: Setup, machine: MachineFacts,
                                       stack: StackFacts, launch: LaunchFacts):
    config, where, _ = deepspeed_config(setup)
    if config is None or not precision_enabled(config, "fp16", _effective_precision(setup)):
        return
    static = isinstance(config.get("fp16"), dict) and config["fp16"].get("loss_scale", 0) not in (0, "auto")
    if overflows_fp16(setup.family) or static:
        why = (f"{setup.family} was pre-trained in bf16" if not static else
               f"a static loss_scale={config['fp16']['loss_scale']}")
        yield Draft(f"DeepSpeed fp16 with {why}: overflowing steps drive the loss scale to its minimum",
                    evidence=where, fix=Fix('use "bf16": {"enabled": "auto"} with bf16=True',
                                            applicability=Applicability.UNSAFE))


def _fsdp_on(setup: Setup) -> Evidence | None:
    sharding = setup.sharding
    return (sharding.evidence[0] if sharding.evidence else None) if sharding.kind == "fsdp" else None


# torch's own policies group a block's parameters whatever their dtype: with fp32 adapters inside half blocks
# every unit mixes dtypes. A policy the script builds itself is not judged (it may wrap trainable leaves apart).
_MIXING_POLICIES = ("transformer_auto_wrap_policy", "size_based_auto_wrap_policy", "ModuleWrapPolicy")


# the fix for a hand-written accelerate loop under an FSDP1 config: peft's policy, which Trainer installs itself
_PEFT_POLICY_BEFORE_PREPARE = ("before accelerator.prepare: accelerator.state.fsdp_plugin.auto_wrap_policy = "
                               "fsdp_auto_wrap_policy(model) (from peft.utils.other)")
_ACC_FSDP_LORA = ("import torch\nfrom accelerate import Accelerator\nfrom peft import LoraConfig, get_peft_model\n"
                  "{imports}from transformers import AutoModelForCausalLM\naccelerator = Accelerator()\n"
                  "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16)\n"
                  "model = get_peft_model(model, LoraConfig(r=8, target_modules=['c_attn']))\n{policy}"
                  "model = accelerator.prepare(model)\n"
                  "opt = accelerator.prepare(torch.optim.AdamW(model.parameters()))\n"
                  "for batch in loader:\n    accelerator.backward(model(**batch).loss)\n    opt.step()\n")


@rule(
    "PD504", "fsdp-mixed-dtype-flatten", severity="error", phase="wrap",
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
    log=LogSignature(patterns=(r"Must flatten tensors with uniform dtype", r"requires uniform dtype",
                               r"Must flatten tensors with uniform `requires_grad`",
                           r"Cannot flatten integer dtype tensors", r"Integer parameters are unsupported")),
    fires=[Example("import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                   "from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy\n"
                   "from peft import LoraConfig, get_peft_model\nfrom transformers import AutoModelForCausalLM\n"
                   "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16)\n"
                   "model = get_peft_model(model, LoraConfig(r=8, target_modules=['c_attn']))\n"
                   "model = FSDP(model, auto_wrap_policy=transformer_auto_wrap_policy)\n"
                   "opt = torch.optim.AdamW(model.parameters())\n"),
           Example("import torch\nfrom peft import LoraConfig\n"
                   "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, TrainingArguments\n"
                   "from trl import SFTTrainer\n"
                   "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)\n"
                   "model = AutoModelForCausalLM.from_pretrained('m', quantization_config=q, dtype=torch.bfloat16)\n"
                   "args = TrainingArguments('o', bf16=True, fsdp='full_shard auto_wrap')\n"
                   "SFTTrainer(model=model, args=args, peft_config=LoraConfig(r=8)).train()\n"),
           Example(_ACC_FSDP_LORA.format(imports="", policy=""),
                   launcher="accelerate launch --use_fsdp --fsdp_version 1 --num_processes 2 train.py",
                   note="accelerate installs no peft wrap policy (Trainer does), and use_orig_params is off by default: "
                        "frozen and trainable parameters in one unit"),
           Example(_ACC_FSDP_LORA.format(imports="", policy=""),
                   launcher="accelerate launch --use_fsdp --fsdp_version 1 --fsdp_use_orig_params true "
                            "--num_processes 2 train.py", note="use_orig_params on: bf16 base and fp32 adapters")],
    silent=[Example(_ACC_FSDP_LORA.format(imports="", policy="model = model.to(torch.bfloat16)\n"),
                    launcher="accelerate launch --use_fsdp --fsdp_version 1 --fsdp_use_orig_params true "
                             "--num_processes 2 train.py", note="the adapters cast to the base's dtype"),
            Example(_ACC_FSDP_LORA.format(imports="from peft.utils.other import fsdp_auto_wrap_policy\n",
                                          policy="accelerator.state.fsdp_plugin.auto_wrap_policy = "
                                                 "fsdp_auto_wrap_policy(model)\n"),
                    launcher="accelerate launch --use_fsdp --fsdp_version 1 --num_processes 2 train.py"),Example("import torch, functools\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                    "from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy\n"
                    "from peft import LoraConfig, get_peft_model\nfrom transformers import AutoModelForCausalLM\n"
                    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16)\n"
                    "model = get_peft_model(model, LoraConfig(r=8, target_modules=['c_attn']))\n"
                    "trainable_leaves = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: "
                    "not list(m.children()) and m.weight.requires_grad)\n"
                    "model = FSDP(model, auto_wrap_policy=trainable_leaves)\n"
                    "opt = torch.optim.AdamW(model.parameters())\n",
                    note="the project's own policy: each trainable leaf is its own unit"),
            Example("import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
                    "from peft import LoraConfig, get_peft_model\nfrom peft.utils.other import fsdp_auto_wrap_policy\n"
                    "from transformers import AutoModelForCausalLM\n"
                    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16)\n"
                    "model = get_peft_model(model, LoraConfig(r=8, target_modules=['c_attn']))\n"
                    "model = FSDP(model, auto_wrap_policy=fsdp_auto_wrap_policy(model))\n"
                    "opt = torch.optim.AdamW(model.parameters())\n"),
            Example("import torch\nfrom peft import LoraConfig\n"
                    "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, TrainingArguments\n"
                    "from trl import SFTTrainer\n"
                    "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16, "
                    "bnb_4bit_quant_storage=torch.bfloat16)\n"
                    "model = AutoModelForCausalLM.from_pretrained('m', quantization_config=q, dtype=torch.bfloat16)\n"
                    "args = TrainingArguments('o', bf16=True, fsdp='full_shard auto_wrap')\n"
                    "SFTTrainer(model=model, args=args, peft_config=LoraConfig(r=8)).train()\n")],
)
def fsdp_mixed_dtype_flatten(script: ScriptFacts, setup: Setup, machine: MachineFacts, launch: LaunchFacts,
                             stack: StackFacts):
    on = _fsdp_on(setup)
    if on is None:
        return
    if setup.quantized.value == "4bit":
        cfg = setup.quantized.call if setup.quantized.call and setup.quantized.call.kind == "bnb_config" else None
        storage = decide(cfg.kwarg("bnb_4bit_quant_storage"), machine, stack) if cfg else None
        stored = dtypes.from_string(storage.value) if storage is not None and storage.state == KNOWN else None
        if stored != setup.weights.value or stored is None:
            left = stored is None
            yield Draft("QLoRA under FSDP with bnb_4bit_quant_storage left at uint8: FSDP cannot flatten the "
                        "quantized integer storage with the model's float parameters" if left else
                        f"QLoRA under FSDP with bnb_4bit_quant_storage={stored} beside {setup.weights.value} "
                        f"weights: FSDP flattens only tensors of one dtype",
                        evidence=_in_script_first((on,) + setup.quantized.evidence
                                                  + (() if left else (evidence_of(storage, "bnb_4bit_quant_storage",
                                                                                  cfg),)), script),
                        error="ValueError: Cannot flatten integer dtype tensors" if left else
                        f"ValueError: Must flatten tensors with uniform dtype but got torch.{setup.weights.value} "
                        f"and torch.{stored}",
                        fix=Fix(f"bnb_4bit_quant_storage=torch.{setup.weights.value or 'bfloat16'} in the "
                                f"BitsAndBytesConfig", applicability=Applicability.SAFE,
                                edits=present(set_kwarg(cfg, "bnb_4bit_quant_storage",
                                                 f"torch.{setup.weights.value or 'bfloat16'}")) if cfg else ()))
        return
    raw = script.of("fsdp")
    launched = not raw and setup.peft.value and setup.style == "accelerate" and setup.sharding.source == "launch" \
        and setup.sharding.fsdp_version in (None, 1) and not script.of("peft_wrap_policy")
    if launched and not setup.sharding.use_orig_params:
        # FSDP1 without use_orig_params flattens a unit's parameters into one that must also share requires_grad:
        # a frozen base and trainable adapters in one block fail whatever their dtypes
        yield Draft("FSDP (from the accelerate config, use_orig_params off) wraps frozen base weights and trainable "
                    "LoRA adapters into the same units: accelerate installs no peft policy",
                    evidence=(on,) + setup.peft.evidence,
                    error="ValueError: Must flatten tensors with uniform `requires_grad` when `use_orig_params=False`",
                    fix=Fix(f"{_PEFT_POLICY_BEFORE_PREPARE}, or fsdp_use_orig_params: true with "
                            "the adapters in the base's dtype", applicability=Applicability.UNSAFE))
        return
    if not setup.peft.value or not dtypes.is_half(setup.weights.value) or \
            setup.adapter_dtype.value == setup.weights.value:
        return
    attach = setup.peft.call
    recast = attach is not None and any((c.location.path, c.location.line) > (attach.location.path, attach.location.line)
                                        for c in setup.casts)  # `model.to(torch.bfloat16)` after the adapters
    if launched and not recast:
        # accelerate's FSDP1 plugin wraps with the config's policy (or none): unlike Trainer it installs no peft
        # policy for a PeftModel, so the half base and fp32 adapters of a block share a unit
        yield Draft(f"FSDP (from the accelerate config) wraps {setup.weights.value} base weights and "
                    f"{setup.adapter_dtype.value} LoRA adapters into the same units: accelerate installs no peft policy",
                    evidence=(on,) + setup.weights.evidence + setup.adapter_dtype.evidence,
                    error=f"ValueError: Must flatten tensors with uniform dtype but got torch.{setup.weights.value} "
                          f"and torch.{setup.adapter_dtype.value}",
                    fix=Fix(_PEFT_POLICY_BEFORE_PREPARE, applicability=Applicability.UNSAFE))
        return
    if not raw:
        return  # Trainer installs peft's fsdp_auto_wrap_policy for PeftModels itself
    policy = raw[0].kwarg("auto_wrap_policy")
    if "fsdp_auto_wrap_policy" in policy.text:
        return
    if policy.state != ABSENT and not any(p in policy.text for p in _MIXING_POLICIES):
        return  # the project's own policy (or one chosen at run time) may give the LoRA leaves their own units
    path = only_on_some_paths((setup.weights.call,) + setup.casts, raw[0])
    yield Draft(f"FSDP wraps {setup.weights.value} base weights and {setup.adapter_dtype.value} LoRA adapters into the "
                f"same units" + (f"; only when {path}" if path else ""),
                severity=path_severity("", path),
                evidence=(on,) + setup.weights.evidence + setup.adapter_dtype.evidence,
                error=f"ValueError: Must flatten tensors with uniform dtype but got torch.{setup.weights.value} and "
                      f"torch.{setup.adapter_dtype.value}",
                fix=Fix("auto_wrap_policy=fsdp_auto_wrap_policy(model) (from peft.utils.other)", applicability=Applicability.UNSAFE))
