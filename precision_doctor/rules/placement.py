"""Device placement: DataParallel over placed models, device maps under DDP, reentrant checkpointing under
DDP, moving offloaded models, inputs left on the CPU (PD301-PD305)."""

from __future__ import annotations

from ..derive import LaunchPlan, Setup, call_evidence, decide, device_map_kind, evidence_of
from ..derive.sharding import zero3_shards_the_load
from ..derive.live import live_evidence
from .registry import Example, LogSignature, rule
from ..model.facts import ABSENT, KNOWN, Call, LaunchFacts, MachineFacts, MachineOrigin, ScriptFacts, StackFacts
from ..model.findings import Applicability, Draft, Evidence, Fix
from ._common import gpu_phrase, present, set_kwarg


_QLORA = ("import torch\nfrom peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
          "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments\n"
          "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
          "bnb_4bit_compute_dtype=torch.bfloat16)\n"
          "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-7B', quantization_config=q, "
          "dtype=torch.bfloat16{device_map})\n"
          "model = prepare_model_for_kbit_training(model)\n"
          "model = get_peft_model(model, LoraConfig(r=16, target_modules=['q_proj', 'v_proj']))\n"
          "Trainer(model=model, args=TrainingArguments('out', bf16=True{args})).train()\n")


def _per_rank(code: str) -> str:
    """The same recipe with one full replica per DDP rank."""
    return code.replace("import torch\n", "import os, torch\nlocal_rank = int(os.environ['LOCAL_RANK'])\n", 1) \
        .replace("device_map={'': 0}", "device_map={'': local_rank}")


