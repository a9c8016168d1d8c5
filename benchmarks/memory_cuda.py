"""The memory verdict against a real GPU: does a job train at the batch the doctor calls safe, and how close is the
estimate to what the GPU holds (reserved by torch's caching allocator plus the memory outside it)?

Three model families at their real sizes (Qwen2-0.5B, GPT-2 medium, TinyLlama-1.1B, each built from its config and
saved as users' checkpoints are) x four regimes (full bf16; fp32 weights under fp16 AMP; LoRA with gradient
checkpointing; QLoRA: 4-bit NF4 base, prepare_model_for_kbit_training, LoRA), 1,024-token sequences, the Trainer's
default optimizer. For each job this writes the training script the way users write one, asks
`precision-doctor memory --target PROFILE --format json` for the largest batch that fits that profile's GPU with
the estimate's measured error to spare (`safe_batch`) and without it (`largest_batch_that_fits`), and trains it for
three real optimizer steps in one process per job:

- capped: the allocator limited to the profile's memory less what this process holds outside it, at the safe batch
  (the doctor's promise: it must train) and at the largest batch whose estimate fits (uncertain);
- uncapped: at two ordinary batches, where the estimate is compared with the allocated and reserved peaks.

    python benchmarks/memory_cuda.py --json rows.json   # needs a CUDA GPU, torch, transformers, peft, bitsandbytes
    python benchmarks/memory_cuda.py --only qwen2       # one family
    python benchmarks/memory_cuda.py --smoke            # tiny models on the CPU: the harness itself, no figures

Exit status 1 when a job does not train at the batch called safe.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
STEPS = 3


def _python_path() -> str:
    """This checkout first, then whatever the caller had (wheels carried to a GPU machine)."""
    return os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))


# Each family at its published size (the hub configs of Qwen/Qwen2-0.5B, gpt2-medium, TinyLlama/TinyLlama-1.1B).
FAMILIES = {
    "qwen2": dict(
        model_type="qwen2",
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
    ),
    "gpt2": dict(model_type="gpt2", n_embd=1024, n_layer=24, n_head=16, vocab_size=50257, n_positions=1024),
    "llama": dict(
        model_type="llama",
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=22,
        num_attention_heads=32,
        num_key_value_heads=4,
        vocab_size=32000,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
    ),
}
# --smoke: the same families, a few layers wide
_SMOKE_DECODER = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)
SMOKE_SIZES = {
    "qwen2": {**_SMOKE_DECODER, "vocab_size": 1000},
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, vocab_size=1000),
    "llama": {**_SMOKE_DECODER, "vocab_size": 1000},
}


@dataclass(frozen=True)
class Regime:
    name: str
    dtype: str  # the dtype from_pretrained loads in
    precision: str  # TrainingArguments' bf16 / fp16
    lora: int = 0
    checkpointing: bool = False
    qlora: bool = False


REGIMES = (
    Regime("full bf16", "bfloat16", "bf16"),
    Regime("fp32 weights, fp16 AMP", "float32", "fp16"),
    Regime("LoRA r=16, checkpointing", "bfloat16", "bf16", lora=16, checkpointing=True),
    Regime("QLoRA r=16, checkpointing", "bfloat16", "bf16", lora=16, checkpointing=True, qlora=True),
)
# The GPU each job is capped at: small enough that its safe batch is a real edge, large enough for batches above 1.
TARGETS = {
    ("qwen2", "full bf16"): "a10g",
    ("qwen2", "fp32 weights, fp16 AMP"): "a100-40gb",
    ("qwen2", "LoRA r=16, checkpointing"): "t4",
    ("qwen2", "QLoRA r=16, checkpointing"): "t4",
    ("gpt2", "full bf16"): "t4",
    ("gpt2", "fp32 weights, fp16 AMP"): "l4",
    ("gpt2", "LoRA r=16, checkpointing"): "t4",
    ("gpt2", "QLoRA r=16, checkpointing"): "t4",
    ("llama", "full bf16"): "a10g",
    ("llama", "fp32 weights, fp16 AMP"): "a100-40gb",
    ("llama", "LoRA r=16, checkpointing"): "t4",
    ("llama", "QLoRA r=16, checkpointing"): "t4",
}

SCRIPT = """\
import torch
from torch.utils.data import Dataset
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments{bnb_import}
{peft_import}
MODEL = "{model}"


