"""Text rendering of `explain`: each diagnosis with the log lines that prove it, the cause and the fix."""

from __future__ import annotations

from rich.console import Console

from ..model.redact import markup
from .lines import PLACES


def render_diagnoses(found, findings, name: str, console: Console, related) -> None:
    out = console.print
    if not found:
        out(
            f"no known cause found in {markup(name)}: none of the failure signatures precision-doctor knows is "
            f"in this log"
        )
        return
    out(f"[bold]{len(found)} known cause{'s' if len(found) != 1 else ''}[/bold] in {markup(name)}, most likely first")
    for i, d in enumerate(found, 1):
        out(f"\n{i}. [bold]{d.rule.id}[/bold] {d.rule.name}  [dim](confidence {d.confidence:.2f})[/dim]")
        out("   [dim]the log says[/dim]")
        for number, text in sorted(set(d.evidence + d.tells))[:6]:
            out(f"     [cyan]{number:>6}[/cyan]  {markup(text[:200])}", soft_wrap=True)
        out(f"   [dim]cause[/dim]  {markup(d.rule.why)}", soft_wrap=True)
        out(f"   [bold]fix[/bold]    {markup(d.rule.fix)}", soft_wrap=True)
        mine = [f for f in findings if f.rule_id in related(d.rule.id)]
        for f in mine[:3]:
            where = PLACES.place(f.locations[0].path, f.locations[0].line) if f.locations else f.path
            out(
                f"   [bold]in the script[/bold]  {f.rule_id} at [cyan]{markup(where)}[/cyan]: {markup(f.message)}",
                soft_wrap=True,
            )
