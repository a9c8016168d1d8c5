"""The report for people: rich colour on a terminal, plain readable text when piped or NO_COLOR."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import __version__
from ..engine import Result
from ..model.facts import NOTHING_TO_CHECK, Facts
from ..model.findings import SEVERITIES, SEVERITY_RANK, Finding
from ..model.redact import MARKUP_TAG, markup, printable
from .lines import PLACES, SourceLines
from .unknowns import NOT_CHECKED, UnknownEntry, by_file, unknown_entries

if TYPE_CHECKING:  # a plain report is written without rich (cli._report_console)
    from rich.console import Console

_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}
_MARK = {"error": "✗", "warning": "!", "info": "i"}
_PHASE = {
    "launch": "at launch",
    "config": "while the script builds its training objects",
    "load": "while loading the model",
    "wrap": "when the trainer wraps the model",
    "first-step": "in the first training step",  # the forward, the backward or the first optimizer step
    "later-steps": "after some steps",
}
_STACK_SHOWN = ("torch", "transformers", "accelerate", "peft", "trl", "bitsandbytes")


class _Buffer:
    """Collects the report's lines and prints them in one call: rich's per-call cost dominates big reports."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, text: str = "", soft_wrap: bool = True, **_) -> None:
        # every line, whatever it interpolates: a value from a checked file never reaches the terminal raw
        self.lines.append(printable(text, keep_newlines=True))


def plain(markup: str) -> str:
    """The text rich shows for our markup, without rich: tags dropped, escaped tags and backslashes as rich writes
    them, and `\\[` before a bracket that is no tag shown as `[` (what rich does with the text between tags)."""
    out: list[str] = []
    position = 0
    for match in MARKUP_TAG.finditer(markup):
        out.append(markup[position : match.start()].replace("\\[", "["))
        backslashes, escaped = divmod(len(match.group(1)), 2)
        out.append("\\" * backslashes)
        if escaped:
            out.append(f"[{match.group(2)}]")
        position = match.end()
    out.append(markup[position:].replace("\\[", "["))
    return "".join(out)


def render(
    result: Result,
    facts: Facts,
    console: Console,
    quiet: bool = False,
    verbose: bool = False,
    show_unknowns: bool | None = None,
) -> None:
    """The report. A folder run (more than one script) starts with a summary, lists the files with findings, most
    severe first, counts the clean ones (`verbose` lists them too) and folds its unknowns into one line unless
    `show_unknowns`; a single script's report lists its unknowns."""
    fancy = console.is_terminal and not console.no_color
    out = _Buffer()
    _render(result, facts, out, fancy, quiet, verbose, show_unknowns)
    _emit(out, console, fancy)


def _emit(out: _Buffer, console: Console, fancy: bool) -> None:
    if fancy:
        console.print("\n".join(out.lines), soft_wrap=True, highlight=False)
    else:  # piped, NO_COLOR, CI logs: the same text without rich's per-character styling work
        console.file.write("\n".join(plain(line) for line in out.lines) + "\n")


def _render(
    result: Result,
    facts: Facts,
    out,
    fancy: bool,
    quiet: bool,
    verbose: bool = False,
    show_unknowns: bool | None = None,
) -> None:
    lines = SourceLines()
    folder = len(facts.all_scripts) + len(facts.jobs) > 1
    if show_unknowns is None:
        show_unknowns = not folder
    if not quiet:
        _header(facts, out, result)
    by_path: dict[str, list[Finding]] = {}
    for f in result.findings:
        by_path.setdefault(f.path, []).append(f)
    if folder and not quiet:
        _summary(result, facts, by_path, out)
    machine_findings = by_path.get("", [])
    if not quiet or machine_findings:
        out(f"\n[bold]machine[/bold]  {_status(machine_findings) if facts.machine.known else '[dim]not probed[/dim]'}")
        if not quiet:
            _machine(facts, out)
        for f in machine_findings:
            _finding(f, out, lines, fancy)
    for run in (facts, *facts.jobs):  # the job script, or each one a folder holds
        if run.job is not None:
            _job(run, by_path.get(run.job.path, []), out, lines, fancy, quiet)
    if facts.live is not None and (not quiet or facts.live.ended not in ("stopped", "steps done")):
        _live(facts.live, result, out)  # a run that never reached training is news even with --quiet
    scripts = list(facts.all_scripts)
    if folder:  # the files with the worst findings first; the order of the walk among equals
        order = {s.path: i for i, s in enumerate(scripts)}
        scripts.sort(key=lambda s: (_worst(by_path.get(s.path, [])), -len(by_path.get(s.path, [])), order[s.path]))
    for script in scripts:
        found = by_path.get(script.path, [])
        skipped = next((u.reason for u in script.unknowns if u.what == NOT_CHECKED), None)
        empty = next((u.reason for u in script.unknowns if u.what == NOTHING_TO_CHECK), None)
        if not found and skipped is None and (quiet or (folder and not verbose)):
            continue  # counted in the summary, not listed
        status = _status(found) if skipped is None else f"[yellow]not checked[/yellow]: {markup(skipped)}"
        if empty is not None:
            status = f"[dim]nothing to check[/dim] ({markup(empty)})"
        if not found and skipped is None and facts.live is not None and facts.live.ended not in _LIVE_OK:
            status = f"[yellow]no static findings, but the live run {_LIVE_SHORT.get(facts.live.ended, '')}[/yellow]"
        out(f"\n[bold]{markup(script.path)}[/bold]  {status}")
        for f in found:
            _finding(f, out, lines, fancy)
    if not quiet:
        _unknowns(unknown_entries(result, facts), out, show_unknowns)
        _skipped(result, out)
    if folder and not quiet:  # the summary at the top has scrolled away by now
        out(f"\n[bold]summary[/bold]  {_files_line(facts, by_path)}")
    out(f"\n{_severity_counts(result.findings)}")


