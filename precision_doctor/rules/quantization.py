"""bitsandbytes quantization and PEFT adapters on top of it (PD401-PD406)."""

from __future__ import annotations

from ..knowledge import dtypes
from ..derive import Setup, call_evidence, decide, dtype_of_cast, evidence_of
from .registry import Example, LogSignature, rule
from ..model.facts import ABSENT, MachineFacts, ScriptFacts, StackFacts, VersionSource
from ..model.findings import Applicability, Draft, Edit, Fix
from ..probes.stack import at_least
from ..knowledge.signatures import LOADER, accepted
from ._common import native_bf16, present, set_kwarg

_HEAD = ("import torch\nfrom peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
         "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments\n")
_LOAD4 = ("q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4'{compute})\n"
          "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B', quantization_config=q, "
          "dtype=torch.bfloat16, device_map={{'': 0}})\n")
_PREP = "model = prepare_model_for_kbit_training(model)\n"
_LORA = "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
_TRAIN = "Trainer(model=model, args=TrainingArguments('out', bf16=True{args})).train()\n"
_BF16 = ", bnb_4bit_compute_dtype=torch.bfloat16"


_ADAPTERS_TRAIN = "    Trainer(model=model, args=TrainingArguments('o')).train()\n"
_ADAPTERS_ON_SOME_PATHS = (_HEAD + "def run(method):\n"
                           "    q = BitsAndBytesConfig(load_in_4bit=True)\n"
                           "    model = AutoModelForCausalLM.from_pretrained('gpt2', quantization_config=q)\n"
                           "    if method == 'a':\n"
                           "        model = get_peft_model(model, LoraConfig(r=8))\n"
                           "    elif method == 'b':\n"
                           "        model = get_peft_model(model, LoraConfig(r=16))\n"
                           + _ADAPTERS_TRAIN + "import sys\nrun(sys.argv[1])\n")


def qlora(compute: str = _BF16, prep: bool = True, lora: bool = True, args: str = "", middle: str = "") -> str:
    return (_HEAD + _LOAD4.format(compute=compute) + middle + (_PREP if prep else "") + (_LORA if lora else "")
            + _TRAIN.format(args=args))


@rule(
    "PD401", "quantized-model-cast-or-move", severity="error", phase="load",
    summary="Casting a bitsandbytes 4/8-bit model to another dtype (or moving it, on old stacks).",
    what="`.half()`, `.float()`, `.bfloat16()`, `.to(torch.float16)` on a model loaded with "
         "`BitsAndBytesConfig(load_in_4bit/8bit=True)`; `.to(\"cuda\")`/`.cuda()` too with bitsandbytes < 0.43.2 "
         "(4-bit) or < 0.48 (8-bit).",
    why="The quantized weights are packed integers with their own compute dtype; transformers refuses to cast them.",
    error="ValueError: You cannot cast a bitsandbytes model in a new `dtype`. Make sure to load the model using "
          "`from_pretrained` using the desired `dtype` by passing the correct `dtype` argument.",
    fix="Don't cast a quantized model: choose the non-quantized modules' dtype with `dtype=` at load time and the "
        "compute dtype with `bnb_4bit_compute_dtype`; place it with `device_map`.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    log=LogSignature(patterns=(r"`\.to` is not supported for `4-bit` or `8-bit` bitsandbytes models",
                           r"`\.half\(\)` is not supported for quantized model",
                           r"`\.float\(\)` is not supported for quantized")),
    fires=[Example(qlora(middle="model = model.half()\n")),
           Example(qlora(middle="model.to(torch.bfloat16)\n"))],
    silent=[Example(qlora()),
            Example(qlora(middle="model = model.to('cuda')\n"), note="moving is allowed on current bitsandbytes")],
)
def quantized_model_cast_or_move(script: ScriptFacts, setup: Setup, stack: StackFacts):
    bits = setup.quantized.value
    if bits not in ("4bit", "8bit"):
        return
    for c in script.of("cast"):
        if c.receiver not in setup.model_names and c not in setup.chain:
            continue
        method = c.callee.rsplit(".", 1)[-1]
        d = dtype_of_cast(c)
        if method in ("half", "float", "bfloat16") or d:
            error = (f"ValueError: `.{method}()` is not supported for quantized model. Please use the model as it "
                     f"is, since the model has already been casted to the correct `dtype`."
                     if method in ("half", "float") else "")
            yield Draft(f"the model is {bits} bitsandbytes-quantized and then cast with .{method}(...)",
                        evidence=setup.quantized.evidence + (call_evidence(c, f".{method}() on a quantized model"),),
                        error=error, fix=Fix("remove the cast; pick dtype= / bnb_4bit_compute_dtype at load time",
                                             applicability=Applicability.UNSAFE))
        elif method in ("cuda", "to"):
            old_4 = bits == "4bit" and not at_least(stack, "bitsandbytes", "0.43.2")
            old_8 = bits == "8bit" and not at_least(stack, "bitsandbytes", "0.48")
            if old_4 or old_8:
                bnb = stack.get("bitsandbytes")
                yield Draft(f"moving a {bits} model with .{method}() needs a newer bitsandbytes "
                            f"(have {bnb.version}, {bnb.source})",
                            evidence=(call_evidence(c, "moved after quantized loading"),),
                            error="ValueError: Calling `to()` is not supported for `4-bit` quantized models with the "
                                  "installed version of bitsandbytes." if old_4 else
                                  "ValueError: You need to install `pip install bitsandbytes>=0.48.0` if you want to "
                                  "move a 8-bit model across devices using to().",
                            fix=Fix("place it with device_map at load time instead", applicability=Applicability.UNSAFE))


