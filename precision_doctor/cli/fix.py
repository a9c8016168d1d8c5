"""`precision-doctor fix`: apply the findings' fixes (or undo a run)."""

from __future__ import annotations

from ..model.errors import InputError
from ._common import console, settings_for, training_python


def register(sub) -> None:
    fix = sub.add_parser(
        "fix",
        help="apply the fixes: a diff per finding, then [y]es/[n]o/[a]ll/[q]uit",
        description="Apply the code fixes of the findings, most severe first. Safe fixes with "
        "--yes; fixes that need review with --unsafe too. Without a terminal (or with "
        "--diff) it prints the patch and changes nothing.",
    )
    fix.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="training scripts, or folders of them; with --undo: "
        "the backup folder `fix` printed (default: this "
        "folder's project)",
    )
    fix.add_argument("--undo", action="store_true", help="restore the files of the last fix run, byte for byte")
    fix.add_argument("--force", action="store_true", help="with --undo: restore even files changed since the fix")
    fix.add_argument("--yes", action="store_true", help="apply every safe fix without asking")
    fix.add_argument("--unsafe", action="store_true", help="with --yes or --diff: include fixes that need review")
    fix.add_argument("--diff", action="store_true", help="print the patch (patch -p0 / git apply -p0), apply nothing")
    for flag, kw in (
        ("--target", {"metavar": "NAME[:COUNT]"}),
        ("--facts", {"metavar": "FILE"}),
        ("--launcher", {"metavar": "CMD"}),
        ("--select", {"metavar": "IDS"}),
        ("--ignore", {"metavar": "IDS"}),
        ("--config", {"metavar": "FILE"}),
        ("--python", {"metavar": "PATH"}),
    ):
        fix.add_argument(flag, help="as for check", **kw)
    fix.add_argument("--model-config", action="append", default=[], metavar="[ID=]PATH", help="as for check")
    fix.add_argument("--hub", action="store_true", help="as for check")
    fix.set_defaults(
        fail_on=None,
        jobs=1,
        fmt="text",
        output=None,
        quiet=False,
        no_color=False,
        statistics=False,
        verbose=False,
        show_unknowns=False,
        include_facts=False,
    )


def run_fix_command(opts, script_args: tuple[str, ...]) -> int:
    import os

    from ..fix.session import run_engine_check, run_fix
    from ..probes.checkpoint import give_model_configs
    from ..probes.collect import gather

    if opts.undo:
        from ..fix.undo import undo

        return undo(opts.paths, opts.force, print)
    if not opts.paths:
        raise InputError("fix: name the training scripts to fix (or --undo)")
    settings = settings_for(opts)
    root = os.path.dirname(settings.source) if settings.source else "."
    give_model_configs(opts.model_config, hub=opts.hub)

    def facts():
        return gather(
            opts.paths,
            target=settings.target,
            launcher=settings.launcher,
            script_args=script_args,
            facts_file=settings.facts,
            exclude=settings.exclude,
            root=root,
            python=training_python(opts),
        )

    return run_fix(
        run_engine_check(facts, settings.policy),
        yes=opts.yes,
        diff_only=opts.diff,
        unsafe=opts.unsafe,
        select=settings.policy.select if opts.select else None,
        console=console(),
    )
