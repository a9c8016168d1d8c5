"""What the cluster rules share: the job script and the allocation it runs on (PD116-PD126): processes per node against
the GPUs the job asks for,."""

from __future__ import annotations

import shlex

from ...derive.launch import accelerate_machines
from ...model.facts import KNOWN, JobFacts, LaunchFacts, Location, MachineFacts
from ...model.findings import Evidence

SPAWNERS = ("torchrun", "accelerate", "deepspeed")  # launchers that start one process per GPU themselves


TRAIN = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
    "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n"
)


LOOP = (
    "import torch\nmodel = torch.nn.Linear(8, 8).cuda()\nopt = torch.optim.AdamW(model.parameters())\n"
    "for _ in range(10):\n    model(torch.randn(4, 8, device='cuda')).sum().backward()\n    opt.step()\n"
)


def _job(*directives: str, body: str) -> str:
    return "#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in directives) + body


def _at(job: JobFacts, line: int, excerpt: str, note: str) -> Evidence:
    return Evidence(Location(job.path, line), excerpt, note, "job-script")


def directive(job: JobFacts, name: str, note: str) -> Evidence:
    s = job.directives[name]
    return _at(job, s.line, f"#SBATCH --{name}={s.value}", note)


def launch_evidence(job: JobFacts, note: str) -> Evidence:
    return _at(job, job.launch_line, ("srun " if job.srun else "") + job.launch, note)


def _flag(command: str, *names: str) -> str | None:
    """The value of a launcher flag as written in the (expanded) command, or None when it is not given."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, w in enumerate(words):
        name, eq, value = w.partition("=")
        if name in names:
            return value if eq else (words[i + 1] if i + 1 < len(words) else "")
    return None


def per_task_processes(launch: LaunchFacts) -> int | None:
    """Processes one launcher invocation starts on its node; None when the launch does not say. accelerate's count
    is the total over its machines (`derive.launch.accelerate_machines`)."""
    if launch.launcher == "python":
        return 1
    if launch.launcher in SPAWNERS:
        v = launch.num_processes
        if v.state == KNOWN and isinstance(v.value, int):
            machines = accelerate_machines(launch) if launch.launcher == "accelerate" else 1
            return v.value // machines if machines else None
        if launch.launcher == "torchrun" and _flag(launch.command, "--nproc_per_node", "--nproc-per-node") is None:
            return 1  # torchrun's default
    return None


def _tasks(job: JobFacts) -> int | None:
    """Copies of the launch line on each node: srun's tasks per node, or one (the batch step) without srun."""
    return job.tasks_per_node if job.srun else 1


def gpus_evidence(job: JobFacts) -> Evidence:
    name = next((n for n in ("gpus-per-node", "gres", "gpus-per-task") if n in job.directives), "")
    return (
        directive(job, name, f"{job.gpus_per_node} GPUs per node")
        if name
        else launch_evidence(job, f"{job.gpus_per_node} GPUs per node")
    )


def n_squared(job: JobFacts, launch: LaunchFacts) -> bool:
    tasks, each = _tasks(job), per_task_processes(launch)
    return bool(job.srun and tasks and tasks > 1 and launch.launcher in SPAWNERS and each and each > 1)


_NODE = "import torch\n"


TORCHRUN = "torchrun --nnodes 2 --nproc_per_node 8 --master_port 29500 train.py"


def _names(node: MachineFacts) -> set[str]:
    host = node.host
    if host is None:
        return {node.source}
    return {host.hostname, host.node_name, node.source} | {a for addrs in host.interfaces.values() for a in addrs}


def env_value(name: str, job: JobFacts | None, machine: MachineFacts) -> tuple[str, Evidence | None]:
    """A launch variable's value: the job script's export (literal only), else the one the nodes were probed with."""
    if job is not None and name in job.env:
        s = job.env[name]
        if "$" in s.value or "`" in s.value:
            return "", None
        return s.value, _at(job, s.line, f"export {name}={s.value}", f"{name} in the job script")
    for node in machine.nodes:
        value = node.host.env.get(name, "") if node.host else ""
        if value:
            return value, Evidence(None, f"{name}={value}", f"in the environment on {node.node_name}", "env")
    return "", None
