"""The report for people: rich colour on a terminal, plain readable text when piped or NO_COLOR."""

from __future__ import annotations

import re
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from .. import __version__
from .._util import python_lines
from ..engine import Result
from ..facts import Facts
from ..findings import SEVERITIES, Finding

_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}
_MARK = {"error": "✗", "warning": "!", "info": "i"}
_PHASE = {"launch": "at launch", "config": "while the script builds its training objects",
          "load": "while loading the model", "wrap": "when the trainer wraps the model",
          "first-step": "at the first optimizer step", "later-steps": "after some steps"}
_STACK_SHOWN = ("torch", "transformers", "accelerate", "peft", "trl", "bitsandbytes")


class _Lines:
    """Source lines for excerpts; files that are not here (a --facts snapshot) just have none."""

    def __init__(self):
        self._cache: dict[str, list[str]] = {}

    def get(self, path: str, line: int) -> str:
        if path not in self._cache:
            try:
                self._cache[path] = python_lines(Path(path).read_text(encoding="utf-8-sig", errors="replace"))
            except OSError:
                self._cache[path] = []
        lines = self._cache[path]
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""


class _Buffer:
    """Collects the report's lines and prints them in one call: rich's per-call cost dominates big reports."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, text: str = "", soft_wrap: bool = True, **_) -> None:
        self.lines.append(text)


_TAG = re.compile(r"(?<!\\)\[/?[a-z][a-z ]*\]")


def plain(markup: str) -> str:
    """The text of our markup without rich: tags dropped, escaped brackets restored."""
    return _TAG.sub("", markup).replace("\\[", "[")


def render(result: Result, facts: Facts, console: Console, quiet: bool = False) -> None:
    fancy = console.is_terminal and not console.no_color
    out = _Buffer()
    _render(result, facts, out, fancy, quiet)
    if fancy:
        console.print("\n".join(out.lines), soft_wrap=True, highlight=False)
    else:  # piped, NO_COLOR, CI logs: the same text without rich's per-character styling work
        console.file.write("\n".join(plain(line) for line in out.lines) + "\n")


def _render(result: Result, facts: Facts, out, fancy: bool, quiet: bool) -> None:
    lines = _Lines()
    if not quiet:
        _header(facts, out)
    by_path: dict[str, list[Finding]] = {}
    for f in result.findings:
        by_path.setdefault(f.path, []).append(f)
    machine_findings = by_path.get("", [])
    if not quiet or machine_findings:
        out(f"\n[bold]machine[/bold]  {_status(machine_findings) if facts.machine.known else '[dim]not probed[/dim]'}")
        if not quiet:
            _machine(facts, out)
        for f in machine_findings:
            _finding(f, out, lines, fancy)
    if facts.live is not None and (not quiet or facts.live.ended not in ("stopped", "steps done")):
        _live(facts.live, result, out)  # a run that never reached training is news even with --quiet
    for script in facts.scripts:
        found = by_path.get(script.path, [])
        if quiet and not found:
            continue
        status = _status(found)
        out(f"\n[bold]{escape(script.path)}[/bold]  {status}")
        for f in found:
            _finding(f, out, lines, fancy)
    if not quiet:
        _unknowns(facts, out)
        _skipped(result, out)
    counts = {s: sum(1 for f in result.findings if f.severity == s) for s in SEVERITIES}
    summary = " · ".join(f"{n} {s}{'s' if n != 1 and s != 'info' else ''}" for s, n in counts.items())
    out(f"\n{summary}")


def _header(facts: Facts, out) -> None:
    stack = ", ".join(facts.stack.get(n).describe() for n in _STACK_SHOWN if facts.stack.get(n).version)
    launch = facts.launch.command if facts.launch.known else "not given (--launcher)"
    out(f"[bold]precision-doctor {__version__}[/bold] · {len(facts.scripts)} script"
        f"{'s' if len(facts.scripts) != 1 else ''}")
    out(f"machine: {escape(facts.machine.describe())}", soft_wrap=True)
    out(f"launch:  {escape(launch)}")
    out(f"stack:   {escape(stack)}", soft_wrap=True)


def _machine(facts: Facts, out) -> None:
    m = facts.machine
    if not m.known:
        out(f"  [dim]{escape(m.reason)}: the rules that need the machine are skipped (pass --target or --facts)[/dim]",
            soft_wrap=True)
        return
    if m.driver_version:
        out(f"  driver {escape(m.driver_version)}, CUDA {escape(m.cuda_driver_version or '?')}")
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
        out(f"  GPU {g.index}  {escape(g.name)} (sm_{g.capability[0]}{g.capability[1]}, "
            f"{g.memory_total_mib / 1024:.0f} GiB{used}){escape(extra)}", soft_wrap=True)
    host = m.host
    if host is not None:
        if host.busy_ports:
            ports = ", ".join(f"{b.port}" + (f" (pid {b.pid})" if b.pid else "") for b in host.busy_ports)
            out(f"  busy ports: {escape(ports)}")
        if host.accelerate_config_path:
            mp = host.accelerate_config.get("mixed_precision", "not set")
            out(f"  accelerate config: {escape(host.accelerate_config_path)} (mixed_precision: {escape(str(mp))})",
                soft_wrap=True)


_ENDED = {
    "stopped": "stopped where training starts ({at}), before any optimizer step",
    "steps done": "ran {steps} real optimizer step(s), then stopped",
    "finished": "ran to its end without reaching a training entry point (Trainer.train, Accelerator.prepare, "
                "Optimizer.step)",
    "exited": "exited with code {code} before reaching training",
    "raised": "raised before {where}",
    "timed out": "did not reach training before the timeout: ended with its process group",
    "crashed": "died without reporting (exit code {code})",
}


def _live(live, result: Result, out) -> None:
    where = "the first optimizer step" if not live.optimizer_steps else f"step {live.optimizer_steps + 1}"
    text = _ENDED.get(live.ended, live.ended).format(at=live.stopped_at, steps=live.optimizer_steps,
                                                     code=live.exit_code, where=where)
    out(f"\n[bold]live run[/bold]  the script {escape(text)}  [dim]({live.wall_s:.1f} s, peak RSS "
        f"{live.peak_rss_mib:.0f} MiB; log: {escape(live.log_path)})[/dim]", soft_wrap=True)
    model = live.model
    if model:
        out(f"  model {escape(model.get('architecture', '?'))}: " + escape("; ".join(
            f"{p}: " + ", ".join(f"{d} x{n}" for d, n in c.items()) for p, c in model.get("param_dtypes", {}).items())),
            soft_wrap=True)
        out(f"  trainable: {escape(', '.join(f'{d} x{n}' for d, n in model.get('trainable_dtypes', {}).items()))}"
            + (f"; adapters: {escape(str(model['peft']))}" if model.get("peft") else "")
            + (f"; hf_device_map devices: {escape(', '.join(sorted(set(model['device_map'].values()))))}"
               if model.get("device_map") else ""), soft_wrap=True)
    if live.trainer:
        t = live.trainer
        out(f"  Trainer: n_gpu={t.get('n_gpu')} is_model_parallel={t.get('is_model_parallel')} fp16={t.get('fp16')} "
            f"bf16={t.get('bf16')} wraps in: {t.get('wrap')}")
    if live.accelerator:
        out(f"  Accelerator: {escape(str(live.accelerator))}", soft_wrap=True)
    if live.optimizer:
        out(f"  optimizer {escape(live.optimizer.get('class', '?'))}: " + escape("; ".join(
            str(g.get("dtypes")) for g in live.optimizer.get("groups", []))), soft_wrap=True)
    if live.losses:
        out(f"  losses: {escape(str(list(live.losses[:8])))}{' ...' if len(live.losses) > 8 else ''}")
    if live.error and not any(f.error and live.error.get("type", "") in f.error for f in result.findings):
        out(f"  [red]{escape(live.error.get('type', ''))}: {escape(live.error.get('message', '')[:300])}[/red] "
            f"(no known cause: see the log)", soft_wrap=True)
    for line in live.log_tail[-12:]:
        out(f"  [dim]| {escape(line[:220])}[/dim]", soft_wrap=True)
    for w in result.withdrawn:
        out(f"  [yellow]withdrawn[/yellow] {w.rule_id}: {escape(w.message)} — {escape(w.reason)}", soft_wrap=True)


def _status(found: list[Finding]) -> str:
    if not found:
        return "[green]no problems found[/green]"
    worst = found[0].severity
    n = len(found)
    return f"[{_STYLE[worst]}]{n} finding{'s' if n != 1 else ''}[/{_STYLE[worst]}]"


def _finding(f: Finding, out, lines: _Lines, fancy: bool) -> None:
    style = _STYLE[f.severity]
    mark = f"{_MARK[f.severity]} " if fancy else ""
    likely = "" if f.confidence == "certain" else " (likely)"
    out(f"\n  [{style}]{mark}{f.severity}[/{style}] [bold]{f.rule_id}[/bold] {f.name}{likely}")
    out(f"    {escape(f.message)}", soft_wrap=True)
    if f.evidence:
        out("    [dim]evidence[/dim]")
        for e in f.evidence:
            where = f"{e.location.path}:{e.location.line}" if e.location else (e.origin or "")
            source = lines.get(e.location.path, e.location.line) if e.location else ""
            excerpt = source or e.excerpt
            out(f"      [cyan]{escape(where)}[/cyan]  {escape(excerpt)}  [dim]← {escape(e.note)}[/dim]",
                soft_wrap=True)
            for step in e.trail:
                out(f"        [dim]via {escape(step)}[/dim]", soft_wrap=True)
    if f.error:
        lead = "the job dies" if f.severity == "error" else "what the job shows"
        out(f"    [dim]{lead} {_PHASE.get(f.phase, '')}[/dim]")
        out(f"      [{style}]{escape(f.error)}[/{style}]", soft_wrap=True)
    if f.why:
        out(f"    [dim]why[/dim]  {escape(f.why)}", soft_wrap=True)
    if f.fix:
        safety = "[green]safe[/green]" if f.fix.safe else "[yellow]review[/yellow]"
        out(f"    [bold]fix[/bold]  {escape(f.fix.description)}  [{safety}]", soft_wrap=True)
        for edit in f.fix.edits:
            out(f"         {escape(edit.describe())}", soft_wrap=True)
        for cmd in f.fix.commands:
            out(f"         $ {escape(cmd)}", soft_wrap=True)
        for note in f.fix.notes:
            out(f"         [yellow]note[/yellow] {escape(note)}", soft_wrap=True)


def _unknowns(facts: Facts, out) -> None:
    items = [(s, u) for s in facts.scripts for u in s.unknowns if not (u.hardware and facts.machine.known)]
    if not items:
        return
    out(f"\n[bold]unknown[/bold] ({len(items)}): values the doctor cannot decide statically; rules that need them stay silent")
    for s, u in items:
        where = f"{u.location.path}:{u.location.line}" if u.location else s.path
        out(f"  [cyan]{escape(where)}[/cyan]  {escape(u.what)}: {escape(u.reason)}", soft_wrap=True)


def _skipped(result: Result, out) -> None:
    if result.skipped:
        reasons = sorted({s.reason for s in result.skipped})
        ids = ", ".join(s.rule_id for s in result.skipped)
        out(f"\n[dim]skipped {ids}: {'; '.join(reasons)}[/dim]", soft_wrap=True)
    for c in result.crashed:
        out(f"\n[red]check {c.rule_id} crashed[/red]: {escape(c.reason)} (please report it)", soft_wrap=True)
