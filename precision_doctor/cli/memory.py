"""`precision-doctor memory`: each script's per-GPU memory breakdown and verdict."""

from __future__ import annotations

from ._common import EXIT_OK, console, write_output


def register(sub) -> None:
    memory = sub.add_parser(
        "memory",
        help="the per-GPU memory breakdown of a training script: will it fit?",
        description="Estimate each script's GPU memory per device (weights, gradients, optimizer "
        "state, activations) before it runs. The scripts' own arguments go after `--`.",
    )
    memory.add_argument("paths", nargs="+", metavar="PATH", help="training scripts, or folders of them")
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


def run_memory(opts, script_args: tuple[str, ...]) -> int:
    from ..derive import derive_memory
    from ..probes.checkpoint import give_model_configs
    from ..probes.collect import gather
    from ..report.memory import render_json, render_text

    give_model_configs(opts.model_config, hub=opts.hub)
    facts = gather(
        opts.paths, target=opts.target, launcher=opts.launcher, script_args=script_args, facts_file=opts.facts, jobs=1
    )
    memory = derive_memory(facts)
    if opts.fmt == "text" and not opts.output:
        render_text(facts, memory, console(no_color=opts.no_color))
    else:
        write_output(
            opts.output, render_json(facts, memory) if opts.fmt == "json" else plain_memory_text(facts, memory)
        )
    return EXIT_OK


def plain_memory_text(facts, memory) -> str:
    import io

    from rich.console import Console

    from ..report.memory import render_text

    buffer = io.StringIO()
    render_text(facts, memory, Console(file=buffer, no_color=True, highlight=False, width=120))
    return buffer.getvalue()