class RandomTokens(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        ids = torch.randint(2, {vocab}, ({sequence},))
        return {{"input_ids": ids, "labels": ids}}

{load}
args = TrainingArguments(
    output_dir="{out}",
    per_device_train_batch_size={batch},
    {precision}=True,
    gradient_checkpointing={checkpointing},{checkpointing_kwargs}
    max_steps={steps},{use_cpu}
    report_to="none",
    save_strategy="no",
    logging_strategy="no",
    dataloader_num_workers=0,
)
trainer = Trainer(model=model, args=args, train_dataset=RandomTokens())
trainer.train()
"""

LOAD_PLAIN = "model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.{dtype})\n"
LOAD_QLORA = """\
quantization = BitsAndBytesConfig(
    load_in_4bit=True,
    bnb_4bit_quant_type="nf4",
    bnb_4bit_compute_dtype=torch.bfloat16,
    bnb_4bit_use_double_quant=True,
)
model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.{dtype}, quantization_config=quantization)
model = prepare_model_for_kbit_training(model)
"""
WRAP_LORA = 'model = get_peft_model(model, LoraConfig(r={lora}, lora_alpha={alpha}, task_type="CAUSAL_LM"))\n'


# One process per job: runs the job's scripts as __main__, one after the other, and prints what torch held for each.
# The GPU is otherwise idle, so device memory in use beyond the allocator's reserve is this process's own (context,
# kernels, library handles). Between runs everything the script made is dropped and the cache emptied.
CHILD = r"""
import gc, json, os, runpy, sys, time
import torch
runs = json.loads(sys.argv[1])
cuda = torch.cuda.is_available()
import transformers
transformers.logging.set_verbosity_error()

def outside_allocator():
    free, total = torch.cuda.mem_get_info()
    return (total - free) - torch.cuda.memory_reserved()

if cuda:  # load the GEMM kernels the runs use before reading what the process holds outside the allocator
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        a = torch.ones(256, 256, device="cuda", dtype=dt); (a @ a).sum().item()
    del a; torch.cuda.synchronize(); torch.cuda.empty_cache()
    warm_outside = outside_allocator()
    total = torch.cuda.mem_get_info()[1]
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; outside the allocator "
          f"{warm_outside >> 20} MiB", file=sys.stderr, flush=True)

state = {}
class Steps(transformers.TrainerCallback):
    def on_step_end(self, args, st, control, **kwargs):
        state["steps"] = st.global_step

real_train = transformers.Trainer.train
def train(self, *a, **k):
    if cuda:
        torch.cuda.synchronize()
        state["weights"] = torch.cuda.memory_allocated()
    self.add_callback(Steps())
    return real_train(self, *a, **k)
transformers.Trainer.train = train

STATS = ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "requested_bytes.all.peak",
         "inactive_split_bytes.all.peak", "segment.all.peak", "num_alloc_retries", "num_ooms")