@rule(
    "PD402", "bnb-compute-dtype-float32-default", severity="warning", phase="first-step",
    summary="4-bit loading without `bnb_4bit_compute_dtype`: every matmul dequantizes to float32.",
    what="`BitsAndBytesConfig(load_in_4bit=True)` with no `bnb_4bit_compute_dtype` (default float32) while the "
         "training runs in fp16/bf16.",
    why="The 4-bit kernels dequantize to the compute dtype: float32 makes every matmul slow and mismatched with the "
        "half-precision activations.",
    error="UserWarning: Input type into Linear4bit is torch.float16, but bnb_4bit_compute_dtype=torch.float32 "
          "(default). This will lead to slow inference or training speed.",
    fix="Set `bnb_4bit_compute_dtype` to the training compute dtype: `torch.bfloat16` on Ampere or newer, "
        "`torch.float16` on T4/V100.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the compute dtype is not stored in the weights.",
    log=LogSignature(patterns=(r"Input type into Linear4bit is torch\.\w+, but bnb_4bit_compute_dtype=torch\.float32",)),
    fires=[Example(qlora(compute=""))],
    silent=[Example(qlora()),
            Example(qlora(compute="").replace("bf16=True", "bf16=False").replace("dtype=torch.bfloat16",
                                                                                 "dtype=torch.float32"),
                    note="fp32 training: float32 is right")],
)
def bnb_compute_dtype_float32_default(script: ScriptFacts, setup: Setup, machine: MachineFacts,
                                      stack: StackFacts):
    if setup.quantized.value != "4bit" or not setup.trains:
        return
    half = setup.amp.value in ("fp16", "bf16") or dtypes.is_half(setup.weights.value)
    if not half:
        return
    for cfg in script.of("bnb_config"):
        if not decide(cfg.kwarg("load_in_4bit"), machine, stack).is_(True):
            continue
        if cfg.kwarg("bnb_4bit_compute_dtype").state != ABSENT:
            continue
        target = "torch.bfloat16" if native_bf16(machine) is not False and setup.amp.value != "fp16" \
            else "torch.float16"
        yield Draft("BitsAndBytesConfig(load_in_4bit=True) without bnb_4bit_compute_dtype computes in float32 while "
                    "training runs in half precision",
                    evidence=(call_evidence(cfg, "no bnb_4bit_compute_dtype (default float32)"),) + setup.amp.evidence,
                    fix=Fix(f"bnb_4bit_compute_dtype={target}", applicability=Applicability.SAFE,
                            edits=present(set_kwarg(cfg, "bnb_4bit_compute_dtype", target))))


