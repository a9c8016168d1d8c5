"""PD101 bf16-on-unsupported-gpu: bf16 requested on a GPU without native bf16 (compute capability < 8.0: V100, T4,
Titan RTX, RTX 20xx)."""

from __future__ import annotations

from ...derive import Setup, decide, evidence_of
from ...derive.setup import other_device
from ...knowledge import bf16_checks, dtypes
from ...model.facts import KNOWN, MachineFacts, ScriptFacts, StackFacts
from ...model.findings import Applicability, Draft, Edit, Evidence, Fix
from .._common import (
    gpu_phrase,
    keep_shared_source,
    only_on_some_paths,
    path_severity,
    present,
    set_kwarg,
    setup_entry,
    weights_source_edit,
)
from ..registry import Example, LogSignature, rule
from ._hardware import _trainer, pre_ampere

# Whether the job's libraries refuse bf16 at start-up there is knowledge/bf16_checks.refusal: nothing refuses it
# with torch >= 2.3 and transformers >= 4.35 (FAILURES.md "Version facts").


def _cpu_autocast(c) -> bool:
    first = c.args[0] if c.args else c.kwarg("device_type")
    return c.callee.startswith("torch.cpu.amp") or first.is_("cpu")


_SFT = (
    "import torch\nfrom transformers import AutoModelForCausalLM\nfrom trl import SFTConfig, SFTTrainer\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
    "SFTTrainer(model=model, args=SFTConfig(output_dir='out'), train_dataset=None).train()\n"
)


_LOOP_CPU_BF16 = (
    "import torch\nmodel = torch.nn.Linear(8, 8)\nopt = torch.optim.AdamW(model.parameters())\n"
    "with torch.cpu.amp.autocast(dtype=torch.bfloat16):\n    loss = model(torch.randn(2, 8)).sum()\n"
    "loss.backward()\nopt.step()\n"
)


