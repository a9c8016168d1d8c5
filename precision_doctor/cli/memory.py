"""`precision-doctor memory`: each script's per-GPU memory breakdown and verdict."""

from __future__ import annotations

from ..model.errors import InputError
from ._common import EXIT_OK, bounded, console, write_output


def register(sub) -> None:
    memory = sub.add_parser(
        "memory",
        help="the per-GPU memory breakdown of a training script, or of a model and settings: will it fit?",
        description="Estimate each script's GPU memory per device (weights, gradients, optimizer "
        "state, activations) before it runs. The scripts' own arguments go after `--`. Without a script, "
        "--model and the settings flags describe the job (an SFT run); --compare gives a table over GPUs.",
    )
    memory.add_argument("paths", nargs="*", metavar="PATH", help="training scripts, or folders of them")
    memory.add_argument("--target", metavar="NAME[:COUNT]", help="the GPU the job runs on, e.g. a100:4")
    memory.add_argument("--facts", metavar="FILE", help="a machine snapshot instead of this machine")
    memory.add_argument("--launcher", metavar="CMD", help="the launch command (processes per node)")
    memory.add_argument(
        "--model-config", action="append", default=[], metavar="[ID=]PATH", help="as for check: a model's config.json"
    )
    memory.add_argument("--hub", action="store_true", help="as for check: fetch an unknown model's config")
    memory.add_argument("--format", dest="fmt", choices=("text", "json"), default="text")
    memory.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    memory.add_argument("--no-color", action="store_true", help="plain text even on a terminal")
    memory.add_argument(
        "--plot", metavar="FILE.svg", help="draw peak memory against the batch size (one script or one target)"
    )
    job = memory.add_argument_group("without a script")
    job.add_argument(
        "--model", metavar="ID|DIR", help="a model id (the shipped table, the HF cache) or a config folder"
    )
    job.add_argument("--batch", type=bounded(int, 1, 1 << 16), default=8, help="per-GPU batch size (default 8)")
    job.add_argument("--seq", type=bounded(int, 1, 1 << 22), default=1024, help="tokens per sample (default 1024)")
    job.add_argument("--lora", type=bounded(int, 1, 1 << 14), metavar="R", help="LoRA adapters of rank R")
    job.add_argument("--qlora", action="store_true", help="4-bit base with LoRA adapters (rank 16 unless --lora)")
    job.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="adamw")
    job.add_argument("--dtype", choices=tuple(DTYPES), help="the weights' dtype (default: the checkpoint's)")
    job.add_argument("--amp", choices=("bf16", "fp16"), help="mixed precision")
    job.add_argument("--checkpointing", action="store_true", help="gradient checkpointing")
    job.add_argument(
        "--gpus", type=bounded(int, 1, 1 << 10), help="data-parallel processes per node (default: --target's count)"
    )
    sharding = job.add_mutually_exclusive_group()
    sharding.add_argument("--zero", type=int, choices=(1, 2, 3), help="DeepSpeed ZeRO stage")
    sharding.add_argument("--fsdp", action="store_true", help="FSDP full sharding")
    job.add_argument("--offload", action="store_true", help="with --zero/--fsdp: offload to the CPU")
    job.add_argument(
        "--compare", metavar="GPU,GPU,...", help="a table over these targets, e.g. t4,l4,a10g,a100-40gb,a100-80gb,h100"
    )


def run_memory(opts, script_args: tuple[str, ...]) -> int:
    from ..derive import derive_memory
    from ..probes.checkpoint import give_model_configs
    from ..probes.collect import gather
    from ..report.memory import render_json, render_text

    give_model_configs(opts.model_config, hub=opts.hub)
    if opts.model is not None or opts.compare:
        return _run_model(opts)
    if not opts.paths:
        raise InputError("memory: give a training script, or --model ID with the job's settings")
    facts = gather(
        opts.paths, target=opts.target, launcher=opts.launcher, script_args=script_args, facts_file=opts.facts, jobs=1
    )
    memory = derive_memory(facts)
    if opts.plot:
        _plot(opts.plot, memory, None)
    if opts.fmt == "text" and not opts.output:
        render_text(facts, memory, console(no_color=opts.no_color))
    else:
        write_output(
            opts.output, render_json(facts, memory) if opts.fmt == "json" else plain_memory_text(facts, memory)
        )
    return EXIT_OK


# --- without a script ----------------------------------------------------------------------------------------

OPTIMIZERS = {
    "adamw": "adamw_torch_fused",
    "adamw8bit": "adamw_bnb_8bit",
    "paged_adamw_8bit": "paged_adamw_8bit",
    "adafactor": "adafactor",
    "sgd": "sgd",
}
DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}


