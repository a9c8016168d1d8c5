"""PD307 remote-code-no-checkpointing: Gradient checkpointing on a checkpoint's own model class that does not support
it."""

from __future__ import annotations

from typing import Literal

from ...derive import Checkpointing, Setup
from ...derive.placement import how_enabled
from ...knowledge.versions import at_least
from ...model.facts import RemoteClass, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, rule
from ._placement import CHATBASE_CONFIG, CHATBASE_CONFIGURATION

# the keywords the Trainer hands the model's gradient_checkpointing_enable when it switches checkpointing on, from
# each release: gradient_checkpointing_kwargs from 4.35 (4.36.2 trainer.py:1653), every_n_layers from 5.16 (5.16.1
# trainer.py:1404-1410), offload from 5.23 (an overriding method is called by activation_checkpointing_enable with
# all three: 5.23.0 modeling_utils.py:3133-3138, 5.24 :3142-3147)
EVERY_N_LAYERS_FROM = "5.16"
_TRAINER_KEYWORDS = (
    ("5.23", ("gradient_checkpointing_kwargs", "every_n_layers", "offload")),
    (EVERY_N_LAYERS_FROM, ("gradient_checkpointing_kwargs", "every_n_layers")),
    ("4.35", ("gradient_checkpointing_kwargs",)),
)
# transformers 5.23.0 renamed the feature in the message (modeling_utils.py:3146; "gradient" up to 5.22, 4.57.1
# modeling_utils.py:3689)
ACTIVATION_WORDING_FROM = "5.23"
# from 4.35.0 transformers switches each module's `gradient_checkpointing` flag and refuses a model with none
# (modeling_utils.py:1881-1901; the same text in 5.24)
MODULE_FLAGS_FROM = "4.35"
NO_MODULE_FLAG = (
    "{name} is not compatible with gradient checkpointing. Make sure all the architecture support it by setting a "
    "boolean attribute `gradient_checkpointing` to modules of the model that uses checkpointing."
)

_MODELING = (
    "from torch import nn\n"
    "from transformers import PreTrainedModel\n"
    "from .configuration_chatbase import ChatBaseConfig\n\n\n"
    "class ChatBasePreTrainedModel(PreTrainedModel):\n"
    "    config_class = ChatBaseConfig\n"
    "    base_model_prefix = 'model'\n{supports}\n\n"
    "class ChatBaseForCausalLM(ChatBasePreTrainedModel):\n"
    "    def __init__(self, config):\n"
    "        super().__init__(config)\n"
    "        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)\n{flag}"
)
_FLAG = "        self.gradient_checkpointing = False\n"
_OWN_ENABLE = (
    "\n    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None{rest}):\n"
    "        super().gradient_checkpointing_enable(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs)\n"
)
_SCRIPT = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('./chatbase-1b', dtype=torch.bfloat16, trust_remote_code=True)\n"
    "args = TrainingArguments('out', bf16=True, per_device_train_batch_size=4{args})\n"
    "Trainer(model=model, args=args, train_dataset=data).train()\n"
)


def _files(supports: str = "", flag: str = _FLAG) -> dict[str, str]:
    return {
        "chatbase-1b/config.json": CHATBASE_CONFIG,
        "chatbase-1b/configuration_chatbase.py": CHATBASE_CONFIGURATION,
        "chatbase-1b/modeling_chatbase.py": _MODELING.format(supports=supports, flag=flag),
    }