@rule(
    "PD403", "kbit-gradient-checkpointing-no-input-grads", severity="error", phase="first-step",
    summary="Reentrant gradient checkpointing over a frozen (k-bit) base whose inputs don't require grad.",
    what="A quantized base wrapped with `get_peft_model` without `prepare_model_for_kbit_training` or "
         "`enable_input_require_grads()`, then trained with gradient checkpointing in its reentrant form (the "
         "transformers <= 4.57 default). TRL's SFTTrainer with `peft_config` prepares the model itself.",
    why="Reentrant checkpointing only produces a graph when a block's inputs require grad; frozen embeddings give "
        "inputs that don't, so the loss has no grad_fn. transformers 5 enables input grads itself.",
    error="RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn",
    fix="`prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)` before `get_peft_model`, or "
        "`model.enable_input_require_grads()`, or `gradient_checkpointing_kwargs={\"use_reentrant\": False}`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: prepares what the training needs.",
    fires=[Example(qlora(prep=False, args=", gradient_checkpointing=True"), versions={"transformers": "4.57.1"})],
    silent=[Example(qlora(prep=True, args=", gradient_checkpointing=True"), versions={"transformers": "4.57.1"}),
            Example(qlora(prep=False, args=", gradient_checkpointing=True")),
            Example(qlora(prep=False, args=", gradient_checkpointing=True, gradient_checkpointing_kwargs="
                                           "{'use_reentrant': False}"), versions={"transformers": "4.57.1"})],
)
def kbit_gradient_checkpointing_no_input_grads(script: ScriptFacts, setup: Setup, machine: MachineFacts,
                                               stack: StackFacts):

    if not setup.peft.value or setup.peft.call is None or setup.peft.call.kind != "get_peft_model":
        return
    if at_least(stack, "transformers", "5.0") or script.of("prepare_kbit", "input_grads"):
        return
    gc = setup.placement.checkpointing
    on, reentrant, ev = gc.on, gc.reentrant, gc.evidence
    if not on or not reentrant:
        return
    base = "a k-bit base" if setup.quantized.value else "a frozen base"
    wrap = setup.peft.call
    yield Draft(f"{base} gets LoRA adapters without prepare_model_for_kbit_training / enable_input_require_grads, "
                f"and reentrant gradient checkpointing then finds no input that requires grad",
                evidence=(call_evidence(wrap, "adapters on a frozen base"),) + ev,
                fix=Fix("model = prepare_model_for_kbit_training(model) before get_peft_model", applicability=Applicability.SAFE,
                        edits=(Edit("insert_before", wrap.location.path, wrap.location.line,
                                    new="model = prepare_model_for_kbit_training(model)"),)))


@rule(
    "PD404", "quantized-model-without-adapters", severity="error", phase="wrap",
    summary="Training a 4/8-bit model with no trainable adapters attached.",
    what="Trainer/SFTTrainer given a bitsandbytes-quantized model without `get_peft_model` / `peft_config` (or after "
         "`merge_and_unload()`).",
    why="Quantized weights cannot be trained; transformers refuses a purely quantized model.",
    error="ValueError: You cannot perform fine-tuning on purely quantized models. Please attach trainable adapters on "
          "top of the quantized model to correctly perform fine-tuning.",
    fix="Attach adapters (`get_peft_model(model, LoraConfig(...))` or SFTTrainer `peft_config=`), or load without "
        "quantization.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    fires=[Example(qlora(lora=False)),
           Example(_ADAPTERS_ON_SOME_PATHS, note="a warning: adapters on the if and elif branches only, training on "
                                                 "every path"),
           Example(qlora().replace(_LORA, _LORA.replace("model = ", "peft_model = ", 1)),
                   note="the adapters are bound to peft_model; the Trainer is given the quantized base")],
    silent=[Example(qlora()),
            Example(qlora().replace(_LORA, _LORA.replace("model = ", "peft_model = ", 1)).replace(
                "Trainer(model=model", "Trainer(model=peft_model")),
            Example(_ADAPTERS_ON_SOME_PATHS.replace("    if method == 'a':\n", "    if method == 'a':\n"
                                                    "        model = get_peft_model(model, LoraConfig(r=8))\n"
                                                    "        Trainer(model=model, args=TrainingArguments('o')).train()\n"
                                                    "    if False:\n"),
                    note="training only on the branch that attaches adapters")],
)
def quantized_model_without_adapters(script: ScriptFacts, setup: Setup):
    if setup.style != "trainer" or setup.quantized.value not in ("4bit", "8bit"):
        return
    wrapper = setup.peft.call if setup.peft.value else None
    if wrapper is not None and wrapper.kind == "get_peft_model" and setup.followed and wrapper not in setup.chain \
            and wrapper.target and wrapper.target not in setup.model_names:
        # `peft_model = get_peft_model(model, cfg)`, then `Trainer(model=model)`: the adapters are in `model`'s
        # modules, but the Trainer is given the quantized base, not a PeftModel, and refuses it
        yield Draft(f"the model is {setup.quantized.value}-quantized and the Trainer is given it without its PeftModel "
                    f"wrapper: get_peft_model's result is {wrapper.target}, not what the Trainer trains",
                    evidence=setup.quantized.evidence + (call_evidence(wrapper, f"adapters: {wrapper.target}"),
                                                         call_evidence(setup.trainer, "given the quantized base")),
                    fix=Fix(f"give the Trainer {wrapper.target} (model={wrapper.target})",
                            applicability=Applicability.UNSAFE))
        return
    if setup.peft.value:
        return
    attached = [c for c in script.of("get_peft_model") if c.branches and
                (c.target in setup.model_names or not c.target)]
    trained_on = {(br.line, br.taken) for br in setup.trainer.branches}
    if any((c.branches[-1].line, c.branches[-1].taken) in trained_on for c in attached):
        return  # training happens only on a path that attached adapters
    if attached:  # some paths attach adapters: the others are the finding, at most a warning
        where = "; ".join(c.branches[-1].describe() for c in attached[:3])
        yield Draft(f"the model is {setup.quantized.value}-quantized and adapters are attached only when {where}: "
                    f"on any other path that reaches training it is trained as it is",
                    severity="warning",
                    evidence=setup.quantized.evidence + tuple(call_evidence(c, "adapters on this branch only")
                                                              for c in attached[:3]),
                    fix=Fix("attach adapters on every path that trains (or train only where they are attached)",
                            applicability=Applicability.UNSAFE))
        return
    yield Draft(f"the model is {setup.quantized.value}-quantized and no adapters are attached before training",
                evidence=setup.quantized.evidence + (call_evidence(setup.trainer, "trained as it is"),),
                fix=Fix("model = get_peft_model(model, LoraConfig(...)) before the Trainer (or peft_config=)",
                        applicability=Applicability.UNSAFE))


