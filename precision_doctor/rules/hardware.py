"""What the GPU can do: bf16, tf32, fp8, FlashAttention, fp16 AMP without a GPU (PD101-PD107)."""

from __future__ import annotations

from ..knowledge import dtypes
from ..derive import Setup, call_evidence, decide, evidence_of
from .registry import Example, LogSignature, rule
from ..model.facts import KNOWN, MachineFacts, Predicate, ScriptFacts, StackFacts, Value
from ..model.findings import Applicability, Draft, Edit, Evidence, Fix
from ..probes.stack import at_least
from ._common import (gpu_phrase, keep_shared_source, only_on_some_paths, path_severity, present, set_kwarg, setup_entry,
                      weights_source_edit)

# From torch 2.3 `torch.cuda.is_bf16_supported()` answers True on pre-Ampere GPUs (including_emulation=True), and
# transformers' `is_torch_bf16_gpu_available` and accelerate's bf16 check gate on it: nothing refuses bf16 there
# (FAILURES.md "Version facts", checked against torch 2.13 / transformers 5.23 / accelerate 1.15). Before it, they
# refuse `bf16=True` / `mixed_precision="bf16"` at start-up.
TORCH_STOPS_REFUSING_BF16 = "2.3"
# Scripts that run on another device than a CUDA GPU: their bf16 is not the GPU's question.
_OTHER_DEVICE_IMPORTS = ("torch_xla", "intel_extension_for_pytorch")


def _other_device(script: ScriptFacts) -> str:
    """The non-CUDA device a script is written for, from its imports ("" for none)."""
    for name in script.imports:
        if name.split(".", 1)[0] in _OTHER_DEVICE_IMPORTS:
            return "a TPU (torch_xla)" if name.startswith("torch_xla") else "an Intel CPU (intel_extension_for_pytorch)"
    return ""


def _cpu_autocast(c) -> bool:
    first = c.args[0] if c.args else c.kwarg("device_type")
    return c.callee.startswith("torch.cpu.amp") or first.is_("cpu")

_HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"


_FP8_LOOP = ("from accelerate import Accelerator\nimport torch\nacc = Accelerator(mixed_precision='fp8')\n"
             "model = torch.nn.Linear(8, 8)\nopt = torch.optim.AdamW(model.parameters())\n"
             "model, opt = acc.prepare(model, opt)\n")
_QLORA_LOAD = ("import torch\nfrom transformers import BitsAndBytesConfig, AutoModelForCausalLM\n"
               "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.{compute})\n"
               "m = AutoModelForCausalLM.from_pretrained('gpt2', quantization_config=q)\n")


_SFT = ("import torch\nfrom transformers import AutoModelForCausalLM\nfrom trl import SFTConfig, SFTTrainer\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
        "SFTTrainer(model=model, args=SFTConfig(output_dir='out'), train_dataset=None).train()\n")
_LOOP_CPU_BF16 = ("import torch\nmodel = torch.nn.Linear(8, 8)\nopt = torch.optim.AdamW(model.parameters())\n"
                  "with torch.cpu.amp.autocast(dtype=torch.bfloat16):\n    loss = model(torch.randn(2, 8)).sum()\n"
                  "loss.backward()\nopt.step()\n")


def _trainer(load: str, args: str) -> str:
    return (_HEAD + f"model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B'{load})\n"
            f"Trainer(model=model, args=TrainingArguments('out'{args})).train()\n")


def _pre_ampere(machine: MachineFacts) -> bool:
    return machine.known and bool(machine.gpus) and not machine.gpus[0].native_bf16


def _decided_by_guard(evidence: tuple[Evidence, ...]) -> bool:
    """Every request was chosen by a hardware guard (PD102's finding); a library default alone is a request."""
    chosen = [e for e in evidence if e.origin != "default"]
    return bool(chosen) and all(e.origin == "profile" for e in chosen)


def bf16_requests(setup: Setup, machine: MachineFacts, stack: StackFacts) -> tuple[Evidence, ...]:
    """Every place the script asks for bf16: mixed precision, weights, autocast."""
    found: list[Evidence] = []
    if setup.amp.value == "bf16":
        found.extend(setup.amp.evidence)
    if setup.weights.value == dtypes.BFLOAT16:
        found.extend(setup.weights.evidence)
    for a in setup.autocasts:
        if _cpu_autocast(a):
            continue
        v = decide(a.kwarg("dtype"), machine, stack)
        if v.state == KNOWN and dtypes.from_string(v.value) == dtypes.BFLOAT16:
            found.append(evidence_of(v, "autocast dtype bfloat16", a))
    return tuple(found)