for run in runs:
    state.clear()
    out = {"script": run["script"], "batch": run["batch"], "capped": run["capped"], "result": "trains"}
    if cuda:
        cap = (run["budget"] - warm_outside) / total if run["capped"] else 1.0
        out["allocator_cap"] = int(cap * total) if run["capped"] else None
        torch.cuda.set_per_process_memory_fraction(min(max(cap, 0.0), 1.0))
        torch.cuda.reset_peak_memory_stats()
        start_reserved = torch.cuda.memory_reserved()
    began = time.time()
    try:
        runpy.run_path(run["script"], run_name="__main__")
    except torch.OutOfMemoryError as e:
        out["result"] = "out of memory"
        out["error"] = str(e).splitlines()[0][:300]
    except Exception as e:
        out["result"] = "failed"
        out["error"] = f"{type(e).__name__}: {str(e)[:500]}"
    out["seconds"] = round(time.time() - began, 1)
    out["steps"] = state.get("steps", 0)
    if cuda:
        out["weights"] = state.get("weights")
        stats = torch.cuda.memory_stats()
        out.update({k: stats.get(k, 0) for k in STATS})
        out["peak_allocated"] = torch.cuda.max_memory_allocated()
        out["peak_reserved"] = torch.cuda.max_memory_reserved()
        out["outside_allocator"] = outside_allocator()
        out["outside_allocator_warm"] = warm_outside
        out["reserved_before"] = start_reserved
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        out["left_after"] = torch.cuda.memory_allocated()
    print("RESULT " + json.dumps(out), flush=True)
"""


@dataclass
class Job:
    family: str
    regime: Regime
    target: str

    @property
    def name(self) -> str:
        return f"{self.family}, {self.regime.name}"


# Builds a family from its config and saves it in bf16 safetensors, as hub checkpoints are. In a process of its
# own: this one must hold no GPU memory, which the jobs would otherwise read as their own.
SAVE = r"""
import json, sys
import torch, transformers
spec, folder = json.loads(sys.argv[1]), sys.argv[2]
config = transformers.AutoConfig.for_model(spec.pop("model_type"), **spec)
with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
model.save_pretrained(folder)
print("VOCAB", config.vocab_size, flush=True)
"""


def save_model(family: str, folder: Path, smoke: bool) -> int:
    """Returns the saved model's vocabulary size."""
    spec = {**FAMILIES[family], **(SMOKE_SIZES[family] if smoke else {})}
    done = subprocess.run([sys.executable, "-c", SAVE, json.dumps(spec), str(folder)], capture_output=True, text=True)
    vocab = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("VOCAB ")]
    if not vocab:
        raise SystemExit(f"saving {family} failed: {done.stderr[-1500:]}")
    return int(vocab[0])


def save_config(family: str, folder: Path) -> int:
    """Only the config.json a saved checkpoint has (weights in bf16): all the doctor reads. Returns the vocab."""
    import transformers

    spec = dict(FAMILIES[family])
    config = transformers.AutoConfig.for_model(spec.pop("model_type"), **spec)
    config.dtype = "bfloat16"
    config.save_pretrained(folder)
    return config.vocab_size


def estimates_for(rows: list[dict], folder: Path) -> list[dict]:
    """The doctor's verdict today on each measured row's script (a fixture's rows: family, regime, target, batch),
    and at batch 1 of each job (its safe and largest batches). No GPU needed."""
    regimes = {r.name: r for r in REGIMES}
    vocabs = {f: save_config(f, folder / f) for f in {row["family"] for row in rows}}
    jobs = {(row["family"], row["regime"]) for row in rows}
    scripts = {}
    for family, name in jobs:
        job = Job(family, regimes[name], TARGETS[family, name])
        for batch in {1} | {row["batch"] for row in rows if (row["family"], row["regime"]) == (family, name)}:
            script = write_script(job, folder / family, vocabs[family], batch, folder, 1024, False)
            scripts[family, name, batch] = script.name
    by_path = {}
    for target in {TARGETS[key[:2]] for key in scripts}:  # one run of the doctor per GPU
        paths = [name for key, name in scripts.items() if TARGETS[key[:2]] == target]
        by_path.update({entry["path"]: entry for entry in doctor_many(paths, target, folder)})
    verdicts = {key: by_path[name] for key, name in scripts.items()}
    return [
        {**verdicts[row["family"], row["regime"], row["batch"]], "job": verdicts[row["family"], row["regime"], 1]}
        for row in rows
    ]


