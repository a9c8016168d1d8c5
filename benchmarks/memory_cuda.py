"""The memory verdict against a real GPU: does a job the doctor says fits really fit, and does one it says will not
really run out?

For each case this writes a training script the way users write one (a model saved with save_pretrained and loaded
with from_pretrained, TrainingArguments, Trainer), asks `precision-doctor memory --target PROFILE --format json`
for the largest per_device_train_batch_size that fits that profile's GPU, and runs the script for three real
optimizer steps on this machine's GPU, its allocator capped at the profile's memory (less the CUDA context this
process really holds): once at that batch size, where the doctor says it fits, and once at the smallest batch the
doctor says overflows the GPU by at least 15 %. Each run reports what torch held: weights at train(), the peak the
allocator handed out and reserved, and the memory outside the allocator (context, kernels, libraries), beside the
estimate for the same batch.

    python benchmarks/memory_cuda.py              # needs a CUDA GPU, torch, transformers and peft
    python benchmarks/memory_cuda.py --quick      # two cases

Exit status 1 when a run the doctor says fits runs out of memory, or one it says overflows fits.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _python_path() -> str:
    """This checkout first, then whatever the caller had (wheels carried to a GPU machine)."""
    return os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))


MIB = 1 << 20
OVERFLOW = 1.15  # the batch run to show a predicted overflow is real: estimated peak >= 115 % of the GPU


@dataclass(frozen=True)
class Case:
    name: str
    arch: str  # llama | gpt2
    dtype: str  # the dtype from_pretrained loads in
    precision: str  # bf16=True | fp16=True | "" (none)
    target: str  # the GPU profile whose memory the run is capped at
    sequence: int = 1024
    checkpointing: bool = False
    lora: int = 0


CASES = [
    Case("llama 0.5B, fp32 weights, bf16 AMP", "llama", "float32", "bf16", "l4"),
    Case("llama 0.5B, bf16 weights", "llama", "bfloat16", "bf16", "t4"),
    Case("llama 0.5B, fp32 + bf16 AMP, checkpointing", "llama", "float32", "bf16", "l4", checkpointing=True),
    Case("llama 0.5B, bf16, LoRA r=16", "llama", "bfloat16", "bf16", "t4", lora=16),
    Case("gpt2 0.35B, fp32 weights, fp16 AMP", "gpt2", "float32", "fp16", "t4"),
]
QUICK = CASES[:2]

SCRIPT = """\
import torch
from torch.utils.data import Dataset
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
{peft_import}
MODEL = "{model}"


class RandomTokens(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        ids = torch.randint(2, {vocab}, ({sequence},))
        return {{"input_ids": ids, "labels": ids}}


model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.{dtype})
{peft_wrap}
args = TrainingArguments(
    output_dir="{out}",
    per_device_train_batch_size={batch},
    {precision}
    gradient_checkpointing={checkpointing},
    max_steps=3,
    optim="adamw_torch",
    report_to=[],
    save_strategy="no",
    dataloader_num_workers=0,
)
trainer = Trainer(model=model, args=args, train_dataset=RandomTokens())
trainer.train()
"""

# Runs a script as __main__ with the allocator capped, and prints what torch held. The GPU is otherwise idle, so
# the memory in use before the script starts is this process's CUDA context.
CHILD = r"""
import json, os, runpy, sys
import torch
out = {"result": "fits", "steps": 0}
free, total = torch.cuda.mem_get_info()
out["context_at_start"] = total - free
budget = int(os.environ["PD_BUDGET"])
torch.cuda.set_per_process_memory_fraction(min(1.0, max(budget - out["context_at_start"], 0) / total))
import transformers

class Steps(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        out["steps"] = state.global_step

real_train = transformers.Trainer.train
def train(self, *a, **k):
    out["weights"] = torch.cuda.memory_allocated()
    self.add_callback(Steps())
    return real_train(self, *a, **k)
transformers.Trainer.train = train
try:
    runpy.run_path(sys.argv[1], run_name="__main__")
except torch.cuda.OutOfMemoryError:
    out["result"] = "out of memory"
out["peak_allocated"] = torch.cuda.max_memory_allocated()
out["peak_reserved"] = torch.cuda.max_memory_reserved()
free, total = torch.cuda.mem_get_info()
out["outside_allocator"] = (total - free) - torch.cuda.memory_reserved()
print("RESULT " + json.dumps(out), flush=True)
"""


# Measures, without a cap, where the memory of one case goes at several batch sizes: the end of the first forward,
# the first backward's peak, after the first optimizer step, and the peak over two steps. One process per case.
PHASES = r"""
import gc, json, sys
import torch, transformers
case, model_dir = json.loads(sys.argv[1]), sys.argv[2]
transformers.logging.set_verbosity_error()
model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, case["dtype"]))
if case["lora"]:
    import peft
    model = peft.get_peft_model(model, peft.LoraConfig(r=case["lora"], task_type="CAUSAL_LM"))