@rule(
    "PD101", "bf16-on-unsupported-gpu", severity="warning", escalates_to="error", phase="first-step",
    summary="bf16 requested on a GPU without native bf16 (compute capability < 8.0: V100, T4, Titan RTX, RTX 20xx).",
    what="`bf16=True`, `mixed_precision=\"bf16\"`, `dtype=torch.bfloat16` or a bf16 autocast on a target GPU older "
         "than Ampere.",
    why="bf16 needs Ampere tensor cores. Older stacks refuse it; torch >= 2.3 emulates it instead (every matmul in "
        "fp32, no bf16 cuBLAS or flash kernels): very slow, and fused kernels fail later. Severity: an error where "
        "the job dies at start-up — bf16 mixed precision (`bf16=True`, `mixed_precision=\"bf16\"`) on torch < 2.3, "
        "where transformers and accelerate gate on `torch.cuda.is_bf16_supported()`, then False on sm_70/75; a "
        "warning on torch >= 2.3, where that check emulates and nothing in torch 2.13 / transformers 5.23 / "
        "accelerate 1.15 refuses bf16 (FAILURES.md, Version facts), and on a path only some runs take. Scripts "
        "written for a TPU (torch_xla) or an Intel CPU (ipex, CPU autocast) are not judged against the GPU.",
    error="on torch >= 2.3: no refusal, bf16 runs emulated and kernels fail later with `... not implemented for "
          "'BFloat16'`; older transformers: ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, "
          "using Ampere GPU with cuda>=11.0",
    fix="On pre-Ampere GPUs use fp16 done right: fp32 weights with fp16=True (autocast + GradScaler); fp32 for "
        "models pre-trained in bf16 that overflow in fp16 (T5, Gemma). Never fp16 weights without loss scaling.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: fp32 weights take twice the memory of bf16.",
    needs=("machine",),
    log=LogSignature(patterns=(r"Your setup doesn't support bf16/gpu",
                           r"bf16 mixed precision requires PyTorch >= 1\.10 and a supported device",
                           r"Current CUDA Device does not support bfloat16",
                           r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0")),
    fires=[Example(_trainer(", dtype=torch.float32", ", bf16=True"), target="v100"),
           Example(_trainer(", dtype=torch.bfloat16", ", bf16=True"), target="titan-rtx"),
           Example(_trainer(", dtype=torch.float32", ", bf16=True"), target="t4", versions={"torch": "2.2.2"},
                   note="an error: torch < 2.3 refuses bf16 on sm_75"),
           Example(_SFT, target="t4", note="SFTConfig turns bf16 on when fp16 is off: a default is a request")],
    silent=[Example(_trainer(", dtype=torch.float32", ", bf16=True"), target="a100"),
            Example(_trainer(", dtype=torch.float32", ", fp16=True"), target="v100"),
            Example("import torch_xla.core.xla_model as xm\n" + _trainer(", dtype=torch.float32", ", bf16=True"),
                    target="t4", note="a TPU script: its bf16 runs on the TPU"),
            Example(_LOOP_CPU_BF16, target="t4", note="bf16 autocast on the CPU"),
            Example(_SFT.replace("SFTConfig(output_dir='out')", "SFTConfig(output_dir='out', fp16=True)"), target="t4",
                    note="fp16 on: TRL leaves bf16 off")],
)
def bf16_on_unsupported_gpu(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts):
    if not setup.trains or not _pre_ampere(machine) or _other_device(script):
        return
    asks = bf16_requests(setup, machine, stack)
    if not asks or _decided_by_guard(asks):  # a bf16 chosen by an emulating guard is PD102's finding
        return
    edits: list[Edit] = []
    if setup.amp.value == "bf16" and setup.training_args is not None:
        edits += present(set_kwarg(setup.training_args, "bf16", "False"), set_kwarg(setup.training_args, "fp16", "True"))
    if setup.weights.value == dtypes.BFLOAT16:
        edit = weights_source_edit(setup, "torch.float32")
        if edit:
            edits.append(edit)
    g = machine.gpus[0]
    torch = stack.get("torch")
    refused = setup.amp.value == "bf16" and setup.style in ("trainer", "accelerate") and \
        not at_least(stack, "torch", TORCH_STOPS_REFUSING_BF16)
    bug_calls = (setup.amp.call if setup.amp.value == "bf16" else None,
                 setup.weights.call if setup.weights.value == dtypes.BFLOAT16 else None) + setup.casts
    path = only_on_some_paths(bug_calls, setup_entry(setup))
    outcome = (f"torch {torch.version} ({torch.source}) refuses bf16 mixed precision there" if refused else
               f"on torch {torch.version} ({torch.source}) it runs emulated, slowly, and kernels without a bf16 "
               f"version fail")
    yield Draft(f"bf16 is requested but GPU 0 ({gpu_phrase(machine)}) has no native bf16: {outcome}"
                + (f"; only when {path}" if path else ""),
                severity=path_severity("error" if refused else "warning", path),
                evidence=asks + (Evidence(None, g.name, f"compute capability {g.capability[0]}.{g.capability[1]} "
                                                        f"< 8.0", "profile"),),
                fix=keep_shared_source(Fix("use fp32 weights with fp16 mixed precision (fp16=True: autocast + GradScaler)",
                                           applicability=Applicability.UNSAFE, edits=tuple(edits),
                                           notes=("Not fp16 weights without loss scaling: that underflows (PD204).",)),
                                       setup, script))


def _emulating_guards(v: Value) -> list[Predicate]:
    out: list[Predicate] = []
    stack = [v]
    while stack:
        cur = stack.pop()
        if cur is None:
            continue
        if cur.predicate is not None:
            preds = [cur.predicate]
            while preds:
                p = preds.pop()
                if p.kind == "bf16_supported" and p.emulation:
                    out.append(p)
                preds.extend(p.parts)
        stack.extend([cur.if_true, cur.if_false])
    return out


@rule(
    "PD102", "emulated-bf16-guard", severity="warning", phase="first-step",
    summary="A `torch.cuda.is_bf16_supported()` guard answers True on pre-Ampere GPUs and picks emulated bf16.",
    what="A choice made with `torch.cuda.is_bf16_supported()` (or transformers' `is_torch_bf16_gpu_available()` / "
         "accelerate's `is_bf16_available()`, which call it), on a target GPU older than Ampere.",
    why="Since torch 2.3 `is_bf16_supported()` defaults to `including_emulation=True`: it only checks that a bf16 "
        "tensor can be created, which works on T4/V100/Titan RTX, so the guard chooses bf16 there — emulated, slow, "
        "with kernel gaps. The usual \"bf16 if supported else fp16\" fix takes the wrong branch. A warning: the "
        "guard answers True only where nothing refuses bf16 (torch >= 2.3), so the job runs, slowly.",
    error="no refusal: bf16 runs emulated (slow), fused kernels fail with `... not implemented for 'BFloat16'`",
    fix="Ask the real question: `torch.cuda.is_bf16_supported(including_emulation=False)`, or "
        "`torch.cuda.get_device_capability()[0] >= 8`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the guard then answers what it was written to ask.",
    needs=("machine",),
    fires=[Example(_HEAD + "bf16 = torch.cuda.is_bf16_supported()\n"
                   "model = AutoModelForCausalLM.from_pretrained('gpt2', "
                   "dtype=torch.bfloat16 if bf16 else torch.float32)\n"
                   "Trainer(model=model, args=TrainingArguments('o', bf16=bf16, fp16=not bf16, "
                   "per_device_train_batch_size=4)).train()\n",
                   target="t4", note="bf16 where supported, decided by a guard")],
    silent=[Example(_HEAD + "bf16 = torch.cuda.is_bf16_supported(including_emulation=False)\n"
                    "model = AutoModelForCausalLM.from_pretrained('gpt2', "
                    "dtype=torch.bfloat16 if bf16 else torch.float32)\n"
                    "Trainer(model=model, args=TrainingArguments('o', bf16=bf16, fp16=not bf16, "
                    "per_device_train_batch_size=4)).train()\n",
                    target="t4"),
            Example(_HEAD + "bf16 = torch.cuda.is_bf16_supported()\n"
                    "model = AutoModelForCausalLM.from_pretrained('gpt2', "
                    "dtype=torch.bfloat16 if bf16 else torch.float32)\n"
                    "Trainer(model=model, args=TrainingArguments('o', bf16=bf16, fp16=not bf16, "
                    "per_device_train_batch_size=4)).train()\n",
                    target="a100")],
)
def emulated_bf16_guard(script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    if not _pre_ampere(machine) or not at_least(stack, "torch", "2.3"):
        return
    seen = set()
    for call in script.calls:
        for name, v in list(call.kwargs.items()) + [(str(i), a) for i, a in enumerate(call.args)]:
            for p in _emulating_guards(v):
                if (p.text, call.location.path) in seen:
                    continue
                seen.add((p.text, call.location.path))
                decided = decide(v, machine, stack)
                chosen = decided.value if decided.state == KNOWN else "the bf16 branch"
                yield Draft(f"{p.text} answers True on {gpu_phrase(machine)} (emulated bf16), so this guard picks "
                            f"{chosen!s}",
                            evidence=(evidence_of(v, f"{name}= chosen by {p.text}", call),),
                            fix=Fix("ask for native bf16: torch.cuda.is_bf16_supported(including_emulation=False)",
                                    applicability=Applicability.SAFE, edits=(Edit("replace_value", p.location.path, p.location.line,
                                                           old=p.text, new=_native(p.text),
                                                           column=p.location.column),) if p.location else ()))


def _native(text: str) -> str:
    if text.endswith("is_bf16_supported()"):
        return text[:-1] + "including_emulation=False)"
    return "torch.cuda.is_bf16_supported(including_emulation=False)"


@rule(
    "PD103", "tf32-on-unsupported-gpu", severity="error", phase="config",
    summary="`tf32=True` on a GPU older than Ampere, or without a GPU: TrainingArguments refuses it.",
    what="`TrainingArguments(tf32=True)` / `--tf32 True` on compute capability < 8.0 or a CPU-only machine.",
    why="TF32 is an Ampere tensor-core format; TrainingArguments validates it in `__post_init__`.",
    error="ValueError: --tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7",
    fix="`tf32=False` (or leave it unset) on pre-Ampere GPUs and CPUs.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: TF32 does not exist there.",
    needs=("machine",),
    fires=[Example(_trainer(", dtype=torch.float32", ", fp16=True, tf32=True"), target="t4",
                   fixed=_trainer(", dtype=torch.float32", ", fp16=True, tf32=False"))],
    silent=[Example(_trainer(", dtype=torch.float32", ", bf16=True, tf32=True"), target="a100")],
)
def tf32_on_unsupported_gpu(script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    if machine.gpus and machine.gpus[0].tf32:
        return
    for args in script.of("training_args"):
        v = decide(args.kwarg("tf32"), machine, stack)
        if v.is_(True):
            where = gpu_phrase(machine) or "a machine with no GPU"
            yield Draft(f"tf32=True on {where}: TF32 needs an Ampere or newer GPU",
                        evidence=(evidence_of(v, "tf32=True", args),),
                        fix=Fix("drop tf32=True", applicability=Applicability.SAFE, edits=present(set_kwarg(args, "tf32", "False"))))


@rule(
    "PD104", "fp8-unsupported", severity="error", phase="first-step",
    summary="FP8 requested on a GPU below compute capability 8.9 (Ada/Hopper).",
    what="`Accelerator(mixed_precision=\"fp8\")`, `accelerate launch --mixed_precision fp8` or "
         "`transformer_engine.pytorch.fp8_autocast(enabled=True)` on A100, V100, T4 or RTX 30xx.",
    why="FP8 tensor cores exist from compute capability 8.9. Transformer Engine asserts; current accelerate warns and "
        "silently trains in FP16 instead.",
    error="AssertionError: Device compute capability 8.9 or higher required for FP8 execution.",
    fix="Use bf16 on Ampere; run FP8 only on sm_89+/sm_90 with transformer-engine or torchao installed.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: changes the training precision.",
    needs=("machine",),
    log=LogSignature(patterns=(r"compute capability 8\.9 or higher required for FP8", r"requires `transformer_engine` or `MS-AMP`",
                           r"no FP8-compatible backend was installed")),
    fires=[Example(_FP8_LOOP, target="a100")],
    silent=[Example(_FP8_LOOP, target="h100")],
)
def fp8_unsupported(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts):
    if not machine.gpus or machine.gpus[0].fp8:
        return
    g = machine.gpus[0]
    cap = Evidence(None, g.name, f"compute capability {g.capability[0]}.{g.capability[1]} < 8.9", "profile")
    if setup.amp.value == "fp8":
        yield Draft(f"fp8 mixed precision on {gpu_phrase(machine)}: accelerate falls back to FP16 with a warning",
                    evidence=setup.amp.evidence + (cap,), severity="warning",
                    error="The current device has compute capability of (8, 0) which is insufficient for FP8 mixed "
                          "precision training (requires a GPU Hopper/Ada Lovelace or higher, compute capability of "
                          "8.9 or higher). Will use FP16 instead.",
                    fix=Fix("use mixed_precision='bf16' on this GPU", applicability=Applicability.UNSAFE,
                            edits=present(set_kwarg(setup.accelerator, "mixed_precision", "'bf16'"))
                            if setup.accelerator is not None else ()))
    for c in script.of("fp8_autocast"):
        if not decide(c.kwarg("enabled"), machine, stack).is_(False):
            yield Draft(f"fp8_autocast on {gpu_phrase(machine)}: Transformer Engine needs compute capability 8.9",
                        evidence=(call_evidence(c, "FP8 autocast"), cap),
                        fix=Fix("run FP8 only on Ada/Hopper; use bf16 autocast here", applicability=Applicability.UNSAFE))


@rule(
    "PD105", "half-precision-amp-on-cpu", severity="warning", escalates_to="error", phase="first-step",
    summary="fp16 mixed precision on a machine with no CUDA GPU: no scaler, no autocast, silently fp32.",
    what="`fp16=True`, `mixed_precision=\"fp16\"` or `torch.autocast(\"cuda\")` when the job runs on a machine "
         "with no visible CUDA GPU (a CPU node, a CI runner, an empty CUDA_VISIBLE_DEVICES).",
    why="On torch >= 2.3 / transformers >= 4.41 accelerate creates no GradScaler and no autocast for fp16 on CPU, and "
        "CUDA autocast disables itself: training runs in fp32 while the logs say fp16. Older stacks refused to start.",
    error="UserWarning: User provided device_type of 'cuda', but CUDA is not available. Disabling",
    fix="On CPU use bf16 autocast (`torch.autocast(\"cpu\", dtype=torch.bfloat16)`, Trainer `bf16=True, "
        "use_cpu=True`) or fp32.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: changes the training precision.",
    needs=("machine",),
    log=LogSignature(patterns=(r"can only be used on CUDA", r"User provided device_type of 'cuda', but CUDA is not available")),
    fires=[Example(_trainer(", dtype=torch.float32", ", fp16=True"), target="cpu")],
    silent=[Example(_trainer(", dtype=torch.float32", ", fp16=True"), target="a100"),
            Example(_trainer(", dtype=torch.float32", ", bf16=True, use_cpu=True"), target="cpu")],
)
def half_precision_amp_on_cpu(setup: Setup, machine: MachineFacts, stack: StackFacts):
    if machine.gpus or not setup.trains:
        return
    old_stack = not at_least(stack, "transformers", "4.41")
    if setup.amp.value == "fp16" and setup.amp_from_launch:  # TrainingArguments never sees it: nothing refuses
        yield Draft("fp16 mixed precision from the launch on a machine with no CUDA GPU: accelerate creates no "
                    "GradScaler and no autocast, so training silently runs in fp32", evidence=setup.amp.evidence,
                    error="no error: the run is fp32 while launched as fp16",
                    fix=Fix("drop --mixed_precision fp16 from the launch (or mixed_precision: fp16 from the accelerate "
                            "config); on CPU use bf16=True with use_cpu=True", applicability=Applicability.UNSAFE))
    elif setup.amp.value == "fp16":
        yield Draft("fp16 mixed precision on a machine with no CUDA GPU: no GradScaler and no autocast are created, "
                    "so training silently runs in fp32", evidence=setup.amp.evidence,
                    severity="" if not old_stack else "",
                    error=("ValueError: FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half "
                           "precision evaluation (`--fp16_full_eval`) can only be used on CUDA devices.")
                    if old_stack else "no error: the run is fp32 while configured as fp16 (transformers < 4.41 "
                                      "refused to start)",
                    fix=Fix("on CPU use bf16=True with use_cpu=True, or drop fp16", applicability=Applicability.UNSAFE,
                            edits=present(set_kwarg(setup.training_args, "fp16", "False"))
                            if setup.training_args is not None else ()))
    for a in setup.autocasts:
        device = a.args[0] if a.args else a.kwarg("device_type")
        if a.callee.startswith("torch.cuda.amp") or (device.state == KNOWN and device.value == "cuda"):
            yield Draft("CUDA autocast on a machine with no CUDA GPU disables itself: the region runs in fp32",
                        evidence=(call_evidence(a, "autocast('cuda')"),),
                        fix=Fix("use torch.autocast('cpu', dtype=torch.bfloat16) on CPU", applicability=Applicability.UNSAFE))


@rule(
    "PD106", "flash-attn-on-pre-ampere", severity="error", phase="first-step",
    summary="FlashAttention-2 on a GPU older than Ampere.",
    what="`attn_implementation=\"flash_attention_2\"` with a target GPU of compute capability < 8.0.",
    why="FlashAttention-2 kernels are built for Ampere and newer only (Turing and Volta are not supported).",
    error="RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
    fix="Use `attn_implementation=\"sdpa\"` (or `\"eager\"`) on V100/T4/Titan RTX/RTX 20xx.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same attention, another kernel.",
    needs=("machine",),
    log=LogSignature(patterns=(r"FlashAttention only supports Ampere GPUs or newer",)),
    fires=[Example(_trainer(", dtype=torch.float16, attn_implementation='flash_attention_2'", ", fp16=True"),
                   target="t4")],
    silent=[Example(_trainer(", dtype=torch.float32, attn_implementation='sdpa'", ", fp16=True, per_device_train_batch_size=4")
                    .replace("meta-llama/Llama-3.2-1B", "HuggingFaceTB/SmolLM2-135M"), target="t4",
                    note="a model small enough for full fp32 training on a T4"),
            Example(_trainer(", dtype=torch.bfloat16, attn_implementation='flash_attention_2'", ", bf16=True"),
                    target="a10g")],
)
def flash_attn_on_pre_ampere(script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    if not _pre_ampere(machine):
        return
    for load in script.of("model_load"):
        v = decide(load.kwarg("attn_implementation"), machine, stack)
        if v.state == KNOWN and v.value in ("flash_attention_2", "flash_attention_3"):
            yield Draft(f"{v.value} on {gpu_phrase(machine)}: FlashAttention needs an Ampere or newer GPU",
                        evidence=(evidence_of(v, v.value, load),),
                        fix=Fix("use attn_implementation='sdpa'", applicability=Applicability.SAFE,
                                edits=present(set_kwarg(load, "attn_implementation", "'sdpa'"))))


@rule(
    "PD107", "bnb-bf16-compute-on-pre-ampere", severity="warning", phase="first-step",
    summary="QLoRA with `bnb_4bit_compute_dtype=torch.bfloat16` on a GPU without native bf16.",
    what="`BitsAndBytesConfig(bnb_4bit_compute_dtype=torch.bfloat16)` copied from an Ampere recipe onto a "
         "T4 / V100 / Titan RTX.",
    why="Every 4-bit matmul dequantises to the compute dtype; bf16 there is emulated (very slow), and paired with "
        "bf16=True it hits PD101. A warning: the compute dtype alone is refused by no release (the refusal of "
        "`bf16=True` on torch < 2.3 is PD101's error).",
    error="no refusal on current stacks: emulated bf16 matmuls, or the bf16 errors of PD101 with bf16=True",
    fix="`bnb_4bit_compute_dtype=torch.float16` with fp32 LoRA adapters and `fp16=True` (the usual T4 recipe).",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the compute dtype is not stored in the weights.",
    needs=("machine",),
    fires=[Example(_QLORA_LOAD.format(compute="bfloat16"), target="t4")],
    silent=[Example(_QLORA_LOAD.format(compute="float16"), target="t4")],
)
def bnb_bf16_compute_on_pre_ampere(script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    if not _pre_ampere(machine):
        return
    for cfg in script.of("bnb_config"):
        v = decide(cfg.kwarg("bnb_4bit_compute_dtype"), machine, stack)
        if v.state == KNOWN and dtypes.from_string(v.value) == dtypes.BFLOAT16:
            yield Draft(f"bnb_4bit_compute_dtype=bfloat16 on {gpu_phrase(machine)}: every 4-bit matmul runs in "
                        f"emulated bf16", evidence=(evidence_of(v, "4-bit compute dtype bfloat16", cfg),),
                        fix=Fix("bnb_4bit_compute_dtype=torch.float16", applicability=Applicability.SAFE,
                                edits=present(set_kwarg(cfg, "bnb_4bit_compute_dtype", "torch.float16"))))
