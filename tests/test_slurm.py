"""On a real two-node SLURM cluster (.ci/slurm-up: two slurmd on this host): `snapshot --all-nodes` inside an
allocation probes both nodes through srun, `check --facts` reads the merged snapshot and names the node that is
different, and the example cli_filter refuses a job whose script would die at `sbatch` while its twin is accepted.
Without SLURM (no packages, no root, no apt) the tests skip and say why."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UP = ROOT / ".ci" / "slurm-up"
GOOD = (
    "import os\nimport torch\nlocal_rank = int(os.environ['LOCAL_RANK'])\ntorch.cuda.set_device(local_rank)\n"
    "model = torch.nn.Linear(8, 8).to(local_rank)\nopt = torch.optim.AdamW(model.parameters())\n"
    "model(torch.randn(4, 8, device=local_rank)).sum().backward()\nopt.step()\n"
)


def _start(tmp_root: Path, extra_env: dict[str, str]) -> dict[str, str]:
    """The cluster's environment, or a skip that says why there is none."""
    if not UP.exists() or shutil.which("bash") is None:
        pytest.skip("no .ci/slurm-up")
    env = {**os.environ, **extra_env, "PD_SLURM_DIR": str(tmp_root)}
    done = subprocess.run(["bash", str(UP)], capture_output=True, text=True, env=env, timeout=240)
    conf = tmp_root / "slurm.conf"
    if "export SLURM_CONF=" not in done.stdout:
        reason = (done.stderr.strip().splitlines() or ["slurm-up gave no reason"])[-1]
        print(f"SLURM cluster not available: {reason}")
        pytest.skip(f"SLURM cluster not available: {reason}")
    return {**env, "SLURM_CONF": str(conf), "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A two-node cluster of its own (its own ports and state), shut down by the daemons' pids at the end."""
    root = Path("/tmp") / f"pd-slurm-test-{os.getpid()}"
    env = _start(root, {"PD_SLURM_PORT_BASE": "17200"})
    yield env
    subprocess.run(["bash", str(UP), "--down"], env=env, capture_output=True, timeout=60)
    shutil.rmtree(root, ignore_errors=True)


def _doctor(*args: str) -> list[str]:
    return [sys.executable, "-m", "precision_doctor", *args]


def test_snapshot_all_nodes_probes_every_node_and_check_names_the_busy_master(cluster, tmp_path):
    (tmp_path / "train.py").write_text(GOOD)
    launch = "torchrun --nnodes 2 --nproc_per_node 1 --master_port {port} train.py"
    with socket.socket() as holder:  # a leftover rendezvous: a port outside 29500-29510 held on the master
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        snap = tmp_path / "alloc.json"
        done = subprocess.run(
            [
                "salloc",
                "-N2",
                "--quiet",
                *_doctor("snapshot", "--all-nodes", "-o", str(snap), "--launcher", launch.format(port=port)),
            ],
            capture_output=True,
            text=True,
            env=cluster,
            timeout=120,
            cwd=tmp_path,
        )
    assert done.returncode == 0, done.stderr
    machine = json.loads(snap.read_text())["machine"]
    assert [n["host"]["node_name"] for n in machine["nodes"]] == ["n1", "n2"]  # really ran on both slurmd
    assert machine["allocation"]["hosts"] == ["n1", "n2"] and machine["allocation"]["job_id"].isdigit()
    for node in machine["nodes"]:
        assert port in node["host"]["ports_checked"]  # the port the launch names, not only 29500-29510
        assert [b["port"] for b in node["host"]["busy_ports"]] == [port]
        assert "lo" in node["host"]["interfaces"]

    report = subprocess.run(
        _doctor("check", "train.py", "--facts", str(snap), "--launcher", launch.format(port=port), "--format", "json"),
        capture_output=True,
        text=True,
        env=cluster,
        cwd=tmp_path,
    )
    found = {f["id"]: f for f in json.loads(report.stdout)["findings"]}
    assert "PD123" in found and "on the master node n1" in found["PD123"]["message"], report.stdout[:2000]
    assert report.returncode == 1

    twin = subprocess.run(
        _doctor(
            "check",
            "train.py",
            "--facts",
            str(snap),
            "--launcher",
            launch.format(port=port + 1 if port < 65535 else port - 1),
            "--format",
            "json",
        ),
        capture_output=True,
        text=True,
        env=cluster,
        cwd=tmp_path,
    )
    assert "PD123" not in {f["id"] for f in json.loads(twin.stdout)["findings"]}


def test_nccl_interface_missing_on_the_real_nodes(cluster, tmp_path):
    (tmp_path / "train.py").write_text(GOOD)
    snap = tmp_path / "alloc.json"
    done = subprocess.run(
        ["salloc", "-N2", "--quiet", *_doctor("snapshot", "--all-nodes", "-o", str(snap))],
        capture_output=True,
        text=True,
        env=cluster,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    nodes = json.loads(snap.read_text())["machine"]["nodes"]
    real = sorted(set(nodes[0]["host"]["interfaces"]) - {"lo"}) or ["lo"]
    for ifname, fires in (("pd-no-such-if0", True), (real[0], False)):
        job = tmp_path / "job.sbatch"
        job.write_text(
            "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=1\n"
            f"export NCCL_SOCKET_IFNAME={ifname}\nsrun torchrun --nnodes 2 --nproc_per_node 1 train.py\n"
        )
        report = subprocess.run(
            _doctor("check", "job.sbatch", "--facts", str(snap), "--format", "json"),
            capture_output=True,
            text=True,
            env=cluster,
            cwd=tmp_path,
        )
        hits = [f for f in json.loads(report.stdout)["findings"] if f["id"] == "PD126"]
        assert bool(hits) == fires, report.stdout[:2000]
        if fires:
            assert "n1" in hits[0]["message"] and "n2" in hits[0]["message"]
            assert hits[0]["locations"][0] == {"path": "job.sbatch", "line": 4, "column": 1}


@pytest.fixture(scope="module")
def gated_cluster():
    """A second cluster whose sbatch runs examples/slurm/cli_filter.lua."""
    root = Path("/tmp") / f"pd-slurm-gate-{os.getpid()}"
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "examples" / "slurm" / "cli_filter.lua", root / "cli_filter.lua")
    env = _start(root, {"PD_SLURM_CLI_FILTER": "1", "PD_SLURM_PORT_BASE": "17100"})
    env["PRECISION_DOCTOR"] = " ".join(_doctor())
    yield env
    subprocess.run(["bash", str(UP), "--down"], env=env, capture_output=True, timeout=60)
    shutil.rmtree(root, ignore_errors=True)


def test_cli_filter_refuses_a_job_that_would_die_and_accepts_its_twin(gated_cluster, tmp_path):
    (tmp_path / "train.py").write_text(GOOD)
    bad = tmp_path / "bad.sbatch"
    bad.write_text(
        "#!/bin/bash\n#SBATCH -N 1\n#SBATCH --ntasks-per-node=2\nsrun torchrun --nproc_per_node 2 train.py\n"
    )
    good = tmp_path / "good.sbatch"
    good.write_text(
        "#!/bin/bash\n#SBATCH -N 1\n#SBATCH --ntasks-per-node=1\nsrun torchrun --nproc_per_node 2 train.py\n"
    )
    refused = subprocess.run(
        ["sbatch", "--hold", str(bad)], capture_output=True, text=True, env=gated_cluster, cwd=tmp_path, timeout=120
    )
    assert refused.returncode != 0
    assert "PD118" in refused.stderr and "precision-doctor" in refused.stderr, refused.stderr
    assert "Submitted batch job" not in refused.stdout

    accepted = subprocess.run(
        ["sbatch", "--hold", str(good)], capture_output=True, text=True, env=gated_cluster, cwd=tmp_path, timeout=120
    )
    assert accepted.returncode == 0 and "Submitted batch job" in accepted.stdout, accepted.stderr
    job_id = accepted.stdout.split()[-1]
    subprocess.run(["scancel", job_id], env=gated_cluster, capture_output=True, timeout=30)

    overridden = subprocess.run(
        ["sbatch", "--hold", str(bad)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**gated_cluster, "PRECISION_DOCTOR_SKIP": "1"},
        timeout=120,
    )
    assert overridden.returncode == 0 and "Submitted batch job" in overridden.stdout, overridden.stderr
    subprocess.run(["scancel", overridden.stdout.split()[-1]], env=gated_cluster, capture_output=True, timeout=30)
