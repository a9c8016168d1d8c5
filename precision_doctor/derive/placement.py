"""Where the trained model ends up and how Trainer wraps it: the device map's kind, Trainer's own
DataParallel decision and why a wrap would break this model, and how gradient checkpointing is switched on.
Derived once per script; rules read the result from `setup.placement`."""

from __future__ import annotations

import re

from ..knowledge import dtypes
from ..knowledge.versions import TRAINER_SKIPS_DP_FOR_4BIT, at_least
from ..model.facts import ABSENT, KNOWN, Call, MachineFacts, RemoteClass, ScriptFacts, StackFacts, Value
from ..model.findings import Evidence
from .launch import device_map_kind
from .setup import Checkpointing, Placement, Setup, call_evidence, decide, evidence_of, trainer_fsdp_config

# transformers PR#45407 (merged 2026-04): Trainer stops wrapping 4-bit models in DataParallel. Used only when the
# installed trainer.py cannot be read: the release is taken from the PR's merge, not read from a changelog.
TRAINER_4BIT_EXEMPTION_RELEASE = "5.6"
# From transformers 4.30.0 Trainer no longer enters autocast itself: mixed precision is accelerate's, applied by
# `accelerator.prepare(model)`, which `_inner_training_loop` skips for a wrapped model
# (`use_accelerator_prepare = True if model is self.model else False`), and `autocast_smart_context_manager` is a
# `nullcontext` outside CPU AMP. Read in the released trainer.py: 4.29.2 enters `torch.cuda.amp.autocast(dtype=
# self.amp_dtype)` whenever `use_cuda_amp`; 4.30.0 sets `use_cuda_amp` only under fairscale's sharded_ddp and adds
# `use_accelerator_prepare`. So under DataParallel no autocast is entered that the replicas could lose.
TRAINER_AUTOCAST_LEFT_TO_ACCELERATE = "4.30.0"


AXOLOTL = "axolotl"  # the import tag of an Axolotl recipe (probes/config_families)


def derive_placement(setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts) -> Placement:
    load = setup.model_load
    kind = device_map_kind(decide(load.kwarg("device_map"), machine, stack)) if load else "none"
    exempt, source = trainer_exempts_4bit(stack)
    return Placement(
        device_map=kind,
        # Axolotl marks the model model-parallel when one process sees several GPUs (loaders/model.py
        # `_apply_post_lora_load_setup`: is_parallelizable / model_parallel): Trainer never wraps it in DataParallel
        trainer_wrap="none" if AXOLOTL in script.imports else _trainer_wrap(setup, len(machine.gpus), exempt),
        exempts_4bit=exempt,
        exempts_4bit_source=source,
        dataparallel_crash_reasons=_dataparallel_crash_reasons(setup, kind, exempt, source, stack),
        checkpointing=_checkpointing(setup, script, machine, stack),
    )


def trainer_exempts_4bit(stack: StackFacts) -> tuple[bool, str]:
    """Does Trainer skip DataParallel for 4-bit models? What the installed trainer.py does when the stack probe
    read it, else decided from the version."""
    read = stack.behaviours.get(TRAINER_SKIPS_DP_FOR_4BIT)
    if read is not None:
        return read.value, f"read in the installed {read.evidence}"
    pkg = stack.get("transformers")
    return (
        at_least(stack, "transformers", TRAINER_4BIT_EXEMPTION_RELEASE),
        f"transformers {pkg.version} ({pkg.source}); the exemption arrived in {TRAINER_4BIT_EXEMPTION_RELEASE} "
        f"(PR#45407)",
    )


def _dataparallel_crash_reasons(
    setup: Setup, device_map: str, exempt: bool, how: str, stack: StackFacts
) -> tuple[Evidence, ...]:
    reasons: list[Evidence] = []
    load = setup.model_load
    if setup.quantized.value == "4bit" and not exempt:
        reasons.append(
            Evidence(
                load.location if load else None,
                load.text if load else "",
                f"4-bit bitsandbytes modules are not replica-safe, and this Trainer still wraps them ({how})",
                "code",
            )
        )
    if load is not None and device_map == "offload":
        reasons.append(call_evidence(load, "offloaded modules run through accelerate hooks, which replicas break"))
    if (
        setup.amp.value == "bf16"
        and setup.weights.value == dtypes.BFLOAT16
        and not at_least(stack, "transformers", TRAINER_AUTOCAST_LEFT_TO_ACCELERATE)
    ):
        version = stack.get("transformers")
        reasons.append(
            Evidence(
                None,
                "torch.nn.parallel.parallel_apply",
                f"autocast's dtype is thread-local: on transformers {version.version} ({version.source}) "
                f"Trainer enters bf16 autocast around DataParallel, whose replicas re-enter it as fp16, "
                f"meeting bf16 weights (from {TRAINER_AUTOCAST_LEFT_TO_ACCELERATE} Trainer enters no "
                f"autocast under DataParallel)",
                "code",
            )
        )
    return tuple(reasons)


