"""`precision-doctor rules`, `rule` and `targets`: what the doctor checks and the GPUs it knows."""

from __future__ import annotations

import sys

from ..model.errors import InputError
from ._common import EXIT_OK


def register(sub) -> None:
    rules_cmd = sub.add_parser("rules", help="list every rule: id, name, severity, one line")
    rules_cmd.add_argument(
        "--format",
        dest="fmt",
        choices=("text", "json"),
        default="text",
        help="json: every rule's id, name, severities, phase, summary and doc address",
    )
    rule = sub.add_parser("rule", help="print a rule's full documentation")
    rule.add_argument("rule_id", metavar="RULE", help="a rule id (PD201) or name")
    sub.add_parser("targets", help="list the GPU profiles --target accepts")


def list_rules(fmt: str = "text") -> int:
    from ..report.ruledoc import severity_label
    from ..rules.catalog import rules

    if fmt == "json":
        import json

        from ..report.ruledoc import help_uri

        doc = [
            {
                "id": r.id,
                "name": r.name,
                "severity": r.severity,
                "escalates_to": r.escalates_to,
                "phase": r.phase,
                "summary": r.summary,
                "fix_applicability": r.applicability,
                "needs": list(r.needs),
                "help_uri": help_uri(r.id),
            }
            for r in rules()
        ]
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return EXIT_OK
    for r in rules():
        print(f"{r.id}  {r.name:<40} {severity_label(r):<20} {r.summary}")
    return EXIT_OK


def show_rule(rule_id: str) -> int:
    from ..report.ruledoc import rule_doc
    from ..rules.catalog import get_rule

    r = get_rule(rule_id)
    if r is None:
        from ..model.errors import did_you_mean, rule_id_key
        from ..rules.catalog import rules

        hint = did_you_mean(rule_id, [x.id for x in rules()], rule_id_key) or did_you_mean(
            rule_id, [x.name for x in rules()]
        )
        raise InputError(f"no rule {rule_id!r}{hint or ';'} `precision-doctor rules` lists them")
    print(rule_doc(r))
    return EXIT_OK


def list_targets() -> int:
    from ..probes.target import PROFILES

    print(f"{'cpu':<14} (no GPU)")
    for p in PROFILES:
        caps = (
            ", ".join(
                x
                for x, ok in (
                    ("bf16", p.capability >= (8, 0)),
                    ("tf32", p.capability >= (8, 0)),
                    ("fp8", p.capability >= (8, 9)),
                )
                if ok
            )
            or "fp16 only"
        )
        alias = f"  (also: {', '.join(p.aliases)})" if p.aliases else ""
        print(
            f"{p.name:<14} {p.gpu_name:<32} sm_{p.capability[0]}{p.capability[1]}  {p.memory_mib / 1024:>5.1f} GiB  "
            f"{caps}{alias}"
        )
    return EXIT_OK