def _worst(found: list[Finding]) -> int:
    return min((SEVERITY_RANK[f.severity] for f in found), default=len(SEVERITY_RANK))


def _severity_counts(findings) -> str:
    counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}
    return " · ".join(f"{n} {s}{'s' if n != 1 and s != 'info' else ''}" for s, n in counts.items())


def rule_counts(findings) -> list[tuple[str, int, str, str, str]]:
    """(rule id, findings, the worst severity, their severities as reported, name), the commonest first:
    `1 error, 7 warnings` where a rule reported both (its severity depends on the case: a version range, an assumed
    value)."""
    counts: dict[str, dict] = {}
    names: dict[str, str] = {}
    for f in findings:
        by_severity = counts.setdefault(f.rule_id, {})
        by_severity[f.severity] = by_severity.get(f.severity, 0) + 1
        names[f.rule_id] = f.name
    rows = []
    for rule_id, by_severity in counts.items():
        ordered = sorted(by_severity.items(), key=lambda e: SEVERITY_RANK[e[0]])
        said = ", ".join(
            f"{n} {s}{'s' if n != 1 and s != 'info' else ''}" if len(ordered) > 1 else str(s) for s, n in ordered
        )
        rows.append((rule_id, sum(by_severity.values()), ordered[0][0], said, names[rule_id]))
    return sorted(rows, key=lambda e: (-e[1], e[0]))


def _files_line(facts: Facts, by_path: dict[str, list[Finding]]) -> str:
    """The files checked, the job scripts of a folder run among them (as the JSON report counts them)."""
    scripts = facts.all_scripts
    jobs = [run.job.path for run in facts.jobs if run.job is not None]
    not_checked = sum(1 for s in scripts if any(u.what == NOT_CHECKED for u in s.unknowns))
    with_findings = sum(1 for s in scripts if by_path.get(s.path)) + sum(1 for j in jobs if by_path.get(j))
    total = len(scripts) + len(jobs)
    clean = total - with_findings - not_checked
    extra = f", {not_checked} not checked" if not_checked else ""
    return (
        f"{total} files checked: {with_findings} with findings, {clean} with no "
        f"problems{extra}{'' if clean == 0 else ' (-v lists them)'}"
    )


def _summary(result: Result, facts: Facts, by_path: dict[str, list[Finding]], out) -> None:
    out(f"\n[bold]summary[/bold]  {_files_line(facts, by_path)}")
    out(f"  findings  {_severity_counts(result.findings)}")
    for i, (rule_id, n, worst, severities, name) in enumerate(rule_counts(result.findings)):
        lead = "  by rule   " if i == 0 else "            "
        out(f"{lead}{rule_id} {n:>5}  [{_STYLE[worst]}]{severities:<7}[/{_STYLE[worst]}] {name}")


def render_statistics(result: Result, console: Console) -> None:
    """`--statistics`: one line per rule, the commonest first (like ruff's)."""
    out = _Buffer()
    for rule_id, n, _worst, severities, name in rule_counts(result.findings):
        out(f"{n:>5}\t{rule_id}\t\\[{severities}] {name}")
    out(_severity_counts(result.findings))
    _emit(out, console, console.is_terminal and not console.no_color)