@rule(
    "PD301", "dataparallel-over-device-map", severity="error", phase="first-step",
    summary="Trainer wraps a placed, quantized or offloaded model in nn.DataParallel, and the replicas break it.",
    what="A Trainer started as one process on a node with several visible GPUs, whose model Trainer does not see as "
         "model-parallel (a single-device `device_map`, `.to(\"cuda\")`, a PEFT/bitsandbytes model), so "
         "`_wrap_model` applies `nn.DataParallel` — to 4-bit modules (before transformers added the 4-bit "
         "exemption), to modules behind offload hooks, or (transformers < 4.30) to bf16 weights whose autocast dtype "
         "the replica threads do not inherit.",
    why="DataParallel replicates the module in worker threads. Quantized and dispatched modules are not replica-safe, "
        "and `parallel_apply` re-enters autocast with the enabled flag only, so bf16 autocast becomes fp16 in the "
        "replicas: activations and weights end up in different dtypes (the logged step count halves when the "
        "wrap begins, then a matmul such as lm_head's fails). Boundaries: from transformers 4.30.0 Trainer enters "
        "no autocast under DataParallel (it skips `accelerator.prepare(model)` for a wrapped model and its "
        "`autocast_smart_context_manager` is a nullcontext; read in the 4.29.2 and 4.30.0 trainer.py), so a "
        "non-quantized, non-offloaded bf16 model there is PD114 (slow, batch and loss doubled), not a crash; from "
        "5.6 (PR #45407) Trainer no longer wraps 4-bit models.",
    error="RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16",
    fix="Launch DDP instead (`torchrun --nproc_per_node N` / `accelerate launch`) with `device_map={\"\": "
        "local_rank}`, or restrict the job to one GPU (`CUDA_VISIBLE_DEVICES=0`); for genuine model parallelism let "
        "`device_map=\"auto\"` span the GPUs. Setting `training_args._n_gpu = 1` also avoids the wrap but sets a "
        "private attribute.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a launch change.",
    needs=("machine",),
    log=LogSignature(patterns=(r"mat1 and mat2 must have the same dtype", r"expected mat1 and mat2 to have the same dtype",
                           r"module must have its parameters and buffers on device cuda:0 \(device_ids\[0\]\)",
                           r"Caught RuntimeError in replica \d+ on device \d+"),
                 tells=(r"torch/nn/parallel/data_parallel\.py", r"Training with DataParallel", r"parallel_apply\.py"),
                 proven=0.35, both=0.95, tells_alone=0.5, halving_progress=True),
    related=('PD208', 'PD114'),
    fires=[Example(_QLORA.format(device_map=", device_map={'': 0}", args=""), target="rtx-6000-ada:2",
                   launcher="python train.py", versions={"transformers": "4.57.1"}, note="a stage-2 QLoRA load over two GPUs"),
           Example(_QLORA.format(device_map="", args="").replace("quantization_config=q, ", ""),
                   target="a100:2", launcher="python train.py", versions={"transformers": "4.29.2"},
                   note="bf16 weights: Trainer's own bf16 autocast is lost in the replicas")],
    silent=[Example(_per_rank(_QLORA.format(device_map=", device_map={'': 0}", args=", ddp_find_unused_parameters=False")),
                    target="rtx-6000-ada:2", launcher="torchrun --nproc_per_node 2 train.py",
                    versions={"transformers": "4.57.1"}),
            Example(_QLORA.format(device_map=", device_map={'': 0}", args=""), target="rtx-6000-ada:2",
                    launcher="python train.py", versions={"transformers": "5.23.0"}),
            Example(_QLORA.format(device_map=", device_map={'': 0}", args=""), target="rtx-6000-ada:1",
                    launcher="python train.py", versions={"transformers": "4.57.1"}),
            Example(_QLORA.format(device_map="", args="").replace("quantization_config=q, ", ""),
                    target="a100:2", launcher="python train.py", versions={"transformers": "4.30.0"},
                    note="no autocast under DataParallel from 4.30: PD114's slow wrap, not a crash")],
)
def dataparallel_over_device_map(setup: Setup, machine: MachineFacts, launch: LaunchFacts, live):
    if live is not None and live.trainer and machine.origin == MachineOrigin.THIS_MACHINE:
        yield from _live_dataparallel(live)  # Trainer's own decision, on this machine's GPUs
        return
    if setup.style != "trainer" or len(machine.gpus) < 2 or (launch.known and launch.launcher != "python"):
        return
    wrap = setup.placement.trainer_wrap
    if wrap == "none" and setup.quantized.value == "4bit" and not setup.placement.exempts_4bit and \
            setup.model_load is not None:
        # A spreading device_map is model parallel only if it really spans GPUs; a 4-bit model often fits on one,
        # and then Trainer wraps it after all (a two-stage recipe whose second stage loads 4-bit). Only the live model tells: say so, as a warning.
        dm = setup.model_load.kwarg("device_map")
        yield Draft(f"device_map={dm.text} may place this 4-bit model on a single GPU; Trainer then wraps it in "
                    f"nn.DataParallel, which 4-bit modules do not survive on this transformers",
                    evidence=(call_evidence(setup.model_load, "4-bit model with a device_map decided at load time"),
                              Evidence(None, gpu_phrase(machine), f"{len(machine.gpus)} GPUs visible", "profile")),
                    severity="warning", confidence="likely",
                    fix=Fix(f"launch DDP (torchrun --nproc_per_node {len(machine.gpus)}) with device_map={{'': "
                            f"local_rank}}, or CUDA_VISIBLE_DEVICES=0; `check --live` confirms the device map",
                            applicability=Applicability.UNSAFE))
        return
    if wrap != "DataParallel":
        return
    reasons = setup.placement.dataparallel_crash_reasons
    if not reasons:
        return  # DataParallel alone is slow, not broken: PD114
    n = len(machine.gpus)
    yield Draft(f"started as one process with {n} GPUs visible, Trainer wraps this model in nn.DataParallel, "
                f"which breaks it", evidence=(Evidence(None, gpu_phrase(machine), f"{n} GPUs visible", "profile"),
                                              Evidence(None, launch.command or "python (no --launcher given)",
                                                       "one process", "launcher" if launch.known else "assumed"))
                + tuple(reasons), confidence="certain" if launch.known else "likely",
                fix=Fix(f"launch DDP: torchrun --nproc_per_node {n} {setup.path} with device_map={{'': local_rank}}; "
                        f"or CUDA_VISIBLE_DEVICES=0", applicability=Applicability.UNSAFE,
                        commands=(f"torchrun --nproc_per_node {n} {setup.path}",
                                  f"CUDA_VISIBLE_DEVICES=0 python {setup.path}"),
                        notes=("`training_args._n_gpu = 1` avoids the wrap too, through a private "
                               "attribute; model.is_parallelizable/model_parallel are lost under PEFT wrapping.",)))