@rule(
    "PD307",
    "remote-code-no-checkpointing",
    severity="error",
    phase="first-step",
    summary="Gradient checkpointing on a checkpoint's own model class that does not support it.",
    what="The model is loaded through an Auto class with `trust_remote_code=True`, so transformers builds the class "
    "the checkpoint's config.json `auto_map` names from the checkpoint's own Python file — and that class (in "
    "Python's method order over its bases) never sets `supports_gradient_checkpointing = True`, or sets it while "
    "none of the model's modules has the `gradient_checkpointing` flag transformers switches, while the job turns "
    "gradient checkpointing on (`gradient_checkpointing=True`, a TRL config's default, "
    "`model.gradient_checkpointing_enable()`, or peft's `prepare_model_for_kbit_training`). The modeling file is "
    "read beside config.json (a local folder, or the Hugging Face cache's snapshot for the revision loaded), never "
    "imported; a script that sets `model.supports_gradient_checkpointing = True` itself, asks the model first, or "
    "catches the error is judged as such. The script's own flag counts where the model reads it: on the model "
    "before checkpointing is switched on, in code the script runs — not on peft's wrapper, not in a function "
    "nothing calls, not after `train()`, not in a callback (the Trainer switches checkpointing on before "
    "`on_train_begin`). A class that overrides `gradient_checkpointing_enable` with fewer keywords than the Trainer "
    "passes (gradient_checkpointing_kwargs from 4.35, every_n_layers from 5.16, offload from 5.23) is refused by "
    "Python instead, with a TypeError.",
    why="`gradient_checkpointing_enable()` refuses a class whose `supports_gradient_checkpointing` is false "
    "(`PreTrainedModel` defaults it to False), and from transformers 4.35 one whose modules carry no "
    "`gradient_checkpointing` flag to switch: the job dies when the Trainer (or the script) switches checkpointing "
    "on, after the model has loaded.",
    error="ValueError: ChatBaseForCausalLM does not support activation checkpointing.",
    fix="Load a class that supports it: transformers' own (drop `trust_remote_code=True` where the installed "
    "transformers has the architecture) or a revision of the checkpoint whose code sets "
    "`supports_gradient_checkpointing = True`; otherwise turn gradient checkpointing off and make room for the "
    "activations it would have freed (a smaller batch, a shorter sequence).",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: which class to load, or how much memory to give up, is a choice the doctor cannot make.",
    fires=[
        Example(_SCRIPT.format(args=", gradient_checkpointing=True"), files=_files()),
        Example(
            _SCRIPT.format(args="").replace(
                "args = TrainingArguments", "model.gradient_checkpointing_enable()\nargs = TrainingArguments"
            ),
            files=_files("    supports_gradient_checkpointing = False\n"),
            versions={"transformers": "4.57.1"},
            note="the script switches it on; transformers before 5.23 says 'gradient checkpointing'",
        ),
        Example(
            _SCRIPT.format(args=", gradient_checkpointing=True"),
            files=_files("    supports_gradient_checkpointing = True\n", flag=""),
            note="it says it supports checkpointing, but no module has the flag transformers switches",
        ),
        Example(
            _SCRIPT.format(args=", gradient_checkpointing=True"),
            files=_files("    supports_gradient_checkpointing = True\n" + _OWN_ENABLE.format(rest="")),
            note="its own gradient_checkpointing_enable takes no every_n_layers, which the Trainer passes from 5.16",
        ),
    ],
    silent=[
        Example(
            _SCRIPT.format(args=", gradient_checkpointing=True"),
            files=_files("    supports_gradient_checkpointing = True\n"),
        ),
        Example(
            _SCRIPT.format(args=", gradient_checkpointing=True").replace(", trust_remote_code=True", ""),
            files=_files(),
            note="without trust_remote_code transformers never runs the checkpoint's code",
        ),
        Example(_SCRIPT.format(args=""), files=_files(), note="no gradient checkpointing"),
        Example(
            _SCRIPT.format(args=", gradient_checkpointing=True"),
            files=_files("    supports_gradient_checkpointing = True\n" + _OWN_ENABLE.format(rest=", **kwargs")),
            note="its own method takes any keyword",
        ),
    ],
)
def remote_code_no_checkpointing(script: ScriptFacts, setup: Setup, stack: StackFacts):
    gc = setup.placement.checkpointing
    if not gc.through_model:
        return
    switched_on = tuple(e for e in gc.evidence if not e.note.startswith("use_reentrant"))  # (where it is turned on)
    own = setup.own_enable
    refused = _refused_keyword(own.value, gc, script, stack) if isinstance(own.value, RemoteClass) else None
    if refused is not None:
        keyword, by, severity = refused
        remote = own.value
        method = f"{remote.enable_owner}.gradient_checkpointing_enable()"
        evidence = own.evidence + (
            Evidence(remote.enable_at, remote.enable_text, f"the checkpoint's own method: no `{keyword}`", "code"),
        )
        yield Draft(
            f"{method}, the checkpoint's own, takes no `{keyword}`, which {by} passes when it switches gradient "
            "checkpointing on",
            evidence=evidence + switched_on,
            error=f"TypeError: {method} got an unexpected keyword argument '{keyword}'",
            severity=severity,
            fix=Fix(
                "switch checkpointing on with the keywords the model's method takes (`model.gradient_checkpointing_"
                "enable()` before training, gradient_checkpointing off in the arguments), or load a revision of the "
                f"checkpoint whose method takes **kwargs; transformers before {EVERY_N_LAYERS_FROM} does not pass "
                "`every_n_layers`",
                applicability=Applicability.DISPLAY,
            ),
        )
        return
    found = setup.model_class
    if not isinstance(found.value, RemoteClass):
        return
    remote = found.value
    if remote.checkpointing == "no" and gc.through_model != "asks":
        word = "activation" if at_least(stack, "transformers", ACTIVATION_WORDING_FROM) else "gradient"
        what, error = "which does not support it", f"{remote.name} does not support {word} checkpointing."
    elif (
        remote.checkpointing == "yes"
        and remote.module_flags is False
        and at_least(stack, "transformers", MODULE_FLAGS_FROM)
    ):
        what = "none of whose modules has the gradient_checkpointing flag transformers switches"
        error = NO_MODULE_FLAG.format(name=remote.name)
    else:
        return
    yield Draft(
        f"gradient checkpointing on {remote.name}, the checkpoint's own class, {what}: transformers refuses it when "
        "checkpointing is switched on",
        evidence=found.evidence + switched_on,
        error=f"ValueError: {error}",
        # a condition the run decides, or a try whose handler may take the refusal (or re-raise it)
        severity="warning" if gc.through_model in ("maybe", "caught") or remote.workaround_conditional else None,
        fix=Fix(
            "load a class that supports gradient checkpointing (transformers' own, without trust_remote_code, "
            "where it has the architecture), or turn checkpointing off and make room for the activations",
            applicability=Applicability.DISPLAY,
        ),
    )


