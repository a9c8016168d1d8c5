"""Loading and construction APIs: renamed keywords, and attention kernels against the weights' dtype and the
architecture (PD214-PD216, PD218)."""

from __future__ import annotations

from ..knowledge import dtypes
from ..derive import Setup, call_evidence, decide, evidence_of
from ..derive.checkpoint import checkpoint_of, describe_source
from ..derive.setup import DTYPE_KEYWORD_FROM
from ..knowledge.families import ALL_ATTENTION
from .registry import Example, LogSignature, rule
from ..model.facts import KNOWN, MachineFacts, ScriptFacts, StackFacts, VersionSource
from ..model.findings import Applicability, Draft, Edit, Fix
from ..probes.stack import at_least
from ..knowledge.signatures import SPECIALISED, accepted, class_id, decided_by, local_id
from ._common import keep_shared_source, literal_edit, native_bf16, present, weights_source_edit

_HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"


@rule(
    "PD214", "torch-dtype-kwarg-renamed", severity="warning", phase="load",
    summary="`torch_dtype=` is deprecated in from_pretrained (transformers >= 4.56): use `dtype=`.",
    what="`from_pretrained(..., torch_dtype=...)` on transformers 4.56 or newer.",
    why="transformers 4.56 renamed the argument; v5 keeps `torch_dtype` as an alias that warns. The doctor treats "
        "both spellings as one setting for every other rule.",
    error="`torch_dtype` is deprecated! Use `dtype` instead!",
    fix="Rename the keyword: `dtype=...` (keep `torch_dtype` only for transformers < 4.56).",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same setting under its current name.",
    fires=[Example(_HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n",
                   fixed=_HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n")],
    silent=[Example(_HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"),
            Example(_HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n",
                    versions={"transformers": "4.46.3"})],
)
def torch_dtype_kwarg_renamed(script: ScriptFacts, stack: StackFacts):
    if not at_least(stack, "transformers", DTYPE_KEYWORD_FROM):
        return
    version = stack.get("transformers")
    for load in script.of("model_load"):
        if "torch_dtype" in load.kwargs and "dtype" not in load.kwargs:
            yield Draft(f"torch_dtype= is deprecated on transformers {version.version} ({version.source}); "
                        f"use dtype=", evidence=(call_evidence(load, "torch_dtype="),),
                        fix=Fix("rename torch_dtype= to dtype=", applicability=Applicability.SAFE,
                                edits=(Edit("rename_kwarg", load.location.path, load.location.line,
                                            call=load.callee.rsplit(".", 1)[-1], old="torch_dtype", new="dtype"),)),
                        confidence="likely" if version.source == VersionSource.ASSUMED else "certain")


_FLASH = ("flash_attention_2", "flash_attention_3")


@rule(
    "PD215", "flash-attn-fp32-weights", severity="error", phase="first-step",
    summary="FlashAttention with float32 weights: the kernel takes only fp16/bf16.",
    what="`attn_implementation=\"flash_attention_2\"` on a model whose weights are float32. An error in a loop "
         "without autocast; a warning under fp16/bf16 autocast (Trainer `bf16=True`), where inputs are cast.",
    why="FlashAttention kernels are written for fp16 and bf16 only.",
    error="RuntimeError: FlashAttention only support fp16 and bf16 data type",
    fix="Load with `dtype=torch.bfloat16` (or float16), or run under `torch.autocast(..., dtype=torch.bfloat16)`.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: bf16 weights change what is trained.",
    log=LogSignature(patterns=(r"FlashAttention only support fp16 and bf16 data type",
                           r"Flash Attention 2\.0 only supports torch\.float16 and torch\.bfloat16")),
    fires=[
        Example(_HEAD + "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32, "
                "attn_implementation='flash_attention_2').cuda()\n"
                "opt = torch.optim.AdamW(model.parameters())\nfor b in loader:\n"
                "    model(**b).loss.backward()\n    opt.step()\n"),
    ],
    silent=[
        Example(_HEAD + "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.bfloat16, "
                "attn_implementation='flash_attention_2').cuda()\n"
                "opt = torch.optim.AdamW(model.parameters())\nfor b in loader:\n"
                "    model(**b).loss.backward()\n    opt.step()\n"),
        Example(_HEAD + "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32, "
                "attn_implementation='sdpa')\nTrainer(model=model, args=TrainingArguments('o')).train()\n"),
    ],
)
def flash_attn_fp32_weights(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts):
    load = setup.model_load
    if load is None or not setup.trains or setup.weights.value != dtypes.FLOAT32:
        return
    impl = decide(load.kwarg("attn_implementation"), machine, stack)
    if impl.state != KNOWN or impl.value not in _FLASH or _unsupported(script, load, str(impl.value), stack):
        return  # an architecture without the kernel fails at load instead: PD218
    autocast = setup.amp.value in ("fp16", "bf16", "autocast")
    target = "torch.bfloat16" if native_bf16(machine) is not False else "torch.float16"
    edit = weights_source_edit(setup, target)
    yield Draft(f"{impl.value} with float32 weights: the kernel takes only fp16/bf16"
                + (" (autocast casts the inputs, so it runs, with a warning)" if autocast else
                   " and no autocast casts the inputs"),
                evidence=(evidence_of(impl, impl.value, load),) + setup.weights.evidence + setup.amp.evidence,
                severity="warning" if autocast else "",
                error=("Flash Attention 2.0 only supports torch.float16 and torch.bfloat16 dtypes, but the current "
                       "dype in the model is torch.float32." if autocast else ""),
                fix=keep_shared_source(Fix(f"load with dtype={target}" + ("" if autocast else
                                                                          " or wrap the forward in torch.autocast"),
                                           applicability=Applicability.UNSAFE, edits=(edit,) if edit else ()),
                                       setup, script))


def _unsupported(script: ScriptFacts, load, impl: str, stack: StackFacts):
    """The checkpoint's architecture, when it is known not to implement `impl` on this transformers (the support
    table is read from transformers 5.x's modeling files: `_supports_sdpa`, `_supports_flash_attn`)."""
    if not at_least(stack, "transformers", "5.0"):
        return None
    ckpt = checkpoint_of(load, script)
    if ckpt is None or not ckpt.attention:
        return None
    wanted = "flash_attention_2" if impl in _FLASH else impl
    if wanted not in ALL_ATTENTION or wanted in ckpt.attention:
        return None
    return ckpt


_KERNEL_NAME = {"flash_attention_2": "Flash Attention 2", "flash_attention_3": "Flash Attention 3",
                "sdpa": "an attention implementation through torch.nn.functional.scaled_dot_product_attention"}


@rule(
    "PD218", "attn-implementation-unsupported", severity="error", phase="load",
    summary="`attn_implementation=` names a kernel the model's architecture does not implement: the load fails.",
    what="`from_pretrained(..., attn_implementation=\"flash_attention_2\" | \"sdpa\")` on an architecture whose "
         "transformers class does not declare that kernel (T5 and BLOOM have no FlashAttention-2; Gemma-2 has no "
         "sdpa), judged from the checkpoint's `model_type` on transformers 5.x.",
    why="transformers checks `_supports_flash_attn` / `_supports_sdpa` of the model class while building it and "
        "refuses a kernel the class does not implement, before any weight is loaded.",
    error="ValueError: T5ForConditionalGeneration does not support Flash Attention 2 yet. Please request to add "
          "support where the model is hosted, on its model hub page",
    fix="Pick a kernel the architecture implements: `attn_implementation=\"sdpa\"` where it has one, else "
        "`\"eager\"`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same attention computed by another kernel.",
    log=LogSignature(patterns=(r"does not support Flash Attention \d",
                               r"does not support an attention implementation through torch\.nn\.functional")),
    fires=[Example(_HEAD.replace("AutoModelForCausalLM", "AutoModelForSeq2SeqLM") +
                   "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-base', dtype=torch.bfloat16, "
                   "attn_implementation='flash_attention_2')\n"
                   "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n", target="a100",
                   fixed=_HEAD.replace("AutoModelForCausalLM", "AutoModelForSeq2SeqLM") +
                   "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-base', dtype=torch.bfloat16, "
                   "attn_implementation='sdpa')\n"
                   "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n")],
    silent=[Example(_HEAD.replace("AutoModelForCausalLM", "AutoModelForSeq2SeqLM") +
                    "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-base', dtype=torch.bfloat16, "
                    "attn_implementation='sdpa')\n"
                    "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n", target="a100"),
            Example(_HEAD + "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', "
                    "dtype=torch.bfloat16, attn_implementation='flash_attention_2')\n"
                    "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n", target="a100"),
            Example(_HEAD.replace("AutoModelForCausalLM", "AutoModelForSeq2SeqLM") +
                    "model = AutoModelForSeq2SeqLM.from_pretrained('google/flan-t5-base', dtype=torch.bfloat16, "
                    "attn_implementation='flash_attention_2')\n"
                    "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n", target="a100",
                    versions={"transformers": "4.46.3"}, note="the support table is read from transformers 5.x")],
)
def attn_implementation_unsupported(script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    for load in script.of("model_load"):
        impl = decide(load.kwarg("attn_implementation"), machine, stack)
        if impl.state != KNOWN or not isinstance(impl.value, str):
            continue
        ckpt = _unsupported(script, load, impl.value, stack)
        if ckpt is None:
            continue
        better = "sdpa" if "sdpa" in ckpt.attention else "eager"
        name = ckpt.architecture or ckpt.model_type
        yield Draft(f"{name} does not implement attn_implementation={impl.value!r} "
                    f"(it has: {', '.join(ckpt.attention)}): the load fails",
                    evidence=(evidence_of(impl, f"attn_implementation={impl.value}", load),
                              call_evidence(load, f"checkpoint {describe_source(ckpt)}, model_type {ckpt.model_type}")),
                    error=f"ValueError: {name} does not support {_KERNEL_NAME.get(impl.value, impl.value)} yet.",
                    fix=Fix(f"attn_implementation={better!r}", Applicability.SAFE,
                            edits=present(literal_edit(impl, repr(better)))))


@rule(
    "PD216", "trainer-tokenizer-kwarg-removed", severity="error", phase="wrap",
    summary="`Trainer(tokenizer=...)` was removed in transformers 5: use `processing_class=`.",
    what="`Trainer(..., tokenizer=...)` (and the script's subclasses whose constructor is Trainer's, or passes "
         "**kwargs on to it) on transformers 5 or newer, where the keyword no longer exists; a deprecation warning "
         "on 4.46-4.57. The keyword's history is read from Trainer.__init__ of each release (the fields "
         "keyword-not-accepted, PD217, judges every other keyword with).",
    why="transformers 4.46 renamed the argument to `processing_class` (it also takes processors and image "
        "processors) and 5.0 removed the old name, so the Trainer is never constructed.",
    error="TypeError: Trainer.__init__() got an unexpected keyword argument 'tokenizer'",
    fix="Pass the tokenizer as `processing_class=tokenizer`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same object under the current name.",
    log=LogSignature(patterns=(r"unexpected keyword argument 'tokenizer'",)),
    fires=[Example(_HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
                   "Trainer(model=m, args=TrainingArguments('o'), tokenizer=tok).train()\n",
                   fixed=_HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
                   "Trainer(model=m, args=TrainingArguments('o'), processing_class=tok).train()\n")],
    silent=[Example(_HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
                    "Trainer(model=m, args=TrainingArguments('o'), processing_class=tok).train()\n"),
            Example(_HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
                    "Trainer(model=m, args=TrainingArguments('o'), tokenizer=tok).train()\n",
                    versions={"transformers": "4.44.2"})],
)
def trainer_tokenizer_kwarg_removed(script: ScriptFacts, stack: StackFacts):
    version = stack.get("transformers")
    for trainer in script.of("trainer"):
        if "tokenizer" not in trainer.kwargs:
            continue
        cid = local_id(trainer.callee, script.classes) or class_id(trainer.callee)
        owner = decided_by(cid, stack, script.classes) if cid else None
        if SPECIALISED.get((owner, "tokenizer")) != "PD216":
            continue  # a TRL trainer's own __init__ decides: keyword-not-accepted (PD217) judges it
        fields = accepted(owner, stack)
        if fields is None or "processing_class" not in fields.names:
            continue  # before 4.46 `tokenizer` is the parameter (or the version is outside the table)
        removed = "tokenizer" not in fields.names
        # a version neither installed nor declared may be a 4.x that still takes it: a warning that says so (a declared
        # range is read as what a fresh install of it gets, the newest release it allows)
        assumed = removed and version.source == VersionSource.ASSUMED
        name = trainer.callee.rsplit(".", 1)[-1]
        yield Draft(f"{name}(tokenizer=...) " + (f"no longer exists on transformers {version.version}"
                                                   if removed else f"is deprecated on transformers {version.version}")
                    + f" ({version.source}{'; not installed nor declared: pin it to be sure' if assumed else ''}); "
                      f"use processing_class=",
                    evidence=(call_evidence(trainer, "tokenizer="),),
                    severity="" if removed and not assumed else "warning",
                    error="" if removed else ("FutureWarning: `tokenizer` is deprecated and will be removed in "
                                              "version 5.0.0 for `Trainer.__init__`. Use `processing_class` instead."),
                    fix=Fix("rename tokenizer= to processing_class=", applicability=Applicability.SAFE,
                            edits=(Edit("rename_kwarg", trainer.location.path, trainer.location.line, call=name,
                                        old="tokenizer", new="processing_class"),)),
                    confidence="likely" if version.source == VersionSource.ASSUMED else "certain")
