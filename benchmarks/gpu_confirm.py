"""The doctor's CUDA-only predictions against a real GPU.

Each case is a rule's firing script and its correct twin, made runnable (a tiny Llama saved from a config, data
built in the script). For each script this runs `precision-doctor check` statically on this machine (real NVML,
no --target) and then with `--live --steps 2`, which really trains on the GPU, and compares:

- the firing script: the static check reports the rule at error level, and the real run raises the rule's declared
  error, which the live report attaches to the same rule;
- the twin: the static check does not report the rule at error level, and the real run trains without raising.

It also checks what NVML shows this machine: `precision-doctor snapshot` names the GPU torch sees, and a second
process holding 2 GiB of GPU memory is reported (PD115) with its pid.

    python benchmarks/gpu_confirm.py              # needs a CUDA GPU, torch and transformers
    python benchmarks/gpu_confirm.py --snapshot FILE   # also keep the machine snapshot

Exit status 1 when a prediction does not hold.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _python_path() -> str:
    """This checkout first, then whatever the caller had (wheels carried to a GPU machine)."""
    return os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))


TRAINER = """
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("TINY", dtype=torch.{dtype})
ids = torch.randint(0, 128, (16,))
data = [{{"input_ids": ids, "labels": ids}} for _ in range(16)]
args = TrainingArguments(output_dir="out", {precision}=True, per_device_train_batch_size=2, report_to=[])
Trainer(model=model, args=args, train_dataset=data).train()
"""

CAST_AFTER_OPTIMIZER = """
import torch
model = torch.nn.Linear(16, 4).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for x in [torch.randn(8, 16, device="cuda") for _ in range(2)]:
    model(x).sum().backward()
    opt.step()
model = model.to(torch.bfloat16)  # phase 2 in bf16: the fp32 state from phase 1 stays
for x in [torch.randn(8, 16, device="cuda", dtype=torch.bfloat16) for _ in range(2)]:
    model(x).sum().backward()
    opt.step()
