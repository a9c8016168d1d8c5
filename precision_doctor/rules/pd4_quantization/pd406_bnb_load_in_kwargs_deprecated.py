"""PD406 bnb-load-in-kwargs-deprecated: `from_pretrained(load_in_4bit=/load_in_8bit=)`: removed in transformers 5,
deprecated before."""

from __future__ import annotations

from ...derive import evidence_of
from ...knowledge.signatures import LOADER, accepted
from ...knowledge.versions import at_least
from ...model.facts import ScriptFacts, StackFacts, VersionSource
from ...model.findings import Applicability, Draft, Edit, Fix
from ..registry import Example, LogSignature, rule
from ._quantization import HEAD

# The first transformers release that deprecates `load_in_4bit=`/`load_in_8bit=` and refuses them next to a
# `quantization_config` (PR #26610, read in the 4.37.2 and 4.38.0 wheels' modeling_utils.py).
LOAD_IN_KWARGS_REFUSED_WITH_CONFIG = "4.38.0"


@rule(
    "PD406",
    "bnb-load-in-kwargs-deprecated",
    severity="warning",
    escalates_to="error",
    phase="load",
    summary="`from_pretrained(load_in_4bit=/load_in_8bit=)`: removed in transformers 5, deprecated before.",
    what="The legacy `load_in_4bit=`/`load_in_8bit=` keywords of `from_pretrained`, alone or together with "
    "`quantization_config=`.",
    why="transformers 5 removed them (the model class receives an unknown keyword; read from each release's "
    "from_pretrained, the signatures keyword-not-accepted, PD217, judges every other keyword with); from 4.38.0 "
    "to 4.57 they are deprecated and refused next to a `quantization_config`. "
    "Before 4.38 both were accepted (the config won) and "
    "the keywords were the documented API. Boundary: the refusal and the deprecation warning arrive together "
    "in 4.38.0 with the HfQuantizer refactor (huggingface/transformers PR #26610); 4.37.2's modeling_utils.py "
    "refuses only other BitsAndBytesConfig keywords next to a config, 4.38.0's raises \"You can't pass "
    '`load_in_4bit`or `load_in_8bit` as a kwarg when passing `quantization_config`" (read in both released '
    "wheels; users report it from 4.38.2, hiyouga/LlamaFactory#4157). Unsloth's "
    "`FastLanguageModel.from_pretrained(load_in_4bit=True)` is Unsloth's own API and is not judged here.",
    error="TypeError: LlamaForCausalLM.__init__() got an unexpected keyword argument 'load_in_4bit'",
    fix="Pass only `quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...)`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same quantization, in the supported form.",
    log=LogSignature(
        patterns=(
            r"unexpected keyword argument 'load_in_(4|8)bit'",
            r"load_in_4bit` and `load_in_8bit` arguments are deprecated",
        )
    ),
    fires=[
        Example(
            HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', load_in_4bit=True)\n",
            fixed=(
                "import torch\n"
                "from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
                "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer,"
                " TrainingArguments\n"
                "m = AutoModelForCausalLM.from_pretrained('gpt2',"
                " quantization_config=BitsAndBytesConfig(load_in_4bit=True))\n"
            ),
        ),
        Example(
            HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', load_in_8bit=True)\n",
            versions={"transformers": "4.44.0"},
            fixed=(
                "import torch\n"
                "from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
                "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer,"
                " TrainingArguments\n"
                "m = AutoModelForCausalLM.from_pretrained('gpt2',"
                " quantization_config=BitsAndBytesConfig(load_in_8bit=True))\n"
            ),
        ),
        Example(
            HEAD + "q = BitsAndBytesConfig(load_in_4bit=True)\n"
            "m = AutoModelForCausalLM.from_pretrained('gpt2', load_in_4bit=True, quantization_config=q)\n",
            versions={"transformers": "4.38.0"},
            note="refused next to quantization_config from 4.38.0",
            fixed=(
                "import torch\n"
                "from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
                "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer,"
                " TrainingArguments\n"
                "q = BitsAndBytesConfig(load_in_4bit=True)\n"
                "m = AutoModelForCausalLM.from_pretrained('gpt2', quantization_config=q)\n"
            ),
        ),
    ],
    silent=[
        Example(
            HEAD + "q = BitsAndBytesConfig(load_in_4bit=True)\n"
            "m = AutoModelForCausalLM.from_pretrained('gpt2', quantization_config=q)\n"
        ),
        Example(
            HEAD + "q = BitsAndBytesConfig(load_in_4bit=True)\n"
            "m = AutoModelForCausalLM.from_pretrained('gpt2', load_in_4bit=True, quantization_config=q)\n",
            versions={"transformers": "4.31.0"},
            note="accepted before 4.38: the config wins",
        ),
        Example(
            "from unsloth import FastLanguageModel\n"
            "m, tok = FastLanguageModel.from_pretrained(model_name='unsloth/llama-3-8b', load_in_4bit=True)\n",
            note="Unsloth's own from_pretrained, where load_in_4bit= is the documented keyword",
        ),
    ],
)
def bnb_load_in_kwargs_deprecated(script: ScriptFacts, stack: StackFacts):
    if not at_least(stack, "transformers", LOAD_IN_KWARGS_REFUSED_WITH_CONFIG):
        return  # the documented keywords then, accepted next to a config
    loader = accepted(LOADER, stack)  # from_pretrained's keywords of this release (signatures.py)
    version = stack.get("transformers")
    for load in script.of("model_load"):
        for flag in ("load_in_4bit", "load_in_8bit"):
            if flag not in load.kwargs:
                continue
            removed = loader is not None and flag not in loader.names
            both = "quantization_config" in load.kwargs
            cls = load.callee.rsplit(".", 2)[-2] if "." in load.callee else "the model"
            error = (
                f"TypeError: {cls}.__init__() got an unexpected keyword argument '{flag}'"
                if removed
                else "ValueError: You can't pass `load_in_4bit`or `load_in_8bit` as a kwarg when passing "
                "`quantization_config` argument at the same time."
                if both
                else "The `load_in_4bit` and `load_in_8bit` arguments are deprecated and will be removed in the future "
                "versions. Please, pass a `BitsAndBytesConfig` object in `quantization_config` argument instead."
            )
            yield Draft(
                f"from_pretrained({flag}=...) "
                + (f"no longer exists on transformers {version.version}" if removed else "is deprecated")
                + (" (and is refused next to quantization_config)" if both and not removed else ""),
                evidence=(evidence_of(load.kwargs[flag], f"{flag}=", load),),
                severity="error" if removed or both else "",
                error=error,
                fix=Fix(
                    f"quantization_config=BitsAndBytesConfig({flag}=True)",
                    applicability=Applicability.UNSAFE if both else Applicability.SAFE,
                    edits=(
                        Edit(
                            "remove_kwarg",
                            load.location.path,
                            load.location.line,
                            call="from_pretrained",
                            name=flag,
                            library="transformers",
                        ),
                    )
                    + (
                        ()
                        if both
                        else (
                            Edit(
                                "set_kwarg",
                                load.location.path,
                                load.location.line,
                                call="from_pretrained",
                                name="quantization_config",
                                new=f"BitsAndBytesConfig({flag}=True)",
                                library="transformers",
                            ),
                            Edit(
                                "add_import", load.location.path, 1, new="from transformers import BitsAndBytesConfig"
                            ),
                        )
                    ),
                ),
                confidence="likely" if version.source == VersionSource.ASSUMED else "certain",
            )
            return