for batch in case["batches"]:
    rec = {"case": case["name"], "batch": batch}
    class Phases(transformers.TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            if "backward_peak" not in rec:
                rec["backward_peak"] = torch.cuda.max_memory_allocated()
                rec["before_step"] = torch.cuda.memory_allocated()
        def on_optimizer_step(self, args, state, control, **kwargs):
            if "after_step" not in rec:
                rec["after_step"] = torch.cuda.memory_allocated()
    def forward_end(module, inputs, output):
        rec.setdefault("forward_end", torch.cuda.memory_allocated())
    hook = model.register_forward_hook(forward_end)
    ids = torch.randint(2, case["vocab"], (case["sequence"],))
    data = [{"input_ids": ids, "labels": ids}] * (4 * batch)
    args = transformers.TrainingArguments(output_dir="out", per_device_train_batch_size=batch, max_steps=2,
                                          gradient_checkpointing=case["checkpointing"], optim="adamw_torch",
                                          report_to=[], save_strategy="no", **({case["precision"]: True}
                                                                               if case["precision"] else {}))
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[Phases()])
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    rec["weights"] = torch.cuda.memory_allocated()
    trainer.train()
    rec["peak"] = torch.cuda.max_memory_allocated()
    rec["peak_reserved"] = torch.cuda.max_memory_reserved()
    free, total = torch.cuda.mem_get_info()
    rec["outside_allocator"] = (total - free) - torch.cuda.memory_reserved()
    print("PHASES " + json.dumps(rec), flush=True)
    hook.remove()
    del trainer
    for p in model.parameters():
        p.grad = None
    gc.collect(); torch.cuda.empty_cache()
"""

BATCHES = {
    "llama 0.5B, fp32 weights, bf16 AMP": (4, 8, 16),
    "llama 0.5B, bf16 weights": (4, 8, 16),
    "llama 0.5B, fp32 + bf16 AMP, checkpointing": (16, 32, 64),
    "llama 0.5B, bf16, LoRA r=16": (4, 8, 16),
    "gpt2 0.35B, fp32 weights, fp16 AMP": (2, 4, 8),
}


def phases(case: Case, model: Path, vocab: int, folder: Path) -> list[dict]:
    spec = {
        "name": case.name,
        "dtype": case.dtype,
        "lora": case.lora,
        "vocab": vocab,
        "sequence": case.sequence,
        "checkpointing": case.checkpointing,
        "precision": case.precision,
        "batches": BATCHES[case.name],
    }
    done = subprocess.run(
        [sys.executable, "-c", PHASES, json.dumps(spec), str(model)], capture_output=True, text=True, cwd=folder
    )
    rows = [json.loads(line[len("PHASES ") :]) for line in done.stdout.splitlines() if line.startswith("PHASES ")]
    if len(rows) != len(spec["batches"]):
        print(f"{case.name}: phases ended early (exit {done.returncode}): {done.stderr.strip()[-1500:]}", flush=True)
    for row in rows:
        est = doctor(write_script(case, model, vocab, row["batch"], folder), case.target)["per_gpu_bytes"]
        row["estimated"] = est
        print(
            f"{case.name}, batch {row['batch']}: "
            + ", ".join(
                f"{k} {row[k] / MIB:,.0f}"
                for k in (
                    "weights",
                    "forward_end",
                    "backward_peak",
                    "before_step",
                    "after_step",
                    "peak",
                    "peak_reserved",
                    "outside_allocator",
                )
                if k in row
            )
            + " MiB; estimated "
            + ", ".join(f"{k} {v / MIB:,.0f}" for k, v in est.items())
            + " MiB",
            flush=True,
        )
    return rows


def save_model(arch: str, folder: Path) -> int:
    """A model built from its config, saved as users' checkpoints are (bf16 safetensors); returns its vocab size."""
    import torch
    import transformers

    if arch == "llama":
        cfg = transformers.LlamaConfig(
            hidden_size=2048,
            intermediate_size=5504,
            num_hidden_layers=8,
            num_attention_heads=16,
            num_key_value_heads=4,
            vocab_size=32000,
            max_position_embeddings=4096,
            bos_token_id=1,
            eos_token_id=2,
        )
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.GPT2Config(n_embd=1024, n_layer=24, n_head=16, vocab_size=50257, n_positions=1024)
        model = transformers.GPT2LMHeadModel(cfg)
    model.to(torch.bfloat16).save_pretrained(folder)
    return cfg.vocab_size


