"""PD127 global-rank-as-device: A multi-node job picks its GPU by the global rank, which runs past the GPUs of every
node but the first."""

from __future__ import annotations

from ...derive.launch import GLOBAL_RANK_VARIABLES, environment_variables
from ...model.facts import Call, JobFacts, LaunchFacts, ScriptFacts, Value
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, rule

_SCRIPT = (
    "import os\nimport torch\nimport torch.distributed as dist\n"
    "dist.init_process_group('nccl')\n"
    "{read}\n"
    "torch.cuda.set_device({device})\n"
    "model = torch.nn.Linear(512, 512).cuda()\n"
    "model = torch.nn.parallel.DistributedDataParallel(model)\n"
)
_MULTI_NODE = "torchrun --nnodes 2 --nproc_per_node 4 --rdzv_backend c10d --rdzv_endpoint node1:29400 train.py"


def device_values(script: ScriptFacts) -> list[tuple[Call, Value]]:
    """Where the script names the GPU a process uses: set_device, `.to(...)` / `.cuda(...)`, a device_map."""
    out: list[tuple[Call, Value]] = []
    for c in script.of("set_device"):
        out.extend((c, v) for v in c.args[:1])
    for c in script.of("cast"):
        method = c.callee.rsplit(".", 1)[-1]
        if method in ("to", "cuda"):
            out.extend((c, v) for v in list(c.args[:1]) + [c.kwargs[k] for k in ("device",) if k in c.kwargs])
    for c in script.of("model_load"):
        if "device_map" in c.kwargs:
            out.append((c, c.kwargs["device_map"]))
    return out


@rule(
    "PD127",
    "global-rank-as-device",
    severity="error",
    phase="wrap",
    summary="A multi-node job picks its GPU by the global rank, which runs past the GPUs of every node but the first.",
    what="`torch.cuda.set_device(int(os.environ['RANK']))`, `.to(f'cuda:{rank}')` or `device_map={'': rank}` with "
    "the rank read from RANK / SLURM_PROCID / OMPI_COMM_WORLD_RANK, under a launch of several nodes.",
    why="The global rank numbers every process of the job: on the second node of 4-GPU nodes it is 4 to 7, and "
    "there is no cuda:4. On one node the global and the local rank agree, which is why such scripts work until "
    "they scale out. The local rank (LOCAL_RANK, SLURM_LOCALID) is the GPU on the process's own node.",
    error="RuntimeError: CUDA error: invalid device ordinal",
    fix="Read the device from LOCAL_RANK (`int(os.environ['LOCAL_RANK'])`), or use accelerate's "
    "`accelerator.device` / `PartialState().local_process_index`.",
    applicability=Applicability.DISPLAY,
    fires=[
        Example(
            _SCRIPT.format(read="rank = int(os.environ['RANK'])", device="rank"), target="a100:4", launcher=_MULTI_NODE
        ),
        Example(
            _SCRIPT.format(read="rank = int(os.environ.get('RANK', 0))", device="f'cuda:{rank}'"),
            target="a100:4",
            launcher=_MULTI_NODE,
            note="an f-string device from the rank",
        ),
    ],
    silent=[
        Example(
            _SCRIPT.format(read="local_rank = int(os.environ['LOCAL_RANK'])", device="local_rank"),
            target="a100:4",
            launcher=_MULTI_NODE,
        ),
        Example(
            _SCRIPT.format(read="rank = int(os.environ['RANK'])", device="rank"),
            target="a100:4",
            launcher="torchrun --nproc_per_node 4 train.py",
            note="one node: the global rank is the local one",
        ),
    ],
)
def global_rank_as_device(script: ScriptFacts, launch: LaunchFacts, job: JobFacts):
    nodes = max(launch.num_machines if launch.known else 1, job.nodes if job is not None else 1)
    if nodes < 2:
        return
    for call, value in device_values(script):
        global_rank = [name for name in environment_variables(value) if name in GLOBAL_RANK_VARIABLES]
        if not global_rank:
            continue
        name = global_rank[0]
        yield Draft(
            f"the GPU is chosen by {name}, the rank among all {nodes} nodes' processes: on every node but the first "
            "it names a GPU the node does not have",
            evidence=(
                Evidence(call.location, call.text, f"device from {name}", "code"),
                Evidence(None, launch.command or (job.path if job else ""), f"{nodes} nodes", "launcher"),
            ),
            fix=Fix(f"read the device from LOCAL_RANK instead of {name}", Applicability.DISPLAY),
        )
        return
