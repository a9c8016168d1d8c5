"""Job scripts as the launch, the partition's GPU, multi-node snapshots, and host checks without a GPU driver."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.probes.collect import System, gather, read_snapshot
from precision_doctor.probes.jobscript import is_job_script, read_job

from .fake_nvml import NO_NVML, NO_SCHEDULER

ROOT = Path(__file__).resolve().parents[1]
ALLOCATIONS = ROOT / "fixtures" / "allocations"
TRAIN = "import torch\nmodel = torch.nn.Linear(8, 8)\nopt = torch.optim.AdamW(model.parameters())\nopt.step()\n"


def _write(folder: Path, job: str, script: str = TRAIN, name: str = "train.py") -> Path:
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(script)
    path = folder / "job.sbatch"
    path.write_text(job)
    return path


def _check(path: Path, **kw):
    facts = gather([str(path)], stack_overrides=dict(CURRENT), environ={}, system=kw.pop("system", NO_NVML), **kw)
    return engine.run(facts), facts


def test_directives_continuations_and_expansion(tmp_path):
    job = _write(
        tmp_path / "exp",
        "#!/bin/bash\n#SBATCH -N2\n#SBATCH --ntasks-per-node 1\n#SBATCH --gpus-per-node=h100:8\n"
        "#SBATCH -p gpu --exclusive\nNPROC=${NPROC:-8}\nPORT=$((20000 + 17))\n"
        "cd $SLURM_SUBMIT_DIR/src\n"
        "srun --kill-on-bad-exit=1 torchrun --nnodes $SLURM_NNODES \\\n  --nproc_per_node ${NPROC} \\\n"
        "  --master_port $PORT train.py --lr 1e-4\n#SBATCH --nodes=9\n",
        name="src/train.py",
    )
    facts, launch = read_job(str(job))
    assert (facts.nodes, facts.tasks_per_node, facts.gpus_per_node, facts.gpu_type) == (2, 1, 8, "h100")
    assert facts.directives["partition"].value == "gpu" and "exclusive" in facts.directives
    assert facts.launch_line == 9 and facts.srun
    assert facts.script.endswith("src/train.py")  # found from the `cd` line
    assert launch.num_machines == 2 and launch.num_processes.value == 8 and launch.main_process_port.value == 20017
    assert launch.script_args == ("--lr", "1e-4")


def test_sbatch_reads_its_own_lines_and_a_trailing_semicolon_ends_an_assignment(tmp_path):
    """An `#SBATCH` line is sbatch's, not a shell's: `|` in a constraint splits nothing. `PORT=29513;` is still
    the script's own variable."""
    job = _write(
        tmp_path / "semi",
        "#!/bin/bash\n#SBATCH --constraint=a100|h100 --gres=gpu:4\n#SBATCH --nodes=1\nPORT=29513;\n"
        "srun torchrun --nproc_per_node 4 --master_port $PORT train.py 2>&1 | tee train.log\n",
    )
    facts, launch = read_job(str(job))
    assert facts.directives["constraint"].value == "a100|h100" and "gres" in facts.directives
    assert launch.main_process_port.value == 29513 and launch.script_args == ()


def test_values_set_at_run_time_stay_unknown_and_nothing_is_run(tmp_path):
    marker = tmp_path / "ran"
    job = _write(
        tmp_path,
        f"#!/bin/bash\n#SBATCH -N 2\nexport MASTER_PORT=$(touch {marker}; echo 1234)\n"
        f"export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456\n"
        f"srun torchrun --nnodes $NODES --nproc_per_node `nproc` train.py\n",
    )
    facts, launch = read_job(str(job))
    assert not marker.exists()
    assert launch.main_process_port.state != "known"  # from a command: not guessed
    assert launch.num_processes.state != "known"
    assert facts.env["HF_TOKEN"].value == "<redacted>"
    result, _ = _check(job, target="a100:4")
    assert not [f for f in result.findings if f.rule_id in ("PD116", "PD117", "PD119")]  # silent on unknowns


def test_job_detection(tmp_path):
    (tmp_path / "run.sh").write_text("python train.py\n")
    (tmp_path / "job").write_text("#!/usr/bin/env bash\npython train.py\n")
    (tmp_path / "train.py").write_text("#!/usr/bin/env python\nimport torch\n")
    assert is_job_script(str(tmp_path / "run.sh")) and is_job_script(str(tmp_path / "job"))
    assert not is_job_script(str(tmp_path / "train.py"))