@rule(
    "PD405", "int8-fp16-scalar-type-mismatch", severity="error", phase="first-step",
    summary="8-bit LoRA with fp16=True on 2023-era peft/bitsandbytes: a Half/Float mismatch in backward.",
    what="`load_in_8bit` + `prepare_model_for_int8_training` + `fp16=True` with peft <= 0.4 or bitsandbytes <= 0.39.",
    why="Old bitsandbytes' MatMul8bitLt.backward multiplied fp16 gradients with fp32 state.",
    error="RuntimeError: expected scalar type Half but found Float",
    fix="Upgrade peft and bitsandbytes; or drop fp16=True for int8 LoRA.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    fires=[Example(qlora().replace("load_in_4bit=True, bnb_4bit_quant_type='nf4'", "load_in_8bit=True")
                   .replace("bf16=True", "fp16=True"), versions={"bitsandbytes": "0.38.1", "peft": "0.3.0"})],
    silent=[Example(qlora().replace("load_in_4bit=True, bnb_4bit_quant_type='nf4'", "load_in_8bit=True")
                    .replace("bf16=True", "fp16=True"))],
)
def int8_fp16_scalar_type_mismatch(setup: Setup, stack: StackFacts):
    if setup.quantized.value != "8bit" or setup.amp.value != "fp16":
        return
    old_peft = not at_least(stack, "peft", "0.5")
    old_bnb = not at_least(stack, "bitsandbytes", "0.40")
    if not (old_peft or old_bnb):
        return
    versions = ", ".join(stack.get(n).describe() for n in ("peft", "bitsandbytes"))
    yield Draft(f"8-bit training with fp16=True on {versions}: the old int8 backward mixes Half and Float",
                evidence=setup.quantized.evidence + setup.amp.evidence,
                fix=Fix("pip install -U peft bitsandbytes", applicability=Applicability.UNSAFE, commands=("pip install -U peft bitsandbytes",)))


# The first transformers release that deprecates `load_in_4bit=`/`load_in_8bit=` and refuses them next to a
# `quantization_config` (PR #26610, read in the 4.37.2 and 4.38.0 wheels' modeling_utils.py).
LOAD_IN_KWARGS_REFUSED_WITH_CONFIG = "4.38.0"


