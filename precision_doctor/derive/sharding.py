"""DeepSpeed and FSDP as the job runs them, wherever they are set up, in the order the libraries look:

1. the Trainer's own `deepspeed=` (a dict, or the JSON file it names) or `HfDeepSpeedConfig(...)`, then its `fsdp=`
   (TrainingArguments reads `deepspeed=` before the launcher's environment);
2. Lightning's `strategy=` (its own launcher and DeepSpeed / FSDP strategies);
3. `accelerate launch`: its options over its config file (`--use_deepspeed`, `--zero_stage`, `distributed_type:
   DEEPSPEED`, `deepspeed_config: {zero_stage: 3}`, `--deepspeed_config_file`), for a script that trains through
   Trainer or `Accelerator()`: accelerate passes them as ACCELERATE_* variables that only those read;
4. a `FullyShardedDataParallel(...)` the script builds itself.

One place answers it for the distributed rules and the memory plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..knowledge.lightning import lightning_launch, lightning_precision_sections
from ..model.call_kinds import LIGHTNING_CLASSES
from ..model.facts import KNOWN, LaunchFacts, MachineFacts, ScriptFacts, StackFacts, Value
from ..model.findings import Evidence
from .launch import Sharding, accelerate_settings
from .setup import Setup, call_evidence, decide, evidence_of, trainer_fsdp_config

ACCELERATE_DEFAULT_STAGE = 2  # DeepSpeedPlugin: ACCELERATE_DEEPSPEED_ZERO_STAGE, else 2
# accelerate's FSDP sharding strategies by name and by the number `accelerate config` may write
_FSDP_STRATEGIES = {
    "FULL_SHARD": "full_shard",
    "SHARD_GRAD_OP": "shard_grad_op",
    "NO_SHARD": "no_shard",
    "HYBRID_SHARD": "hybrid_shard",
    "HYBRID_SHARD_ZERO2": "hybrid_shard",
    "1": "full_shard",
    "2": "shard_grad_op",
    "3": "no_shard",
    "4": "hybrid_shard",
    "5": "hybrid_shard",
}


def precision_enabled(config: dict, section: str, amp: Any) -> bool:
    """Whether DeepSpeed runs `section` ("fp16" / "bf16"): `true`, or "auto" / no section at all with the job's mixed
    precision being that mode. The HF integration fills "auto" from TrainingArguments' fp16/bf16
    (`trainer_config_process`), and accelerate's `DeepSpeedPlugin.set_mixed_precision` fills "auto" and adds a
    missing section from the same effective precision (Trainer's flags, else Accelerator's mixed_precision)."""
    parts = [config.get(section)] + ([config.get("bfloat16")] if section == "bf16" else [])
    for part in parts:
        value = part.get("enabled", False) if isinstance(part, dict) else "auto" if part is None else False
        if value is True or (isinstance(value, str) and value.lower() == "true"):
            return True
        if value != "auto":
            continue
        if amp == section or (section == "bf16" and amp == "fp8"):
            return True
    return False


def hard_enabled(config: dict, section: str) -> bool:
    """`"enabled": true` written in the config (not "auto"): DeepSpeed runs it whatever the job's precision."""
    parts = [config.get(section)] + ([config.get("bfloat16")] if section == "bf16" else [])
    return any(
        isinstance(p, dict) and (p.get("enabled") is True or str(p.get("enabled")).lower() == "true") for p in parts
    )


def zero_stage(config: dict | None) -> int | None:
    zero = (config or {}).get("zero_optimization")
    stage = zero.get("stage") if isinstance(zero, dict) else None
    return stage if isinstance(stage, int) and not isinstance(stage, bool) else None


def derive_sharding(
    setup: Setup, script: ScriptFacts, launch: LaunchFacts, machine: MachineFacts, stack: StackFacts
) -> Sharding:
    for call in ([setup.training_args] if setup.training_args else []) + script.of("hf_deepspeed_config"):
        v = decide(
            call.kwarg("deepspeed")
            if call.kind == "training_args"
            else (call.args[0] if call.args else call.kwarg("config_file_or_dict")),
            machine,
            stack,
        )
        if v.state == KNOWN and v.value:
            return _deepspeed_of_script(v, call, script)
    if setup.training_args is not None:
        v = decide(setup.training_args.kwarg("fsdp"), machine, stack)
        if v.state == KNOWN and v.value not in ("", None, False, []):
            text = " ".join(v.value) if isinstance(v.value, list) else str(v.value)
            config, _ = trainer_fsdp_config(setup.training_args, machine, stack)
            kind, offload = _trainer_fsdp_config(text, config)
            return Sharding(
                "fsdp",
                "trainer",
                fsdp=kind,
                offload_params=offload,
                evidence=(evidence_of(v, f"fsdp={v.text}", setup.training_args),),
                call=setup.training_args,
            )
    acc = setup.accelerator
    if acc is not None and acc.callee in LIGHTNING_CLASSES:
        return _lightning(acc)  # Lightning runs its own strategies, not accelerate's
    if setup.style in ("trainer", "accelerate"):
        found = _launch_sharding(setup, launch, machine)
        if found is not None:
            return found
    raw = script.of("fsdp")
    if raw:
        return Sharding(
            "fsdp",
            "code",
            fsdp=_raw_fsdp(raw[0]),
            evidence=(call_evidence(raw[0], "FullyShardedDataParallel"),),
            call=raw[0],
        )
    return Sharding()