def _refused_keyword(
    remote: RemoteClass, gc: Checkpointing, script: ScriptFacts, stack: StackFacts
) -> tuple[str, str, Literal["warning"] | None] | None:
    """The first keyword the checkpoint's own gradient_checkpointing_enable does not take, among those the Trainer
    (by release) or the script's own call passes it: (keyword, who passes it, severity: None for an error)."""
    takes = remote.enable_keywords
    if takes is None or "**" in takes:
        return None
    if gc.by_trainer:
        passed = next((kw for boundary, kw in _TRAINER_KEYWORDS if at_least(stack, "transformers", boundary)), ())
        missing = next((k for k in passed if k not in takes), None)
        if missing is not None:
            return missing, f"transformers {stack.get('transformers').version}'s Trainer", None
    for call in script.of("gc_enable"):
        if call.callee.rsplit(".", 1)[-1] != _ENABLE or call.never_runs:
            continue
        how = how_enabled(call)  # (as the setup judges where checkpointing is switched on)
        if how == "asks" and remote.checkpointing == "no":
            continue  # (asked first, a model that says no is never called)
        missing = next((k for k in call.kwargs if k not in takes), None)
        if missing is not None:
            severity: Literal["warning"] | None = "warning" if how in ("maybe", "caught") else None
            return missing, f"the script's call at line {call.location.line}", severity
    return None


_ENABLE = "gradient_checkpointing_enable"
