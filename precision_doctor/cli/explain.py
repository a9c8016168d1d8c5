"""`precision-doctor explain`: name the known failures behind a training log or traceback."""

from __future__ import annotations

import sys

from ._common import EXIT_OK, console, deliver


def register(sub) -> None:
    explain = sub.add_parser(
        "explain",
        help="diagnose a training log or traceback (file or stdin)",
        description="Read a training log or traceback and name the known failures behind it, "
        "ranked by how well the log proves them. Exit 0 whether or not a cause is "
        "found; 2 when the log cannot be read.",
    )
    explain.add_argument("log", nargs="?", default="-", metavar="LOG", help="a log file, or - for stdin (default)")
    explain.add_argument("--script", metavar="PATH", help="also check this script and point at the lines that cause it")
    explain.add_argument("--format", dest="fmt", choices=("text", "json"), default="text")
    for flag in ("--target", "--facts", "--launcher"):
        explain.add_argument(flag, help="with --script: as for check")


def run_explain(opts, script_args: tuple[str, ...]) -> int:
    from ..diagnose import diagnose, open_log
    from ..rules.catalog import related

    source, name = open_log(opts.log)
    with source:
        found = diagnose(source)
    findings = []
    if opts.script:
        from .. import engine
        from ..probes.collect import gather

        facts = gather(
            [opts.script], target=opts.target, launcher=opts.launcher, script_args=script_args, facts_file=opts.facts
        )
        findings = list(engine.run(facts).findings)
    if opts.fmt == "json":
        doc = {"version": 1, "log": name, "diagnoses": []}
        for d in found:
            item = d.to_json()
            item["script"] = [
                {"path": loc.path, "line": loc.line, "message": f.message}
                for f in findings
                if f.rule_id in related(d.rule.id)
                for loc in f.locations[:1]
            ]
            doc["diagnoses"].append(item)
        from ..model.redact import shown_data
        from ..model.strict_json import dumps

        return deliver(lambda: sys.stdout.write(dumps(shown_data(doc), indent=2) + "\n"), EXIT_OK)
    from ..report.explain_text import render_diagnoses

    return deliver(lambda: render_diagnoses(found, findings, name, console(), related), EXIT_OK)
