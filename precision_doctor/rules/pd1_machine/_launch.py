"""What the launch rules share: the machine the job starts on and how it is launched: compute modes, stale contexts,
ports, process."""

from __future__ import annotations

import time

from ...derive.launch import written_per_rank
from ...derive.placement import AXOLOTL
from ...model.facts import KNOWN, Call, GpuProcess, MachineFacts, ScriptFacts

ACC = (
    "import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\nmodel = torch.nn.Linear(512, 512)\n"
)


ACC_LOOP = (
    "optimizer = torch.optim.AdamW(model.parameters())\nmodel, optimizer = accelerator.prepare(model, optimizer)\n"
)


ACC_GOOD = ACC + ACC_LOOP


TRAINER = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32{dm})\n"
    "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n"
)


def fixed_placements(script: ScriptFacts) -> list[tuple[Call, str]]:
    """Places the script pins work to GPU 0 in every rank: "cuda:0", device_map={"": 0}, and "cuda" / .cuda() (the
    current device) before any rank has chosen its own (`torch.cuda.set_device`, or `Accelerator()`, whose state
    sets each rank's device). A value written from a rank (`{"": int(os.environ.get("LOCAL_RANK", 0))}`,
    `{"": local_rank}`) reads 0 only with the launcher's variable unset: under the launch, each rank's own GPU."""
    out = []
    setters = script.of("set_device") + script.of("accelerator")
    for c in script.of("tensor_on_device"):  # torch.randn(..., device="cuda"): a warm-up, a buffer
        v = c.kwarg("device")
        if v.state == KNOWN and not written_per_rank(v):
            if v.value in ("cuda:0", 0) or (v.value == "cuda" and not _device_chosen_before(c, setters)):
                out.append((c, f"{c.callee.rsplit('.', 1)[-1]}(device={v.value!r})"))
    for c in script.of("cast"):
        method = c.callee.rsplit(".", 1)[-1]
        if method == "cuda" and not c.args:
            if not _device_chosen_before(c, setters):
                out.append((c, ".cuda()"))
        elif method == "to":
            for v in list(c.args) + [c.kwargs[k] for k in ("device",) if k in c.kwargs]:
                if v.state != KNOWN or written_per_rank(v):
                    continue
                if v.value == "cuda:0" or (v.value == "cuda" and not _device_chosen_before(c, setters)):
                    out.append((c, f".to({v.value!r})"))
    # Axolotl replaces a recipe's device_map with {"": LOCAL_RANK} whenever it runs more than one process
    # (utils/config/__init__.py:139-147, 221-222)
    loads = [] if AXOLOTL in script.imports else script.of("model_load")
    for load in loads:
        v = load.kwarg("device_map")
        if (
            v.state == KNOWN
            and (v.value in ("cuda", "cuda:0", 0) or v.value in ({"": 0}, {"": "cuda:0"}))
            and not written_per_rank(v)
        ):
            out.append((load, f"device_map={v.text}"))
    return out


def _device_chosen_before(c: Call, setters: list[Call]) -> bool:
    """Whether a rank's device may already be set when `c` runs: a setter earlier in the same scope, or one in
    another scope (order unknown: not judged). False only where every setter comes later in c's own scope."""
    for s in setters:
        if s.location.path != c.location.path or s.scope != c.scope:
            return True
        if (s.location.line, s.location.column) < (c.location.line, c.location.column):
            return True
    return False


def age(p: GpuProcess, probed_at: float) -> str:
    """When the process started, and how long before the machine was probed (the report is a function of the
    facts: no clock is read here)."""
    if not p.started:
        return ""
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime(p.started))
    if not probed_at:
        return f", started {started} UTC"
    hours = (probed_at - p.started) / 3600
    ago = (
        f" ({hours / 24:.0f} days before the probe)"
        if hours >= 48
        else f" ({hours:.0f} h before the probe)"
        if hours >= 1
        else ""
    )
    return f", started {started} UTC{ago}"


def describe_process(p: GpuProcess, machine: MachineFacts) -> str:
    who = "yours" if p.mine else (p.user or "owner unknown")
    cmd = p.command or "command unknown"
    state = {"stopped": "stopped (T)", "zombie": "zombie (defunct)", "gone": "no longer exists"}.get(p.status, p.status)
    orphan = ", parent gone" if p.parent_alive is False else ""
    return f"pid {p.pid} ({cmd}; {who}; {state}{orphan}{age(p, machine.probed_at)})"