def launch_line(facts: Facts, result: Result | None) -> str:
    """The launch as given, then how the doctor understood it: `torchrun --nproc_per_node 2 train.py (torchrun,
    2 processes per node)`."""
    launch = facts.launch
    if not launch.known:
        return launch.describe() if not launch.command else f"{launch.command} ({launch.describe()})"
    plan = result.plan if result is not None else None
    if plan is None or plan.processes is None:
        count = "processes per node unknown"
    else:
        count = f"{plan.processes} process{'es' if plan.processes != 1 else ''} per node"
    return f"{launch.command} ({launch.describe()}, {count})"


def _header(facts: Facts, out, result: Result | None = None) -> None:
    stack = ", ".join(facts.stack.get(n).describe() for n in _STACK_SHOWN if facts.stack.get(n).version)
    launch = launch_line(facts, result)
    out(
        f"[bold]precision-doctor {__version__}[/bold] · {len(facts.all_scripts)} script"
        f"{'s' if len(facts.all_scripts) != 1 else ''}"
        + (f", {len(facts.jobs)} job script{'s' if len(facts.jobs) != 1 else ''}" if facts.jobs else "")
    )
    out(f"machine: {markup(facts.machine.describe())}", soft_wrap=True)
    out(f"launch:  {markup(launch)}")
    out(f"stack:   {markup(stack)}", soft_wrap=True)


def _machine(facts: Facts, out) -> None:
    m = facts.machine
    for node in m.nodes:  # an allocation: one line per node
        out(f"  node {markup(node.node_name)}  {markup(node.describe())}", soft_wrap=True)
    if not m.known:
        probed = " (ports, processes and environment were)" if m.host is not None else ""
        out(
            f"  [dim]{markup(m.reason)}: the rules that need the GPUs are skipped{probed} (pass --target or "
            f"--facts)[/dim]",
            soft_wrap=True,
        )
        _host(m, out)
        return
    if m.driver_version:
        out(f"  driver {markup(m.driver_version)}, CUDA {markup(m.cuda_driver_version or '?')}")
    if not m.gpus:
        out("  no GPU visible")
    for g in m.gpus:
        used = f", {g.memory_used_mib / 1024:.1f} GiB in use" if g.memory_used_mib >= 1024 else ""
        extras = [g.compute_mode] if g.compute_mode != "Default" else []
        if g.mig:
            extras.append("MIG")
        if g.processes:
            extras.append(f"{len(g.processes)} process{'es' if len(g.processes) != 1 else ''}")
        extra = f" · {', '.join(extras)}" if extras else ""
        out(
            f"  GPU {g.index}  {markup(g.name)} (sm_{g.capability[0]}{g.capability[1]}, "
            f"{g.memory_total_mib / 1024:.0f} GiB{used}){markup(extra)}",
            soft_wrap=True,
        )
    _host(m, out)


def _host(m, out) -> None:
    host = m.host
    if host is not None:
        if host.busy_ports:
            ports = ", ".join(f"{b.port}" + (f" (pid {b.pid})" if b.pid else "") for b in host.busy_ports)
            out(f"  busy ports: {markup(ports)}")
        if host.accelerate_config_path:
            mp = host.accelerate_config.get("mixed_precision", "not set")
            out(
                f"  accelerate config: {markup(host.accelerate_config_path)} (mixed_precision: {markup(str(mp))})",
                soft_wrap=True,
            )


def _job(facts: Facts, found: list[Finding], out, lines, fancy: bool, quiet: bool) -> None:
    """The job script: what it asks each node for and how it launches, then its own findings."""
    job = facts.job
    if quiet and not found:
        return
    out(f"\n[bold]{markup(job.path)}[/bold]  {_status(found)}")
    if not quiet:
        gpus = job.gpus_per_node
        tasks = job.tasks_per_node if job.srun else 1
        out(
            f"  {job.nodes} node{'s' if job.nodes != 1 else ''} × {tasks if tasks else '?'} task"
            f"{'s' if tasks != 1 else ''}, {gpus if gpus is not None else '?'} GPUs per node"
            + (f", partition {markup(job.directives['partition'].value)}" if "partition" in job.directives else "")
        )
        if job.launch:
            out(f"  line {job.launch_line}: {'srun ' if job.srun else ''}{markup(job.launch)}", soft_wrap=True)
    for f in found:
        _finding(f, out, lines, fancy)