def test_a_job_is_checked_with_its_training_script_and_findings_point_at_its_lines(tmp_path):
    job = _write(
        tmp_path,
        "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=4\n#SBATCH --gres=gpu:4\n"
        "srun torchrun --nproc_per_node 4 train.py\n",
    )
    result, facts = _check(job, target="a100")
    assert [s.path for s in facts.scripts] == [str(tmp_path / "train.py")] or facts.scripts[0].path.endswith("train.py")
    assert len(facts.machine.gpus) == 4  # --target a100 with the job's --gres count
    hit = next(f for f in result.findings if f.rule_id == "PD118")
    assert hit.path.endswith("job.sbatch") and {loc.line for loc in hit.locations} == {5, 3}


def test_a_job_running_several_programs_is_judged_by_the_one_that_trains(tmp_path):
    """Data preparation before training and evaluation after it: the training launch is the job's, with the
    exports above it; a second training stage is named as not judged, never silently passed."""
    (tmp_path / "prepare.py").write_text("import datasets\ndatasets.load_dataset('x').save_to_disk('data')\n")
    (tmp_path / "eval.py").write_text("import torch\nmodel.eval()\n")
    (tmp_path / "dpo.py").write_text("from trl import DPOTrainer\nDPOTrainer(model=m).train()\n")
    job = _write(
        tmp_path,
        "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:4\npython prepare.py\nexport MASTER_PORT=29511\n"
        "srun torchrun --nproc_per_node 4 train.py\nexport MASTER_PORT=29999\npython eval.py\n"
        "torchrun --nproc_per_node 4 dpo.py\n",
    )
    facts, launch = read_job(str(job))
    assert facts.launch_line == 6 and facts.script.endswith("train.py") and launch.launcher == "torchrun"
    assert launch.main_process_port.value == 29511  # the export above it, not the one after
    assert [u.what for u in facts.unknowns] == ["line 9"] and "dpo.py" in facts.unknowns[0].reason
    result, gathered = _check(job, target="a100")
    assert [Path(s.path).name for s in gathered.scripts] == ["train.py"]
    fixed_port = next(f for f in result.findings if f.rule_id == "PD119")
    assert "port: 29511," in fixed_port.error  # the port the job fixes, in the error it would show


@pytest.mark.parametrize(
    "line,port,args",
    [
        ("export MASTER_ADDR=$(hostname); srun torchrun --nproc_per_node 4 --master_port 29512 train.py", 29512, ()),
        (
            "P=29513; RUN=a; srun torchrun --nproc_per_node 4 --master_port $P train.py --name $RUN",
            29513,
            ("--name", "a"),
        ),
        ("cd . && export MASTER_PORT=29514 && srun python train.py", 29514, ()),
        ("if [ -f data.bin ]; then srun torchrun --nproc_per_node 4 --master_port 29515 train.py; fi", 29515, ()),
        ("( srun torchrun --nproc_per_node 4 --master_port 29516 train.py ) 2>&1 | tee log", 29516, ()),
        ("mkdir -p out && cd out && srun torchrun --nproc_per_node 4 --master_port 29517 ../train.py", 29517, ()),
    ],
)
def test_a_job_line_that_sets_variables_then_launches(tmp_path, line, port, args):
    """Variables set, folders changed and compound commands opened on the launch's own line: the launch is still
    found, with what the line set before it."""
    facts, launch = read_job(str(_write(tmp_path, f"#!/bin/bash\n#SBATCH --gres=gpu:4\n{line}\n")))
    assert facts.launch_line == 3 and facts.script.endswith("train.py")
    assert launch.main_process_port.value == port
    assert launch.script_args == args


def test_a_launch_built_in_variables_keeps_what_is_set_at_run_time_as_written(tmp_path):
    """accelerate's own SLURM example: the launch is assembled in variables, one part from a command. The launch is
    read, the part set at run time stays unknown, and accelerate's total process count is split over its machines."""
    job = _write(
        tmp_path,
        "#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:4\n"
        "export GPUS_PER_NODE=4\nhead_node_ip=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)\n"
        'export LAUNCHER="accelerate launch \\\n    --num_processes $((SLURM_NNODES * GPUS_PER_NODE)) \\\n'
        '    --num_machines $SLURM_NNODES --main_process_ip $head_node_ip --main_process_port 29500 \\\n    "\n'
        'export SCRIPT="train.py"\nexport CMD="$LAUNCHER $SCRIPT --mixed_precision fp16"\nsrun $CMD\n',
    )
    facts, launch = read_job(str(job))
    assert facts.launch_line == 13 and launch.launcher == "accelerate" and facts.script.endswith("train.py")
    assert launch.num_processes.value == 16 and "$head_node_ip" in launch.command
    result, _ = _check(job, target="a100")
    assert not [f for f in result.findings if f.rule_id in ("PD116", "PD118")]  # 16 over 4 machines: 4 per node


