"""The machine the job starts on and how it is launched: compute modes, stale contexts, ports, process
counts, rank placement, implicit precision and implicit DataParallel (PD108-PD115)."""

from __future__ import annotations

import time

from ..knowledge import dtypes
from ..derive import LaunchPlan, Setup, call_evidence
from ..derive.launch import command_with_option, written_per_rank
from .registry import Example, LogSignature, rule
from ..model.facts import ABSENT, KNOWN, BusyPort, Call, GpuProcess, LaunchFacts, MachineFacts, ScriptFacts, StackFacts
from ..model.findings import Applicability, Draft, Evidence, Fix
from ..probes.frameworks import lightning_launch
from ..probes.stack import at_least
from ._common import gpu_phrase, native_bf16, present, set_kwarg

_ACC = ("import torch\nfrom accelerate import Accelerator\n"
        "accelerator = Accelerator()\nmodel = torch.nn.Linear(512, 512)\n")
_ACC_LOOP = ("optimizer = torch.optim.AdamW(model.parameters())\n"
             "model, optimizer = accelerator.prepare(model, optimizer)\n")
_ACC_GOOD = _ACC + _ACC_LOOP
_ACC_CUDA0 = _ACC + "model = model.to('cuda:0')\n" + _ACC_LOOP
_LIGHTNING = ("import lightning as L\nfrom my_model import LitModel\n"
              "trainer = L.Trainer(accelerator='gpu', devices={devices}, strategy='ddp', precision='bf16-mixed')\n"
              "trainer.fit(LitModel())\n")
_TRAINER = ("import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32{dm})\n"
            "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n")


# --- what the launch rules share ----------------------------------------------------------------

def fixed_placements(script: ScriptFacts) -> list[tuple[Call, str]]:
    """Places the script pins work to one GPU for every rank: "cuda", "cuda:0", .cuda(), device_map={"": 0}. A
    value written from a rank (`{"": int(os.environ.get("LOCAL_RANK", 0))}`, `{"": local_rank}`) reads 0 only with
    the launcher's variable unset: under the launch, each rank's own GPU."""
    out = []
    for c in script.of("cast"):
        method = c.callee.rsplit(".", 1)[-1]
        if method == "cuda" and not c.args:
            out.append((c, ".cuda()"))
        elif method == "to":
            for v in list(c.args) + [c.kwargs[k] for k in ("device",) if k in c.kwargs]:
                if v.state == KNOWN and v.value in ("cuda", "cuda:0") and not written_per_rank(v):
                    out.append((c, f".to({v.value!r})"))
    for load in script.of("model_load"):
        v = load.kwarg("device_map")
        if v.state == KNOWN and (v.value in ("cuda", "cuda:0", 0) or v.value in ({"": 0}, {"": "cuda:0"})) \
                and not written_per_rank(v):
            out.append((load, f"device_map={v.text}"))
    return out



def _ranks_pick_their_gpu(script: ScriptFacts) -> bool:
    return bool(script.of("set_device"))


def _age(p: GpuProcess, probed_at: float) -> str:
    """When the process started, and how long before the machine was probed (the report is a function of the
    facts: no clock is read here)."""
    if not p.started:
        return ""
    started = time.strftime('%Y-%m-%d %H:%M', time.gmtime(p.started))
    if not probed_at:
        return f", started {started} UTC"
    hours = (probed_at - p.started) / 3600
    ago = f" ({hours / 24:.0f} days before the probe)" if hours >= 48 else \
        f" ({hours:.0f} h before the probe)" if hours >= 1 else ""
    return f", started {started} UTC{ago}"


def describe_process(p: GpuProcess, machine: MachineFacts) -> str:
    who = "yours" if p.mine else (p.user or "owner unknown")
    cmd = p.command or "command unknown"
    state = {"stopped": "stopped (T)", "zombie": "zombie (defunct)", "gone": "no longer exists"}.get(p.status,
                                                                                                   p.status)
    orphan = ", parent gone" if p.parent_alive is False else ""
    return f"pid {p.pid} ({cmd}; {who}; {state}{orphan}{_age(p, machine.probed_at)})"


