"""Every launch command users type: understood with its own defaults, the same job the same whichever way it is
started, and a launcher the doctor does not know named in the report, never refused."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.probes.collect import gather
from precision_doctor.probes.launch import parse_launcher
from precision_doctor.report.json_report import render

from .conftest import machine_probes

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "fixtures" / "configs"
# a Trainer script: fp16 weights under fp16 AMP (PD201 on any launch), device_map="auto" (PD302 under DDP ranks)
TRAIN = (
    "import torch\n"
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32, device_map='auto')\n"
    "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n"
)
JOB = "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:2\nsrun torchrun --nproc_per_node 2 train.py\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder as a user's: a script, a module run with -m, recipes of three families and a job script."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(TRAIN)
    shutil.copy(CONFIGS / "llamafactory" / "seed001_titan_bf16_lora.yaml", tmp_path / "lf.yaml")
    shutil.copy(CONFIGS / "axolotl" / "seed001_titan_full_ft.yml", tmp_path / "ax.yml")
    (tmp_path / "sft.yaml").write_text("model_name_or_path: gpt2\ndataset_name: x\nbf16: true\noutput_dir: out\n")
    (tmp_path / "job.sbatch").write_text(JOB)
    return tmp_path


def check(launcher, paths=(), target="a100:2", machine=None, environ=None):
    facts = gather(
        list(paths),
        target=target if machine is None else None,
        launcher=launcher,
        stack_overrides=dict(CURRENT),
        **machine_probes(machine, environ),
    )
    return engine.run(facts), facts


# (the command, the processes per node it starts on two A100s)
COMMANDS = [
    ("python train.py", 1),
    ("torchrun --nproc_per_node 2 train.py", 2),
    ("accelerate launch --num_processes 2 train.py", 2),
    ("deepspeed --num_gpus 2 train.py", 2),
    ("python -m torch.distributed.run --nproc_per_node 2 train.py", 2),
    ("srun torchrun --nproc_per_node 2 train.py", 2),
    ("srun python train.py", 1),
    ("mpirun -np 2 python train.py", 2),
    ("CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node 2 train.py", 2),
    ("env NCCL_DEBUG=INFO torchrun --nproc_per_node 2 train.py", 2),
    ("nohup python train.py", 1),
    ("fabric run --devices 2 train.py", 2),
    ("llamafactory-cli train lf.yaml", 2),
    ("FORCE_TORCHRUN=1 NPROC_PER_NODE=1 llamafactory-cli train lf.yaml", 1),
    ("axolotl train ax.yml", 2),
    ("trl sft --config sft.yaml", 2),
    ("tune run --nproc_per_node 2 full_finetune_distributed --config sft.yaml", 2),
    ("sbatch job.sbatch", 2),
    ("python -m pkg.train", 1),
    ("mylauncher go train.py", None),
]


@pytest.mark.parametrize("command,processes", COMMANDS, ids=[c for c, _ in COMMANDS])
def test_every_launch_command_gives_a_report(project, command, processes):
    result, facts = check(command)
    report = json.loads(render(result, facts))
    assert report["launch"]["processes_per_node"] == processes, report["launch"]
    if processes is None:
        assert report["launch"]["unknown_launcher"] == "mylauncher"
        assert any("launcher `mylauncher`" in u["what"] and "PD111" in u["silences"] for u in report["unknowns"])
    else:
        assert report["launch"]["understood"], report["launch"]
    assert report["files"]["checked"] >= (0 if command.startswith("tune") else 1)


OTHER_SUBCOMMANDS = [
    ("llamafactory-cli eval lf.yaml", "llamafactory-cli eval"),
    ("lmf chat lf.yaml", "lmf chat"),
    ("python -m llamafactory.cli export lf.yaml", "python -m llamafactory.cli export"),
    ("accelerate config", "accelerate config"),
    ("axolotl merge-lora ax.yml", "axolotl merge-lora"),
]


@pytest.mark.parametrize("command,named", OTHER_SUBCOMMANDS, ids=[c for c, _ in OTHER_SUBCOMMANDS])
def test_a_known_tools_other_subcommand_is_named_as_such(command, named):
    """Not "a launcher the doctor does not know": the tool is known, and it was told to do something else."""
    launch = parse_launcher(command)
    assert launch.describe() == f"`{named}` is not a training command: processes per node unknown"
    assert [u.what for u in launch.unknowns] == [f"`{named}`"]


def test_llamafactory_cli_as_a_python_module_is_named_as_the_cli():
    launch = parse_launcher("python -m llamafactory.cli train lf.yaml")
    assert launch.launcher == "llamafactory-cli" and launch.describe() == "llamafactory-cli train"


def test_same_job_three_ways_same_findings(project):
    def seen(launcher):
        result, _ = check(launcher, ["train.py"])
        return {(f.rule_id, f.message) for f in result.findings}

    ways = [
        "torchrun --nproc_per_node 2 train.py",
        "python -m torch.distributed.run --nproc-per-node=2 train.py",
        "nohup env NCCL_DEBUG=INFO srun --ntasks-per-node=1 torchrun --nproc_per_node 2 train.py",
    ]
    first = seen(ways[0])
    assert "PD302" in {rule for rule, _ in first}  # device_map="auto" under two DDP ranks
    assert all(seen(way) == first for way in ways[1:])


def test_a_recipe_launched_three_ways_same_findings(project):
    def seen(launcher):
        result, _ = check(launcher, ["lf.yaml"], target="titan-rtx:2")
        return {(f.rule_id, f.message) for f in result.findings}

    alone = seen(None)  # no launch given: llamafactory-cli's own, one process per GPU
    assert alone
    assert seen("llamafactory-cli train lf.yaml") == alone
    assert seen("FORCE_TORCHRUN=1 lmf train lf.yaml") == alone


def test_visible_devices_on_the_line_narrow_the_gpus(project):
    result, _ = check("CUDA_VISIBLE_DEVICES=0 torchrun --nproc_per_node 2 train.py", ["train.py"])
    assert "PD111" in {f.rule_id for f in result.findings}  # two processes, one GPU left visible
    result, _ = check("torchrun --nproc_per_node 2 train.py", ["train.py"])
    assert "PD111" not in {f.rule_id for f in result.findings}


def test_srun_tasks_times_the_launcher_processes(project):
    result, _ = check("srun --ntasks-per-node 2 torchrun --nproc_per_node 2 train.py", ["train.py"])
    assert result.plan.processes == 4
    assert "PD111" in {f.rule_id for f in result.findings}


def test_one_python_on_two_gpus_is_dataparallel_but_two_copies_are_not(project):
    (project / "plain.py").write_text(TRAIN.replace(", device_map='auto'", ""))
    result, _ = check("nohup python plain.py", ["plain.py"])
    assert "PD114" in {f.rule_id for f in result.findings}
    result, _ = check("mpirun -np 2 python plain.py", ["plain.py"])
    assert not {"PD114", "PD301"} & {f.rule_id for f in result.findings}


def test_llamafactory_cli_finds_a_free_port_unless_master_port_is_set(project):
    machine = "l40s_2x_exclusive_stopped"  # 29500 is taken on this node
    result, _ = check("llamafactory-cli train lf.yaml", machine=machine)
    assert "PD110" not in {f.rule_id for f in result.findings}
    result, _ = check("MASTER_PORT=29500 llamafactory-cli train lf.yaml", machine=machine)
    found = [f for f in result.findings if f.rule_id == "PD110"]
    assert found
    fixed = found[0].fix.commands[0]
    assert fixed.startswith("MASTER_PORT=") and "MASTER_PORT=29500" not in fixed and "llamafactory-cli" in fixed


@pytest.mark.parametrize(
    "command, versions, busy",
    [
        # torchtune >= 0.5.0 runs torchrun standalone without --rdzv_endpoint (pytorch/torchtune#2015)
        ("tune run --nproc_per_node 2 full_finetune_distributed --config sft.yaml", {}, False),
        ("tune run --nproc_per_node 2 full_finetune_distributed --config sft.yaml", {"torchtune": "0.6.1"}, False),
        # --master_port is ignored by a standalone rendezvous
        ("tune run --nproc_per_node 2 --master_port 29500 lora_finetune_distributed --config sft.yaml", {}, False),
        # a rendezvous endpoint written: that port
        (
            "tune run --nproc_per_node 2 --rdzv_endpoint localhost:29500 full_finetune_distributed --config sft.yaml",
            {},
            True,
        ),
        # before 0.5.0: torchrun's defaults, a static 29500 on torch < 2.12
        (
            "tune run --nproc_per_node 2 full_finetune_distributed --config sft.yaml",
            {"torchtune": "0.4.0", "torch": "2.5.1"},
            True,
        ),
        (
            "tune run --nproc_per_node 2 full_finetune_distributed --config sft.yaml",
            {"torchtune": "0.4.0", "torch": "2.12.0"},
            False,
        ),
    ],
)
def test_tune_run_rendezvous_port_follows_the_torchtune_release(project, command, versions, busy):
    machine = "l40s_2x_exclusive_stopped"  # 29500 is taken on this node
    facts = gather([], launcher=command, stack_overrides={**CURRENT, **versions}, **machine_probes(machine, None))
    result = engine.run(facts)
    assert ("PD110" in {f.rule_id for f in result.findings}) is busy


def test_a_module_not_in_the_folder_is_unknown(project):
    result, facts = check("python -m nowhere.train", ["train.py"])
    assert any("nowhere.train" in u.what for u in facts.scripts[0].unknowns)


def test_sbatch_options_override_the_job_scripts(project):
    _, facts = check("sbatch --gres=gpu:4 job.sbatch")
    assert facts.job is not None and facts.job.gpus_per_node == 4
    assert facts.scripts and facts.scripts[0].path.endswith("train.py")


@pytest.mark.parametrize(
    "command,launcher,through",
    [
        ("time -p torchrun train.py", "torchrun", ("time",)),
        ("stdbuf -oL -eL python train.py", "python", ("stdbuf",)),
        ("timeout --signal=INT 2h python train.py", "python", ("timeout",)),
        ("exec accelerate launch train.py", "accelerate", ("exec",)),
        ("uv run --with peft torchrun train.py", "torchrun", ("uv run",)),
        ("conda run -n ml --no-capture-output python train.py", "python", ("conda run",)),
        ('bash -c "cd /work && torchrun --nproc-per-node=4 train.py"', "torchrun", ()),
        ("mpiexec -n 4 -ppn 2 -genv NCCL_DEBUG INFO python train.py", "python", ("mpiexec (2 processes per node)",)),
        ("lightning run model --devices auto train.py", "fabric", ()),
        ("python3.11 -u -X dev train.py --bf16", "python", ()),
    ],
)
def test_layers_in_front_of_the_launcher(command, launcher, through):
    launch = parse_launcher(command)
    assert launch.known and launch.launcher == launcher
    assert launch.through == through
    assert launch.script == "train.py"


def test_launch_line_environment_is_the_jobs():
    launch = parse_launcher("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz1234 MASTER_PORT=29600 MY_VAR=1 torchrun train.py")
    assert launch.env.get("MASTER_PORT") == "29600"
    assert "MY_VAR" not in launch.env  # only launch variables are recorded
    assert "hf_abcdefghijklmnopqrstuvwxyz1234" not in launch.env.get("HF_TOKEN", "")


@pytest.mark.parametrize(
    "command,env",
    [
        ("cd /work && torchrun --nproc_per_node 2 train.py", {}),
        ("export MASTER_PORT=29601; torchrun --nproc_per_node 2 train.py", {"MASTER_PORT": "29601"}),
        ("export NCCL_DEBUG=INFO MASTER_PORT=29602 && torchrun --nproc_per_node 2 train.py", {"MASTER_PORT": "29602"}),
        ("MASTER_PORT=29603 && torchrun --nproc_per_node 2 train.py", {}),  # a shell variable: not the command's
        ('bash -c "export MASTER_PORT=29604; torchrun --nproc_per_node 2 train.py"', {"MASTER_PORT": "29604"}),
    ],
)
def test_a_command_list_launches_its_launcher_with_what_it_exported(command, env):
    launch = parse_launcher(command)
    assert launch.known and launch.launcher == "torchrun" and launch.script == "train.py"
    assert {k: v for k, v in launch.env.items() if k == "MASTER_PORT"} == env


TRAINS = "from transformers import Trainer\ntrainer = Trainer(model=model)\ntrainer.train()\n"
LOOP = "for batch in data:\n    loss = model(**batch).loss\n    loss.backward()\n    opt.step()\n"
EVALUATES = "model.eval()\nprint(model(**batch).loss)\n"
DOWNLOADS = "from huggingface_hub import snapshot_download\nsnapshot_download('org/model')\n"


@pytest.mark.parametrize(
    "command,files,script",
    [
        # the program that trains, wherever it stands in the list
        (
            "python download.py && python train.py && python eval.py",
            {"download.py": DOWNLOADS, "train.py": TRAINS, "eval.py": EVALUATES},
            "train.py",
        ),
        (
            "torchrun --nproc_per_node 2 train.py && python eval.py",
            {"train.py": TRAINS, "eval.py": EVALUATES},
            "train.py",
        ),
        ("python eval.py; python run.py", {"run.py": LOOP, "eval.py": EVALUATES}, "run.py"),  # what it calls, not order
        ("python evaluate.py && python finetune.py", {}, "finetune.py"),  # not readable: the name says which
        ("python sft.py && python dpo.py", {"sft.py": TRAINS, "dpo.py": TRAINS}, "sft.py"),  # the first of equals
        ("python prepare.py && llamafactory-cli train sft.yaml", {"prepare.py": DOWNLOADS}, "sft.yaml"),
        # training through imported code: no call in the script itself; the names and the order decide
        (
            "torchrun --nproc_per_node 4 -m eval_harness --baseline && torchrun --nproc_per_node 4 pretrain_gpt.py",
            {"pretrain_gpt.py": "from megatron.training import pretrain\npretrain(provider)\n"},
            "pretrain_gpt.py",
        ),
        ("python -m scripts.download && python main.py", {"main.py": "from lib import main\nmain()\n"}, "main.py"),
        ("python prepare.py && python cli.py fit", {"prepare.py": DOWNLOADS, "cli.py": "LightningCLI(M)\n"}, "cli.py"),
        ("python tok.py && python main.py", {"tok.py": "spm.SentencePieceTrainer.train(input='c.txt')\n"}, "main.py"),
        ("python -c 'import torch; print(torch.cuda.is_available())' && python run.py", {}, "run.py"),
        ("python main_latest.py && python run_tests.py", {}, "main_latest.py"),  # `latest` says nothing of tests
        (
            "cd exp && python score.py --baseline && python run.py",
            {"exp/run.py": LOOP, "exp/score.py": "print(1)\n"},
            "run.py",
        ),
        (
            "tune run eleuther_eval --config eval.yaml && tune run --nproc_per_node 4 full_finetune_distributed "
            "--config ft.yaml",
            {},
            "full_finetune_distributed",
        ),
    ],
)
def test_a_command_list_launches_the_program_that_trains(tmp_path, monkeypatch, command, files, script):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    assert parse_launcher(command).script == script


def test_of_queued_jobs_the_one_that_trains_is_read():
    assert parse_launcher("sbatch prep_data.sbatch; sbatch train.sbatch").job_file == "train.sbatch"


@pytest.mark.parametrize(
    "command,script_args,env",
    [
        # quoted operators are words of the script's arguments, never where the command ends
        ('torchrun --nproc_per_node 2 train.py --sep ";" --tag "a && b"', ("--sep", ";", "--tag", "a && b"), {}),
        ("torchrun --nproc_per_node 2 train.py --name 'run;2'", ("--name", "run;2"), {}),
        # operators without spaces around them still end a command
        ("export MASTER_PORT=29605;torchrun --nproc_per_node 2 train.py", (), {"MASTER_PORT": "29605"}),
        # a pipeline's launcher, not the command its output goes to; redirections are no arguments of the script
        ("torchrun --nproc_per_node 2 train.py 2>&1 | tee train.log", (), {}),
        ("nohup torchrun --nproc_per_node 2 train.py > train.log 2>&1 &", (), {}),
        ("torchrun --nproc_per_node 2 train.py>train.log --lr 1e-4", ("--lr", "1e-4"), {}),
        ("torchrun --nproc_per_node 2 train.py --lr 1e-4 | grep -v warn | python filter.py", ("--lr", "1e-4"), {}),
        ('torchrun --nproc_per_node 2 train.py --prompt "x>" &>> train.log', ("--prompt", "x>"), {}),
        # a command substitution is one word, whatever it holds (its value is the job's, decided when it runs)
        (
            "export MASTER_PORT=$(cat port; echo); torchrun --nproc_per_node 2 train.py",
            (),
            {"MASTER_PORT": "$(cat port; echo)"},
        ),
        ("bash -c \"cd /w; torchrun --nproc_per_node 2 train.py --sep ';'\"", ("--sep", ";"), {}),
        # compound commands: a subshell, a group, one-line if and loops start the command inside them
        ("(cd /w && torchrun --nproc_per_node 2 train.py)", (), {}),
        ("{ torchrun --nproc_per_node 2 train.py; } 2>&1 | tee train.log", (), {}),
        ("if [ -d data ]; then torchrun --nproc_per_node 2 train.py; fi", (), {}),
        ("while true; do torchrun --nproc_per_node 2 train.py && break; done", (), {}),
        ("for seed in 1 2; do torchrun --nproc_per_node 2 train.py --seed $seed; done", ("--seed", "$seed"), {}),
        # a substitution's own quotes and spaces stay in its word; `$'...'` is read as bash reads it
        ('torchrun --nproc_per_node 2 train.py --tag "$(date "+%F %T")"', ("--tag", '$(date "+%F %T")'), {}),
        ("torchrun --nproc_per_node 2 train.py --run ${NAME:-a b}", ("--run", "${NAME:-a b}"), {}),
        ("torchrun --nproc_per_node 2 train.py --sep $'\\t'", ("--sep", "\t"), {}),
        (
            "torchrun --nproc_per_node 2 train.py --sep $'\\x' --p $'C:\\Users'",
            ("--sep", "\\x", "--p", "C:\\Users"),
            {},
        ),
        ("torchrun --nproc_per_node 2 train.py --x $(echo \\)) --lr 1", ("--x", "$(echo \\))", "--lr", "1"), {}),
        # a subshell's exports stay in it
        ("(export MASTER_PORT=29612); torchrun --nproc_per_node 2 train.py", (), {}),
        # a `#` that starts a word outside quotes begins a comment; inside a word or quoted it is text
        ("torchrun --nproc_per_node 2 train.py --tag a#b '#c'  # on 2 GPUs; --bf16", ("--tag", "a#b", "#c"), {}),
    ],
)
def test_the_shell_ends_a_command_only_at_an_unquoted_operator(command, script_args, env):
    launch = parse_launcher(command)
    assert launch.known and launch.launcher == "torchrun" and launch.script == "train.py"
    assert launch.num_processes.value == 2
    assert launch.script_args == script_args
    assert {k: v for k, v in launch.env.items() if k == "MASTER_PORT"} == env


@pytest.mark.parametrize(
    "command,launcher,detail",
    [
        ("sbatch job.sbatch 2>&1 | tee submit.log", "sbatch", "job.sbatch"),  # the job it queues, not `tee`
        ("./run_train.sh --gpus 2 | tee train.log", "", "run_train.sh"),  # no launcher known: the pipeline's first
        ("llamafactory-cli train train.yaml > train.log 2>&1", "llamafactory-cli", "train.yaml"),
    ],
)
def test_a_pipeline_launches_its_first_command(command, launcher, detail):
    launch = parse_launcher(command)
    assert launch.launcher == launcher
    assert detail in (launch.job_file, launch.unknown_launcher, launch.script)
    assert launch.script_args == ()


@pytest.mark.parametrize(
    "command,option,rewritten",
    [
        (
            "cd /work && torchrun --nproc_per_node 2 train.py --lr 1e-4 2>&1 | tee log",
            "--master_port 29501",
            "cd /work && torchrun --nproc_per_node 2 --master_port 29501 train.py --lr 1e-4 2>&1 | tee log",
        ),
        ("torchrun --nproc_per_node 2 train.py --sep ';'", "--master_port 29501", None),
        ("llamafactory-cli train x.yaml > train.log 2>&1", "MASTER_PORT=29501", None),
        (  # the option goes to the launch judged (the one that trains), not the first command of the list
            "python evaluate_base.py && torchrun --nproc_per_node 2 train.py",
            "--master_port 29501",
            "python evaluate_base.py && torchrun --nproc_per_node 2 --master_port 29501 train.py",
        ),
        ("(cd /w && torchrun --nproc_per_node 2 train.py)", "--master_port 29501", None),
        (  # the same script twice: the launch judged is the multi-process one
            "python train.py --dry_run && deepspeed --num_gpus 2 train.py",
            "--master_port 29501",
            "python train.py --dry_run && deepspeed --num_gpus 2 --master_port 29501 train.py",
        ),
    ],
)
def test_a_fix_rewrites_the_launch_line_as_the_shell_reads_it(command, option, rewritten):
    """PD110's fix sets a port in the user's own launch line: its operators, quotes and redirections survive."""
    from precision_doctor.derive.launch import command_with_option

    new = command_with_option(parse_launcher(command), option)
    if rewritten:
        assert new == rewritten
    again, before = parse_launcher(new), parse_launcher(command)
    assert (again.launcher, again.script_args) == (before.launcher, before.script_args)
    assert again.main_process_port.value == 29501 or again.env.get("MASTER_PORT") == "29501"


def test_axolotl_launcher_choice_and_its_arguments():
    launch = parse_launcher("axolotl train ax.yml --launcher torchrun --micro-batch-size 2 -- --nproc_per_node 4")
    assert launch.launcher == "torchrun" and launch.num_processes.value == 4
    assert launch.script == "ax.yml" and launch.script_args == ("--micro-batch-size", "2")


def test_unknown_launcher_is_not_refused_by_the_cli(project):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "precision_doctor",
            "check",
            "--target",
            "a100:2",
            "--launcher",
            "mylauncher go train.py",
        ],
        capture_output=True,
        text=True,
        cwd=project,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode in (0, 1), done.stderr
    assert "launcher `mylauncher` is not known" in done.stdout