def _live_dataparallel(live):
    if live.trainer.wrap != "DataParallel" or live.model is None:
        return
    model = live.model
    reasons = []
    if model.quantized.get("Linear4bit"):
        reasons.append("4-bit bitsandbytes modules")
    if any(v in ("cpu", "disk") for v in (model.device_map or {}).values()):
        reasons.append("offloaded modules behind accelerate hooks")
    if live.trainer.bf16 and "bfloat16" in {d for c in model.param_dtypes.values() for d in c}:
        reasons.append("bf16 weights whose autocast dtype the replica threads lose")
    if not reasons:
        return
    devices = sorted(set((model.device_map or {}).values())) or list(model.devices)
    yield Draft(f"confirmed by the live Trainer: args.n_gpu={live.trainer.n_gpu}, is_model_parallel="
                f"{live.trainer.is_model_parallel}, so it wraps the model in nn.DataParallel over "
                f"{', '.join(reasons)}",
                evidence=(live_evidence(live, f"hf_device_map devices: {', '.join(map(str, devices)) or 'none'}"),),
                fix=Fix("launch DDP (torchrun) with device_map={'': local_rank}, or CUDA_VISIBLE_DEVICES=0",
                        applicability=Applicability.UNSAFE))


@rule(
    "PD302", "device-map-auto-under-ddp", severity="error", phase="wrap",
    summary="`device_map=\"auto\"` (a model spread over GPUs) in a multi-process DDP, DeepSpeed or FSDP launch.",
    what="`from_pretrained(..., device_map=\"auto\" | \"balanced\" | \"sequential\")` with `torchrun "
         "--nproc_per_node N` / `accelerate launch --num_processes N` (N > 1).",
    why="Each rank would hold a model split over every GPU; DDP needs one full replica per process on its own GPU, "
        "and accelerate refuses the combination.",
    error="ValueError: You can't train a model that has been loaded with `device_map='auto'` in any distributed "
          "mode. Please rerun your script specifying `--num_processes=1` or by launching with `python "
          "{{myscript.py}}`.",
    fix="One replica per process: `device_map={\"\": PartialState().process_index}` or "
        "`{\"\": int(os.environ[\"LOCAL_RANK\"])}`; or run one process with `python` for naive pipeline parallelism.",
    applicability=Applicability.SAFE,
    fix_safety="Safe under DDP: each rank loads the whole model on its own GPU.",
    fires=[Example(_QLORA.format(device_map=", device_map='auto'", args=""),
                   launcher="torchrun --nproc_per_node 2 train.py")],
    silent=[Example(_per_rank(_QLORA.format(device_map=", device_map={'': 0}", args="")),
                    launcher="torchrun --nproc_per_node 2 train.py", note="correct DDP QLoRA"),
            Example(_QLORA.format(device_map=", device_map='auto'", args=""), launcher="python train.py")],
)
def device_map_auto_under_ddp(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts,
                              plan: LaunchPlan):
    n, n_ev = plan.multi_process, plan.processes_evidence
    if n <= 1:
        return
    if setup is not None and zero3_shards_the_load(setup, stack):
        return  # ZeRO-3 refuses any device_map at load (PD502, whose fix removes it): a per-rank map is no cure
    for load in script.of("model_load"):
        v = decide(load.kwarg("device_map"), machine, stack)
        if device_map_kind(v) == "spread":
            yield Draft(f"device_map={v.text} spreads the model over the GPUs, but {n} processes each load it",
                        evidence=(evidence_of(v, f"device_map={v.text}", load), n_ev),
                        fix=Fix("one full replica per process: device_map={'': int(os.environ['LOCAL_RANK'])}",
                                applicability=Applicability.SAFE, edits=present(set_kwarg(load, "device_map",
                                                            '{"": int(os.environ["LOCAL_RANK"])}'))))


