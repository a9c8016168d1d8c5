"""Rules about the doctor's own configuration (PD001)."""

from __future__ import annotations

from ..engine import Example, rule


@rule(
    "PD001", "unused-suppression", severity="info", phase="config",
    summary="A `# precision-doctor: ignore[...]` comment that suppresses nothing.",
    what="A suppression comment whose rule did not fire on that line (fixed since, moved, or a typo in the id).",
    why="Stale suppressions hide the next real finding on that line and make the gate harder to trust.",
    error="no error: the comment is dead weight",
    fix="Remove the comment, or the id that no longer applies.",
    fix_safety="Safe: it suppresses nothing.",
    fires=[Example("import torch\nx = torch.zeros(3)  # precision-doctor: ignore[PD201]\n")],
    silent=[Example("import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
                    "args = TrainingArguments('out', fp16=True)  # precision-doctor: ignore[PD201]\n"
                    "Trainer(model=model, args=args).train()\n")],
)
def unused_suppression(facts):
    """Computed by the engine after every other rule has run (it needs their findings)."""
    return ()