_ENDED = {
    "stopped": "stopped where training starts ({at}), before any optimizer step",
    "steps done": "ran {steps} real optimizer step(s), then stopped",
    "finished": "ran to its end without reaching a training entry point (Trainer.train, Accelerator.prepare, "
    "Optimizer.step)",
    "exited": "exited with code {code} before reaching training",
    "raised": "raised before {where}",
    "timed out": "did not reach training before the timeout: ended with every process it started",
    "timed out after": "reached training ({at}) but did not end before the timeout: ended with every process it "
    "started",
    "crashed": "died without reporting (exit code {code})",
}
_LIVE_OK = ("stopped", "steps done")  # a script's "no problems found" needs these when it ran live
_LIVE_SHORT = {
    "finished": "never reached training",
    "exited": "exited before training",
    "raised": "raised an error",
    "timed out": "timed out",
    "crashed": "died without reporting",
}


def _live(live, result: Result, out) -> None:
    where = "the first optimizer step" if not live.optimizer_steps else f"step {live.optimizer_steps + 1}"
    ended = "timed out after" if live.ended == "timed out" and live.stopped_at else live.ended
    text = _ENDED.get(ended, ended).format(
        at=live.stopped_at, steps=live.optimizer_steps, code=live.exit_code, where=where
    )
    log = f"; log: {markup(live.log_path)}" if live.log_path else ""
    out(
        f"\n[bold]live run[/bold]  the script {markup(text)}  [dim]({live.wall_s:.1f} s, peak RSS "
        f"{live.peak_rss_mib:.0f} MiB{log})[/dim]",
        soft_wrap=True,
    )
    for label, value in _live_rows(live):
        out(f"  {label:<12} {markup(value)}", soft_wrap=True)
    if live.losses:
        out(f"  losses: {markup(str(list(live.losses[:8])))}{' ...' if len(live.losses) > 8 else ''}")
    if live.error and not any(f.error and live.error.type in f.error for f in result.findings):
        out(
            f"  [red]{markup(live.error.type)}: {markup(live.error.message[:300])}[/red] (no known cause: see the log)",
            soft_wrap=True,
        )
    for line in live.log_tail[-12:]:
        out(f"  [dim]| {markup(line[:220])}[/dim]", soft_wrap=True)
    for w in result.withdrawn:
        out(f"  [yellow]withdrawn[/yellow] {w.rule_id}: {markup(w.message)} — {markup(w.reason)}", soft_wrap=True)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{d} x{n}" for d, n in counts.items()) or "none"


def _live_rows(live) -> list[tuple[str, str]]:
    """The live model, Trainer, Accelerator and optimizer as labelled lines a person reads."""
    rows = []
    m = live.model
    if m is not None:
        rows.append(("model", m.architecture or "?"))
        rows += [(f"  {prefix}", _counts(counts)) for prefix, counts in m.param_dtypes.items()]
        rows.append(("trainable", _counts(m.trainable_dtypes)))
        for name, a in m.peft.items():
            rows.append(
                (
                    "adapters",
                    f"{name}: {a.type} r={a.r} on {', '.join(a.target_modules) or '?'}"
                    + (f"; modules_to_save {', '.join(a.modules_to_save)}" if a.modules_to_save else ""),
                )
            )
        if m.quantized:
            rows.append(
                (
                    "quantized",
                    _counts(m.quantized) + (f"; compute {', '.join(m.compute_dtypes)}" if m.compute_dtypes else ""),
                )
            )
        if m.device_map:
            rows.append(("device map", ", ".join(sorted(set(m.device_map.values())))))
        rows.append(("devices", ", ".join(m.devices) or "?"))
    if live.trainer is not None:
        t = live.trainer
        rows.append(
            (
                "Trainer",
                f"n_gpu {t.n_gpu}, model parallel {t.is_model_parallel}, fp16 {t.fp16}, bf16 {t.bf16},"
                f" wraps in {t.wrap}, batch {t.train_batch_size}",
            )
        )
    if live.accelerator is not None:
        a = live.accelerator
        rows.append(
            (
                "Accelerator",
                f"mixed_precision {a.mixed_precision or 'no'}, GradScaler {a.scaler}, "
                f"{a.distributed_type or 'no distribution'}, {a.num_processes} process(es)",
            )
        )
    if live.optimizer is not None:
        o = live.optimizer
        rows.append(
            (
                "optimizer",
                f"{o.class_name}: "
                + "; ".join(
                    _counts(g.dtypes) + (" (fused)" if g.fused else " (foreach)" if g.foreach else "") for g in o.groups
                )
                + (f"; {o.state_dtype_mismatches} state tensors of another dtype" if o.state_dtype_mismatches else ""),
            )
        )
    return rows


