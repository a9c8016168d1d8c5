"""The memory verdict against twelve Trainer jobs trained on an H200 (fixtures/memory_h200_jobs.json, written by
benchmarks/memory_cuda.py): Qwen2-0.5B, GPT-2 medium and TinyLlama-1.1B at full size, each in full bf16, fp32
weights under fp16 AMP, LoRA with checkpointing and QLoRA. The doctor's estimate for each job's own script is held
to what the GPU held, and its "safe" batch to the batches that really trained."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from precision_doctor.derive.memory import MEASURED_UNDERESTIMATE

ROOT = Path(__file__).resolve().parent.parent
H200 = json.loads((ROOT / "fixtures" / "memory_h200_jobs.json").read_text())
ROWS = H200["rows"]
# the capped runs read the memory outside the allocator every time; the uncapped runs' reading was spoiled
OUTSIDE = max(r["outside_allocator"] for r in ROWS if r["outside_allocator"] is not None)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    pytest.importorskip("transformers")  # writes each family's config.json as save_pretrained does
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import memory_cuda

    return memory_cuda.estimates_for(ROWS, tmp_path_factory.mktemp("h200"))


def held(row: dict) -> int:
    return row["peak_reserved"] + (row["outside_allocator"] or OUTSIDE)


def at_cap(row: dict) -> bool:
    """A capped run whose allocator had to flush its cache: what it reserved was bounded by the cap."""
    return row["capped"] and row["alloc_retries"] > 0


def test_the_estimate_is_what_the_gpu_held(verdicts):
    """Reserved by torch's caching allocator plus the memory outside it: within -5 %..+10 % on every run that was
    not held at its cap (before the allocator was modelled, LoRA with checkpointing was 9-16 % under, QLoRA 15-30 %,
    GPT-2 in bf16 8-16 %), and never more above the estimate than the margin a safe batch keeps."""
    errors = {}
    for row, verdict in zip(ROWS, verdicts, strict=True):
        if not at_cap(row):
            peak = verdict["per_gpu_bytes"]["peak"]
            errors[row["family"], row["regime"], row["batch"]] = peak / held(row) - 1
            assert held(row) <= peak * (1 + MEASURED_UNDERESTIMATE), (row["family"], row["regime"], row["batch"])
    assert len(errors) >= 30
    assert all(-0.05 <= e <= 0.10 for e in errors.values()), {k: f"{e:+.1%}" for k, e in errors.items()}


def test_no_job_that_trained_is_called_out_of_memory(verdicts):
    """An error says the job will die: every capped run that trained gets no "will not fit" (the allocator's reserve
    alone decides nothing: near its cap it flushes and retries), and every run that ran out of memory gets either
    "will not fit" or "may not fit", never "fits"."""
    said = defaultdict(set)
    for row, verdict in zip(ROWS, verdicts, strict=True):
        if row["capped"]:
            said[row["result"]].add(verdict["verdict"].split(":")[0])
            if row["result"] == "trains":
                assert not verdict["verdict"].startswith("will not fit"), (row["family"], row["regime"], row["batch"])
            else:
                assert verdict["verdict"] != "fits", (row["family"], row["regime"], row["batch"])
    # the runs that ran out: two whose tensors the estimate puts past the GPU, one it calls uncertain
    assert "may not fit" in said["out of memory"]
    assert any(v.startswith("will not fit") for v in said["out of memory"])


def test_the_allocated_peak_is_what_torch_allocated(verdicts):
    for row, verdict in zip(ROWS, verdicts, strict=True):
        if row["result"] != "trains":
            continue
        b = verdict["per_gpu_bytes"]
        allocated = b["peak"] - b["CUDA context"] - b["allocator reserve"]
        assert abs(allocated / row["peak_allocated"] - 1) <= 0.04, (row["family"], row["regime"], row["batch"])


def test_the_safe_batch_trained(verdicts):
    """Every job trained, capped at the target GPU's memory, at a batch at least as large as the one the doctor now
    calls safe; no batch it calls safe ran out of memory. Where no capped run reached the safe batch (TinyLlama's
    LoRA and QLoRA have none: their harness process held memory of its own then; Qwen2 fp32 under fp16 AMP trained
    at 7 and ran out at 9, and 8 is safe), the memory measured at the two largest batches not held at a cap,
    extended linearly, stays within the GPU at the safe batch."""
    jobs = defaultdict(list)
    for row, verdict in zip(ROWS, verdicts, strict=True):
        jobs[row["family"], row["regime"]].append((row, verdict))
    assert len(jobs) == 12
    for job, runs in jobs.items():
        safe, budget = runs[0][1]["job"]["safe_batch"], runs[0][1]["job"]["budget_bytes"]
        assert safe >= 1, job
        assert all(row["batch"] > safe for row, _ in runs if row["result"] == "out of memory"), job
        trained = [row["batch"] for row, _ in runs if row["capped"] and row["result"] == "trains"]
        if trained and max(trained) >= safe:
            continue
        (b1, h1), (b2, h2) = sorted((row["batch"], held(row)) for row, _ in runs if not at_cap(row))[-2:]
        assert safe > b2 and h2 + (h2 - h1) / (b2 - b1) * (safe - b2) <= budget, job