@rule(
    "PD303", "ddp-reentrant-checkpointing", severity="error", phase="first-step",
    summary="Reentrant gradient checkpointing under DDP with unused parameters or adapters.",
    what="A multi-process DDP launch, gradient checkpointing with `use_reentrant=True` (the transformers 4 default), "
         "and `ddp_find_unused_parameters=True` / `DistributedDataParallel(find_unused_parameters=True)` (common with "
         "LoRA, whose frozen base leaves parameters unused) — which a Trainer sets itself for a PeftModel when "
         "`ddp_find_unused_parameters` is unset.",
    why="Reentrant checkpointing runs a second backward inside the first; DDP's reducer then sees the same "
        "parameters marked ready twice.",
    error="RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following "
          "reasons: 1) Use of a module parameter outside the `forward` function. 2) Reused parameters in multiple "
          "reentrant backward passes.",
    fix="`gradient_checkpointing_kwargs={\"use_reentrant\": False}` (Trainer argument or "
        "`model.gradient_checkpointing_enable(...)`), and `ddp_find_unused_parameters=False`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: non-reentrant checkpointing computes the same gradients.",
    fires=[Example(_per_rank(_QLORA.format(device_map=", device_map={'': 0}",
                                           args=", gradient_checkpointing=True, ddp_find_unused_parameters=True")),
                   launcher="torchrun --nproc_per_node 2 train.py", versions={"transformers": "4.57.1"}),
           Example(_per_rank(_QLORA.format(device_map=", device_map={'': 0}", args=", gradient_checkpointing=True")),
                   launcher="torchrun --nproc_per_node 2 train.py", versions={"transformers": "4.57.1"},
                   note="the Trainer turns find_unused_parameters on for a PeftModel, which is no PreTrainedModel"),
           Example(_per_rank(_QLORA.format(device_map=", device_map={'': 0}",
                                           args=", activation_checkpointing=True, "
                                                "activation_checkpointing_kwargs={'use_reentrant': True}")),
                   launcher="torchrun --nproc_per_node 2 train.py",
                   note="transformers 5.24's names for gradient_checkpointing(_kwargs)")],
    silent=[Example(_per_rank(_QLORA.format(device_map=", device_map={'': 0}",
                                            args=", gradient_checkpointing=True, gradient_checkpointing_kwargs="
                                                 "{'use_reentrant': False}")),
                    launcher="torchrun --nproc_per_node 2 train.py", versions={"transformers": "4.57.1"}),
            Example(_per_rank(_QLORA.format(device_map=", device_map={'': 0}", args=", gradient_checkpointing=True")),
                    launcher="torchrun --nproc_per_node 2 train.py"),
            Example(_per_rank(_QLORA.format(device_map=", device_map={'': 0}", args=", gradient_checkpointing=True, "
                                                                                   "ddp_find_unused_parameters=False")),
                    launcher="torchrun --nproc_per_node 2 train.py", versions={"transformers": "4.57.1"}),
            Example(_per_rank(_QLORA.format(device_map=", device_map={'': 0}", args=", gradient_checkpointing=True, "
                                            "deepspeed={'zero_optimization': {'stage': 2}}")),
                    launcher="torchrun --nproc_per_node 2 train.py", versions={"transformers": "4.57.1"},
                    note="DeepSpeed runs no DDP reducer")],
)
def ddp_reentrant_checkpointing(script: ScriptFacts, setup: Setup, machine: MachineFacts, stack: StackFacts,
                                plan: LaunchPlan):
    n, n_ev = plan.multi_process, plan.processes_evidence
    if n <= 1 or setup.style not in ("trainer", "loop", "accelerate") or setup.sharding.kind in ("deepspeed", "fsdp"):
        return  # (DeepSpeed and FSDP run no DDP reducer: accelerate 1.15 accelerator.py:659-669, 1884-1898)
    gc = setup.placement.checkpointing
    on, reentrant, ev = gc.on, gc.reentrant, gc.evidence
    if not on or not reentrant:
        return
    flag = decide(setup.training_args.kwarg("ddp_find_unused_parameters"), machine, stack) \
        if setup.training_args is not None else None
    unused = flag is not None and flag.is_(True)
    unused = unused or any(decide(d.kwarg("find_unused_parameters"), machine, stack).is_(True)
                           for d in script.of("ddp"))
    # Trainer turns find_unused_parameters off for a checkpointing PreTrainedModel, but a PeftModel is not one: with
    # ddp_find_unused_parameters unset it is on (transformers 5.24 trainer.py:749-756)
    wrapped = setup.style == "trainer" and flag is not None and (flag.state == ABSENT or flag.is_(None)) and \
        setup.peft.value and setup.peft.call is not None and setup.peft.call.kind in ("get_peft_model", "peft_load",
                                                                                        "trainer")
    if not unused and not wrapped:
        return  # Trainer turns find_unused_parameters off when checkpointing; reentrant then works
    why = "find_unused_parameters=True" + (" (the Trainer's default for a PeftModel, which is no PreTrainedModel)"
                                           if wrapped and not unused else "")
    spelled = "activation_checkpointing_kwargs" if setup.training_args is not None and \
        "activation_checkpointing_kwargs" in setup.training_args.kwargs else "gradient_checkpointing_kwargs"
    edits = present(set_kwarg(setup.training_args, spelled, '{"use_reentrant": False}')) \
        if setup.training_args is not None else ()
    yield Draft(f"reentrant gradient checkpointing under {n}-process DDP with {why}: DDP marks parameters ready twice",
                evidence=(n_ev,) + ev, fix=Fix("gradient_checkpointing_kwargs={'use_reentrant': False}", applicability=Applicability.SAFE,
                                                edits=edits))