"""

# A cast before the first step trains: the state is created at that step, in bf16 (seen on an H200, torch 2.11).
CAST_BEFORE_OPTIMIZER = """
import torch
model = torch.nn.Linear(16, 4).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model = model.to(torch.bfloat16)
loader = [torch.randn(8, 16, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
for x in loader:
    model(x).sum().backward()
    opt.step()
"""

HALF_MODEL = """
import torch
model = torch.nn.Linear(16, 4).cuda().half()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    x = torch.randn(8, 16, device="cuda")
    loss = model(x).sum()
    loss.backward()
    opt.step()
"""

AUTOCAST_MODEL = """
import torch
model = torch.nn.Linear(16, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for _ in range(4):
    x = torch.randn(8, 16, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
"""

LOOP = """
import torch
from torch.utils.data import DataLoader


class MyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.layer(x)


dataset = [(torch.randn(16), torch.randn(4)) for _ in range(32)]
loader = DataLoader(dataset, batch_size=8)
model = MyNet().cuda()
opt = torch.optim.AdamW(model.parameters())
for x, y in loader:
{move}    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
"""

# (rule, the script that must raise its declared error, the twin that must train)
CASES = [
    ("PD201", TRAINER.format(dtype="float16", precision="fp16"), TRAINER.format(dtype="float32", precision="fp16")),
    ("PD202", TRAINER.format(dtype="bfloat16", precision="fp16"), TRAINER.format(dtype="bfloat16", precision="bf16")),
    ("PD203", CAST_AFTER_OPTIMIZER, CAST_BEFORE_OPTIMIZER),
    ("PD208", HALF_MODEL, AUTOCAST_MODEL),
    ("PD305", LOOP.format(move=""), LOOP.format(move="    x, y = x.cuda(), y.cuda()\n")),
]

HOLDER = (
    "import sys, time, torch\n"
    "x = torch.empty(2 << 30, dtype=torch.uint8, device='cuda')\n"
    "print('holding', flush=True)\n"
    "sys.stdin.read()\n"
)


def doctor(*args: str, cwd: Path) -> tuple[int, dict, str]:
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": _python_path(), "HF_HUB_OFFLINE": "1"},
    )
    try:
        report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    except ValueError:
        report = {}
    return done.returncode, report, done.stderr


def declared_error(rule_id: str) -> str:
    sys.path.insert(0, str(ROOT))
    from precision_doctor.rules.catalog import get_rule

    return get_rule(rule_id).error


def the_rule(report: dict, rule_id: str) -> list[dict]:
    return [f for f in report.get("findings", ()) if f["id"] == rule_id]


def confirm(rule_id: str, body: str, fires: bool, folder: Path, tiny: Path) -> list[str]:
    """What did not hold for this script (empty: everything did)."""
    script = folder / f"{rule_id}_{'fires' if fires else 'twin'}.py"
    script.write_text(textwrap.dedent(body).replace("TINY", str(tiny)))
    wrong = []
    _, static, err = doctor("check", script.name, "--format", "json", cwd=folder)
    static_errors = [f for f in the_rule(static, rule_id) if f["severity"] == "error"]
    if fires and not static_errors:
        wrong.append(f"the static check did not report {rule_id} at error level ({err.strip()[-300:]})")
    if not fires and static_errors:
        wrong.append(f"the static check reported {rule_id} on its twin: {static_errors[0]['message']}")
    _, live, err = doctor(
        "check",
        script.name,
        "--live",
        "--steps",
        "2",
        "--timeout",
        "240",
        "--format",
        "json",
        "--include-facts",
        cwd=folder,
    )
    if os.environ.get("PD_KEEP"):
        Path(os.environ["PD_KEEP"], script.stem + ".json").write_text(json.dumps(live, indent=1))
    raised = [f for f in the_rule(live, rule_id) if "live run raised" in f["message"]]
    others = [f["message"] for f in live.get("findings", ()) if "live run raised" in f["message"]]
    if fires:
        expected = re.split(r",| but ", declared_error(rule_id).split(": ", 1)[-1])[0].rstrip(".")
        if not raised:
            wrong.append(f"the real run did not raise {rule_id}'s error ({others or err.strip()[-600:]})")
        elif expected not in raised[0]["message"]:
            wrong.append(f"the real run raised something else: {raised[0]['message']} (declared: {expected})")
        else:
            print(f"  real error: {raised[0]['message'].split(': ', 1)[-1]}", flush=True)
    elif others:
        wrong.append(f"the twin raised on the real GPU: {others[0]}")
    return wrong


def check_nvml(folder: Path, snapshot_out: str | None, twin: Path) -> list[str]:
    import torch

    wrong = []
    code, _, err = doctor("snapshot", "-o", str(folder / "snapshot.json"), cwd=folder)
    if code != 0:
        return [f"snapshot failed (exit {code}): {err.strip()[-500:]}"]
    snap = json.loads((folder / "snapshot.json").read_text())
    if snapshot_out:
        Path(snapshot_out).write_text(json.dumps(snap, indent=1))
    gpus = snap.get("machine", snap).get("gpus", [])
    names = [g.get("name") for g in gpus]
    print(f"NVML: {names}", flush=True)
    if torch.cuda.get_device_name() not in names:
        wrong.append(f"snapshot GPUs {names} do not include {torch.cuda.get_device_name()}")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        time.sleep(1)
        _, report, err = doctor("check", twin.name, "--format", "json", cwd=folder)
        held = the_rule(report, "PD115")
        if not held:
            wrong.append(
                f"a process holding 2 GiB of GPU memory (pid {holder.pid}) was not reported (PD115): "
                f"{[f['id'] for f in report.get('findings', ())]} {err.strip()[-300:]}"
            )
        else:
            print(f"PD115: {held[0]['message']}", flush=True)
            if str(holder.pid) not in json.dumps(held[0]):
                wrong.append(f"PD115 does not name the holding process {holder.pid}: {held[0]['message']}")
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshot", help="write the machine snapshot (real NVML) to this file")
    parser.add_argument("--only", help="these rules' cases only, comma-separated (and no NVML check)")
    args = parser.parse_args()
    import torch
    import transformers

    if not torch.cuda.is_available():
        print("no CUDA GPU here: this benchmark needs one", file=sys.stderr)
        return 2
    print(
        f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; transformers {transformers.__version__}",
        flush=True,
    )
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tiny = folder / "tiny"
        cfg = transformers.LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            vocab_size=128,
        )
        transformers.LlamaForCausalLM(cfg).save_pretrained(tiny)
        for rule_id, firing, twin in CASES:
            if args.only and rule_id not in args.only.split(","):
                continue
            for fires, body in ((True, firing), (False, twin)):
                wrong = confirm(rule_id, body, fires, folder, tiny)
                failures += bool(wrong)
                print(
                    f"{rule_id} {'fires' if fires else 'twin '}: {'held' if not wrong else '; '.join(wrong)}",
                    flush=True,
                )
        if not args.only:
            wrong = check_nvml(folder, args.snapshot, folder / "PD201_twin.py")
            failures += bool(wrong)
            print(f"NVML: {'held' if not wrong else '; '.join(wrong)}", flush=True)
    print(f"\n{failures} prediction(s) did not hold")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
