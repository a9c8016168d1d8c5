"""PD703 framework-refuses-versions: the framework's start-up check refuses the library versions the job runs."""

from __future__ import annotations

from ...derive.launch import job_env
from ...knowledge.version_gates import family_of, newest_accepting
from ...knowledge.versions import requirement_holds, requirement_name
from ...model.facts import LaunchFacts, MachineFacts, ScriptFacts, StackFacts, VersionGate, VersionSource
from ...model.findings import Applicability, Draft, Evidence, Fix
from ..registry import Example, LogSignature, rule

_RECIPE = (
    "model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
    "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\nbf16: true\n"
)
# versions each release's check accepts, but for what an example changes
_FITS_095 = {
    "llamafactory": "0.9.5",
    "transformers": "5.6.0",
    "accelerate": "1.15.0",
    "peft": "0.20.0",
    "trl": "0.24.0",
}
_FITS_092 = {"llamafactory": "0.9.2", "transformers": "4.49.0", "accelerate": "1.2.1", "peft": "0.12.0", "trl": "0.9.6"}


@rule(
    "PD703",
    "framework-refuses-versions",
    severity="error",
    phase="config",
    summary="The framework's own start-up check refuses the library versions the job runs with.",
    what="LLaMA-Factory checks the versions of transformers, datasets, accelerate, peft and trl as it starts "
    "(`check_dependencies()`, run when `llamafactory-cli train` imports its argument parser) and refuses any outside "
    "the ranges that release was tested with — the common case is a `pip install -U transformers` for a new model "
    "after LLaMA-Factory was installed. Judged where both versions are the job's own: installed in the environment "
    "read, given, or pinned with `==`; the ranges are read from the installed LLaMA-Factory's source, else from the "
    "doctor's table of its releases (0.7.1-0.9.5, from their wheels). `DISABLE_VERSION_CHECK=1` in the job's "
    "environment skips the check, as LLaMA-Factory does.",
    why="transformers' `require_version` raises before anything loads: the job dies in its first seconds, after "
    "the queue wait. It keeps one clause per operator, so of two `!=` clauses only the last is checked, and it "
    "orders versions as `packaging` does (a `.dev0` build comes before its release); the doctor judges the same way.",
    error="ImportError: transformers>=4.55.0,<=5.6.0 is required for a normal functioning of this module, but found "
    "transformers==5.24.0.",
    fix="Install the versions the check names (`pip install 'transformers>=4.55.0,<=5.6.0'`), or a LLaMA-Factory "
    "release whose check accepts the installed ones; `DISABLE_VERSION_CHECK=1` skips the check (LLaMA-Factory's "
    "own hint) and runs a combination it was not tested with.",
    applicability=Applicability.DISPLAY,
    fix_safety="Display only: which package to move is the user's choice, and the doctor never installs anything.",
    log=LogSignature(
        patterns=(
            r"is required for a normal functioning of this module, but found",
            r"distribution was not found and is required by this application",
        )
    ),
    related=("PD217",),
    fires=[
        Example(
            _RECIPE,
            name="train.yaml",
            versions={**_FITS_095, "transformers": "5.24.0"},
            note="transformers upgraded past the release's range",
        ),
        Example(
            _RECIPE,
            name="train.yaml",
            versions={**_FITS_092, "transformers": "4.48.0"},
            note="0.9.2 excludes 4.46.0-4.48.0, but require_version keeps only its last `!=` clause",
        ),
    ],
    silent=[
        Example(_RECIPE, name="train.yaml", versions=_FITS_095),
        Example(
            _RECIPE,
            name="train.yaml",
            versions={**_FITS_092, "transformers": "4.47.1"},
            note="listed as excluded, but only the last `!=` clause is checked",
        ),
        Example(
            _RECIPE,
            name="train.yaml",
            versions={**_FITS_095, "transformers": "5.24.0"},
            env={"DISABLE_VERSION_CHECK": "1"},
            note="the check is skipped",
        ),
        Example(_RECIPE, name="train.yaml", note="LLaMA-Factory's release not known: nothing to judge by"),
    ],
)
def framework_refuses_versions(script: ScriptFacts, stack: StackFacts, machine: MachineFacts, launch: LaunchFacts):
    # (taking the script: its project's stack, where the framework's check was read)
    env = job_env(launch, machine)
    for gate in stack.version_gates:
        refused, unjudged, judged = _refused(gate, stack, env.get("DISABLE_VERSION_CHECK", "0").lower())
        if not refused:
            continue
        name = family_of(gate.framework)
        said = "; ".join(what for _, what, _ in refused)
        if unjudged:
            said += (
                f" (the check of {unjudged[0]}, whose version is not pinned here, comes first)"
                if len(unjudged) == 1
                else f" (the checks of {', '.join(unjudged)}, whose versions are not pinned here, come first)"
            )
        declared = [
            requirement_name(r.requirement)
            for r, _, _ in refused
            if stack.get(requirement_name(r.requirement)).source == VersionSource.DECLARED
        ]
        if declared and stack.get(gate.framework).source == VersionSource.DECLARED:
            said += "; pinned in one install, pip's resolver may refuse the pair before the job starts"
        # a launch the doctor could not read may set DISABLE_VERSION_CHECK for the job
        unread = launch.unknown_launcher and not launch.not_training
        evidence = tuple(
            Evidence(None, requirement.requirement, f"{gate.where}:{requirement.line} check_dependencies()", "library")
            for requirement, _, _ in refused
        ) + (Evidence(None, stack.get(gate.framework).describe(), f"{name} {gate.version}", "environment"),)
        wanted = " ".join(f"'{requirement.requirement}'" for requirement, _, _ in refused)
        # (a release whose check takes every library version judged here: moving one package is enough)
        newest = newest_accepting(gate.framework, judged)
        others = ""
        library = requirement_name(refused[0][0].requirement)
        if newest and newest != gate.version and len(refused) == 1:
            others = f", or {name} {newest}, the newest release whose check accepts {library} {judged[library]}"
        yield Draft(
            f"{name} {gate.version} refuses the library versions as it starts: {said}",
            evidence=evidence,
            error=refused[0][2],
            severity="warning" if unread else None,
            fix=Fix(
                f"install versions its check accepts (`pip install {wanted}`){others}; DISABLE_VERSION_CHECK=1 "
                "skips the check and runs a combination it was not tested with",
                Applicability.DISPLAY,
            ),
        )