def test_axolotl_preprocess_before_train_is_not_the_training_launch(tmp_path):
    job = _write(
        tmp_path,
        "#!/bin/bash\n#SBATCH --gres=gpu:8\nsrun axolotl preprocess train.yaml\n"
        "srun axolotl train train.yaml --launcher torchrun -- --nproc_per_node=8\n",
        script="base_model: org/m\n",
        name="train.yaml",
    )
    facts, launch = read_job(str(job))
    assert facts.launch_line == 4 and launch.launcher == "torchrun" and not facts.unknowns  # axolotl train under it


def test_a_subshell_keeps_what_it_sets_and_a_sweep_reads_each_launchs_own_port(tmp_path):
    (tmp_path / "data").mkdir()
    job = _write(
        tmp_path,
        "#!/bin/bash\n#SBATCH --gres=gpu:4\n(export MASTER_PORT=29601; python prepare.py)\n"
        "(cd data && python prepare.py)\nsrun python train.py\n",
    )
    facts, launch = read_job(str(job))
    assert facts.launch_line == 5 and facts.script.endswith("train.py") and "MASTER_PORT" not in facts.env
    assert not facts.unknowns  # train.py is found in the job's folder, not in data/
    sweep = _write(
        tmp_path / "sweep",
        "#!/bin/bash\n#SBATCH --gres=gpu:8\nPORT=29500\ntorchrun --nproc_per_node 4 --master_port $PORT train.py &\n"
        "PORT=29501\ntorchrun --nproc_per_node 4 --master_port $PORT train.py &\nwait\n",
    )
    result, _ = _check(sweep, target="a100")
    assert not [f for f in result.findings if f.rule_id == "PD119" and f.severity == "error"]


def test_an_evaluation_module_after_training_through_imported_code_is_not_judged(tmp_path):
    (tmp_path / "pretrain_gpt.py").write_text("from megatron.training import pretrain\npretrain(provider)\n")
    job = _write(
        tmp_path,
        "#!/bin/bash\n#SBATCH --gres=gpu:4\npython train_tokenizer.py\n"
        "srun torchrun --nproc_per_node 4 pretrain_gpt.py --num-layers 24\nsrun python -m tools.evaluate --ckpt out\n",
    )
    facts, launch = read_job(str(job))
    assert facts.launch_line == 4 and launch.launcher == "torchrun" and facts.script.endswith("pretrain_gpt.py")
    assert not facts.unknowns  # a tokenizer's training is not named as another training launch


@pytest.mark.parametrize(
    "lines,port",
    [
        ("MASTER_PORT=29555\n", None),  # a shell variable: the launch's environment has none
        ("MASTER_PORT=29555; srun python -c pass\n", None),
        ("MASTER_PORT=29556\nexport MASTER_PORT\n", 29556),
        ("set -a\nMASTER_PORT=29557\n", 29557),
        ("export MASTER_PORT=1\nMASTER_PORT=29558\n", 29558),  # assigned again once exported: still exported
        ("export -n X\nexport MASTER_PORT=29559\n", 29559),
        ("export MASTER_PORT=29560\nexport -n MASTER_PORT\n", None),
    ],
)
def test_only_exported_variables_reach_the_launch(tmp_path, lines, port):
    facts, launch = read_job(str(_write(tmp_path, f"#!/bin/bash\n#SBATCH --gres=gpu:4\n{lines}srun python train.py\n")))
    assert launch.main_process_port.value == port and ("MASTER_PORT" in facts.env) == (port is not None)


def test_a_launch_kept_in_arrays_is_read_where_it_runs(tmp_path):
    """`CMD=(torchrun ...)` assigns and runs nothing; `srun "${CMD[@]}" "${ARGS[@]}"` runs each element as a word."""
    job = _write(
        tmp_path,
        '#!/bin/bash\n#SBATCH --gres=gpu:4\nARGS=(--lr 1e-4 --run-name "my run")\n'
        "CMD=(torchrun --nproc_per_node 4 --master_port 29533 train.py)\n"
        'srun "${CMD[@]}" "${ARGS[@]}"\n',
    )
    facts, launch = read_job(str(job))
    assert facts.launch_line == 5 and launch.launcher == "torchrun" and facts.script.endswith("train.py")
    assert launch.main_process_port.value == 29533 and launch.script_args == ("--lr", "1e-4", "--run-name", "my run")


