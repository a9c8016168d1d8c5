"""PD308 remote-code-not-trusted: A checkpoint that needs its own code, loaded without trust_remote_code."""

from __future__ import annotations

from ...derive import Setup
from ...model.findings import Applicability, Draft, Fix
from .._common import present, set_kwarg
from ..registry import Example, rule
from ._placement import CHATBASE_CONFIG, CHATBASE_CONFIGURATION

_FILES = {
    "chatbase-1b/config.json": CHATBASE_CONFIG,
    "chatbase-1b/configuration_chatbase.py": CHATBASE_CONFIGURATION,
    "chatbase-1b/modeling_chatbase.py": "from transformers import PreTrainedModel\n\n\n"
    "class ChatBaseForCausalLM(PreTrainedModel):\n    pass\n",
}
_SCRIPT = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('./chatbase-1b', dtype=torch.bfloat16{trust})\n"
    "Trainer(model=model, args=TrainingArguments('out', bf16=True), train_dataset=data).train()\n"
)


@rule(
    "PD308",
    "remote-code-not-trusted",
    severity="error",
    phase="load",
    summary="A checkpoint that needs its own code, loaded without trust_remote_code.",
    what="The model is loaded through an Auto class from a checkpoint whose config.json `auto_map` names its own "
    "class for that Auto class, the job's transformers has no class of its own for the checkpoint's model type "
    "(read from the installed `models/auto/modeling_auto.py`, never imported, else from the doctor's table of "
    "every minor release from 4.36), and `trust_remote_code` is not true. "
    "The checkpoint is read beside the script or in the Hugging Face cache.",
    why="transformers runs a checkpoint's own code only when asked to: with `trust_remote_code` unset it asks on "
    "the terminal for 15 seconds, and a job without one (a batch job, a launcher's worker) dies at load; with it "
    "False the load is refused outright.",
    error="ValueError: The repository ./chatbase-1b contains custom code which must be executed to correctly load "
    "the model.",
    fix="Pass `trust_remote_code=True` to the load (and to the tokenizer's and config's, which ask the same), "
    "having read the checkpoint's code: it runs on your machine with your permissions.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: it lets the checkpoint's own Python code run; read it (or pin a revision you have read) first.",
    fires=[
        Example(
            _SCRIPT.format(trust=""),
            files=_FILES,
            fixed=_SCRIPT.format(trust=", trust_remote_code=True"),
        ),
        Example(
            _SCRIPT.format(trust=", trust_remote_code=False"),
            files=_FILES,
            note="refused outright",
            fixed=_SCRIPT.format(trust=", trust_remote_code=True"),
        ),
    ],
    silent=[
        Example(_SCRIPT.format(trust=", trust_remote_code=True"), files=_FILES),
        Example(
            _SCRIPT.format(trust="").replace("chatbase-1b", "llama-1b"),
            files={k.replace("chatbase-1b", "llama-1b"): v.replace('"chatbase"', '"llama"') for k, v in _FILES.items()},
            note="transformers has llama itself: without trust_remote_code it loads its own class",
        ),
    ],
)
def remote_code_not_trusted(setup: Setup):
    found = setup.untrusted_code
    if not found.value or setup.model_load is None:
        return
    load = setup.model_load
    model = load.args[0].text.strip("'\"") if load.args and load.args[0].text else "the checkpoint"
    yield Draft(
        f"{model} brings its own code for model type {found.value!r}, which the installed transformers does not "
        "have, and it is loaded without trust_remote_code=True: the load is refused",
        evidence=found.evidence,
        error=f"ValueError: The repository {model} contains custom code which must be executed to correctly load the "
        "model.",
        fix=Fix(
            "trust_remote_code=True (after reading the checkpoint's code: it will run)",
            applicability=Applicability.UNSAFE,
            edits=present(set_kwarg(load, "trust_remote_code", "True")),
        )
        if load.location.path.endswith(".py")
        else Fix(  # a recipe: its own key, which the framework hands to from_pretrained
            "`trust_remote_code: true` in the recipe (after reading the checkpoint's code: it will run)",
            applicability=Applicability.DISPLAY,
        ),
    )