# --- rules -------------------------------------------------------------------------------------

@rule(
    "PD108", "exclusive-process-mode-multi-process", severity="error", phase="launch",
    summary="GPUs in Exclusive_Process mode refuse a second CUDA context: busy GPUs or ranks sharing one fail.",
    what="A visible GPU in Exclusive_Process compute mode (`nvidia-smi -c 3`, common on SLURM/SGE) that another "
         "process already holds, or a multi-process launch whose ranks all create a context on the same GPU.",
    why="In Exclusive_Process mode a GPU accepts one CUDA context at a time; the next process to touch it fails.",
    error="RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
    fix="One process per GPU, each touching only its own device: `torch.cuda.set_device(local_rank)` first, "
        "`cuda:{local_rank}` / `accelerator.device` everywhere; clear the processes that hold the GPUs (PD109).",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    needs=("machine",),
    log=LogSignature(patterns=(r"CUDA-capable device\(s\) is/are busy or unavailable", r"all CUDA-capable devices are busy"),
                 proven=0.6),
    related=('PD109', 'PD112'),
    fires=[Example(_ACC_GOOD, machine="l40s_2x_exclusive_stopped",
                   launcher="accelerate launch --num_processes 2 train.py", note="a cluster node: exclusive GPUs held by a stopped run")],
    silent=[Example(_ACC_GOOD, machine="h100_8x", launcher="accelerate launch --num_processes 2 train.py")],
)
def exclusive_process_mode(script: ScriptFacts, machine: MachineFacts, plan: LaunchPlan):
    exclusive = [g for g in machine.gpus if g.compute_mode == "Exclusive_Process"]
    if not exclusive:
        return
    n, n_ev = plan.processes, plan.processes_evidence
    for g in exclusive:
        if g.processes:
            holders = ", ".join(describe_process(p, machine) for p in g.processes)
            yield Draft(f"GPU {g.index} ({g.name}) is in Exclusive_Process mode and already held by {holders}: "
                        f"the job cannot create its CUDA context there",
                        evidence=(Evidence(None, f"GPU {g.index} compute mode", "Exclusive_Process", "profile"),),
                        fix=Fix("free the GPU first (see PD109), or make the job use only free GPUs with "
                                "CUDA_VISIBLE_DEVICES", applicability=Applicability.UNSAFE))
    placements = fixed_placements(script)
    if n and n > 1 and placements and not _ranks_pick_their_gpu(script):
        c, what = placements[0]
        yield Draft(f"{n} processes on Exclusive_Process GPUs, and every rank creates its context with {what}: "
                    f"the second rank to touch GPU 0 fails",
                    evidence=(n_ev, call_evidence(c, f"{what} in every rank")),
                    fix=Fix("give each rank its own GPU: torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) "
                            "before any CUDA work, or use accelerator.device", applicability=Applicability.UNSAFE))