def _lightning(call) -> Sharding:
    """Lightning's DeepSpeed / FSDP strategy: DeepSpeedStrategy builds its config from the stage, the offloads and
    the precision; FSDPStrategy is FSDP1 (ShardedGradScaler under "16-mixed")."""
    found = lightning_launch(call)
    if found is None or found.strategy not in ("deepspeed", "fsdp"):
        return Sharding()
    v = call.kwarg("strategy")
    name = "DeepSpeed" if found.strategy == "deepspeed" else "FSDP"
    evidence = (
        evidence_of(v, f"Lightning's {name} strategy", call)
        if v.state != "absent"
        else call_evidence(call, f"Lightning's {name} strategy"),
    )
    if found.strategy == "fsdp":
        return Sharding(
            "fsdp",
            "lightning",
            fsdp=found.fsdp or "full_shard",
            offload_params=found.offload_params,
            fsdp_version=1,
            evidence=evidence,
        )
    zero: dict[str, Any] = {"stage": found.stage}
    if found.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if found.offload_params:
        zero["offload_param"] = {"device": "cpu"}
    return _deepspeed("lightning", {"zero_optimization": zero, **lightning_precision_sections(call)}, evidence, None)


def _deepspeed_of_script(v: Value, call, script: ScriptFacts) -> Sharding:
    source = "trainer" if call.kind == "training_args" else "hf-deepspeed-config"
    if isinstance(v.value, dict):
        config, where = v.value, evidence_of(v, "DeepSpeed config (inline)", call)
    elif isinstance(v.value, str) and v.value in script.deepspeed_configs:
        config, where = script.deepspeed_configs[v.value], evidence_of(v, f"DeepSpeed config {v.value}", call)
    else:
        return Sharding(
            "deepspeed",
            source,
            evidence=(evidence_of(v, f"deepspeed={v.text}", call),),
            call=call,
            unknown=f"the DeepSpeed config {v.text} cannot be read",
        )
    return _deepspeed(source, config, (where,), call)


def _deepspeed(source: str, config: dict, evidence: tuple[Evidence, ...], call) -> Sharding:
    zero = config.get("zero_optimization") if isinstance(config.get("zero_optimization"), dict) else {}
    return Sharding(
        "deepspeed",
        source,
        config=config,
        stage=zero_stage(config) or 0,
        offload_optimizer=_device(zero.get("offload_optimizer")) in ("cpu", "nvme"),
        offload_params=_device(zero.get("offload_param")) in ("cpu", "nvme"),
        evidence=evidence,
        call=call,
    )


def _device(section: Any) -> str:
    return str(section.get("device", "none")).lower() if isinstance(section, dict) else "none"


def _launch_sharding(setup: Setup, launch: LaunchFacts, machine: MachineFacts) -> Sharding | None:
    settings = accelerate_settings(launch, machine)
    call = setup.training_args if setup.style == "trainer" else setup.accelerator
    on = settings.get("use_deepspeed")
    if on is not None and on.value is True:
        return _accelerate_deepspeed(settings, launch, on, call)
    on = settings.get("use_fsdp")
    if on is not None and on.value is True:
        strategy = settings.get("fsdp_sharding_strategy") or settings.get("fsdp_reshard_after_forward")
        name = str(strategy.value).upper() if strategy is not None else "FULL_SHARD"
        if strategy is not None and isinstance(strategy.value, bool):  # FSDP2: reshard_after_forward true/false
            name = "FULL_SHARD" if strategy.value else "SHARD_GRAD_OP"
        version = settings.get("fsdp_version")
        offload = settings.get("fsdp_offload_params")
        orig = settings.get("fsdp_use_orig_params")  # accelerate's FSDP1 default: False (utils/dataclasses.py:1938)
        kind = _FSDP_STRATEGIES.get(name, "full_shard")
        evidence = (_evidence(on, "FSDP", launch.command),) + (
            (_evidence(strategy, kind, launch.command),) if strategy is not None else ()
        )
        return Sharding(
            "fsdp",
            "launch",
            fsdp=kind,
            offload_params=offload is not None and str(offload.value).lower() == "true",
            use_orig_params=orig is not None and str(orig.value).lower() == "true",
            fsdp_version=_fsdp_version(version),
            evidence=evidence,
            call=call,
        )
    return None


def _fsdp_version(v: Value | None) -> int | None:
    """accelerate's FSDP version: 1 when the config does not say; None when it says something else than 1 or 2."""
    if v is None:
        return 1
    return int(v.value) if str(v.value) in ("1", "2") else None