def _trainer_wrap(setup: Setup, visible_gpus: int, exempt_4bit: bool) -> str:
    """Trainer's own decision (transformers 5.x `Trainer.__init__` / `_wrap_model`): `is_model_parallel` when
    `hf_device_map` spans more than one GPU (or one GPU other than cuda:0); then `_n_gpu = 1`; otherwise
    DataParallel when `n_gpu > 1` unless the model is 8-bit, or 4-bit on versions with that exemption."""
    if setup.style != "trainer" or visible_gpus < 2:
        return "none"
    load = setup.model_load
    device_map = load.kwarg("device_map") if load else None
    if device_map is not None and device_map.state == KNOWN:
        dm = device_map.value
        if dm in ("auto", "balanced", "balanced_low_0"):
            return "none"  # spread over the visible GPUs: model parallel
        if isinstance(dm, dict):
            devices = {str(v) for v in dm.values() if str(v) not in ("cpu", "disk")}
            if len(devices) > 1 or (len(devices) == 1 and devices.pop() not in ("0", "cuda:0", "cuda")):
                return "none"
    elif device_map is not None and device_map.state not in (ABSENT,):
        return "unknown"
    if setup.quantized.value == "8bit":
        return "none"
    if setup.quantized.value == "4bit" and exempt_4bit:
        return "none"
    return "DataParallel"


# TRL's configs (SFT, DPO, GRPO, KTO) turn gradient checkpointing on by default from 0.22.0 (sft_config.py:111
# `gradient_checkpointing: bool = field(default=True, ...)`); before, TrainingArguments' False
TRL_CHECKPOINTING_DEFAULT = "0.22"
# TRL's configs default gradient_checkpointing_kwargs to use_reentrant=False from 0.27.0 (sft_config.py:287; from
# 0.28 in the trainers, 1.16 sft_trainer.py:1079-1081), where transformers (before 5.0) would choose True.
TRL_NON_REENTRANT = "0.27"


def _checkpointing(setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts) -> Checkpointing:
    """Gradient checkpointing as the script switches it on, and whether it is reentrant."""
    evidence: list[Evidence] = []
    on = by_args = by_trainer = False
    reentrant = None
    through_model = ""
    args = setup.training_args
    if args is not None:
        gc = decide(_either(args, "activation_checkpointing", "gradient_checkpointing"), machine, stack)
        # only TRL's own config classes default it on: a plain TrainingArguments handed to a TRL trainer is turned
        # into one from its to_dict() (sft_trainer.py:929-934), which carries its gradient_checkpointing=False
        trl_default = (
            args.callee.startswith("trl.") and gc.state == ABSENT and at_least(stack, "trl", TRL_CHECKPOINTING_DEFAULT)
        )
        if gc.is_(True) or trl_default:
            on = by_args = by_trainer = True
            through_model = "always"
            evidence.append(
                evidence_of(gc, "gradient_checkpointing=True", args)
                if gc.state == KNOWN
                else Evidence(args.location, args.text, "gradient checkpointing on (TRL default)", "default")
            )
        reentrant = _use_reentrant(args, machine, stack, evidence)
        fsdp_wrapped = _fsdp_activation_checkpointing(args, machine, stack)
        if fsdp_wrapped is not None and not on:
            on = by_args = True
            reentrant = False
            evidence.append(fsdp_wrapped)
        if by_args and reentrant is None and setup.trl and at_least(stack, "trl", TRL_NON_REENTRANT):
            reentrant = False  # TRL's own default, before transformers 5 took it
            trl = stack.get("trl")
            evidence.append(
                Evidence(
                    args.location,
                    args.text,
                    f"trl {trl.version} ({trl.source}) sets use_reentrant=False (from {TRL_NON_REENTRANT})",
                    "default",
                )
            )
    switches = [(c, "gradient_checkpointing_enable()") for c in script.of("gc_enable")]
    if setup.quantized.known and setup.quantized.value:
        # peft's prepare_model_for_kbit_training(use_gradient_checkpointing=True) switches it on for a k-bit model
        for c in script.of("prepare_kbit"):
            use = decide(c.args[1] if len(c.args) > 1 else c.kwarg("use_gradient_checkpointing"), machine, stack)
            if use.state == ABSENT or use.is_(True):
                switches.append((c, "prepare_model_for_kbit_training() turns gradient checkpointing on"))
    for c, note in switches:
        on = True
        through_model = _stronger(through_model, how_enabled(c))
        evidence.append(call_evidence(c, note))
        chosen = _use_reentrant(c, machine, stack, [])
        if not by_args:  # the Trainer enables it again from its arguments before training: theirs is the last word
            reentrant = chosen if chosen is not None else reentrant
    own = _old_format_checkpointing(setup) if on else None
    if own is not None:  # the model's own code decides, whatever the script passes
        reentrant = bool(own.own_reentrant)
        evidence.append(
            Evidence(
                own.own_checkpoint,
                own.own_checkpoint_text,
                f"{own.name} checkpoints its layers itself, "
                + ("reentrant" if reentrant else "non-reentrant")
                + (" (use_reentrant not passed: torch's default)" if reentrant else "")
                + "; transformers ignores gradient_checkpointing_kwargs for its old-format setter",
                "code",
            )
        )
    elif on and reentrant is None:  # the library default
        reentrant = not at_least(stack, "transformers", "5.0")
        version = stack.get("transformers")
        evidence.append(
            Evidence(
                None,
                f"transformers {version.version}",
                f"use_reentrant defaults to {reentrant} ({version.source})",
                "default",
            )
        )
    return Checkpointing(
        on, bool(reentrant), tuple(evidence), through_model, by_model_code=own is not None, by_trainer=by_trainer
    )


