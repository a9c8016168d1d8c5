"""Devices written from the rank, the many ways scripts write them: each reads per process (no PD112 on one
node), and a device from the global rank under several nodes is PD127 (the second node has no cuda:4)."""

import pytest

SCRIPT = (
    "import os\nimport torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "{read}\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32{load})\n"
    "{place}"
    "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n"
)
READS = {
    "local": "r = int(os.environ.get('LOCAL_RANK', 0))",
    "local-no-default": "r = int(os.environ['LOCAL_RANK'])",
    "global": "r = int(os.environ.get('RANK', 0))",
    "global-no-default": "r = int(os.environ['RANK'])",
    "slurm": "r = int(os.environ['SLURM_PROCID'])",
}
PLACES = {
    "to-fstring": ("", "model.to(f'cuda:{r}')\n"),
    "torch-device": ("", "model.to(torch.device('cuda', r))\n"),
    "torch-device-index": ("", "model.to(torch.device('cuda', index=r))\n"),
    "set-device": ("", "torch.cuda.set_device(r)\n"),
    "device-map": (", device_map={'': r}", ""),
}
ONE_NODE = "torchrun --nproc_per_node 4 train.py"
TWO_NODES = "torchrun --nnodes 2 --nproc_per_node 4 --rdzv_backend c10d --rdzv_endpoint node1:29400 train.py"


def fired(run_check, read, place, launcher):
    load, placed = PLACES[place]
    code = SCRIPT.format(read=READS[read], load=load, place=placed)
    result, _ = run_check(code, target="a100:4", launcher=launcher)
    return {f.rule_id for f in result.findings}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("read", READS)
def test_a_device_from_the_rank_is_per_process_on_one_node(run_check, read, place):
    assert not {"PD112", "PD127"} & fired(run_check, read, place, ONE_NODE)


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("read", READS)
def test_across_nodes_only_the_local_rank_names_a_gpu_of_the_node(run_check, read, place):
    rules = fired(run_check, read, place, TWO_NODES)
    assert ("PD127" in rules) is (not read.startswith("local")), sorted(rules)
    assert "PD112" not in rules


def test_a_constant_device_is_still_every_rank_on_gpu_0(run_check):
    code = SCRIPT.format(read="r = 0", load="", place="model.to(torch.device('cuda', r))\n")
    result, _ = run_check(code, target="a100:4", launcher=ONE_NODE)
    assert "PD112" in {f.rule_id for f in result.findings}


def test_a_slurm_job_over_two_nodes_reads_its_nodes_from_the_job(run_check):
    job = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n#SBATCH --gres=gpu:4\nsrun python train.py\n"
    code = SCRIPT.format(read=READS["slurm"], load="", place="torch.cuda.set_device(r)\n")
    result, _ = run_check(code, target="a100:4", job=job)
    assert "PD127" in {f.rule_id for f in result.findings}


WARM_UP = (
    "import torch\nfrom accelerate import Accelerator\n{before}accelerator = Accelerator()\n{after}"
    "model = torch.nn.Linear(512, 512)\nopt = torch.optim.AdamW(model.parameters())\n"
    "model, opt = accelerator.prepare(model, opt)\n"
)


@pytest.mark.parametrize(
    "factory",
    ["torch.randn(1024, 1024, device='cuda')", "torch.zeros(8, device='cuda:0')", "torch.empty(8, device=0)"],
)
def test_a_tensor_made_on_the_gpu_before_the_rank_chose_its_own(run_check, factory):
    """Each rank opens a CUDA context on GPU 0: wasted memory there (a warning), refused in Exclusive_Process mode
    (an error); made after Accelerator() chose the rank's GPU, 'cuda' is the rank's own."""
    launch = "accelerate launch --num_processes 2 train.py"
    code = WARM_UP.format(before=f"warm = {factory}\n", after="")
    result, _ = run_check(code, target="a100:2", launcher=launch)
    assert [f.severity for f in result.findings if f.rule_id == "PD112"] == ["warning"]
    result, _ = run_check(code, machine="l40s_2x_exclusive_stopped", launcher=launch)
    assert "error" in [f.severity for f in result.findings if f.rule_id == "PD112"]
    later = WARM_UP.format(before="", after=f"warm = {factory}\n")
    result, _ = run_check(later, target="a100:2", launcher=launch)
    fired = {f.rule_id for f in result.findings}
    assert ("PD112" in fired) is ("cuda:0" in factory or "device=0" in factory)