@rule(
    "PD304", "meta-tensor-move", severity="error", phase="load",
    summary="Moving a model whose device_map offloads modules to the CPU or disk.",
    what="`.to(device)` / `.cuda()` on a model loaded with a `device_map` that puts modules on `\"cpu\"`/`\"disk\"` "
         "(or with `offload_folder`): those weights are meta tensors behind accelerate hooks.",
    why="Offloaded weights live elsewhere and are streamed in by hooks; the module holds meta tensors with no data "
        "to copy.",
    error="RuntimeError: You can't move a model that has some modules offloaded to cpu or disk.",
    fix="Don't move dispatched models: let the device_map place them, pick one that fits on the GPU "
        "(`device_map={\"\": 0}`), or quantize.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    log=LogSignature(patterns=(r"Cannot copy out of meta tensor", r"You can't move a model that has some modules offloaded")),
    fires=[Example("import torch\nfrom transformers import AutoModelForCausalLM\n"
                   "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-70B', dtype=torch.bfloat16, "
                   "device_map={'model': 0, 'lm_head': 'cpu'})\nmodel = model.to('cuda')\n")],
    silent=[Example("import torch\nfrom transformers import AutoModelForCausalLM\n"
                    "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B', dtype=torch.bfloat16, "
                    "device_map={'model': 0, 'lm_head': 'cpu'})\n")],
)
def meta_tensor_move(setup: Setup, script: ScriptFacts, machine: MachineFacts, stack: StackFacts):
    load = setup.model_load
    if load is None:
        return
    dm = decide(load.kwarg("device_map"), machine, stack)
    offload = device_map_kind(dm) == "offload" or load.kwarg("offload_folder").state == KNOWN
    if not offload:
        return
    for c in setup.casts + tuple(x for x in script.of("cast") if x.receiver in setup.model_names):
        method = c.callee.rsplit(".", 1)[-1]
        if method in ("cuda", "to") and (method == "cuda" or any(
                v.state == KNOWN and isinstance(v.value, str) and v.value.startswith(("cuda", "cpu"))
                for v in c.args)):
            yield Draft("the model's device_map offloads modules to the CPU or disk, and it is then moved as a whole",
                        evidence=(evidence_of(dm, f"device_map={dm.text}", load) if dm.state == KNOWN else
                                  call_evidence(load, "offload_folder="), call_evidence(c, "moved after dispatch")),
                        fix=Fix("remove the move: the device_map already placed every module", applicability=Applicability.UNSAFE))
            return


