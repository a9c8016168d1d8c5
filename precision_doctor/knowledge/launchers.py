"""The launchers' vocabulary: which command starts training, the flags each takes and the fact each sets, and
their defaults (the rendezvous port)."""

from __future__ import annotations

from ..model.util import record

DEFAULT_PORT = 29500  # torchrun's, deepspeed's and a multi-process accelerate launch's rendezvous port

# flag spellings each launcher accepts, mapped to the fact they set
FLAGS = {
    "accelerate": {
        "--num_processes": "num_processes",
        "--mixed_precision": "mixed_precision",
        "--main_process_port": "main_process_port",
        "--config_file": "config_file",
        "--num_machines": "num_machines",
        "--gpu_ids": "gpu_ids",
    },
    "torchrun": {
        "--nproc_per_node": "num_processes",
        "--nproc-per-node": "num_processes",
        "--master_port": "main_process_port",
        "--master-port": "main_process_port",
        "--nnodes": "num_machines",
    },
    "deepspeed": {
        "--num_gpus": "num_processes",
        "--num-gpus": "num_processes",
        "--master_port": "main_process_port",
        "--num_nodes": "num_machines",
    },
}
BOOL_FLAGS = {"--multi_gpu", "--cpu", "--standalone", "--use_deepspeed", "--use_fsdp", "--debug", "-m"}

# accelerate launch's DeepSpeed / FSDP options, which override its config file (derive/sharding.py reads them)
ACCELERATE_SWITCHES = ("use_deepspeed", "use_fsdp", "multi_gpu", "cpu")
ACCELERATE_OPTIONS = (
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "zero3_init_flag",
    "deepspeed_config_file",
    "fsdp_sharding_strategy",
    "fsdp_offload_params",
    "fsdp_version",
    "fsdp_reshard_after_forward",
    "fsdp_use_orig_params",
)


@record
class RecipeCli:
    """How a config family's own CLI runs a recipe checked with no launch given: the processes it starts."""

    command: str  # as the report names it, "llamafactory-cli"
    starts: str  # what it starts, "torchrun"
    processes_env: str = ""  # the variable that sets its processes per node, "" when none does
    port_source: str = ""  # where its rendezvous port comes from, "" for the launcher's default


# keyed by the family's import tag in the facts (ScriptFacts.imports). With several visible GPUs each starts one
# process per GPU: `llamafactory-cli train` starts torchrun (NPROC_PER_NODE if set) on a free port (LLaMA-Factory
# 0.9.5 launcher.py:59-66); `axolotl train` starts `accelerate launch` (axolotl 0.19 cli/main.py:102), which with no
# config of its own takes every GPU.
RECIPE_CLIS = {
    "llama-factory": RecipeCli(
        "llamafactory-cli", "torchrun", processes_env="NPROC_PER_NODE", port_source="a free port"
    ),
    "axolotl": RecipeCli("axolotl", "accelerate launch"),
}


def launcher_of(words: list[str]) -> tuple[str | None, list[str]]:
    head = words[0].rsplit("/", 1)[-1]
    if head == "accelerate" and len(words) > 1 and words[1] == "launch":
        return "accelerate", words[2:]
    if head in ("torchrun",):
        return "torchrun", words[1:]
    if head == "deepspeed":
        return "deepspeed", words[1:]
    if head.startswith("python"):
        if len(words) > 2 and words[1] == "-m" and words[2] in ("torch.distributed.run", "torch.distributed.launch"):
            return "torchrun", words[3:]
        if len(words) > 2 and words[1] == "-m" and words[2] == "accelerate.commands.launch":
            return "accelerate", words[3:]
        return "python", words[1:]
    return None, words