def write_script(case: Case, model: Path, vocab: int, batch: int, folder: Path) -> Path:
    lora = case.lora
    text = SCRIPT.format(
        model=model,
        vocab=vocab,
        sequence=case.sequence,
        dtype=case.dtype,
        batch=batch,
        out=folder / "out",
        precision=f"{case.precision}=True," if case.precision else "",
        checkpointing=case.checkpointing,
        peft_import="from peft import LoraConfig, get_peft_model\n" if lora else "",
        peft_wrap=f'model = get_peft_model(model, LoraConfig(r={lora}, task_type="CAUSAL_LM"))\n' if lora else "",
    )
    path = folder / f"train_{case.arch}_b{batch}.py"
    path.write_text(text)
    return path


def doctor(script: Path, target: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "memory", str(script), "--target", target, "--format", "json"],
        capture_output=True,
        text=True,
        cwd=script.parent,
        env={**os.environ, "PYTHONPATH": _python_path()},
    )
    if not done.stdout.strip():
        raise SystemExit(f"precision-doctor memory failed on {script}: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)["scripts"][0]


def run(script: Path, budget: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(script)],
        capture_output=True,
        text=True,
        cwd=script.parent,
        env={**os.environ, "PD_BUDGET": str(budget), "TOKENIZERS_PARALLELISM": "false"},
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise SystemExit(f"{script} ended without a result (exit {done.returncode}): {done.stderr.strip()[-2000:]}")


def overflow_batch(case: Case, model: Path, vocab: int, fits: int, folder: Path) -> tuple[int, dict]:
    """The smallest batch above `fits` whose estimated peak is at least OVERFLOW times the GPU's memory."""
    batch = fits + 1
    while True:
        verdict = doctor(write_script(case, model, vocab, batch, folder), case.target)
        if verdict["per_gpu_bytes"]["peak"] >= OVERFLOW * verdict["budget_bytes"]:
            return batch, verdict
        batch = max(batch + 1, int(batch * 1.1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", help="also write every row as JSON to this file")
    parser.add_argument(
        "--phases", action="store_true", help="measure each case uncapped at three batch sizes, phase by phase, instead"
    )
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU here: this benchmark measures one", file=sys.stderr)
        return 2
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}", flush=True)
    rows, wrong = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models: dict[str, tuple[Path, int]] = {}
        for case in QUICK if args.quick else CASES:
            if case.arch not in models:
                models[case.arch] = (folder / case.arch, save_model(case.arch, folder / case.arch))
            model, vocab = models[case.arch]
            if args.phases:
                rows.extend(phases(case, model, vocab, folder))
                continue
            first = doctor(write_script(case, model, vocab, 1, folder), case.target)
            fits = first["largest_batch_that_fits"]
            if not fits:
                print(f"{case.name}: the doctor says not even batch 1 fits {case.target}; skipped", flush=True)
                continue
            for expected, (batch, verdict) in (
                ("fits", (fits, doctor(write_script(case, model, vocab, fits, folder), case.target))),
                ("out of memory", overflow_batch(case, model, vocab, fits, folder)),
            ):
                got = run(write_script(case, model, vocab, batch, folder), verdict["budget_bytes"])
                est = verdict["per_gpu_bytes"]
                row = {
                    "case": case.name,
                    "target": case.target,
                    "batch": batch,
                    "doctor": expected,
                    "real": got["result"],
                    "steps": got["steps"],
                    "estimated": est,
                    "measured": got,
                }
                rows.append(row)
                wrong += got["result"] != expected
                allocated = est["peak"] - est["CUDA context"] - est["allocator reserve"]
                weights = f"{got.get('weights', 0) / MIB:,.0f}/{est['weights'] / MIB:,.0f}"
                print(
                    f"{case.name} on {case.target} ({verdict['budget_bytes'] / (1 << 30):.0f} GiB), batch {batch}: "
                    f"doctor says {expected}, real run {got['result']} after {got['steps']} steps; "
                    f"weights {weights} MiB (measured/estimated); "
                    f"peak allocated {got['peak_allocated'] / MIB:,.0f} MiB vs estimated {allocated / MIB:,.0f} "
                    f"({got['peak_allocated'] / allocated - 1:+.1%}); "
                    f"reserved + outside {(got['peak_reserved'] + got['outside_allocator']) / MIB:,.0f} MiB vs "
                    f"estimated peak {est['peak'] / MIB:,.0f}; outside the allocator "
                    f"{got['outside_allocator'] / MIB:,.0f} MiB (estimated context "
                    f"{est['CUDA context'] / MIB:,.0f})",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\n{len(rows) - wrong} of {len(rows)} verdicts held on the real GPU")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
