"""PD401 quantized-model-cast-or-move: Casting a bitsandbytes 4/8-bit model to another dtype (or moving it, on old
stacks)."""

from __future__ import annotations

from ...derive import Setup, call_evidence, dtype_of_cast
from ...knowledge.versions import at_least
from ...model.facts import ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, LogSignature, rule
from ._quantization import qlora

_DEEPSPEED = (
    "import deepspeed\nimport torch\nfrom peft import LoraConfig, get_peft_model\n"
    "from transformers import AutoModelForCausalLM, BitsAndBytesConfig\n"
    "bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float16)\n"
    "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', quantization_config=bnb)\n"
    "{wrap}"
    "config = {{'train_micro_batch_size_per_gpu': 4, 'fp16': {{'enabled': True}}}}\n"
    "engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)\n"
)


@rule(
    "PD401",
    "quantized-model-cast-or-move",
    severity="error",
    phase="load",
    summary="Casting a bitsandbytes 4/8-bit model to another dtype (or moving it, on old stacks).",
    what="`.half()`, `.float()`, `.bfloat16()`, `.to(torch.float16)` on a model loaded with "
    '`BitsAndBytesConfig(load_in_4bit/8bit=True)`; `.to("cuda")`/`.cuda()` too with bitsandbytes < 0.43.2 '
    "(4-bit) or < 0.48 (8-bit).",
    why="The quantized weights are packed integers with their own compute dtype; transformers refuses to cast them.",
    error="ValueError: You cannot cast a bitsandbytes model in a new `dtype`. Make sure to load the model using "
    "`from_pretrained` using the desired `dtype` by passing the correct `dtype` argument.",
    fix="Don't cast a quantized model: choose the non-quantized modules' dtype with `dtype=` at load time and the "
    "compute dtype with `bnb_4bit_compute_dtype`; place it with `device_map`.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    log=LogSignature(
        patterns=(
            r"`\.to` is not supported for `4-bit` or `8-bit` bitsandbytes models",
            r"`\.half\(\)` is not supported for quantized model",
            r"`\.float\(\)` is not supported for quantized",
        )
    ),
    fires=[
        Example(qlora(middle="model = model.half()\n")),
        Example(qlora(middle="model.to(torch.bfloat16)\n")),
        Example(_DEEPSPEED.format(wrap=""), note="DeepSpeed's fp16 engine casts the module with .half()"),
    ],
    silent=[
        Example(qlora()),
        Example(qlora(middle="model = model.to('cuda')\n"), note="moving is allowed on current bitsandbytes"),
        Example(
            _DEEPSPEED.format(wrap="model = get_peft_model(model, LoraConfig(r=8))\n"),
            note="the PeftModel is cast by torch, tensor by tensor",
        ),
    ],
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
            error = (
                f"ValueError: `.{method}()` is not supported for quantized model. Please use the model as it "
                f"is, since the model has already been casted to the correct `dtype`."
                if method in ("half", "float")
                else ""
            )
            yield Draft(
                f"the model is {bits} bitsandbytes-quantized and then cast with .{method}(...)",
                evidence=setup.quantized.evidence + (call_evidence(c, f".{method}() on a quantized model"),),
                error=error,
                fix=Fix(
                    "remove the cast; pick dtype= / bnb_4bit_compute_dtype at load time",
                    applicability=Applicability.UNSAFE,
                ),
            )
        elif method in ("cuda", "to"):
            old_4 = bits == "4bit" and not at_least(stack, "bitsandbytes", "0.43.2")
            old_8 = bits == "8bit" and not at_least(stack, "bitsandbytes", "0.48")
            if old_4 or old_8:
                bnb = stack.get("bitsandbytes")
                yield Draft(
                    f"moving a {bits} model with .{method}() needs a newer bitsandbytes "
                    f"(have {bnb.version}, {bnb.source})",
                    evidence=(call_evidence(c, "moved after quantized loading"),),
                    error="ValueError: Calling `to()` is not supported for `4-bit` quantized models with the "
                    "installed version of bitsandbytes."
                    if old_4
                    else "ValueError: You need to install `pip install bitsandbytes>=0.48.0` if you want to "
                    "move a 8-bit model across devices using to().",
                    fix=Fix("place it with device_map at load time instead", applicability=Applicability.UNSAFE),
                )
    yield from _deepspeed_casts(script, setup, bits)


def _deepspeed_casts(script: ScriptFacts, setup: Setup, bits: str):
    """`deepspeed.initialize(model=quantized_model, config={"fp16": {"enabled": True}})`: the engine casts the
    module it is given with `.half()` (DeepSpeed 0.18.0 runtime/engine.py:1306-1309, `_configure_distributed_model`;
    bf16 calls `.bfloat16()`, which transformers leaves to torch), and transformers refuses `.half()` on a quantized
    model. A PeftModel given instead is cast by torch, tensor by tensor."""
    by_key = {c.key: c for c in script.calls}
    for c in script.of("deepspeed_initialize"):
        given = by_key.get(c.refs.get("model", ""))
        if given is None or setup.model_load is None or given.key != setup.model_load.key:
            continue
        written = c.deepspeed_config()
        config = written.value if written.state == "known" else None
        if isinstance(config, str):
            config = script.deepspeed_configs.get(config)
        fp16 = config.get("fp16") if isinstance(config, dict) else None
        if not (isinstance(fp16, dict) and fp16.get("enabled") is True):
            continue
        yield Draft(
            f"the model is {bits} bitsandbytes-quantized and deepspeed.initialize() with fp16 enabled casts the "
            "module it is given with .half()",
            evidence=setup.quantized.evidence + (call_evidence(c, "DeepSpeed fp16: module.half()"),),
            error="ValueError: `.half()` is not supported for quantized model. Please use the model as it is, since "
            "the model has already been casted to the correct `dtype`.",
            fix=Fix(
                "give DeepSpeed the PeftModel (get_peft_model(model, LoraConfig(...))) rather than the quantized base",
                applicability=Applicability.UNSAFE,
            ),
        )