def script_for(opts, model: str) -> str:
    """The supervised fine-tuning script the flags describe (TRL's SFTTrainer, whose SFTConfig takes the sequence
    length; every setting written out, none left to SFTConfig's defaults): the doctor estimates it as any script."""
    lines = [
        "import torch",
        "from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training",
        "from transformers import AutoModelForCausalLM, BitsAndBytesConfig",
        "from trl import SFTConfig, SFTTrainer",
    ]
    load = [repr(model)]
    if opts.dtype:
        load.append(f"dtype={DTYPES[opts.dtype]}")
    if opts.qlora:
        compute = DTYPES[opts.amp or (opts.dtype if opts.dtype in ("bf16", "fp16") else "bf16")]
        lines.append(
            f"bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', bnb_4bit_compute_dtype={compute})"
        )
        load.append("quantization_config=bnb")
    lines.append(f"model = AutoModelForCausalLM.from_pretrained({', '.join(load)})")
    if opts.qlora:
        # peft turns checkpointing on here unless told not to: the flag decides
        lines.append(
            f"model = prepare_model_for_kbit_training(model, use_gradient_checkpointing={bool(opts.checkpointing)})"
        )
    if opts.qlora or opts.lora:  # peft's default modules (q and v projections): what the estimate counts
        lines.append(f"model = get_peft_model(model, LoraConfig(r={opts.lora or 16}))")
    # packed: every sequence is --seq tokens long (unpacked, max_length would only cap them)
    args = ["'out'", f"per_device_train_batch_size={opts.batch}", f"max_length={opts.seq}", "packing=True"]
    args.append(f"optim={OPTIMIZERS[opts.optimizer]!r}")
    args.append(f"bf16={opts.amp == 'bf16'}")  # SFTConfig would turn bf16 on by itself
    args.append(f"fp16={opts.amp == 'fp16'}")
    args.append(f"gradient_checkpointing={bool(opts.checkpointing)}")  # ... and checkpointing
    if opts.zero:
        zero: dict = {"stage": opts.zero}
        if opts.offload:
            zero["offload_optimizer"] = {"device": "cpu"}
            if opts.zero == 3:
                zero["offload_param"] = {"device": "cpu"}
        args.append(f"deepspeed={ {'zero_optimization': zero}!r}")
    elif opts.fsdp:
        args.append("fsdp=" + repr("full_shard auto_wrap" + (" offload" if opts.offload else "")))
    lines.append(f"args = SFTConfig({', '.join(args)})")
    lines.append("SFTTrainer(model=model, args=args).train()")
    return "\n".join(lines) + "\n"


def _run_model(opts) -> int:
    """Memory for --model and its settings: one report, or (--compare) a table of which GPUs fit and at what
    batch. The script the flags describe lives in a private temporary folder, never in the checked tree."""
    import tempfile
    from pathlib import Path

    from ..derive import derive_memory
    from ..probes.collect import gather
    from ..report.memory import render_json

    if opts.model is None:
        raise InputError("memory --compare: give the model with --model ID (or a training script without --compare)")
    if opts.paths:
        raise InputError("memory: give either training scripts or --model, not both")
    if opts.plot and opts.compare:
        raise InputError("memory --plot: draws one GPU's memory; give --target rather than --compare")
    if opts.offload and not (opts.zero or opts.fsdp):
        raise InputError("memory --offload: offloading is DeepSpeed's or FSDP's; add --zero 2|3 or --fsdp")
    if opts.compare and opts.target:
        raise InputError("memory: --compare names the GPUs itself; drop --target")
    local = Path(opts.model).expanduser()
    model = str(local.resolve()) if local.is_dir() else opts.model
    targets = [t.strip() for t in opts.compare.split(",") if t.strip()] if opts.compare else [opts.target]
    if not targets:
        raise InputError("memory --compare: name the GPUs, e.g. --compare t4,l4,a100-80gb")
    counted = [t.partition(":")[2] for t in targets if t and ":" in t]
    if opts.gpus is None:
        opts.gpus = int(counted[0]) if len(counted) == 1 and counted[0].isdigit() else 1
    elif counted and any(c != str(opts.gpus) for c in counted):
        raise InputError(f"memory: --gpus {opts.gpus} and the GPUs per node in --target disagree; give one")
    label = f"--model {opts.model}"
    rows = []
    with tempfile.TemporaryDirectory(prefix="precision-doctor-memory-") as folder:
        script = Path(folder) / "train.py"
        script.write_text(script_for(opts, model), encoding="utf-8")
        launcher = f"torchrun --nproc_per_node {opts.gpus} train.py" if opts.gpus > 1 else "python train.py"
        for target in targets:
            spec = target if target is None or ":" in target or opts.gpus == 1 else f"{target}:{opts.gpus}"
            facts = gather([str(script)], target=spec, launcher=launcher, facts_file=opts.facts, jobs=1)
            memory = derive_memory(facts)
            found = next(iter(memory.values()), None)
            plan = found[1] if found else "no training found"
            if isinstance(plan, str) and "GPU" in plan and "not known" not in plan:
                raise InputError(f"--model {opts.model}: {plan}; name the GPU with --target NAME (see `targets`)")
            if isinstance(plan, str):
                if "not known" in plan or "not in the doctor's table" in plan:
                    plan = (
                        "its size is not known here (not a folder, not in the Hugging Face cache, not in the "
                        "doctor's table)"
                    )
                raise InputError(
                    f"--model {opts.model}: {plan}; give its config with --model-config {opts.model}=config.json "
                    "(or a folder holding config.json), or --hub to fetch it"
                )
            if not opts.compare:
                if opts.plot:
                    _plot(opts.plot, memory, label)
                out = render_json(facts, memory) if opts.fmt == "json" else plain_memory_text(facts, memory)
                for shown in (str(script), f"{Path(folder).name}/train.py"):  # as the report names the script
                    out = out.replace(shown, label)
                write_output(opts.output, out)
                return EXIT_OK
            rows.append(_row(target, plan))
    write_output(opts.output if opts.fmt == "text" or opts.output else None, _table(label, opts, rows))
    return EXIT_OK