def write_script(job: Job, model: Path, vocab: int, batch: int, folder: Path, sequence: int, smoke: bool) -> Path:
    r = job.regime
    text = SCRIPT.format(
        model=model,
        vocab=vocab,
        sequence=sequence,
        batch=batch,
        out=folder / "out",
        precision=r.precision,
        checkpointing=r.checkpointing,
        # peft's adapters with the base frozen: non-reentrant checkpointing needs no input that requires grad
        checkpointing_kwargs='\n    gradient_checkpointing_kwargs={"use_reentrant": False},' if r.checkpointing else "",
        steps=STEPS,
        use_cpu="\n    use_cpu=True," if smoke else "",
        bnb_import=", BitsAndBytesConfig" if r.qlora else "",
        peft_import=(
            "from peft import LoraConfig, get_peft_model"
            + (", prepare_model_for_kbit_training" if r.qlora else "")
            + "\n"
            if r.lora
            else ""
        ),
        load=(LOAD_QLORA if r.qlora else LOAD_PLAIN).format(dtype=r.dtype)
        + (WRAP_LORA.format(lora=r.lora, alpha=2 * r.lora) if r.lora else ""),
    )
    slug = "_".join(filter(None, (job.family, r.dtype, r.precision, "lora" if r.lora else "", "q" if r.qlora else "")))
    path = folder / f"train_{slug}_b{batch}.py"
    path.write_text(text)
    return path