def _status(found: list[Finding]) -> str:
    if not found:
        return "[green]no problems found[/green]"
    worst = found[0].severity
    n = len(found)
    return f"[{_STYLE[worst]}]{n} finding{'s' if n != 1 else ''}[/{_STYLE[worst]}]"


def _finding(f: Finding, out, lines: SourceLines, fancy: bool) -> None:
    style = _STYLE[f.severity]
    mark = f"{_MARK[f.severity]} " if fancy else ""
    likely = "" if f.confidence == "certain" else " (likely)"
    out(f"\n  [{style}]{mark}{f.severity}[/{style}] [bold]{f.rule_id}[/bold] {f.name}{likely}")
    out(f"    {markup(f.message)}", soft_wrap=True)
    if f.evidence:
        out("    [dim]evidence[/dim]")
        for e in f.evidence:
            where = lines.place(e.location.path, e.location.line) if e.location else (e.origin or "")
            source = lines.get(e.location.path, e.location.line) if e.location else ""
            excerpt = source or e.excerpt
            out(f"      [cyan]{markup(where)}[/cyan]  {markup(excerpt)}  [dim]← {markup(e.note)}[/dim]", soft_wrap=True)
            for step in e.trail:
                out(f"        [dim]via {markup(PLACES.in_text(step))}[/dim]", soft_wrap=True)
    if f.error:
        survives = f.error.lower().startswith(("no exception", "no error", "no refusal"))  # numerically broken
        lead = "the job dies" if f.severity == "error" and not survives else "what the job shows"
        out(f"    [dim]{lead} {_PHASE.get(f.phase, '')}[/dim]")
        out(f"      [{style}]{markup(f.error)}[/{style}]", soft_wrap=True)
    if f.why:
        out(f"    [dim]why[/dim]  {markup(f.why)}", soft_wrap=True)
    if f.fix:
        safety = {"safe": "[green]safe[/green]", "unsafe": "[yellow]review[/yellow]"}.get(
            f.fix.effective,
            "[dim]display only[/dim]",  # bare, `[display only]` would be read as a style tag
        )
        out(f"    [bold]fix[/bold]  {markup(f.fix.description)}  [{safety}]", soft_wrap=True)
        for edit in f.fix.edits:
            out(f"         {markup(PLACES.in_text(edit.describe()))}", soft_wrap=True)
        for cmd in f.fix.commands:
            out(f"         $ {markup(cmd)}", soft_wrap=True)
        for note in f.fix.notes:
            out(f"         [yellow]note[/yellow] {markup(note)}", soft_wrap=True)


def _unknowns(entries: list[UnknownEntry], out, listed: bool) -> None:
    if not entries:
        return
    files = by_file(entries)
    silenced = sorted({r for e in entries for r in e.silences})
    kept = f"; they kept {', '.join(silenced)} silent" if silenced else ""
    where = f" in {len(files)} file{'s' if len(files) != 1 else ''}" if len(files) > 1 else ""
    if not listed:
        out(
            f"\n[bold]unknown[/bold]  {len(entries)} value{'s' if len(entries) != 1 else ''}{where} the doctor cannot "
            f"decide statically{kept} (--show-unknowns lists them)",
            soft_wrap=True,
        )
        return
    out(
        f"\n[bold]unknown[/bold] ({len(entries)}{where}): values the doctor cannot decide statically; rules that need "
        f"them stay silent"
    )
    for path, items in files.items():
        if len(files) > 1:
            out(f"  [bold]{markup(path)}[/bold]")
        for e in items:
            at = PLACES.place(path, e.line)
            at = at[len(path) :] if len(files) > 1 and e.line else at
            quiet_rules = f"  [dim](silences {', '.join(e.silences)})[/dim]" if e.silences else ""
            indent = "    " if len(files) > 1 else "  "
            out(f"{indent}[cyan]{markup(at)}[/cyan]  {markup(e.what)}: {markup(e.reason)}{quiet_rules}", soft_wrap=True)


def _skipped(result: Result, out) -> None:
    if result.skipped:
        reasons = sorted({s.reason for s in result.skipped})
        ids = ", ".join(s.rule_id for s in result.skipped)
        out(f"\n[dim]skipped {ids}: {'; '.join(markup(r) for r in reasons)}[/dim]", soft_wrap=True)
    for c in result.crashed:
        out(f"\n[red]check {c.rule_id} crashed[/red]: {markup(c.reason)} (please report it)", soft_wrap=True)