@rule(
    "PD109", "stale-cuda-context", severity="error", phase="launch",
    summary="Zombie, stopped or orphaned processes still hold CUDA contexts and GPU memory.",
    what="A process that holds a context on a visible GPU but will not run again by itself: stopped (Ctrl-Z, `T` "
         "state), a zombie, an orphan of a crashed launcher, or a pid that no longer exists here.",
    why="Its memory stays allocated (OOM for the next job) and, in Exclusive_Process mode, the GPU refuses the next "
        "context. Crashed distributed runs leave these behind.",
    error="torch.OutOfMemoryError: CUDA out of memory, or CUDA error: CUDA-capable device(s) is/are busy or "
          "unavailable",
    fix="End your own stale processes (the exact commands are given); ask the owner or an admin about anyone "
        "else's. Never kill other users' processes.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: ends processes.",
    needs=("machine",),
    log=LogSignature(patterns=(r"CUDA-capable device\(s\) is/are busy or unavailable",), error_is_signature=False, proven=0.6),
    related=('PD108', 'PD112'),
    fires=[Example("import torch\n", machine="l40s_2x_exclusive_stopped")],
    silent=[Example("import torch\n", machine="h100_8x"), Example("import torch\n", machine="titan_rtx")],
)
def stale_cuda_context(machine: MachineFacts):
    for g in machine.gpus:
        for p in g.processes:
            if not p.stale:
                continue
            gib = p.used_mib / 1024
            commands: tuple[str, ...] = ()
            if p.mine and p.status == "stopped":
                commands = (f"kill -CONT {p.pid}  # let it finish, or end it:", f"kill -9 {p.pid}")
            elif p.mine and p.status == "zombie":
                commands = (f"kill -9 $(ps -o ppid= -p {p.pid})  # a zombie is cleared by ending its parent",)
            elif p.mine:
                commands = (f"kill -9 {p.pid}",)
            note = () if p.mine else (f"pid {p.pid} belongs to {p.user or 'another user'}: ask them or an admin; "
                                      f"do not kill it",)
            if p.status == "gone":
                note = (f"NVML lists pid {p.pid} but no such process is visible here (another container, or a "
                        f"leaked context): `nvidia-smi` on the node; an admin can reset the GPU",)
            yield Draft(f"{describe_process(p, machine)} holds {gib:.1f} GiB on GPU {g.index} ({g.name})",
                        evidence=(Evidence(None, f"GPU {g.index}", f"{gib:.1f} GiB held by pid {p.pid} "
                                           f"({p.status})", "profile"),),
                        fix=Fix("end the stale process before launching" if commands else
                                "the process is not yours: have it ended before launching", applicability=Applicability.UNSAFE,
                                commands=commands, notes=note))


@rule(
    "PD110", "master-port-in-use", severity="error", phase="launch",
    summary="The rendezvous port is already taken (often by a crashed run's leftover launcher).",
    what="A multi-process launch whose rendezvous port (`--main_process_port`, `--master_port`, `MASTER_PORT`, the "
         "accelerate config, else 29500) is in use on this node.",
    why="The rendezvous store listens on that port; a second listener fails. torchrun with an explicit port and "
        "multi-node jobs die; accelerate >= 1.8 on one node warns and falls back; torchrun on one node without "
        "--master_port picks a free port itself.",
    error="RuntimeError: The server socket has failed to listen on any local network address. port: 29500, "
          "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
    fix="Use another port: `accelerate launch --main_process_port 29501`, `torchrun --master_port 29501` (or "
        "`--standalone`), `MASTER_PORT=29501`; or end the process that holds it if it is a leftover of yours.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: any free port works on a single node.",
    needs=("host",),
    log=LogSignature(patterns=(r"Address already in use", r"EADDRINUSE", r"another process is utilizing it",
                           r"failed to bind to .*:\d+ \(errno: 98")),
    fires=[Example(_ACC_GOOD, machine="l40s_2x_exclusive_stopped",
                   launcher="torchrun --nproc_per_node 2 --master_port 29500 train.py")],
    silent=[Example(_ACC_GOOD, machine="l40s_2x_exclusive_stopped",
                    launcher="torchrun --nproc_per_node 2 --master_port 29501 train.py"),
            Example(_ACC_GOOD, machine="l40s_2x_exclusive_stopped", launcher="python train.py")],
)
def master_port_in_use(machine: MachineFacts, launch: LaunchFacts, stack: StackFacts, plan: LaunchPlan):
    lightning = plan.spawner == "lightning"  # Lightning's own launcher: MASTER_PORT, else a free port it finds
    if machine.host is None or launch.standalone:
        return
    if not lightning and (not launch.known or launch.launcher == "python"):
        return
    if plan.multi_process <= 1 and launch.num_machines <= 1:
        return
    port, explicit, source = plan.port, plan.port_explicit, plan.port_source
    state = machine.host.port_state(port)
    if not isinstance(state, BusyPort) or (lightning and not explicit):
        return
    multi_node = launch.num_machines > 1
    if launch.launcher == "torchrun" and not explicit and not multi_node:
        return  # torchrun picks a free port on a single node
    recovers = launch.launcher == "accelerate" and not multi_node and at_least(stack, "accelerate", "1.8")
    holder = ""
    commands = []
    if state.pid:
        holder = f" by pid {state.pid}" + (f" ({state.command})" if state.command else "")
        if state.user and machine.host.user and state.user == machine.host.user:
            commands.append(f"kill {state.pid}  # if it is a leftover of a crashed run")
    free = next((p for p in machine.host.ports_checked if p != port and machine.host.port_state(p) is True), port + 1)
    flag = {"accelerate": f"--main_process_port {free}", "torchrun": f"--master_port {free}",
            "deepspeed": f"--master_port {free}"}.get(launch.launcher, f"MASTER_PORT={free}")
    if lightning:
        flag = f"MASTER_PORT={free}"
        commands.insert(0, f"export MASTER_PORT={free}  # or unset MASTER_PORT: Lightning then finds a free port")
    else:
        commands.insert(0, command_with_option(launch, flag))
    yield Draft(f"rendezvous port {port} ({source}) is in use{holder}" +
                (": accelerate will warn and fall back to a standalone-like launch" if recovers else ""),
                evidence=((Evidence(None, source, f"Lightning's rendezvous on port {port}", "env"),
                           plan.processes_evidence) if lightning else
                          (Evidence(None, launch.command, f"rendezvous on port {port}", "launcher"),)),
                severity="warning" if recovers else "",
                error=(f"ConnectionError: Tried to launch distributed communication on port `{port}`, but another "
                       f"process is utilizing it." if launch.launcher == "accelerate" else
                       f"RuntimeError: The server socket has failed to listen on any local network address. port: "
                       f"{port}, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use"),
                fix=Fix(f"launch on a free port: {flag}", applicability=Applicability.SAFE, commands=tuple(commands)))


