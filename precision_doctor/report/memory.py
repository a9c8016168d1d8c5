"""`precision-doctor memory`: the per-GPU memory breakdown of each script, as a table or as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict

from ..derive import Setup
from ..derive.checkpoint import checkpoint_of, describe_source
from ..derive.memory import GIB, MEASURED_UNDERESTIMATE, Parallelism, batch_ranges, cheapest_fit, offloaded_layers
from ..derive.memory_plan import MemoryPlan, first_failure
from ..model.facts import Facts
from ..model.redact import markup, shown_data

SCHEMA_VERSION = 1


def memory_report(facts: Facts, memory: Mapping[str, tuple[Setup, MemoryPlan | str]]) -> list[dict]:
    """One entry per script: the plan's figures in bytes, or why there is none (`memory`: derive_memory's)."""
    out = []
    for script in facts.scripts:
        setup, m = memory[script.path]
        entry: dict = {"path": script.path}
        checkpoint = checkpoint_of(setup.model_load, script)
        if checkpoint is not None:
            entry["checkpoint"] = {k: v for k, v in asdict(checkpoint).items() if v not in (None, "", ())}
        if not isinstance(m, MemoryPlan):
            entry["unknown"] = m
            out.append(entry)
            continue
        b = m.breakdown
        verdict = {
            "load": "will not fit at load",
            "forward": "will not fit at the first forward",
            "backward": "will not fit as the first backward starts",
            "step": "will not fit at the first optimizer step",
            "second step": "will not fit in the second step, with the optimizer state held",
        }.get(first_failure(m), "fits")
        if verdict == "fits" and b.peak > m.budget:
            verdict = "may not fit: the tensors fit, the allocator's reserve may not"
        if m.shape.parallelism.kind == "device-map":
            n = offloaded_layers(m.checkpoint, m.shape, list(m.spread_budgets))
            verdict = f"device_map offloads {n} layers to the CPU" if n else "fits"
        change = cheapest_fit(m.checkpoint, m.shape, m.budget) if verdict != "fits" else None
        safe, fits = batch_ranges(m.checkpoint, m.shape, m.budget)
        entry.update(
            {
                "gpu": m.gpu.name,
                "gpus": m.gpus,
                "parallelism": asdict(m.shape.parallelism),
                "shape": {k: v for k, v in asdict(m.shape).items() if k not in ("parallelism", "assumed")},
                "assumed": list(m.shape.assumed),
                "per_gpu_bytes": {**dict(b.rows()), "peak": b.peak},
                "budget_bytes": m.budget,
                "headroom": round(m.headroom, 4),
                "verdict": verdict,
                "largest_batch_that_fits": fits,
                # with the estimate's measured error (MEASURED_UNDERESTIMATE): batches above `safe_batch` up to
                # `largest_batch_that_fits` are uncertain
                "safe_batch": safe,
                "cheapest_change": change.description if change else None,
            }
        )
        out.append(entry)
    return out


def render_json(facts: Facts, memory: Mapping[str, tuple[Setup, MemoryPlan | str]]) -> str:
    return json.dumps(shown_data({"version": SCHEMA_VERSION, "scripts": memory_report(facts, memory)}), indent=2)


def render_text(facts: Facts, memory: Mapping[str, tuple[Setup, MemoryPlan | str]], console) -> None:
    from rich.table import Table

    def say(text: str = "") -> None:  # a line is never broken: a pipe or a CI log has no width to fit
        console.print(text, soft_wrap=True)

    for entry in memory_report(facts, memory):
        say(f"[bold]{markup(entry['path'])}[/bold]")
        c = entry.get("checkpoint")
        if c:
            params = f"{c['parameters'] / 1e9:.2f}B parameters" if c.get("parameters") else "size unknown"
            say(
                f"  model  {markup(c['model_id'])}: {markup(c.get('architecture') or c.get('model_type'))}, "
                f"{params}, stored in {c.get('torch_dtype') or '?'} ({markup(_source(c))})"
            )
        if "unknown" in entry:
            say(f"  no estimate: {markup(entry['unknown'])}\n")
            continue
        s, p = entry["shape"], entry["parallelism"]
        say(
            f"  setup  weights {s['weight_dtype']}{' ' + s['quantized'] if s['quantized'] else ''}, "
            f"{'LoRA r=' + str(s['lora_rank']) if s['lora_rank'] else 'full fine-tune'}"
            f"{' (embeddings, output layer and norms in fp32)' if s.get('fp32_embeddings') else ''}, "
            f"optimizer {s['optimizer']}, batch {s['batch']} x {s['sequence']} tokens, "
            f"checkpointing {'on' if s['checkpointing'] else 'off'}, {Parallelism(**p).describe()}"
        )
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("per GPU")
        table.add_column("GiB", justify="right")
        for name, value in entry["per_gpu_bytes"].items():
            table.add_row(name, f"{value / GIB:.2f}")
        table.add_row(f"available on {markup(entry['gpu'])}", f"{entry['budget_bytes'] / GIB:.2f}")
        console.print(table)
        plan = memory[entry["path"]][1]
        assert isinstance(plan, MemoryPlan)  # an entry without one is "unknown", passed over above
        say(f"  {_bar(plan.breakdown.peak_parts(), plan.budget)}")
        fits, safe = entry["largest_batch_that_fits"], entry["safe_batch"]
        margin = (
            f" (with the estimate's measured error, +{MEASURED_UNDERESTIMATE:.0%}: up to {safe}; "
            + (f"{safe + 1}-{fits}" if fits > safe + 1 else f"{fits}")
            + " uncertain)"
            if fits > safe
            else ""
        )
        say(
            f"  verdict  {entry['verdict']} (headroom {entry['headroom']:.0%}); largest "
            f"per_device_train_batch_size that fits: {fits}{margin}"
        )
        if entry["cheapest_change"]:
            say(f"  cheapest change  {markup(entry['cheapest_change'])}")
        for a in entry["assumed"]:
            say(f"  assumed  {markup(a)}")
        say()


BAR_WIDTH = 48
_LETTERS = {  # a letter for each part of Breakdown.peak_parts()
    "weights": "W",
    "optimizer state": "O",
    "fp32 master weights and gradients": "M",
    "activations": "A",
    "gradients": "G",
    "CUDA context": "C",
    "allocator reserve": "R",
}


def _bar(peak_parts: list[tuple[str, int]], budget: int) -> str:
    """The peak as one bar against the GPU, a letter per part so it reads without colour (a pipe, a CI log): W
    weights, O optimizer state, M fp32 master copy, A activations and the loss's gradient (G where the gradients are
    larger: the step holds one or the other at its largest), C CUDA context, R allocator reserve; `|` is where the
    GPU's memory ends, `.` what is left, and what does not fit runs past the `|`."""
    parts = [(_LETTERS[name], size) for name, size in peak_parts]
    peak = sum(v for _, v in parts)
    scale = BAR_WIDTH / max(peak, budget, 1)
    used, total = "", 0
    for letter, value in parts:  # cumulative rounding: the bar's length is the peak's
        total += value
        used += letter * (round(total * scale) - len(used))
    edge = round(budget * scale)
    if peak > budget:  # over by less than a cell still shows past the edge
        edge = min(edge, len(used) - 1)
    bar = used[:edge] + "." * max(edge - len(used), 0) + "|" + used[edge:]
    return f"[{bar}] peak {peak / GIB:.1f} of {budget / GIB:.1f} GiB"


def _source(c: dict) -> str:
    from ..model.facts import CheckpointFacts, CheckpointSource, _from_jsonable

    facts = _from_jsonable(CheckpointFacts, {**c, "source": CheckpointSource(c["source"])})
    return describe_source(facts).split(" (", 1)[1].rstrip(")")