def _refused(gate: VersionGate, stack: StackFacts, disable: str) -> tuple[list, list[str], dict[str, str]]:
    """(requirement, what is wrong, the error it raises) for each requirement the job's versions fail, in the check's
    order; the libraries checked before the first of them whose version is not the job's own (one of those may stop
    the job first); and the versions judged, by library. A version counts where it comes from the framework's own
    environment (the installed framework's check against what is installed beside it), or, for the table's check,
    from a pin or the caller: an environment that has the library but not the framework is not the job's."""
    out: list = []
    unjudged: list[str] = []
    judged: dict[str, str] = {}
    for requirement in gate.requirements:
        if disable in gate.disable_values and not requirement.mandatory:
            continue
        library = requirement_name(requirement.requirement)
        have = stack.get(library)
        own = (
            have.source in (VersionSource.INSTALLED, VersionSource.GIVEN)
            if gate.installed
            else (have.source != VersionSource.INSTALLED)
        )
        if not (have.exact and own):
            if not out:
                unjudged.append(library)
            continue
        judged[library] = have.version
        if requirement_holds(requirement.requirement, have.version) is not False:
            continue
        out.append(
            (
                requirement,
                f"{library} {have.version} is outside {requirement.requirement[len(library) :]}",
                f"ImportError: {requirement.requirement} is required for a normal functioning of this module, but "
                f"found {library}=={have.version}.",
            )
        )
    return out, unjudged, judged
