"""PD501 deepspeed-precision-mismatch: The DeepSpeed config hard-codes fp16/bf16 against the Trainer's (or the
launcher's) precision."""

from __future__ import annotations

from ...derive import Setup
from ...derive.sharding import hard_enabled
from ...model.facts import LaunchFacts, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, rule
from ._distributed import _script, deepspeed_config, effective_precision


def _trainer_mismatch(setup: Setup, config: dict, where: tuple[Evidence, ...]):
    if setup.style != "trainer" or not setup.fp16.known or not setup.bf16.known:
        return
    for name, hf in (("fp16", setup.fp16), ("bf16", setup.bf16)):
        if hard_enabled(config, name) and not hf.value:
            hf_text = "fp16|fp16_full_eval+fp16_backend(amp)" if name == "fp16" else "bf16|bf16_full_eval"
            yield Draft(
                f"the DeepSpeed config hard-codes {name}.enabled=true but the Trainer's {name} is off",
                evidence=where + hf.evidence,
                error=f"ValueError: Please correct the following DeepSpeed config values that mismatch "
                f"TrainingArguments values:\n- ds {name}.enabled=True vs hf {hf_text}=False\nThe easiest "
                f"method is to set these DeepSpeed config values to 'auto'.",
                fix=Fix(
                    f'set "{name}": {{"enabled": "auto"}} in the DeepSpeed config', applicability=Applicability.DISPLAY
                ),
            )


def _accelerate_mismatch(setup: Setup, launch: LaunchFacts, config: dict, where: tuple[Evidence, ...]):
    mode = effective_precision(setup)
    if mode not in ("fp16", "bf16", "fp8"):
        return
    other = "bf16" if mode == "fp16" else "fp16"
    if not hard_enabled(config, other):
        return
    said = next((e for e in setup.amp.evidence if e.origin not in ("code", "default")), None) or next(
        iter(setup.amp.evidence), None
    )
    yield Draft(
        f"mixed precision {mode} with {other} enabled in the DeepSpeed config: accelerate refuses the pair",
        evidence=where + ((said,) if said else ()),
        error=f"ValueError: `--mixed_precision` arg cannot be set to `{mode}` when `{other}` is set in the "
        f"DeepSpeed config file.",
        fix=Fix(f'set "{other}": {{"enabled": "auto"}} in the DeepSpeed config', applicability=Applicability.DISPLAY),
    )


@rule(
    "PD501",
    "deepspeed-precision-mismatch",
    severity="error",
    phase="wrap",
    summary="The DeepSpeed config hard-codes fp16/bf16 against the Trainer's (or the launcher's) precision.",
    what='A DeepSpeed JSON or dict with `"fp16": {"enabled": true}` or `"bf16": {"enabled": true}` that '
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
    fix='Set `"enabled": "auto"` in the DeepSpeed config and choose the precision only in TrainingArguments.',
    applicability=Applicability.DISPLAY,
    fix_safety='Display only: a change to the DeepSpeed config, which `fix` does not write ("auto" takes the '
    "Trainer's value, so it is safe to make by hand).",
    fires=[Example(_script("{'fp16': {'enabled': True}, 'zero_optimization': {'stage': 2}}", ", bf16=True"))],
    silent=[
        Example(
            _script(
                "{'fp16': {'enabled': 'auto'}, 'bf16': {'enabled': 'auto'}, 'zero_optimization': {'stage': 2}}",
                ", bf16=True",
            )
        )
    ],
)
def deepspeed_precision_mismatch(
    script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts, launch: LaunchFacts
):
    config, where, _ = deepspeed_config(setup)
    if config is None:
        return
    ds_fp16, ds_bf16 = hard_enabled(config, "fp16"), hard_enabled(config, "bf16")
    if ds_fp16 and ds_bf16:
        yield Draft(
            "the DeepSpeed config enables both fp16 and bf16",
            evidence=where,
            error="ValueError: bfloat16 and fp16 modes cannot be simultaneously enabled",
            fix=Fix(
                'set both to "enabled": "auto" and choose in TrainingArguments', applicability=Applicability.DISPLAY
            ),
        )
        return
    # what the job hits first: TrainingArguments checks its own deepspeed= against its flags; accelerate's
    # DeepSpeedPlugin.set_mixed_precision refuses the other mode hard-coded (for a launcher-made plugin, first)
    trainer = list(_trainer_mismatch(setup, config, where))
    accelerate = list(_accelerate_mismatch(setup, launch, config, where))
    yield from (trainer + accelerate if setup.sharding.source != "launch" else accelerate + trainer)[:1]