def _decided_by_guard(evidence: tuple[Evidence, ...]) -> bool:
    """Every request was chosen by a hardware guard that counts emulation (PD102's finding: a script's guard, or a
    recipe tool's `bf16: auto`); a library default alone is a request."""
    chosen = [e for e in evidence if e.origin != "default"]
    return bool(chosen) and all(e.origin == "profile" or bf16_checks.EMULATED in e.note for e in chosen)


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
    "PD101",
    "bf16-on-unsupported-gpu",
    severity="warning",
    escalates_to="error",
    phase="first-step",
    summary="bf16 requested on a GPU without native bf16 (compute capability < 8.0: V100, T4, Titan RTX, RTX 20xx).",
    what='`bf16=True`, `mixed_precision="bf16"`, `dtype=torch.bfloat16` or a bf16 autocast on a target GPU older '
    "than Ampere.",
    why="bf16 needs Ampere tensor cores. Older stacks refuse it; torch >= 2.3 emulates it instead (every matmul in "
    "fp32, no bf16 cuBLAS or flash kernels): very slow, and fused kernels fail later. Severity: an error where "
    'the job dies at start-up — bf16 mixed precision (`bf16=True`, `mixed_precision="bf16"`) on torch < 2.3, '
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
    log=LogSignature(
        patterns=(
            r"Your setup doesn't support bf16/gpu",
            r"bf16 mixed precision requires PyTorch >= 1\.10 and a supported device",
            r"Current CUDA Device does not support bfloat16",
            r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0",
        )
    ),
    fires=[
        Example(
            _trainer(", dtype=torch.float32", ", bf16=True"),
            target="v100",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B',"
                " dtype=torch.float32)\n"
                "Trainer(model=model, args=TrainingArguments('out', bf16=False, fp16=True)).train()\n"
            ),
        ),
        Example(
            _trainer(", dtype=torch.bfloat16", ", bf16=True"),
            target="titan-rtx",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B',"
                " dtype=torch.float32)\n"
                "Trainer(model=model, args=TrainingArguments('out', bf16=False, fp16=True)).train()\n"
            ),
        ),
        Example(
            _trainer(", dtype=torch.float32", ", bf16=True"),
            target="t4",
            versions={"torch": "2.2.2"},
            note="an error: torch < 2.3 refuses bf16 on sm_75",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B',"
                " dtype=torch.float32)\n"
                "Trainer(model=model, args=TrainingArguments('out', bf16=False, fp16=True)).train()\n"
            ),
        ),
        Example(
            _trainer(", torch_dtype=torch.float32", ", bf16=True"),
            target="t4",
            versions={"transformers": "4.34.1"},
            note="an error: transformers < 4.35 refuses bf16 below compute capability 8.0",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B',"
                " torch_dtype=torch.float32)\n"
                "Trainer(model=model, args=TrainingArguments('out', bf16=False, fp16=True)).train()\n"
            ),
        ),
        Example(
            _SFT,
            target="t4",
            note="SFTConfig turns bf16 on when fp16 is off: a default is a request",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM\n"
                "from trl import SFTConfig, SFTTrainer\n"
                "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
                "SFTTrainer(model=model, args=SFTConfig(output_dir='out', bf16=False, fp16=True),"
                " train_dataset=None).train()\n"
            ),
        ),
    ],
    silent=[
        Example(_trainer(", dtype=torch.float32", ", bf16=True"), target="a100"),
        Example(_trainer(", dtype=torch.float32", ", fp16=True"), target="v100"),
        Example(
            "import torch_xla.core.xla_model as xm\n" + _trainer(", dtype=torch.float32", ", bf16=True"),
            target="t4",
            note="a TPU script: its bf16 runs on the TPU",
        ),
        Example(_LOOP_CPU_BF16, target="t4", note="bf16 autocast on the CPU"),
        Example(
            _SFT.replace("SFTConfig(output_dir='out')", "SFTConfig(output_dir='out', fp16=True)"),
            target="t4",
            note="fp16 on: TRL leaves bf16 off",
        ),
    ],
)
def bf16_on_unsupported_gpu(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts):
    if not setup.trains or not pre_ampere(machine) or other_device(script):
        return
    asks = bf16_requests(setup, machine, stack)
    if not asks or _decided_by_guard(asks):  # a bf16 chosen by an emulating guard is PD102's finding
        return
    edits: list[Edit] = []
    if setup.amp.value == "bf16" and setup.training_args is not None:
        edits += present(
            set_kwarg(setup.training_args, "bf16", "False"), set_kwarg(setup.training_args, "fp16", "True")
        )
    if setup.weights.value == dtypes.BFLOAT16:
        edit = weights_source_edit(setup, "torch.float32")
        if edit:
            edits.append(edit)
    g = machine.gpus[0]
    torch = stack.get("torch")
    refused = bf16_checks.refusal(g, stack, setup.style) if setup.amp.value == "bf16" else ""
    bug_calls = (
        setup.amp.call if setup.amp.value == "bf16" else None,
        setup.weights.call if setup.weights.value == dtypes.BFLOAT16 else None,
    ) + setup.casts
    path = only_on_some_paths(bug_calls, setup_entry(setup))
    outcome = (
        f"{refused}: the job stops at start-up"
        if refused
        else f"on torch {torch.version} ({torch.source}) it runs emulated, slowly, and kernels without a bf16 "
        f"version fail"
    )
    yield Draft(
        f"bf16 is requested but GPU 0 ({gpu_phrase(machine)}) has no native bf16: {outcome}"
        + (f"; only when {path}" if path else ""),
        severity=path_severity("error" if refused else "warning", path),
        evidence=asks
        + (Evidence(None, g.name, f"compute capability {g.capability[0]}.{g.capability[1]} < 8.0", "profile"),),
        fix=keep_shared_source(
            Fix(
                "use fp32 weights with fp16 mixed precision (fp16=True: autocast + GradScaler)",
                applicability=Applicability.UNSAFE,
                edits=tuple(edits),
                notes=("Not fp16 weights without loss scaling: that underflows (PD204).",),
            ),
            setup,
            script,
        ),
    )
