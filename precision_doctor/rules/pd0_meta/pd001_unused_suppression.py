"""PD001 unused-suppression: A `# precision-doctor: ignore[...]` comment that suppresses nothing."""

from __future__ import annotations

from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, LogSignature, rule


@rule(
    "PD001",
    "unused-suppression",
    severity="info",
    phase="config",
    summary="A `# precision-doctor: ignore[...]` comment that suppresses nothing.",
    what="A suppression comment whose rule did not fire on that line (fixed since, moved, or a typo in the id).",
    why="Stale suppressions hide the next real finding on that line and make the gate harder to trust.",
    error="no error: the comment is dead weight",
    fix="Remove the comment, or the id that no longer applies.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: delete the comment (or the id from it) by hand; it suppresses nothing.",
    log=LogSignature(from_logs=False),
    fires=[Example("import torch\nx = torch.zeros(3)  # precision-doctor: ignore[PD201]\n")],
    silent=[
        Example(
            "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
            "args = TrainingArguments('out', fp16=True)  # precision-doctor: ignore[PD201]\n"
            "Trainer(model=model, args=args).train()\n"
        )
    ],
)
def unused_suppression(suppressions):
    """Runs after every other rule, on which comments silenced one of their findings (ruff's unused noqa)."""
    for s in suppressions.marks:
        for rid in s.ids or ("*",):
            if (rid, s.location.path, s.location.line) in suppressions.used:
                continue
            if rid != "*" and rid in suppressions.known and rid not in suppressions.enabled:
                continue  # the rule is off: the comment may matter again when it is back on
            what = "every rule" if rid == "*" else rid
            why = (
                f"{rid} is not a rule" if rid != "*" and rid not in suppressions.known else "nothing fires on this line"
            )
            yield Draft(
                f"suppression of {what} matches nothing: {why}",
                evidence=(Evidence(s.location, "", "unused suppression"),),
                fix=Fix("remove the comment (or the id from it)", Applicability.DISPLAY),
                path=s.location.path,
            )