def test_the_partitions_config_and_the_scheduler_name_the_gpu(tmp_path):
    job = _write(tmp_path, "#!/bin/bash\n#SBATCH -p big\n#SBATCH --gres=gpu:2\npython train.py\n")
    _, facts = _check(job, partitions={"big": {"gpu": "a100-80gb", "count": 8}})
    assert facts.machine.known and len(facts.machine.gpus) == 2 and "A100" in facts.machine.gpus[0].name
    assert "project config" in facts.machine.source

    answers = {
        ("show", "partition", "-o", "big"): "PartitionName=big Nodes=g[01-02] Default=NO\n",
        ("show", "hostnames", "g[01-02]"): "g01\ng02\n",
        ("show", "node", "-o", "g01"): "NodeName=g01 Gres=gpu:l40s:4(S:0-1) State=IDLE\n",
    }
    scheduler = System(
        nvml=NO_NVML.nvml, check_ports=NO_NVML.check_ports, scheduler=lambda args: answers.get(tuple(args), "")
    )
    _, facts = _check(job, system=scheduler)
    assert facts.machine.known and facts.machine.gpus[0].name == "NVIDIA L40S" and len(facts.machine.gpus) == 2
    assert "scontrol" in facts.machine.source

    _, facts = _check(job)  # neither: unknown, and the reason says what to add
    assert not facts.machine.known and "[tool.precision-doctor.partitions.big]" in facts.machine.reason


def test_partitions_config_errors_are_one_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.precision-doctor.partitions]\nbig = { gpu = 3 }\n")
    (tmp_path / "train.py").write_text(TRAIN)
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", "train.py"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 2 and "partitions] big: needs gpu" in done.stderr and "Traceback" not in done.stderr


def test_multi_node_snapshot_and_a_folder_of_node_snapshots(tmp_path):
    machine, _ = read_snapshot(str(ALLOCATIONS / "allocation_2x_mixed.json"))
    assert [n.node_name for n in machine.nodes] == ["gpu01", "gpu03"] and machine.allocation.hosts == ("gpu01", "gpu03")
    folder = tmp_path / "nodes"
    folder.mkdir()
    whole = json.loads((ALLOCATIONS / "allocation_2x_mixed.json").read_text())
    for node in whole["machine"]["nodes"]:
        (folder / f"{node['host']['hostname']}.json").write_text(
            json.dumps({"kind": whole["kind"], "version": whole["version"], "machine": node, "stack": whole["stack"]})
        )
    merged, _ = read_snapshot(str(folder))
    assert [n.node_name for n in merged.nodes] == ["gpu01", "gpu03"]
    (tmp_path / "train.py").write_text(TRAIN)
    facts = gather(
        [str(tmp_path / "train.py")],
        launcher="torchrun --nnodes 2 --nproc_per_node 4 train.py",
        facts_file=str(folder),
        stack_overrides=dict(CURRENT),
    )
    found = {f.rule_id: f for f in engine.run(facts).findings}
    assert {"PD121", "PD122", "PD123", "PD124"} <= set(found)
    assert "gpu03" in found["PD124"].message and "31337" in found["PD124"].message
    assert "master node gpu01" in found["PD123"].message


def test_host_checks_run_without_a_gpu_driver(tmp_path):
    """No NVML: the ports are still probed, including a port outside 29500-29510 that the launch names."""
    (tmp_path / "train.py").write_text(TRAIN)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        no_driver = System(nvml=NO_NVML.nvml, scheduler=NO_SCHEDULER)  # the real bind test
        facts = gather(
            [str(tmp_path / "train.py")],
            launcher=f"torchrun --nproc_per_node 2 --master_port {port} train.py",
            stack_overrides=dict(CURRENT),
            environ={},
            system=no_driver,
        )
    assert not facts.machine.known and port in facts.machine.host.ports_checked
    result = engine.run(facts)
    assert any(f.rule_id == "PD110" and str(port) in f.message for f in result.findings)
    assert "PD110" not in {s.rule_id for s in result.skipped}


def test_snapshot_all_nodes_outside_an_allocation_is_one_line():
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "snapshot", "--all-nodes"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and "SLURM_JOB_ID is not set" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["allocation_2x_h100", "allocation_2x_mixed"])
def test_allocation_fixtures_round_trip(name):
    machine, _ = read_snapshot(str(ALLOCATIONS / f"{name}.json"))
    assert len(machine.nodes) == 2 and all(n.host.interfaces for n in machine.nodes)