@rule(
    "PD111", "more-processes-than-gpus", severity="error", phase="launch",
    summary="The launch starts more processes per node than there are visible GPUs.",
    what="`--nproc_per_node` / `--num_processes` larger than the GPUs the job can see (an 8-GPU command on a 4-GPU "
         "node, a narrower CUDA_VISIBLE_DEVICES), or a Lightning `Trainer(devices=8)` / `Fabric(devices=8)` started "
         "with plain python (Lightning starts one process per device itself).",
    why="Each rank selects GPU `local_rank`; ranks beyond the visible count ask for a device that does not exist. "
        "Lightning checks the device ids it is given against the visible GPUs and refuses at `Trainer(...)`.",
    error="RuntimeError: CUDA error: invalid device ordinal",
    fix="Set the process count to the visible GPU count (Lightning: `devices='auto'`).",
    applicability=Applicability.SAFE,
    fix_safety="Safe.",
    needs=("machine",),
    log=LogSignature(patterns=(r"invalid device ordinal", r"You requested gpu: \[")),
    fires=[Example(_ACC_GOOD, target="a100:4", launcher="torchrun --nproc_per_node 8 train.py"),
           Example(_LIGHTNING.format(devices="8"), target="a100:4", launcher="python train.py",
                   note="Lightning starts one process per device itself")],
    silent=[Example(_ACC_GOOD, target="a100:8", launcher="torchrun --nproc_per_node 8 train.py"),
            Example(_LIGHTNING.format(devices="'auto'"), target="a100:4", launcher="python train.py")],
)
def more_processes_than_gpus(machine: MachineFacts, launch: LaunchFacts, plan: LaunchPlan):
    n, n_ev = plan.processes, plan.processes_evidence
    if not n or not machine.gpus:
        return
    visible = len(machine.gpus)
    lightning = plan.spawner == "lightning" and plan.spawner_call is not None
    found = lightning_launch(plan.spawner_call) if lightning else None
    ids = list(found.device_ids) if found is not None and found.device_ids else list(range(n))
    fits = max(ids) < visible if lightning else n <= visible
    if fits or (not lightning and n <= 1):
        return
    if lightning:
        trainer = plan.spawner_call  # Lightning checks the ids it is given against the visible GPUs itself
        asked = f"GPUs {ids}" if found is not None and found.device_ids else f"{n} GPUs"
        yield Draft(f"{trainer.callee.rsplit('.', 1)[-1]}(devices=...) asks for {asked} but only {visible} "
                    f"{'are' if visible != 1 else 'is'} visible ({gpu_phrase(machine)})", evidence=(n_ev,),
                    error=f"MisconfigurationException: You requested gpu: {ids}\n But your machine only "
                          f"has: {list(range(visible))}",
                    fix=Fix(f"devices={visible}, or devices='auto' (every visible GPU)",
                            applicability=Applicability.SAFE,
                            edits=present(set_kwarg(trainer, "devices", "'auto'"))))
        return
    yield Draft(f"{n} processes per node but only {visible} GPU{'s' if visible != 1 else ''} visible "
                f"({gpu_phrase(machine)})", evidence=(n_ev,),
                fix=Fix(f"launch {visible} processes", applicability=Applicability.SAFE,
                        commands=(f"--nproc_per_node {visible}" if launch.launcher == "torchrun" else
                                  f"--num_processes {visible}",)))