def _plot(path: str, memory, label: str | None) -> None:
    """The plot of the one estimate there is; none, or several, is a usage error."""
    from ..derive.memory_plan import MemoryPlan
    from ..report.memory_plot import svg_plot

    plans = [(name, m) for name, (_, m) in memory.items() if isinstance(m, MemoryPlan)]
    if len(plans) != 1:
        raise InputError(
            f"memory --plot: draws one estimate; this run has {len(plans)} (name one script, or use --model)"
        )
    name, plan = plans[0]
    title = f"{label or name}: batch x {plan.shape.sequence} tokens on {plan.gpu.name}"
    if plan.gpus > 1:
        title += f" (x{plan.gpus}, {plan.shape.parallelism.kind})"
    write_output(path, svg_plot(plan, title))


def _row(target: str, plan) -> dict:
    from ..derive.memory import GIB, batch_ranges
    from ..derive.memory_plan import first_failure

    fails = first_failure(plan)
    safe, fits = batch_ranges(plan.checkpoint, plan.shape, plan.budget)
    return {
        "target": target,
        "gpu": plan.gpu.name,
        "peak_gib": round(plan.breakdown.peak / GIB, 2),
        "available_gib": round(plan.budget / GIB, 2),
        "fits": not fails,
        "fails_at": fails,
        "largest_batch": fits,
        "safe_batch": safe,  # with the estimate's measured error; above it up to largest_batch: uncertain
    }


def _table(label: str, opts, rows: list[dict]) -> str:
    if opts.fmt == "json":
        import json

        return json.dumps({"model": opts.model, "batch": opts.batch, "seq": opts.seq, "targets": rows}, indent=2) + "\n"
    head = f"{label}: batch {opts.batch} x {opts.seq} tokens per GPU\n"
    lines = [f"{'target':<12} {'GPU':<30} {'peak GiB':>9} {'of GiB':>8}  {'verdict':<28} largest batch (safe)"]
    for r in rows:
        verdict = "fits" if r["fits"] else f"out of memory at {r['fails_at']}"
        if r["fits"] and opts.batch > r["safe_batch"]:
            verdict = "uncertain"  # the tensors fit; with the allocator's reserve and the measured error, not
        lines.append(
            f"{r['target']:<12} {r['gpu'][:30]:<30} {r['peak_gib']:>9.2f} {r['available_gib']:>8.2f}  "
            f"{verdict:<28} {r['largest_batch']} ({r['safe_batch']})"
        )
    return head + "\n".join(lines) + "\n"


def plain_memory_text(facts, memory) -> str:
    import io

    from rich.console import Console

    from ..report.memory import render_text

    buffer = io.StringIO()
    # a file or a pipe gets whole lines: no wrapping at a terminal's width
    render_text(facts, memory, Console(file=buffer, no_color=True, highlight=False, width=120, soft_wrap=True))
    return buffer.getvalue()
