"""PD112 ddp-ranks-share-one-gpu: Under a multi-process launch every rank puts its work on cuda:0."""

from __future__ import annotations

from ...derive import LaunchPlan, call_evidence
from ...model.facts import MachineFacts, ScriptFacts
from ...model.findings import Applicability, Draft, Fix
from .._common import present, set_kwarg
from ..registry import Example, rule
from ._launch import ACC, ACC_GOOD, ACC_LOOP, TRAINER, fixed_placements

_ACC_CUDA0 = ACC + "model = model.to('cuda:0')\n" + ACC_LOOP


@rule(
    "PD112",
    "ddp-ranks-share-one-gpu",
    severity="error",
    phase="wrap",
    summary="Under a multi-process launch every rank puts its work on cuda:0.",
    what="`torchrun`/`accelerate launch` with more than one process while the script places the model with "
    '`"cuda:0"` or `device_map={"": 0}`, or with `"cuda"` / `.cuda()` before the rank chose its device '
    "(`torch.cuda.set_device`, or `Accelerator()`, which sets it).",
    why="Every rank creates its context and copies its model on GPU 0: OOM there while the other GPUs idle, NCCL "
    "refusing two ranks on one device, or a busy GPU in Exclusive_Process mode.",
    error="torch.OutOfMemoryError on GPU 0, or NCCL error: Duplicate GPU detected",
    fix='`torch.cuda.set_device(local_rank)` first and `torch.device("cuda", local_rank)`; with accelerate use '
    '`accelerator.device`; for from_pretrained `device_map={"": PartialState().process_index}` or '
    '`{"": int(os.environ["LOCAL_RANK"])}`.',
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: device logic is the script's own.",
    related=("PD108", "PD109"),
    fires=[
        Example(_ACC_CUDA0, launcher="accelerate launch --num_processes 2 train.py", note="every rank on cuda:0"),
        Example(
            "import os, torch\nmodel = torch.nn.Linear(8, 8).cuda()\n"
            "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n",
            launcher="torchrun --nproc_per_node 2 train.py",
            note="the model is placed before the rank sets its device",
        ),
        Example(
            TRAINER.format(dm=", device_map={'': 0}"),
            launcher="torchrun --nproc_per_node 4 train.py",
            fixed=(
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "import os\n"
                "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32, device_map={\"\":"
                ' int(os.environ["LOCAL_RANK"])})\n'
                "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n"
            ),
        ),
        Example(
            "rank = 0\n" + TRAINER.format(dm=", device_map={'': rank}"),
            launcher="torchrun --nproc_per_node 4 train.py",
            note="named rank, but a constant",
            fixed=(
                "import os\n"
                "rank = 0\n"
                "import torch\n"
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32, device_map={\"\":"
                ' int(os.environ["LOCAL_RANK"])})\n'
                "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n"
            ),
        ),
        Example(
            "import torch\nfrom accelerate import Accelerator\nwarm = torch.randn(1024, 1024, device='cuda')\n"
            "accelerator = Accelerator()\nmodel = torch.nn.Linear(512, 512)\n"
            "opt = torch.optim.AdamW(model.parameters())\nmodel, opt = accelerator.prepare(model, opt)\n",
            launcher="accelerate launch --num_processes 2 train.py",
            note="a warning: a warm-up tensor before Accelerator() chose each rank's GPU",
        ),
    ],
    silent=[
        Example(ACC_GOOD, launcher="accelerate launch --num_processes 2 train.py"),
        Example(
            ACC + "model = model.to('cuda')\n" + ACC_LOOP,
            launcher="accelerate launch --num_processes 2 train.py",
            note="'cuda' after Accelerator(): its state has set each rank's device",
        ),
        Example(_ACC_CUDA0, launcher="python train.py"),
        Example(
            "import os\n" + TRAINER.format(dm=", device_map={'': int(os.environ.get('LOCAL_RANK', 0))}"),
            launcher="torchrun --nproc_per_node 4 train.py",
            note="0 only with LOCAL_RANK unset: under torchrun each rank's own GPU",
        ),
        Example(
            "import os\nlocal_rank = int(os.getenv('LOCAL_RANK', '0'))\n"
            + TRAINER.format(dm=", device_map={'': local_rank}"),
            launcher="torchrun --nproc_per_node 4 train.py",
        ),
        Example(
            "import os, torch\ntorch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
            "model = torch.nn.Linear(8, 8).cuda()\n",
            launcher="torchrun --nproc_per_node 2 train.py",
        ),
        Example(
            "import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\n"
            "warm = torch.randn(1024, 1024, device=accelerator.device)\nmodel = torch.nn.Linear(512, 512)\n"
            "opt = torch.optim.AdamW(model.parameters())\nmodel, opt = accelerator.prepare(model, opt)\n",
            launcher="accelerate launch --num_processes 2 train.py",
        ),
        Example(
            "import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\n"
            "warm = torch.randn(1024, 1024, device='cuda')\nmodel = torch.nn.Linear(512, 512)\n"
            "opt = torch.optim.AdamW(model.parameters())\nmodel, opt = accelerator.prepare(model, opt)\n",
            launcher="accelerate launch --num_processes 2 train.py",
            note="after Accelerator(): 'cuda' is the rank's own GPU",
        ),
    ],
)
def ddp_ranks_share_one_gpu(script: ScriptFacts, plan: LaunchPlan, machine: MachineFacts):
    n, n_ev = plan.processes, plan.processes_evidence
    if not n or n <= 1:
        return
    placements = fixed_placements(script)
    if not placements:
        return
    work = [p for p in placements if p[0].kind != "tensor_on_device"]
    if not work:  # only a tensor made on the device (a warm-up, a buffer) before the rank chose its GPU
        c, what = placements[0]
        exclusive = any(g.compute_mode == "Exclusive_Process" for g in machine.gpus)
        yield Draft(
            f"{n} ranks each make a tensor with {what} before choosing their GPU: every rank opens a CUDA context "
            "on GPU 0"
            + (", which Exclusive_Process mode refuses to a second process" if exclusive else " and keeps it there"),
            severity=None if exclusive else "warning",
            evidence=(n_ev, call_evidence(c, f"{what}: GPU 0 in every rank")),
            error="CUDA error: CUDA-capable device(s) is/are busy or unavailable"
            if exclusive
            else "no error: each rank holds a CUDA context (some hundreds of MiB) on GPU 0",
            fix=Fix(
                "choose the rank's GPU first (torch.cuda.set_device(local_rank), or Accelerator()), then make the "
                "tensor on it (device=accelerator.device)",
                applicability=Applicability.UNSAFE,
            ),
        )
        return
    placements = work
    acc = bool(script.of("accelerator"))
    fix = (
        "use accelerator.device (accelerator.prepare places the model)"
        if acc
        else "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) at the start, then device = "
        "torch.device('cuda', local_rank)"
    )
    for c, what in placements[:1]:
        yield Draft(
            f"{n} ranks all place their work with {what}: every rank lands on GPU 0",
            evidence=(n_ev, call_evidence(c, f"{what}: the same GPU in every rank")),
            fix=Fix(
                fix,
                applicability=Applicability.UNSAFE,
                edits=present(set_kwarg(c, "device_map", '{"": int(os.environ["LOCAL_RANK"])}'))
                if c.kind == "model_load"
                else (),
            ),
        )