@rule(
    "PD406", "bnb-load-in-kwargs-deprecated", severity="warning", escalates_to="error", phase="load",
    summary="`from_pretrained(load_in_4bit=/load_in_8bit=)`: removed in transformers 5, deprecated before.",
    what="The legacy `load_in_4bit=`/`load_in_8bit=` keywords of `from_pretrained`, alone or together with "
         "`quantization_config=`.",
    why="transformers 5 removed them (the model class receives an unknown keyword; read from each release's "
        "from_pretrained, the signatures keyword-not-accepted, PD217, judges every other keyword with); from 4.38.0 "
        "to 4.57 they are deprecated and refused next to a `quantization_config`. Before 4.38 both were accepted (the config won) and "
        "the keywords were the documented API. Boundary: the refusal and the deprecation warning arrive together "
        "in 4.38.0 with the HfQuantizer refactor (huggingface/transformers PR #26610); 4.37.2's modeling_utils.py "
        "refuses only other BitsAndBytesConfig keywords next to a config, 4.38.0's raises \"You can't pass "
        "`load_in_4bit`or `load_in_8bit` as a kwarg when passing `quantization_config`\" (read in both released "
        "wheels; users report it from 4.38.2, hiyouga/LlamaFactory#4157). Unsloth's "
        "`FastLanguageModel.from_pretrained(load_in_4bit=True)` is Unsloth's own API and is not judged here.",
    error="TypeError: LlamaForCausalLM.__init__() got an unexpected keyword argument 'load_in_4bit'",
    fix="Pass only `quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...)`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same quantization, in the supported form.",
    log=LogSignature(patterns=(r"unexpected keyword argument 'load_in_(4|8)bit'",
                           r"load_in_4bit` and `load_in_8bit` arguments are deprecated")),
    fires=[Example(_HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', load_in_4bit=True)\n"),
           Example(_HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', load_in_8bit=True)\n",
                   versions={"transformers": "4.44.0"}),
           Example(_HEAD + "q = BitsAndBytesConfig(load_in_4bit=True)\n"
                   "m = AutoModelForCausalLM.from_pretrained('gpt2', load_in_4bit=True, quantization_config=q)\n",
                   versions={"transformers": "4.38.0"}, note="refused next to quantization_config from 4.38.0")],
    silent=[Example(_HEAD + "q = BitsAndBytesConfig(load_in_4bit=True)\n"
                    "m = AutoModelForCausalLM.from_pretrained('gpt2', quantization_config=q)\n"),
            Example(_HEAD + "q = BitsAndBytesConfig(load_in_4bit=True)\n"
                    "m = AutoModelForCausalLM.from_pretrained('gpt2', load_in_4bit=True, quantization_config=q)\n",
                    versions={"transformers": "4.31.0"}, note="accepted before 4.38: the config wins"),
            Example("from unsloth import FastLanguageModel\n"
                    "m, tok = FastLanguageModel.from_pretrained(model_name='unsloth/llama-3-8b', load_in_4bit=True)\n",
                    note="Unsloth's own from_pretrained, where load_in_4bit= is the documented keyword")],
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
            error = (f"TypeError: {cls}.__init__() got an unexpected keyword argument '{flag}'" if removed else
                     "ValueError: You can't pass `load_in_4bit`or `load_in_8bit` as a kwarg when passing "
                     "`quantization_config` argument at the same time." if both else
                     "The `load_in_4bit` and `load_in_8bit` arguments are deprecated and will be removed in the future "
                     "versions. Please, pass a `BitsAndBytesConfig` object in `quantization_config` argument instead.")
            yield Draft(f"from_pretrained({flag}=...) " + (f"no longer exists on transformers {version.version}"
                                                          if removed else "is deprecated")
                        + (" (and is refused next to quantization_config)" if both and not removed else ""),
                        evidence=(evidence_of(load.kwargs[flag], f"{flag}=", load),),
                        severity="error" if removed or both else "", error=error,
                        fix=Fix(f"quantization_config=BitsAndBytesConfig({flag}=True)", applicability=Applicability.UNSAFE if both else Applicability.SAFE,
                                edits=(Edit("remove_kwarg", load.location.path, load.location.line,
                                            call="from_pretrained", name=flag, library="transformers"),) + (
                                    () if both else (Edit("set_kwarg", load.location.path, load.location.line,
                                                          call="from_pretrained", name="quantization_config",
                                                          new=f"BitsAndBytesConfig({flag}=True)",
                                                          library="transformers"),
                                                     Edit("add_import", load.location.path, 1,
                                                          new="from transformers import BitsAndBytesConfig")))),
                        confidence="likely" if version.source == VersionSource.ASSUMED else "certain")
            return