def doctor_many(paths: list[str], target: str, cwd: Path) -> list[dict]:
    """`precision-doctor memory PATH... --target TARGET --format json`: one entry per script."""
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "memory", *paths, "--target", target, "--format", "json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": _python_path()},
    )
    if not done.stdout.strip():
        raise SystemExit(f"precision-doctor memory failed on {paths}: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)["scripts"]


def doctor(script: Path, target: str) -> dict:
    return doctor_many([str(script)], target, script.parent)[0]


def plan(job: Job, model: Path, vocab: int, folder: Path, sequence: int, smoke: bool) -> list[dict]:
    """The runs of one job: capped at the safe and the uncertain batch, uncapped at two ordinary ones."""
    first = doctor(write_script(job, model, vocab, 1, folder, sequence, smoke), job.target)
    if "per_gpu_bytes" not in first:
        raise SystemExit(f"{job.name}: the doctor gives no estimate: {first.get('unknown')}")
    safe, fits = first["safe_batch"], first["largest_batch_that_fits"]
    if smoke:
        safe, fits = 2, 3
    runs = []
    if safe:
        runs.append({"batch": safe, "capped": True, "doctor": "safe"})
    if fits > safe:
        runs.append({"batch": fits, "capped": True, "doctor": "uncertain"})
    for batch in sorted({max(1, safe // 4), max(1, safe // 2)}):
        runs.append({"batch": batch, "capped": False, "doctor": "ordinary"})
    for run in runs:
        script = write_script(job, model, vocab, run["batch"], folder, sequence, smoke)
        run["script"] = str(script)
        run["budget"] = first["budget_bytes"]
    with ThreadPoolExecutor(8) as pool:
        for run, verdict in zip(runs, pool.map(lambda r: doctor(Path(r["script"]), job.target), runs), strict=True):
            run["estimate"] = verdict["per_gpu_bytes"]
    return runs


def measure(job: Job, runs: list[dict]) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(runs)],
        capture_output=True,
        text=True,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"},
    )
    got = {
        (r["batch"], r["capped"]): r
        for r in (json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT "))
    }
    if len(got) != len(runs):
        print(f"{job.name}: the job's process ended early (exit {done.returncode}): {done.stderr[-1500:]}", flush=True)
    rows = []
    for run in runs:
        measured = got.get((run["batch"], run["capped"]))
        if measured is None:
            continue
        rows.append(
            {
                "job": job.name,
                "family": job.family,
                "regime": asdict(job.regime),
                "target": job.target,
                **{k: run[k] for k in ("batch", "capped", "doctor", "budget", "estimate")},
                "measured": measured,
            }
        )
    return rows


def describe(row: dict) -> str:
    m, est = row["measured"], row["estimate"]
    text = f"{row['job']} on {row['target']}, batch {row['batch']} ({row['doctor']}"
    text += f", capped at {row['budget'] / MIB:,.0f} MiB)" if row["capped"] else ", uncapped)"
    text += f": {m['result']} after {m['steps']} steps in {m['seconds']} s"
    if m.get("error"):
        text += f" [{m['error'][:160]}]"
    if "peak_reserved" in m:
        held = m["peak_reserved"] + m["outside_allocator"]
        allocated = est["peak"] - est["CUDA context"] - est["allocator reserve"]
        text += (
            f"; allocated {m['peak_allocated'] / MIB:,.0f} vs {allocated / MIB:,.0f} MiB "
            f"({allocated / m['peak_allocated'] - 1:+.1%}); reserved + outside {held / MIB:,.0f} vs peak "
            f"{est['peak'] / MIB:,.0f} MiB ({est['peak'] / held - 1:+.1%}); reserved/allocated "
            f"{m['peak_reserved'] / m['peak_allocated']:.3f}; outside {m['outside_allocator'] / MIB:,.0f} MiB; "
            f"retries {m['num_alloc_retries']}"
        )
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write every row as JSON to this file (rewritten after each job)")
    parser.add_argument("--only", action="append", help="a family (qwen2, gpt2, llama) or a regime's name")
    parser.add_argument("--smoke", action="store_true", help="tiny models, CPU allowed: tries the harness")
    parser.add_argument("--deadline", type=float, default=0, help="start no job after this many seconds")
    parser.add_argument("--capped-only", action="store_true", help="only the runs at the safe and uncertain batch")
    args = parser.parse_args()
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # asking creates no CUDA context in this process
    import torch

    if not torch.cuda.is_available() and not args.smoke:
        print("no CUDA GPU here: this benchmark measures one (--smoke tries the harness on the CPU)", file=sys.stderr)
        return 2
    began = time.time()
    import transformers

    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    for name in ("peft", "bitsandbytes", "accelerate"):
        try:
            versions[name] = __import__(name).__version__
        except Exception as e:  # noqa: BLE001 - a version we cannot read is recorded as such
            versions[name] = f"unavailable: {type(e).__name__}"
    print(versions, flush=True)
    jobs = [  # family by family: a run cut short by --deadline still has every regime of the first families
        Job(family, regime, TARGETS[family, regime.name])
        for family in ("qwen2", "llama", "gpt2")
        for regime in REGIMES
        if not args.only or family in args.only or regime.name in args.only
    ]
    sequence = 32 if args.smoke else 1024
    rows: list[dict] = []
    broken = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = {f: folder / f for f in {j.family for j in jobs}}
        vocabs = {f: save_model(f, path, args.smoke) for f, path in models.items()}
        with ThreadPoolExecutor(4) as pool:  # the doctor's estimates need no GPU: all of them first
            plans = list(
                pool.map(lambda j: plan(j, models[j.family], vocabs[j.family], folder, sequence, args.smoke), jobs)
            )
        print(f"estimates ready after {time.time() - began:.0f} s", flush=True)
        for job, runs in zip(jobs, plans, strict=True):
            if args.deadline and time.time() - began > args.deadline:
                print(f"{job.name}: not started, past the deadline", flush=True)
                continue
            for row in measure(job, [r for r in runs if r["capped"] or not args.capped_only]):
                rows.append(row)
                print(describe(row), flush=True)
                broken += row["doctor"] == "safe" and row["measured"]["result"] != "trains"
            if args.json:
                Path(args.json).write_text(json.dumps({"versions": versions, "rows": rows}, indent=1))
    safe = [r for r in rows if r["doctor"] == "safe"]
    print(f"\n{len(safe) - broken} of {len(safe)} jobs trained at the batch called safe; {time.time() - began:.0f} s")
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
