"""PD216 trainer-tokenizer-kwarg-removed: `Trainer(tokenizer=...)` was removed in transformers 5: use
`processing_class=`."""

from __future__ import annotations

from ...derive import call_evidence
from ...knowledge.signatures import SPECIALISED, accepted, class_id, decided_by, local_id
from ...model.facts import ScriptFacts, StackFacts, VersionSource
from ...model.findings import Applicability, Draft, Edit, Fix
from ..registry import Example, LogSignature, rule
from ._loading import HEAD


@rule(
    "PD216",
    "trainer-tokenizer-kwarg-removed",
    severity="error",
    phase="wrap",
    summary="`Trainer(tokenizer=...)` was removed in transformers 5: use `processing_class=`.",
    what="`Trainer(..., tokenizer=...)` (and the script's subclasses whose constructor is Trainer's, or passes "
    "**kwargs on to it) on transformers 5 or newer, where the keyword no longer exists; a deprecation warning "
    "on 4.46-4.57. The keyword's history is read from Trainer.__init__ of each release (the fields "
    "keyword-not-accepted, PD217, judges every other keyword with).",
    why="transformers 4.46 renamed the argument to `processing_class` (it also takes processors and image "
    "processors) and 5.0 removed the old name, so the Trainer is never constructed.",
    error="TypeError: Trainer.__init__() got an unexpected keyword argument 'tokenizer'",
    fix="Pass the tokenizer as `processing_class=tokenizer`.",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same object under the current name.",
    log=LogSignature(patterns=(r"unexpected keyword argument 'tokenizer'",)),
    fires=[
        Example(
            HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
            "Trainer(model=m, args=TrainingArguments('o'), tokenizer=tok).train()\n",
            fixed=HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
            "Trainer(model=m, args=TrainingArguments('o'), processing_class=tok).train()\n",
        )
    ],
    silent=[
        Example(
            HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
            "Trainer(model=m, args=TrainingArguments('o'), processing_class=tok).train()\n"
        ),
        Example(
            HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
            "Trainer(model=m, args=TrainingArguments('o'), tokenizer=tok).train()\n",
            versions={"transformers": "4.44.2"},
        ),
    ],
)
def trainer_tokenizer_kwarg_removed(script: ScriptFacts, stack: StackFacts):
    version = stack.get("transformers")
    for trainer in script.of("trainer"):
        if "tokenizer" not in trainer.kwargs:
            continue
        cid = local_id(trainer.callee, script.classes) or class_id(trainer.callee)
        owner = decided_by(cid, stack, script.classes) if cid else None
        if SPECIALISED.get((owner, "tokenizer")) != "PD216":
            continue  # a TRL trainer's own __init__ decides: keyword-not-accepted (PD217) judges it
        fields = accepted(owner, stack)
        if fields is None or "processing_class" not in fields.names:
            continue  # before 4.46 `tokenizer` is the parameter (or the version is outside the table)
        removed = "tokenizer" not in fields.names
        # a version neither installed nor declared may be a 4.x that still takes it: a warning that says so (a declared
        # range is read as what a fresh install of it gets, the newest release it allows)
        assumed = removed and version.source == VersionSource.ASSUMED
        name = trainer.callee.rsplit(".", 1)[-1]
        yield Draft(
            f"{name}(tokenizer=...) "
            + (
                f"no longer exists on transformers {version.version}"
                if removed
                else f"is deprecated on transformers {version.version}"
            )
            + f" ({version.source}{'; not installed nor declared: pin it to be sure' if assumed else ''}); "
            f"use processing_class=",
            evidence=(call_evidence(trainer, "tokenizer="),),
            severity="" if removed and not assumed else "warning",
            error=""
            if removed
            else (
                "FutureWarning: `tokenizer` is deprecated and will be removed in "
                "version 5.0.0 for `Trainer.__init__`. Use `processing_class` instead."
            ),
            fix=Fix(
                "rename tokenizer= to processing_class=",
                applicability=Applicability.SAFE,
                edits=(
                    Edit(
                        "rename_kwarg",
                        trainer.location.path,
                        trainer.location.line,
                        call=name,
                        old="tokenizer",
                        new="processing_class",
                    ),
                ),
            ),
            confidence="likely" if version.source == VersionSource.ASSUMED else "certain",
        )