@rule(
    "PD112", "ddp-ranks-share-one-gpu", severity="error", phase="wrap",
    summary="Under a multi-process launch every rank puts its work on cuda:0.",
    what="`torchrun`/`accelerate launch` with more than one process while the script places the model with "
         "`\"cuda\"`, `\"cuda:0\"`, `.cuda()` or `device_map={\"\": 0}` and never calls `torch.cuda.set_device`.",
    why="Every rank creates its context and copies its model on GPU 0: OOM there while the other GPUs idle, NCCL "
        "refusing two ranks on one device, or a busy GPU in Exclusive_Process mode.",
    error="torch.OutOfMemoryError on GPU 0, or NCCL error: Duplicate GPU detected",
    fix="`torch.cuda.set_device(local_rank)` first and `torch.device(\"cuda\", local_rank)`; with accelerate use "
        "`accelerator.device`; for from_pretrained `device_map={\"\": PartialState().process_index}` or "
        "`{\"\": int(os.environ[\"LOCAL_RANK\"])}`.",
    applicability=Applicability.UNSAFE,
    fix_safety="Unsafe: device logic is the script's own.",
    related=('PD108', 'PD109'),
    fires=[Example(_ACC_CUDA0, launcher="accelerate launch --num_processes 2 train.py", note="every rank on cuda:0"),
           Example(_TRAINER.format(dm=", device_map={'': 0}"), launcher="torchrun --nproc_per_node 4 train.py"),
           Example("rank = 0\n" + _TRAINER.format(dm=", device_map={'': rank}"),
                   launcher="torchrun --nproc_per_node 4 train.py", note="named rank, but a constant")],
    silent=[Example(_ACC_GOOD, launcher="accelerate launch --num_processes 2 train.py"),
            Example(_ACC_CUDA0, launcher="python train.py"),
            Example("import os\n" + _TRAINER.format(dm=", device_map={'': int(os.environ.get('LOCAL_RANK', 0))}"),
                    launcher="torchrun --nproc_per_node 4 train.py",
                    note="0 only with LOCAL_RANK unset: under torchrun each rank's own GPU"),
            Example("import os\nlocal_rank = int(os.getenv('LOCAL_RANK', '0'))\n"
                    + _TRAINER.format(dm=", device_map={'': local_rank}"), launcher="torchrun --nproc_per_node 4 train.py"),
            Example("import os, torch\ntorch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
                    "model = torch.nn.Linear(8, 8).cuda()\n", launcher="torchrun --nproc_per_node 2 train.py")],
)
def ddp_ranks_share_one_gpu(script: ScriptFacts, plan: LaunchPlan):
    n, n_ev = plan.processes, plan.processes_evidence
    if not n or n <= 1 or _ranks_pick_their_gpu(script):
        return
    placements = fixed_placements(script)
    if not placements:
        return
    acc = bool(script.of("accelerator"))
    fix = ("use accelerator.device (accelerator.prepare places the model)" if acc else
           "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) at the start, then device = "
           "torch.device('cuda', local_rank)")
    for c, what in placements[:1]:
        yield Draft(f"{n} ranks all place their work with {what}: every rank lands on GPU 0",
                    evidence=(n_ev, call_evidence(c, f"{what}: the same GPU in every rank")),
                    fix=Fix(fix, applicability=Applicability.UNSAFE,
                            edits=present(set_kwarg(c, "device_map", '{"": int(os.environ["LOCAL_RANK"])}'))
                            if c.kind == "model_load" else ()))