@rule(
    "PD305", "inputs-not-on-model-device", severity="error", phase="first-step",
    summary="A hand-written loop moves the model to the GPU but feeds it batches left on the CPU.",
    what="The model is moved with `.cuda()` / `.to(\"cuda\")`, then called on the batches of a DataLoader loop that "
         "never moves them (`batch.to(device)`), with no `accelerator.prepare(loader)`.",
    why="Every tensor of an op must be on one device; DataLoader batches are created on the CPU.",
    error="RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and "
          "cpu!",
    fix="Move every batch tensor to `model.device` (or `accelerator.device`), or let `accelerator.prepare(loader)` "
        "do it.",
    # torch words it by the path that checks: "but found at least two devices" (TensorIterator), "but got mat1 is on
    # cpu, different from other tensors on cuda:0" (a kernel's device check, what a CUDA Linear raises on torch 2.11)
    log=LogSignature(patterns=(r"Expected all tensors to be on the same device",)),
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    fires=[Example("import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(dataset, batch_size=8)\n"
                   "model = MyNet().cuda()\nopt = torch.optim.AdamW(model.parameters())\n"
                   "for x, y in loader:\n    loss = torch.nn.functional.mse_loss(model(x), y)\n"
                   "    loss.backward()\n    opt.step()\n")],
    silent=[Example("import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(dataset, batch_size=8)\n"
                    "model = MyNet().cuda()\nopt = torch.optim.AdamW(model.parameters())\n"
                    "for x, y in loader:\n    x, y = x.cuda(), y.cuda()\n"
                    "    loss = torch.nn.functional.mse_loss(model(x), y)\n    loss.backward()\n    opt.step()\n"),
            Example("import torch\nfrom torch.utils.data import DataLoader\n"
                    "model = MyNet().cuda()\nopt = torch.optim.AdamW(model.parameters())\n"
                    "for batch in DataLoader(dataset):\n    batch = {k: v.to('cuda') for k, v in batch.items()}\n"
                    "    model(**batch).loss.backward()\n    opt.step()\n")],
)
def inputs_not_on_model_device(script: ScriptFacts, setup: Setup):
    if setup.style not in ("loop",) or not _moved_to_gpu(script, setup):
        return
    loop_vars = _unmoved_loop_inputs(script)
    for call in script.of("call_var"):
        if call.callee not in setup.model_names or not call.in_loop:
            continue
        names = [v.text.lstrip("*") for v in list(call.args) + list(call.kwargs.values())]
        stale = [n for n in names if (call.scope, n) in loop_vars and not _moved_before(script, call, n)]
        if stale:
            yield Draft(f"{call.callee} is on the GPU but {', '.join(stale)} {'comes' if len(stale) == 1 else 'come'} "
                        f"from the data loader on the CPU",
                        evidence=(call_evidence(call, f"called on {', '.join(stale)}"),),
                        fix=Fix(f"move them first: {stale[0]} = {stale[0]}.to(device)", applicability=Applicability.UNSAFE))
            return


def _moved_to_gpu(script: ScriptFacts, setup: Setup) -> bool:
    for c in script.of("cast"):
        if c.receiver not in setup.model_names and c.callee != "<expr>.cuda" and not (
                c.target in setup.model_names):
            continue
        method = c.callee.rsplit(".", 1)[-1]
        if method == "cuda" or (method == "to" and any(v.state == KNOWN and str(v.value).startswith("cuda")
                                                       for v in c.args)):
            return True
    return False


def _unmoved_loop_inputs(script: ScriptFacts) -> set[tuple[str, str]]:
    """(scope, name) of variables bound by a `for ... in <DataLoader>` header."""
    out = set()
    for c in script.of("loop_var"):
        if c.receiver != "dataloader":
            continue
        for name in c.target.split(","):
            out.add((c.scope, name))
    return out


def _moved_before(script: ScriptFacts, call: Call, name: str) -> bool:
    for c in script.of("cast"):
        if c.scope == call.scope and c.location.line <= call.location.line and (
                c.receiver == name or name in c.target.split(",")):
            return True
    return any(c.scope == call.scope and c.location.line < call.location.line and name in c.target.split(",")
               for c in script.calls if c.kind in ("cast", "flow"))