def _accelerate_deepspeed(settings: dict[str, Value], launch: LaunchFacts, on: Value, call) -> Sharding:
    """DeepSpeedPlugin's config: the JSON `deepspeed_config_file` names, else one built from the plugin's settings
    (zero_stage, offload devices) with no precision section: `set_mixed_precision` adds the job's."""
    evidence = [_evidence(on, "DeepSpeed", launch.command)]
    named = settings.get("deepspeed_config_file")
    if named is not None and str(named.value).lower() != "none":
        evidence.append(_evidence(named, f"DeepSpeed config {named.value}", launch.command))
        if not launch.deepspeed_config_path:
            return Sharding(
                "deepspeed",
                "launch",
                evidence=tuple(evidence),
                call=call,
                unknown=f"the DeepSpeed config {named.value} cannot be read",
            )
        return replace(
            _deepspeed("launch", launch.deepspeed_config, tuple(evidence), call), zero3_init=_zero3_init(settings)
        )
    stage_v = settings.get("zero_stage")
    stage = _int(stage_v.value) if stage_v is not None else None  # a quoted "3" too: accelerate int()s the variable
    stage = ACCELERATE_DEFAULT_STAGE if stage is None else stage
    if stage_v is not None:
        evidence.append(_evidence(stage_v, f"ZeRO stage {stage}", launch.command))
    zero: dict[str, Any] = {"stage": stage}
    for name, key in (("offload_optimizer_device", "offload_optimizer"), ("offload_param_device", "offload_param")):
        v = settings.get(name)
        if v is not None:
            zero[key] = {"device": str(v.value).lower()}
            if str(v.value).lower() in ("cpu", "nvme"):
                evidence.append(_evidence(v, f"{key.replace('_', ' ')} to {v.value}", launch.command))
    return replace(
        _deepspeed("launch", {"zero_optimization": zero}, tuple(evidence), call), zero3_init=_zero3_init(settings)
    )


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text) if text.isdigit() else None


def _zero3_init(settings: dict[str, Value]) -> bool:
    v = settings.get("zero3_init_flag")
    return v is None or str(v.value).lower() in ("true", "1", "yes")


def _evidence(v: Value, note: str, command: str) -> Evidence:
    """A launch setting: the config line that writes it, or the launch command that gives it."""
    origin = v.origins[0] if v.origins else None
    if origin is None or origin.kind == "launcher":
        return Evidence(None, command, f"{note} ({v.text})", "launcher")
    return Evidence(v.location, v.text, f"{note} ({origin.detail})" if origin.detail else note, origin.kind)


def _trainer_fsdp_config(text: str, written: dict) -> tuple[str, bool]:
    """The Trainer's FSDP sharding and parameter offload, as transformers 5.24 settles them
    (training_args.py:2826-2872, 2888-2937): `fsdp_config` (setup.trainer_fsdp_config) over the legacy `fsdp`
    words: `reshard_after_forward` False is grad-op sharding (FSDP2), a strategy name under FSDP1; `cpu_offload`
    (or `offload_params`, as accelerate names it) offloads the parameters."""
    kind = _trainer_fsdp(text)
    reshard = written.get("reshard_after_forward")
    if reshard is False or str(reshard).lower() == "false":
        kind = "shard_grad_op"
    elif isinstance(reshard, str) and reshard.upper() in _FSDP_STRATEGIES:
        kind = _FSDP_STRATEGIES[reshard.upper()]
    offload = "offload" in text or any(written.get(k) in (True, "true") for k in ("cpu_offload", "offload_params"))
    return kind, offload


def _trainer_fsdp(text: str) -> str:
    return (
        "hybrid_shard"
        if "hybrid" in text
        else "shard_grad_op"
        if "grad_op" in text
        else "no_shard"
        if "no_shard" in text
        else "full_shard"
    )


def _raw_fsdp(call) -> str:
    v = call.kwarg("sharding_strategy")
    text = v.text.upper() if v.state != "absent" else "FULL_SHARD"
    return next((kind for name, kind in _FSDP_STRATEGIES.items() if not name.isdigit() and name in text), "full_shard")


# accelerate >= 1.0.0 registers ZeRO-3 with transformers whatever zero3_init_flag says (v0.34.0 vs v1.0.0
# `set_deepspeed_weakref`)
ACCELERATE_ALWAYS_REGISTERS_ZERO3 = "1.0.0"


def zero3_shards_the_load(setup: Setup, stack: StackFacts) -> bool:
    """ZeRO-3 is registered with transformers before the model loads, so `from_pretrained` runs under zero.Init and
    refuses a device map, low-memory loading or quantization (PD502)."""
    from ..knowledge.versions import at_least

    sharding, load = setup.sharding, setup.model_load
    if sharding.kind != "deepspeed" or sharding.config is None or sharding.call is None or load is None:
        return False
    if zero_stage(sharding.config) != 3:
        return False
    if not sharding.zero3_init and not at_least(stack, "accelerate", ACCELERATE_ALWAYS_REGISTERS_ZERO3):
        return False  # older accelerate hands ZeRO-3 to transformers only under zero3_init_flag
    call = sharding.call
    return (call.location.path, call.location.line) <= (load.location.path, load.location.line)
