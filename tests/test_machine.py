"""Machine probes: NVML through a fake built from machine fixtures, the real NVML path without a driver,
real sockets, real zombie and stopped processes, a real accelerate config, and snapshots."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.probes.collect import System, gather, snapshot_json
from precision_doctor.probes.gpu import probe_gpus
from precision_doctor.probes.host import describe_processes
from precision_doctor.probes.launch import launch_from_env, parse_launcher

from .fake_nvml import FakeNVML, fake_system, load_machine

ROOT = Path(__file__).resolve().parents[1]
SEED000 = str(ROOT / "fixtures/seed000_accelerate_implicit_bf16/train.py")


def probe(name, visible=None):
    system, _ = fake_system(name)
    return probe_gpus(
        nvml=system.nvml, visible=visible, processes=lambda pids: describe_processes(pids, psutil=system.psutil)
    )


def test_titan_rtx_box():
    m = probe("titan_rtx")
    assert m.known and len(m.gpus) == 1
    g = m.gpus[0]
    assert (g.name, g.capability, g.native_bf16, g.tf32, g.fp8) == ("NVIDIA TITAN RTX", (7, 5), False, False, False)
    assert m.driver_version == "535.183.01" and m.cuda_driver_version == "12.2"


def test_exclusive_l40s_with_stopped_and_zombie_processes():
    m = probe("l40s_2x_exclusive_stopped")
    assert [g.compute_mode for g in m.gpus] == ["Exclusive_Process"] * 2
    stopped, zombie = m.gpus[0].processes[0], m.gpus[1].processes[0]
    assert (stopped.pid, stopped.status, stopped.mine, stopped.used_mib) == (4121, "stopped", True, 10035)
    assert stopped.command == "python" and stopped.stale  # the executable, never the arguments
    assert zombie.status == "zombie" and zombie.stale
    assert m.gpus[0].fp8 and m.gpus[0].native_bf16


def test_eight_h100_node_and_another_users_process():
    m = probe("h100_8x")
    assert len(m.gpus) == 8 and all(g.capability == (9, 0) for g in m.gpus)
    server = m.gpus[3].processes[0]
    assert (server.user, server.mine, server.status, server.stale) == ("bob", False, "sleeping", False)


def test_mig_a100():
    assert probe("a100_mig").gpus[0].mig is True


def test_machine_without_driver_is_unknown_with_reason():
    m = probe("no_gpu")
    assert not m.known and "DriverNotLoaded" in m.reason


def test_real_nvml_path_without_the_library_is_unknown_not_a_crash():
    m = probe_gpus()  # the real pynvml / libnvidia-ml on this machine
    if m.known:
        pytest.skip("this machine has an NVIDIA driver")
    assert m.reason


@pytest.mark.parametrize(
    "visible,expected",
    [
        ("1,0", ["GPU-7d2f9c11-2b3c-4d5e-8f90-a1b2c3d4e5f6", "GPU-0b7e7a44-7a64-4b0a-9d3a-1b2c3d4e5f60"]),
        ("GPU-7d2f", ["GPU-7d2f9c11-2b3c-4d5e-8f90-a1b2c3d4e5f6"]),
        ("0,7", ["GPU-0b7e7a44-7a64-4b0a-9d3a-1b2c3d4e5f60"]),  # CUDA stops at the first invalid entry
        ("", []),
    ],
)
def test_cuda_visible_devices_by_index_and_uuid(visible, expected):
    m = probe("l40s_2x_exclusive_stopped", visible=visible)
    assert [g.uuid for g in m.gpus] == expected
    assert [g.index for g in m.gpus] == list(range(len(expected)))


def test_empty_cuda_visible_devices_is_a_machine_without_gpu(run_check):
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
        "Trainer(model=m, args=TrainingArguments('o', fp16=True)).train()\n"
    )
    result, facts = run_check(code, machine="h100_8x", environ={"CUDA_VISIBLE_DEVICES": ""})
    assert facts.machine.known and not facts.machine.gpus
    assert "PD105" in {f.rule_id for f in result.findings}


def test_a_real_listening_socket_makes_pd110_fire(run_check):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        system, env = fake_system("titan_rtx")
        real_ports = System(nvml=system.nvml, psutil=system.psutil)  # real bind test
        facts = gather(
            [SEED000],
            launcher=f"torchrun --nproc_per_node 2 --master_port {port} train.py",
            environ=env,
            system=real_ports,
            stack_overrides=CURRENT,
        )
        hits = [f for f in engine.run(facts).findings if f.rule_id == "PD110"]
        assert hits and hits[0].severity == "error" and f"port {port}" in hits[0].message
        free = facts.machine.host.port_state(29500)
        assert free is True or free.port == 29500
    finally:
        server.close()
    facts = gather(
        [SEED000],
        launcher=f"torchrun --nproc_per_node 2 --master_port {port} train.py",
        environ=env,
        system=real_ports,
        stack_overrides=CURRENT,
    )
    assert "PD110" not in {f.rule_id for f in engine.run(facts).findings}


def test_real_zombie_and_stopped_children_are_classified():
    pid = os.fork()
    if pid == 0:
        os._exit(0)  # the child exits; not waited for, it stays a zombie
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(sleeper.pid, signal.SIGSTOP)
        deadline = time.time() + 5
        while True:
            got = describe_processes([pid, sleeper.pid, 2**22 + 17])
            if got[pid].status == "zombie" and got[sleeper.pid].status == "stopped" or time.time() > deadline:
                break
            time.sleep(0.05)
        assert got[pid].status == "zombie" and got[pid].stale
        assert got[sleeper.pid].status == "stopped" and got[sleeper.pid].mine is True
        assert got[sleeper.pid].command == os.path.basename(sys.executable)
        assert got[2**22 + 17].status == "gone"
    finally:
        os.waitpid(pid, 0)
        sleeper.kill()
        sleeper.wait()


def test_accelerate_config_file_drives_pd113(tmp_path, run_check):
    cfg = tmp_path / "hf" / "accelerate" / "default_config.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nmixed_precision: bf16\n"
        "num_processes: 2\nmain_process_port: 29500\ndeepspeed_config: {}\n"
    )
    code = (ROOT / "fixtures/seed000_accelerate_implicit_bf16/train.py").read_text()
    result, facts = run_check(code, machine="titan_rtx", environ={"HF_HOME": str(tmp_path / "hf")})
    assert facts.machine.host.accelerate_config["mixed_precision"] == "bf16"
    pd113 = next(f for f in result.findings if f.rule_id == "PD113")
    assert pd113.severity == "error"  # bf16 from the config on a GPU without native bf16
    assert pd113.confidence == "likely"  # no --launcher: `accelerate launch` is assumed
    assert any(e.origin == "accelerate-config" and str(cfg) in e.excerpt for e in pd113.evidence)
    assert "PD101" in {f.rule_id for f in result.findings}
    # launched with plain python, the config does not apply
    result, _ = run_check(
        code, machine="titan_rtx", environ={"HF_HOME": str(tmp_path / "hf")}, launcher="python train.py"
    )
    assert "PD113" not in {f.rule_id for f in result.findings}
    # with accelerate launch, the config's num_processes counts
    result, _ = run_check(
        code, machine="titan_rtx", environ={"HF_HOME": str(tmp_path / "hf")}, launcher="accelerate launch train.py"
    )
    assert {"PD113", "PD111", "PD112"} <= {f.rule_id for f in result.findings}


def test_snapshot_round_trip_gives_the_same_report(tmp_path):
    system, env = fake_system("l40s_2x_exclusive_stopped")
    launcher = "accelerate launch --num_processes 2 --mixed_precision bf16 train.py"
    live = gather([SEED000], launcher=launcher, environ=env, system=system, stack_overrides=CURRENT)
    node = tmp_path / "node.json"
    node.write_text(snapshot_json(live.machine, live.stack))
    offline = gather([SEED000], launcher=launcher, facts_file=str(node))
    assert offline.machine.gpus == live.machine.gpus and offline.machine.host == live.machine.host
    assert offline.stack == live.stack
    key = [(f.rule_id, f.severity, f.message) for f in engine.run(live).findings]
    assert key == [(f.rule_id, f.severity, f.message) for f in engine.run(offline).findings]
    assert {"PD108", "PD109", "PD110", "PD112", "PD203"} <= {k[0] for k in key}


def doctor(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_cli_snapshot_of_a_profile_then_check_against_it(tmp_path):
    out = tmp_path / "node.json"
    assert doctor("snapshot", "--target", "l40s:2", "-o", str(out)).returncode == 0
    data = json.loads(out.read_text())
    data["machine"]["gpus"][0]["compute_mode"] = "Exclusive_Process"  # the user edits what the profile can't know
    data["machine"]["gpus"][0]["processes"] = [{"pid": 77, "used_mib": 2048, "status": "running", "user": "ann"}]
    out.write_text(json.dumps(data))
    proc = doctor(
        "check",
        "fixtures/seed000_accelerate_implicit_bf16/train_fixed.py",
        "--facts",
        str(out),
        "--format",
        "json",
        "--include-facts",
    )
    ids = {f["id"] for f in json.loads(proc.stdout)["findings"]}
    assert "PD108" in ids and proc.returncode == 1
    assert "snapshot node.json" in json.loads(proc.stdout)["facts"]["machine"]["source"]


@pytest.mark.parametrize(
    "content,fragment", [("{not json", "not a JSON snapshot"), ('{"a": 1}', "not a precision-doctor")]
)
def test_bad_snapshot_is_one_line_exit_2(tmp_path, content, fragment):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    proc = doctor("check", "fixtures/seed000_accelerate_implicit_bf16/train.py", "--facts", str(bad))
    assert proc.returncode == 2 and fragment in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = doctor("check", "x.py", "--facts", str(bad), "--target", "t4")
    assert proc.returncode == 2


def test_machine_alone(tmp_path):
    proc = doctor("check", "--target", "t4")
    assert proc.returncode == 0 and "GPU 0  Tesla T4" in proc.stdout


@pytest.mark.parametrize(
    "command,launcher,n,port,args",
    [
        (
            "accelerate launch --num_processes 2 --mixed_precision bf16 train.py --lr 3",
            "accelerate",
            2,
            None,
            ("--lr", "3"),
        ),
        ("torchrun --nproc_per_node=4 --master_port 29501 train.py", "torchrun", 4, 29501, ()),
        ("python -m torch.distributed.run --nproc_per_node 8 train.py --fp16", "torchrun", 8, None, ("--fp16",)),
        ("deepspeed --num_gpus 2 train.py", "deepspeed", 2, None, ()),
        ("python train.py --bf16 True", "python", 1, None, ("--bf16", "True")),
    ],
)
def test_launcher_parsing(command, launcher, n, port, args):
    launch = parse_launcher(command)
    assert launch.launcher == launcher and launch.num_processes.value == n
    assert (launch.main_process_port.value if launch.main_process_port.state == "known" else None) == port
    assert launch.script_args == args


def test_the_doctor_running_under_a_launcher_reads_its_environment():
    launch = launch_from_env({"LOCAL_RANK": "0", "WORLD_SIZE": "4", "ACCELERATE_MIXED_PRECISION": "fp16"})
    assert (launch.launcher, launch.num_processes.value, launch.mixed_precision.value) == ("accelerate", 4, "fp16")
    assert not launch_from_env({}).known


def test_fake_spec_matches_what_the_probe_reads():
    spec = load_machine("h100_8x")["nvml"]
    assert FakeNVML(spec).nvmlDeviceGetCount() == 8


def test_a_snapshot_leaves_out_host_user_and_addresses_and_judges_the_same(tmp_path):
    """A snapshot is meant to be committed: no host name, user name or network address unless --include-host
    (issue 32), and the findings are those of the machine it was taken on."""
    from precision_doctor.cli.snapshot import without_host_identity

    system, env = fake_system("l40s_2x_exclusive_stopped")
    launcher = "accelerate launch --num_processes 2 --mixed_precision bf16 train.py"
    live = gather([SEED000], launcher=launcher, environ=env, system=system, stack_overrides=CURRENT)
    redacted = without_host_identity(live.machine)
    text = snapshot_json(redacted, live.stack)
    users = {p.user for g in live.machine.gpus for p in g.processes if p.user} | {live.machine.host.user} - {""}
    for secret in users | {live.machine.host.hostname} - {""}:
        assert f'"{secret}"' not in text
    node = tmp_path / "node.json"
    node.write_text(text)
    offline = gather([SEED000], launcher=launcher, facts_file=str(node))
    key = sorted((f.rule_id, f.severity) for f in engine.run(live).findings)
    assert key == sorted((f.rule_id, f.severity) for f in engine.run(offline).findings)
    assert [p.mine for g in redacted.gpus for p in g.processes] == [
        p.mine for g in live.machine.gpus for p in g.processes
    ]


def test_cli_snapshot_keeps_the_host_name_only_when_asked(tmp_path):
    import socket

    name = socket.gethostname()
    plain, kept = tmp_path / "plain.json", tmp_path / "kept.json"
    assert doctor("snapshot", "-o", str(plain)).returncode == 0
    assert doctor("snapshot", "--include-host", "-o", str(kept)).returncode == 0
    assert json.loads(plain.read_text())["machine"]["host"]["hostname"] == ""
    assert json.loads(kept.read_text())["machine"]["host"]["hostname"] == name


@pytest.mark.parametrize(
    "target, name, capability, mib",
    [
        ("a40", "NVIDIA A40", (8, 6), 46068),
        ("l40:2", "NVIDIA L40", (8, 9), 46068),
        ("rtx-5090", "NVIDIA GeForce RTX 5090", (12, 0), 32607),
    ],
)
def test_the_added_profiles_are_the_cards_as_nvidia_smi_reports_them(target, name, capability, mib):
    """Issue 32's profiles: each card's name, compute capability and the total nvidia-smi prints (sources in
    probes/target.py); a job is judged against them like any other."""
    from precision_doctor.probes.target import machine_from_target

    machine = machine_from_target(target)
    count = int(target.partition(":")[2] or 1)
    assert [(g.name, g.capability, g.memory_total_mib) for g in machine.gpus] == [(name, capability, mib)] * count
    assert target.split(":")[0] in doctor("targets").stdout