def _old_format_checkpointing(setup: Setup) -> RemoteClass | None:
    """The checkpoint's own class when it still defines the pre-4.35 `_set_gradient_checkpointing(module, value)`
    and its own torch checkpoint calls were read: transformers then switches its flag and ignores the checkpointing
    keyword arguments (modeling_utils.py:3173-3188 in 5.24, 3698-3711 in 4.57.1), so those calls decide."""
    found = setup.model_class.value
    if isinstance(found, RemoteClass) and found.checkpointing == "old" and found.own_reentrant is not None:
        return found
    return None


_ENABLED = ("", "caught", "asks", "maybe", "always")
# the model's own answer, as the if's whole test: `model.supports_gradient_checkpointing`, or getattr of it (every
# transformers model has the attribute, so a default is never taken)
_ASKS = re.compile(
    r"[\w.]+\.supports_gradient_checkpointing"
    r"|getattr\(\s*[\w.]+\s*,\s*(['\"])supports_gradient_checkpointing\1\s*(,\s*[\w.]+\s*)?\)"
)
# a test every transformers model passes (PreTrainedModel defines the method and the attribute; PeftModel forwards
# them): no branch
_HAS_METHOD = re.compile(
    r"hasattr\(\s*[\w.]+\s*,\s*(['\"])"
    r"((gradient|activation)_checkpointing_enable|supports_gradient_checkpointing)\1\s*\)"
)


def _stronger(a: str, b: str) -> str:
    return max(a, b, key=_ENABLED.index)


def how_enabled(call: Call) -> str:
    """always: on every path; maybe: under a condition the run decides; asks: only where the model says it supports
    checkpointing (`if model.supports_gradient_checkpointing:`); caught: in a try, whose handler may take the
    refusal."""
    if call.in_try:
        return "caught"
    branches = [b for b in call.branches if not (b.taken and _HAS_METHOD.fullmatch(b.test.strip()))]
    if any(b.taken and _ASKS.fullmatch(b.test.strip()) for b in branches):
        return "asks"  # (in the body of `if model.supports_gradient_checkpointing:`)
    return "maybe" if branches else "always"  # (the __main__ guard is no branch: every launch takes it)


def _fsdp_activation_checkpointing(args: Call, machine: MachineFacts, stack: StackFacts) -> Evidence | None:
    """FSDP's own activation checkpointing (`fsdp_config={"activation_checkpointing": True}` under `fsdp=`):
    accelerate wraps every layer in torch's checkpoint_wrapper, non-reentrant (accelerator.py:1979-1983 for FSDP1,
    utils/fsdp_utils.py:722 for FSDP2, accelerate 1.15)."""
    fsdp = decide(args.kwarg("fsdp"), machine, stack)
    config, written = trainer_fsdp_config(args, machine, stack)
    on = config.get("activation_checkpointing")
    if fsdp.state != KNOWN or not fsdp.value or (on is not True and str(on).lower() != "true"):
        return None
    return evidence_of(written, "FSDP activation checkpointing (non-reentrant)", args)


def _either(call: Call, *names: str) -> Value:
    """The first of the names the call is given: transformers 5.24 renamed gradient_checkpointing(_kwargs) to
    activation_checkpointing(_kwargs) and keeps the old names as aliases (training_args.py:302-315)."""
    return next((call.kwargs[n] for n in names if n in call.kwargs), call.kwarg(names[-1]))


def _use_reentrant(call: Call, machine: MachineFacts, stack: StackFacts, evidence: list[Evidence]) -> bool | None:
    kw = decide(_either(call, "activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"), machine, stack)
    if kw.state == KNOWN and isinstance(kw.value, dict) and "use_reentrant" in kw.value:
        evidence.append(evidence_of(kw, f"use_reentrant={bool(kw.value['use_reentrant'])}", call))
        return bool(kw.value["use_reentrant"])
    return None