@rule(
    "PD113", "implicit-mixed-precision", severity="warning", escalates_to="error", phase="first-step",
    summary="`Accelerator()` without mixed_precision silently takes it from the launch flag, env or accelerate config.",
    what="`Accelerator()` with no `mixed_precision=` while `accelerate launch --mixed_precision`, "
         "`ACCELERATE_MIXED_PRECISION` or the accelerate config file (`mixed_precision: bf16`) turns it on.",
    why="The script reads as fp32, but Accelerator takes `ACCELERATE_MIXED_PRECISION`, which `accelerate launch` "
        "sets from its flag or the user's config: the precision changes with the machine's config file, not the "
        "code: a run written for fp32 silently trains in bf16.",
    error="no error by itself: training silently runs in another precision; with bf16 on a pre-Ampere GPU or fp16 "
          "over fp16 weights it becomes that rule's error",
    fix="Say it in code: `Accelerator(mixed_precision=\"bf16\")` (or \"fp16\"/\"no\"), so the launch config cannot "
        "change it.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: makes the effective value explicit.",
    log=LogSignature(tells=(r"Mismatch dtype between input and weight",), tells_alone=0.4),
    fires=[Example(_ACC_GOOD, launcher="accelerate launch --mixed_precision bf16 train.py"),
           Example(_ACC_GOOD, env={"ACCELERATE_MIXED_PRECISION": "fp16"})],
    silent=[Example(_ACC_GOOD.replace("Accelerator()", "Accelerator(mixed_precision='bf16')"),
                    launcher="accelerate launch --mixed_precision bf16 train.py"),
            Example(_ACC_GOOD, launcher="accelerate launch --mixed_precision no train.py")],
)
def implicit_mixed_precision(setup: Setup, machine: MachineFacts):
    acc = setup.accelerator
    if acc is None or acc.kwarg("mixed_precision").state != ABSENT or setup.style != "accelerate":
        return
    mode = setup.amp.value
    if mode in (None, "no"):
        return
    source = next((e for e in setup.amp.evidence if e.origin != "code"), None)
    severity = "warning"
    if (mode == "bf16" and native_bf16(machine) is False and machine.gpus) or \
            (mode == "fp16" and setup.weights.value == dtypes.FLOAT16):
        severity = "error"
    yield Draft(f"Accelerator() has no mixed_precision, so it runs in {mode} from "
                f"{source.note if source else 'the launch'}",
                evidence=setup.amp.evidence, severity=severity,
                confidence="likely" if setup.amp.inferred else "certain",
                fix=Fix(f"write it in code: Accelerator(mixed_precision={mode!r}) (or 'no')", applicability=Applicability.SAFE,
                        edits=present(set_kwarg(acc, "mixed_precision", repr(mode)))))


