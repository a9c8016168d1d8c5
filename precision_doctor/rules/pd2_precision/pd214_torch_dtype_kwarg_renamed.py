"""PD214 torch-dtype-kwarg-renamed: `torch_dtype=` is deprecated in from_pretrained (transformers >= 4.56): use
`dtype=`."""

from __future__ import annotations

from ...derive import call_evidence
from ...derive.setup import DTYPE_KEYWORD_FROM
from ...knowledge.signatures import release_of, releases_in_range
from ...knowledge.versions import at_least, version_tuple
from ...model.facts import ScriptFacts, StackFacts, VersionSource
from ...model.findings import Applicability, Draft, Edit, Fix
from ..registry import Example, rule
from ._loading import HEAD


@rule(
    "PD214",
    "torch-dtype-kwarg-renamed",
    severity="warning",
    phase="load",
    summary="`torch_dtype=` is deprecated in from_pretrained (transformers >= 4.56): use `dtype=`.",
    what="`from_pretrained(..., torch_dtype=...)` on transformers 4.56 or newer.",
    why="transformers 4.56 renamed the argument; v5 keeps `torch_dtype` as an alias that warns. The doctor treats "
    "both spellings as one setting for every other rule.",
    error="`torch_dtype` is deprecated! Use `dtype` instead!",
    fix="Rename the keyword: `dtype=...` (keep `torch_dtype` only for transformers < 4.56).",
    applicability=Applicability.SAFE,
    fix_safety="Safe: the same setting under its current name; for review where the project's declared range allows "
    "a transformers older than 4.56, which refuses dtype= (the floor must rise with it).",
    fires=[
        Example(
            HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n",
            fixed=HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n",
        )
    ],
    silent=[
        Example(HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"),
        Example(
            HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n",
            versions={"transformers": "4.46.3"},
        ),
    ],
)
def torch_dtype_kwarg_renamed(script: ScriptFacts, stack: StackFacts):
    if not at_least(stack, "transformers", DTYPE_KEYWORD_FROM):
        return
    version = stack.get("transformers")
    older = _oldest_allowed_without_dtype(version)
    for load in script.of("model_load"):
        if "torch_dtype" in load.kwargs and "dtype" not in load.kwargs:
            yield Draft(
                f"torch_dtype= is deprecated on transformers {version.version} ({version.source}); use dtype=",
                evidence=(call_evidence(load, "torch_dtype="),),
                fix=Fix(
                    "rename torch_dtype= to dtype="
                    + (f", and raise the requirement to transformers>={DTYPE_KEYWORD_FROM}" if older else ""),
                    # the range the project declares lets a fresh install pick a release that refuses dtype=
                    applicability=Applicability.UNSAFE if older else Applicability.SAFE,
                    notes=(
                        f"the project allows transformers{version.spec}, down to {older}, which does not take dtype= "
                        f"(it arrived in {DTYPE_KEYWORD_FROM}): raise the floor with the rename, or keep torch_dtype=",
                    )
                    if older
                    else (),
                    edits=(
                        Edit(
                            "rename_kwarg",
                            load.location.path,
                            load.location.line,
                            call=load.callee.rsplit(".", 1)[-1],
                            old="torch_dtype",
                            new="dtype",
                        ),
                    ),
                ),
                confidence="likely" if version.source == VersionSource.ASSUMED else "certain",
            )


def _oldest_allowed_without_dtype(version) -> str:
    """The oldest release the project's declared range allows when it predates `dtype=`, else ""."""
    allowed = releases_in_range("transformers", version)
    if not allowed:
        return ""
    oldest = release_of("transformers", allowed[0])
    return oldest if version_tuple(oldest) < version_tuple(DTYPE_KEYWORD_FROM) else ""
