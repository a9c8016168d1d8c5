"""The programs the doctor starts are found where the user's PATH really points: never `.`, an empty or a relative
PATH entry, the checked tree or the working directory. Its own Python children never import from the directory the
user stands in. Each planted program or module writes a sentinel file that must stay absent."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from precision_doctor.probes.collect import gather_allocation
from precision_doctor.system.programs import distrust, find_program

JOB = "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:2\n#SBATCH --partition=big\nsrun python train.py\n"


def plant_program(folder: Path, name: str, sentinel: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / name
    program.write_text(f"#!/bin/sh\n: > {sentinel}\necho 'Nodes=n1 Default=YES'\n")  # builtins: PATH is planted
    program.chmod(0o755)


def doctor(*args, cwd, path_entries, extra_env=None):
    env = {**os.environ, "PATH": os.pathsep.join(path_entries), **(extra_env or {})}
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "entry",
    [".", "", "bin", "node_modules/.bin", "{tree}/tools"],
    ids=["dot", "empty", "relative", "relative-nested", "inside-the-checked-tree"],
)
def test_scontrol_planted_in_the_repository_never_runs(tmp_path, entry):
    tree = tmp_path / "repo"
    (tree / ".git").mkdir(parents=True)
    (tree / "train.py").write_text("print('train')\n")
    (tree / "job.sbatch").write_text(JOB)
    sentinel = tmp_path / "scontrol-ran"
    for folder in (tree, tree / "bin", tree / "node_modules" / ".bin", tree / "tools"):
        plant_program(folder, "scontrol", sentinel)
    proc = doctor(
        "check",
        "job.sbatch",
        "--format",
        "json",
        cwd=tree,
        path_entries=[entry.replace("{tree}", str(tree)), "/nonexistent"],
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert not sentinel.exists(), "a program planted in the checked tree or the working directory ran"
    machine = json.loads(proc.stdout) if proc.stdout.strip() else {}
    assert machine, proc.stderr


def test_without_a_trusted_scontrol_the_machine_is_unknown_and_says_why(tmp_path):
    tree = tmp_path / "repo"
    (tree / ".git").mkdir(parents=True)
    (tree / "train.py").write_text("print('train')\n")
    (tree / "job.sbatch").write_text(JOB)
    plant_program(tree, "scontrol", tmp_path / "ran")
    proc = doctor("check", "job.sbatch", "--no-color", cwd=tree, path_entries=[".", "/nonexistent"])
    assert "scontrol is not on PATH outside the checked tree and the working directory" in proc.stdout, proc.stdout
    assert not (tmp_path / "ran").exists()


def test_find_program_takes_an_absolute_entry_outside_the_trees(tmp_path, monkeypatch):
    trusted, tree = tmp_path / "usr-bin", tmp_path / "repo"
    plant_program(trusted, "srun", tmp_path / "x")
    plant_program(tree, "srun", tmp_path / "y")
    monkeypatch.chdir(tree)
    distrust([str(tree / "train.py")])
    found, why = find_program("srun", {"PATH": os.pathsep.join([str(tree), "", ".", str(trusted)])})
    assert found == str(trusted / "srun") and why == ""
    (trusted / "srun").unlink()
    (trusted / "srun").symlink_to(tree / "srun")  # a link from a trusted folder into the tree is the tree's
    found, why = find_program("srun", {"PATH": str(trusted)})
    assert found is None and "outside the checked tree" in why


def test_snapshot_all_nodes_never_runs_a_planted_srun(tmp_path):
    sentinel = tmp_path / "srun-ran"
    plant_program(tmp_path, "srun", sentinel)
    proc = doctor(
        "snapshot",
        "--all-nodes",
        cwd=tmp_path,
        path_entries=[".", "/nonexistent"],
        extra_env={"SLURM_JOB_ID": "7", "SLURM_NNODES": "2"},
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "srun is not on PATH outside the checked tree and the working directory" in proc.stderr
    assert not sentinel.exists()


def plant_modules(folder: Path, sentinel: Path) -> None:
    """A `precision_doctor` package and a `pynvml` module that would run if imported from this folder."""
    (folder / "precision_doctor").mkdir(parents=True)
    touch = f"open({str(sentinel)!r}, 'a').write(__name__ + '\\n')\n"
    (folder / "precision_doctor" / "__init__.py").write_text(touch)
    (folder / "pynvml.py").write_text(touch)
    (folder / "psutil.py").write_text(touch)


def test_the_per_node_snapshot_child_imports_the_installed_doctor(tmp_path):
    """`snapshot --all-nodes` runs `python ... snapshot --node-json` on each node from the job's folder: a planted
    package there is not imported."""
    planted = tmp_path / "job-folder"
    sentinel = tmp_path / "imported"
    plant_modules(planted, sentinel)

    def srun(command, **kw):
        child = command[command.index(sys.executable) :]
        done = subprocess.run(child, cwd=planted, capture_output=True, text=True, timeout=120)
        return subprocess.CompletedProcess(
            command, done.returncode, "".join(f"0: {line}\n" for line in done.stdout.splitlines()), done.stderr
        )

    machine, _ = (
        gather_allocation({"SLURM_JOB_ID": "7", "SLURM_NNODES": "1", "PATH": os.environ["PATH"]}, None, run=srun)
        if _srun_here()
        else pytest.skip("no srun outside the working directory")
    )
    assert not sentinel.exists(), sentinel.read_text()
    assert machine.nodes or machine.source


def _srun_here() -> bool:
    return find_program("srun")[0] is not None


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the doctor itself is started with -P here (Python 3.11+)")
def test_live_mode_children_never_import_from_the_working_directory(tmp_path):
    planted, scripts = tmp_path / "cwd", tmp_path / "scripts"
    sentinel = tmp_path / "imported"
    plant_modules(planted, sentinel)
    scripts.mkdir()
    (scripts / "train.py").write_text("print('ran')\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "precision_doctor",
            "check",
            str(scripts / "train.py"),
            "--live",
            "--target",
            "cpu",
            "--no-color",
        ],
        cwd=planted,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "ran to its end" in proc.stdout, proc.stdout + proc.stderr
    assert not sentinel.exists(), sentinel.read_text()


def test_a_job_linked_into_the_repository_or_in_a_submodule_still_distrusts_the_repository(tmp_path):
    """The job named is a link to a file outside the repository, or sits in a submodule: the repository it is
    named in (the superproject) is the checked tree all the same."""
    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    (repo / ".git").mkdir(parents=True)
    (repo / "jobs").mkdir()
    (repo / "jobs" / ".git").write_text("gitdir: ../.git/modules/jobs\n")  # a submodule
    elsewhere.mkdir()
    for folder in (elsewhere, repo / "jobs"):
        (folder / "train.py").write_text("print('train')\n")
        (folder / "job.sbatch").write_text(JOB)
    (repo / "linked.sbatch").symlink_to(elsewhere / "job.sbatch")
    sentinel, work = tmp_path / "ran", tmp_path / "work"  # the working directory is outside the repository
    work.mkdir()
    plant_program(repo / "bin", "scontrol", sentinel)
    for job in (repo / "linked.sbatch", repo / "jobs" / "job.sbatch"):
        proc = doctor("check", str(job), "--format", "json", cwd=work, path_entries=[str(repo / "bin"), "/nonexistent"])
        assert proc.returncode in (0, 1), proc.stderr
        assert not sentinel.exists(), f"scontrol planted in the repository ran for {job.name}"


@pytest.mark.skipif(not (shutil.which("cc") and sys.platform.startswith("linux")), reason="builds a shared library")
def test_an_nvml_library_planted_where_ld_library_path_points_empty_is_never_loaded(tmp_path):
    """`LD_LIBRARY_PATH=:/usr/local/lib` (the usual `$LD_LIBRARY_PATH:...` with the variable unset) puts the working
    directory first for the dynamic linker: a libnvidia-ml.so.1 planted there must not be loaded."""
    sentinel = tmp_path / "loaded"
    source = tmp_path / "planted.c"
    source.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {\n"
        f'  FILE *f = fopen("{sentinel}", "w"); if (f) fclose(f);\n}}\n'
    )
    built = subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(tmp_path / "libnvidia-ml.so.1"), str(source)],
        capture_output=True,
        text=True,
    )
    if built.returncode:
        pytest.skip(f"cc could not build it: {built.stderr[:200]}")
    (tmp_path / "train.py").write_text("print('train')\n")
    env = {**os.environ, "LD_LIBRARY_PATH": ":/nonexistent"}
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", "train.py", "--format", "json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert not sentinel.exists(), "the planted NVML library was loaded"