@rule(
    "PD114", "implicit-dataparallel", severity="warning", phase="wrap",
    summary="A single-process Trainer on a node with several GPUs wraps the model in nn.DataParallel.",
    what="`Trainer` started with plain `python` where more than one GPU is visible and the model is neither spread "
         "over GPUs by `device_map` nor quantized: Trainer's `_wrap_model` applies `nn.DataParallel` "
         "(`args.n_gpu > 1`).",
    why="DataParallel replicates the model every step from one process: slow, GPU 0 overloaded, the effective batch "
        "size and the logged step count change with the GPU count, and autocast's dtype is not carried into its "
        "worker threads.",
    error="no error: log line `Training with DataParallel so batch size has been adjusted to: ...`",
    fix="Launch DDP (`accelerate launch` / `torchrun --nproc_per_node N`), or restrict the job to one GPU "
        "(`CUDA_VISIBLE_DEVICES=0`).",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: a launch change.",
    needs=("machine",),
    related=('PD208', 'PD301'),
    fires=[Example(_TRAINER.format(dm=""), target="a100:2", launcher="python train.py"),
           Example(_TRAINER.format(dm=", device_map={'': 0}"), target="a100:2", launcher="python train.py"),
           Example(_TRAINER.format(dm="").replace("fp16=True", "bf16=True").replace("torch.float32", "torch.bfloat16"),
                   target="a100:2", launcher="python train.py",
                   note="bf16 weights: no autocast under DataParallel from transformers 4.30, so slow, not a crash")],
    silent=[Example(_TRAINER.format(dm=""), target="a100:2", launcher="torchrun --nproc_per_node 2 train.py"),
            Example(_TRAINER.format(dm=", device_map='auto'"), target="a100:2", launcher="python train.py"),
            Example(_TRAINER.format(dm=""), target="a100:1", launcher="python train.py")],
)
def implicit_dataparallel(setup: Setup, machine: MachineFacts, launch: LaunchFacts, stack: StackFacts,
                          plan: LaunchPlan):
    if setup.style != "trainer" or len(machine.gpus) < 2 or plan.spawner:
        return  # (a tool that starts a process per GPU itself: llamafactory-cli, Lightning)
    if launch.known and launch.launcher != "python":
        return
    if setup.placement.trainer_wrap != "DataParallel" or setup.placement.dataparallel_crash_reasons:
        return  # no wrap, or one that crashes: PD301 reports that
    n = len(machine.gpus)
    yield Draft(f"started as one process with {n} GPUs visible, Trainer wraps the model in nn.DataParallel",
                evidence=(Evidence(None, launch.command or "python (no --launcher given)", "a single process",
                                   "launcher" if launch.known else "assumed"),
                          Evidence(None, gpu_phrase(machine), f"{n} GPUs visible", "profile")) +
                ((call_evidence(setup.model_load, "placed on one device"),) if setup.model_load else ()),
                confidence="certain" if launch.known else "likely",
                fix=Fix(f"run DDP instead: torchrun --nproc_per_node {n} train.py (or CUDA_VISIBLE_DEVICES=0 "
                        f"for one GPU)", applicability=Applicability.UNSAFE,
                        commands=(f"torchrun --nproc_per_node {n} {setup.path}",
                                  f"CUDA_VISIBLE_DEVICES=0 python {setup.path}")))


@rule(
    "PD115", "gpu-memory-in-use", severity="warning", phase="load",
    summary="A visible GPU already has memory in use by another live process.",
    what="A GPU the job will use on which a running process (an inference server, a notebook, another job) holds "
         "more than 1 GiB.",
    why="The job gets only what is left: an OOM at load or at the first large batch, and contended compute.",
    error="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...",
    fix="Use free GPUs (`CUDA_VISIBLE_DEVICES`) or wait for the other process; ask its owner before ending it.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only.",
    needs=("machine",),
    log=LogSignature(from_logs=False),
    fires=[Example("import torch\n", machine="h100_8x")],
    silent=[Example("import torch\n", machine="titan_rtx"),
            Example("import torch\n", machine="h100_8x", env={"CUDA_VISIBLE_DEVICES": "0,1,2"})],
)
def gpu_memory_in_use(machine: MachineFacts):
    for g in machine.gpus:
        live = [p for p in g.processes if not p.stale and p.used_mib >= 1024]
        if not live:
            continue
        used = sum(p.used_mib for p in live) / 1024
        free_gpus = [str(x.index) for x in machine.gpus if not x.processes]
        yield Draft(f"GPU {g.index} ({g.name}) has {used:.1f} GiB of {g.memory_total_mib / 1024:.0f} GiB in use by "
                    + ", ".join(describe_process(p, machine) for p in live),
                    evidence=(Evidence(None, f"GPU {g.index}", f"{used:.1f} GiB in use", "profile"),),
                    fix=Fix("use the free GPUs" + (f": CUDA_VISIBLE_DEVICES={','.join(free_gpus)}"
                                                    if free_gpus else ""), applicability=Applicability.UNSAFE))
