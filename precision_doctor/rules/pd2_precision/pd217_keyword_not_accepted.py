"""PD217 keyword-not-accepted: A keyword or config key the library version in use does not accept: the job dies
before training."""

from __future__ import annotations

from dataclasses import replace

from ...derive import evidence_of
from ...derive.checkpoint import checkpoint_of
from ...derive.launch import job_env
from ...knowledge.launchers import LLAMAFACTORY_CLIS, LLAMAFACTORY_PARSER_VARIABLES, llamafactory_env_enabled
from ...knowledge.signatures import (
    LLAMAFACTORY_TRAIN,
    LLAMAFACTORY_TRAINING_BEFORE,
    LOADER,
    SPECIALISED,
    Accepted,
    Versions,
    accepted,
    beyond_table,
    class_id,
    decided_by,
    describe_spans,
    former_name,
    local_id,
    moved_into_value,
    release_of,
    releases_in_range,
    rename_of,
    spans_of,
    suggestion,
    table,
    trl_config_keys,
)
from ...knowledge.versions import at_least, parse_version
from ...model.facts import (
    Call,
    LaunchFacts,
    Location,
    MachineFacts,
    PackageVersion,
    ParsedArguments,
    ScriptFacts,
    StackFacts,
    Value,
    VersionSource,
)
from ...model.findings import Applicability, Draft, Edit, Evidence, Fix
from .._common import present, set_kwarg
from ..registry import Example, LogSignature, rule

_PHASE = {
    "training_args": "config",
    "bnb_config": "config",
    "peft_config": "config",
    "trainer": "wrap",
    "model_load": "load",
}


# A rename whose value keeps its meaning only within a range: offered for review, not applied on its own.
_REVIEW_RENAMES = {"warmup_ratio": "warmup_steps takes a ratio only below 1 (an integer or 1.0 counts steps)"}


# A log's "unexpected keyword argument" is this rule's, unless the keyword is one a specialised rule reports.
_UNEXPECTED_KEYWORD = r"got an unexpected keyword argument '(?!(?:{})')\w+'".format(
    "|".join(sorted({name for _, name in SPECIALISED}))
)


_ARGS = "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
_LLAMAFACTORY = (
    "model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
    "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\nbf16: true\n"
)
_MEGATRON = "tensor_model_parallel_size: 2\n"
_EXTRA_ARGS_IGNORED = "ALLOW_EXTRA_ARGS=1 at launch lets it through and nothing reads it, so the setting has no effect"
_LAUNCH_DECIDES = (
    "no launch given: USE_MCA=1 or USE_MEGATRON_BRIDGE=1 at launch add Megatron argument classes the doctor does "
    "not read; pass --launcher"
)


def _judge_call(call: Call, script: ScriptFacts, stack: StackFacts):
    cid = local_id(call.callee, script.classes) or class_id(call.callee)
    if cid is None:
        return
    got = accepted(cid, stack, script.classes)
    if got is None:
        return
    loader = cid == LOADER
    known_to_loader = set(table()["classes"][LOADER]["names"]) if loader else set()
    shown = call.callee.rsplit(".", 1)[-1] if not loader else "from_pretrained"
    unsloth_trl = cid.startswith("trl") and _imports_unsloth(script)
    unsloth_trainer = call.kind == "trainer" and unsloth_trl
    for name, value in call.kwargs.items():
        if (
            name == "**"
            or name in got.names
            or (cid, name) in SPECIALISED
            or (_owner(cid, script, stack), name) in SPECIALISED
        ):
            continue
        if unsloth_trainer and name == "tokenizer":
            continue  # `import unsloth` rebuilds TRL's trainers with a `tokenizer=` that feeds processing_class
        if loader and name not in known_to_loader:
            continue  # any other keyword may be an attribute of the model's config: not judged
        severity, doubt = _verdict(cid, name, got, script, stack)
        if unsloth_trl:  # Unsloth's rebuilt TRL trainers and configs add keywords of their own (vllm_sampling_params,
            # max_seq_length kept for old notebooks): what TRL's release lacks may still be taken
            severity, doubt = "warning", "Unsloth rebuilds TRL's trainers and configs, which may accept it"
        how = _versions(_packages(got), stack, doubt)
        ignored = got.open == "ignores"
        new, history, same = _successor(cid, name, got, script, stack)
        cls = shown if not loader else _model_class(call, script)
        message = (
            f"{shown}() {'ignores' if ignored else 'does not accept'} `{name}` on {how}"
            + history
            + (": the setting has no effect" if ignored else "")
        )
        error = (
            f"Unused kwargs: ['{name}']. These kwargs are not used in <class "
            f"'transformers.utils.quantization_config.BitsAndBytesConfig'>."
            if ignored
            else f"TypeError: {cls}.__init__() got an unexpected keyword argument '{name}'"
        )
        yield Draft(
            message,
            evidence=(evidence_of(value, f"{name}=", call),),
            error=error,
            phase=_PHASE[call.kind],
            severity="warning" if ignored else severity,
            confidence="likely" if severity == "warning" else "certain",
            fix=_call_fix(call, name, value, new, same, shown, loader),
        )


def _imports_unsloth(script: ScriptFacts) -> bool:
    """Unsloth patches every TRL trainer and config when imported (`unsloth/models/rl.py` PatchFastRL, run by
    `unsloth/models/llama.py` at import): the rebuilt `__init__` takes `tokenizer=` again, and its configs add
    fields of Unsloth's own."""
    return any(m == "unsloth" or m.startswith("unsloth.") for m in script.imports)


# An `if` that asks which release is installed, or what it accepts, before passing a keyword.
_VERSION_TESTS = ("version", "signature", "fields", "hasattr", "parameters")


def _guarded(call: Call) -> bool:
    """The script decides at run time whether this call runs on this release: it sits under a version (or
    signature) check, or in a try/except that may catch the TypeError and fall back."""
    in_try = call.in_branch and not call.branches  # the probe records the `if`s a call sits in, not its `try`s
    return in_try or any(not b.test or any(word in b.test.lower() for word in _VERSION_TESTS) for b in call.branches)


def _owner(cid: str, script: ScriptFacts, stack: StackFacts) -> str:
    return decided_by(cid, stack, script.classes)


def _model_class(call: Call, script: ScriptFacts) -> str:
    ckpt = checkpoint_of(call, script)
    if ckpt is not None and ckpt.architecture:
        return ckpt.architecture
    owner = call.callee.rsplit(".", 2)[-2] if call.callee.count(".") >= 1 else ""
    return owner if owner and not owner.startswith("Auto") else "the model class"


def _call_fix(call: Call, name: str, value: Value, new: str, same: bool, shown: str, loader: bool) -> Fix:
    spelled_in_call = not _from_dict(value)  # `**cfg`: the keyword is a key of the dict, not of the call
    library = "transformers" if loader else ""
    if "=" in new:  # moved into a value of another keyword: True sets it, False was the default anyway
        keyword, _, setting = new.partition("=")
        remove = Edit("remove_kwarg", call.location.path, call.location.line, call=shown, name=name, library=library)
        if value.is_(False) and spelled_in_call:
            return Fix(f"remove {name}=False (the default)", applicability=Applicability.SAFE, edits=(remove,))
        edits = (remove, *present(set_kwarg(call, keyword, setting))) if value.is_(True) and spelled_in_call else ()
        return Fix(
            f"{name}=True → {new}", applicability=Applicability.SAFE if edits else Applicability.DISPLAY, edits=edits
        )
    if new:
        review = _REVIEW_RENAMES.get(name) or ("" if same else "a guess from the spelling")
        edits = (
            (
                Edit(
                    "rename_kwarg",
                    call.location.path,
                    call.location.line,
                    call=shown,
                    old=name,
                    new=new,
                    library=library,
                ),
            )
            if spelled_in_call
            else ()
        )
        return Fix(
            f"{name}= → {new}=" + (f" ({review})" if review else ""),
            applicability=Applicability.UNSAFE if review else Applicability.SAFE,
            edits=edits,
        )
    return Fix(
        f"remove {name}= (or pin the release that has it)",
        applicability=Applicability.UNSAFE,
        edits=(Edit("remove_kwarg", call.location.path, call.location.line, call=shown, name=name, library=library),)
        if spelled_in_call
        else (),
    )


def _from_dict(value: Value) -> bool:
    """A keyword that arrives through `**cfg`: its text is the dict entry, not the call's keyword."""
    return value.text.endswith("]") and "[" in value.text


def _judge_parsed(
    parsed: ParsedArguments,
    script: ScriptFacts,
    stack: StackFacts,
    unsure: str = "",
    ignored: str = "",
):
    """`unsure`: why a key no release of these classes ever had may still parse (a parser the launch could swap
    in, unread): such a key is a warning saying so; a typo, or a key of another release, stays an error.
    `ignored`: why the parser lets a key no class has through: every such key is a warning, its setting has no
    effect."""
    if not parsed.strict or not parsed.keys:
        return
    trl = parsed.parser == "trl.TrlParser"
    recipe = parsed.source == "recipe"
    behaviour = trl_config_keys(stack) if trl and recipe and parsed.method == "parse_args_and_config" else ""
    if behaviour in ("ignores", "unknown"):
        return  # TRL 0.13-0.18 drops unknown config keys; an unknown TRL version says nothing
    fields: set[str] = set()
    parts: list[tuple[str, Accepted]] = []
    for cls in parsed.classes:
        cid = local_id(cls, script.classes) or class_id(cls)
        got = accepted(cid, stack, script.classes) if cid else None
        if got is None:
            return  # a dataclass whose fields are unknown: any key may be its
        fields |= got.names
        parts.append((cid, got))
    options = set(parsed.options) | ({"env"} if trl and recipe else set())
    if not recipe:
        options |= {"help"}
    unused = [
        k
        for k in parsed.keys
        if k not in fields and k not in options and (recipe or not _command_line_accepts(k, fields | options))
    ]
    if not unused:
        return
    names = ", ".join(c.rsplit(".", 1)[-1] for c in parsed.classes)
    error = _parser_error(parsed, behaviour, unused)
    for key in unused:
        value = parsed.keys[key]
        verdicts = [_verdict(cid, key, got, script, stack) for cid, got in parts]
        doubts = [d for _, d in verdicts if d]
        severity = "warning" if any(s == "warning" for s, _ in verdicts) else "error"
        how = _versions([p for _, got in parts for p in _packages(got)], stack, doubts[0] if doubts else "")
        found = [_successor(cid, key, got, script, stack) for cid, got in parts]
        new = next((f[0] for f in found if f[0]), "")
        hint = next((f[1] for f in found if f[1]), "")
        if not hint:
            close = suggestion(key, fields)
            hint = f" (did you mean `{close}`?)" if close else ""
            new = new or close or ""
        if unsure and not new and all(spans_of(cid, key, script.classes) is None for cid, _ in parts):
            severity, hint = "warning", f"{hint} ({unsure})"
        if ignored:
            severity, hint, error = "warning", f"{hint}: {ignored}", "no error: the key is dropped"
        shown = f"`{key}`" if recipe else f"--{key}"
        where = f"in {parsed.via}" if recipe else "on the command line"
        yield Draft(
            f"{shown} {where} is not a field of {names} on {how}{hint}",
            evidence=(_parsed_evidence(value, key, parsed), _parser_evidence(parsed, dropped=bool(ignored))),
            error=error,
            phase="config",
            severity=severity,
            confidence="likely" if severity == "warning" and not ignored else "certain",
            fix=Fix(
                (f"rename {shown} to `{new}`" if new else f"remove {shown}")
                + (f" in {value.location}" if value.location else ""),
                applicability=Applicability.DISPLAY,
            ),
        )


def _parser_evidence(parsed: ParsedArguments, dropped: bool = False) -> Evidence:
    if parsed.parser.startswith("llamafactory."):
        return Evidence(
            None,
            parsed.via,
            "get_train_args parses the recipe with HfArgumentParser.parse_dict, "
            + ("dropping unknown keys (allow_extra_keys)" if dropped else "refusing unknown keys")
            + " (LLaMA-Factory hparams/parser.py)",
            "launcher",
        )
    return Evidence(parsed.location, "", f"{parsed.method}()")


def _command_line_accepts(word: str, options: set[str]) -> bool:
    """What argparse makes of `--word`: an option as HfArgumentParser adds it (`--name`, `--name-with-dashes`,
    `--no_name` for a flag), or a prefix of exactly one option (argparse's abbreviations)."""
    name = word.replace("-", "_")
    if name in options or (name.startswith("no_") and name[3:] in options):
        return True
    spellings = {o for opt in options for o in (opt, opt.replace("_", "-"))}
    return sum(1 for s in spellings if s.startswith(word)) >= 1


def _parsed_evidence(value: Value, key: str, parsed: ParsedArguments) -> Evidence:
    if value.location is not None:
        return evidence_of(value, f"{key}: no dataclass of the parser has it")
    if parsed.parser.startswith("llamafactory."):  # a word after the recipe (probes/config_families dotlist)
        return Evidence(
            None, key, "a word after the recipe on the launch line: OmegaConf reads it as a key", "launcher"
        )
    return Evidence(None, value.text or f"--{key}", f"--{key} on the command line", "script-arg")


def _parser_error(parsed: ParsedArguments, behaviour: str, unused: list[str]) -> str:
    if parsed.source == "command line":
        words = [w for k in unused for w in (parsed.keys[k].value or (f"--{k}",))]
        return f"ValueError: Some specified arguments are not used by the HfArgumentParser: {words}"
    if behaviour == "raises":
        words = [w for k in unused for w in (f"--{k}", str(parsed.keys[k].value))]
        return (
            f"ValueError: Unknown arguments from config file: {words}. Please remove them, add them to the "
            f"dataclass, or set `fail_with_unknown_args=False`."
        )
    if behaviour == "raises_legacy":
        return (
            f"ValueError: Some specified config arguments are not used by the TrlParser: "
            f"{ {k: parsed.keys[k].value for k in unused} }"
        )
    return f"ValueError: Some keys are not used by the HfArgumentParser: {sorted(unused)}"


def _verdict(cid: str, name: str, got: Accepted, script: ScriptFacts, stack: StackFacts) -> tuple[str, str]:
    """(severity, note): an error when the version the script runs with refuses the keyword — a declared range is
    what a fresh install of it gets, the newest release it allows (as PD216 and PD406 read it), and the note names
    the last release in the range that accepts it, the pin that keeps the call; a warning, and why, when the
    version is only assumed or newer than the table."""
    packages = _packages(got)
    assumed = [p for p in packages if stack.get(p).source == VersionSource.ASSUMED]
    if assumed:
        return "warning", f"{assumed[0]} not installed nor declared: pin it to be sure"
    read_installed = {sig.evidence.split(" ", 1)[0] for sig in stack.signatures.values()}
    newer = [p for p in packages if p not in read_installed and beyond_table(p, stack.get(p).version)]
    if newer:
        return "warning", f"newer than the {newer[0]} releases the doctor's table was built from"
    for package in packages:
        takes = [
            i
            for i in releases_in_range(package, stack.get(package))
            if name in getattr(accepted(cid, Versions(stack).with_release(package, i), script.classes), "names", ())
        ]
        if takes:
            version = stack.get(package)
            last = release_of(package, max(takes))
            return "error", (
                f"a fresh install of {package}{version.spec} gets {version.version}; up to {last} the range accepts "
                f"it: change the keyword, or pin {package}<={last}"
            )
    return "error", ""


def _packages(got: Accepted) -> list[str]:
    # sentence-transformers is not a tracked package: its own fields are those of any release read
    return sorted(p for p in got.packages if p != "sentence-transformers")


def _versions(packages, stack: StackFacts, doubt: str = "") -> str:
    shown = ", ".join(stack.get(p).describe() for p in sorted(set(packages))) or "the script's own classes"
    return shown + (f" ({doubt})" if doubt else "")


def _successor(cid: str, name: str, got: Accepted, script: ScriptFacts, stack: StackFacts) -> tuple[str, str, bool]:
    """(the keyword to use instead or "", what became of it, whether it is the same setting under another name):
    renamed, spelled the old way on an older release, accepted only by other releases, or a typo."""
    new = rename_of(cid, name, script.classes)
    if new and new in got.names:
        return new, f": renamed to `{new}`", True
    moved = moved_into_value(cid, name, script.classes)
    if moved and moved[0] in got.names:
        return f"{moved[0]}={moved[1]!r}", f": it became `{moved[0]}={moved[1]!r}`", True
    spans = spans_of(cid, name, script.classes)
    if spans is not None:
        package, releases = spans
        old = former_name(cid, name, script.classes)
        shown = describe_spans(package, releases)
        accept = "accepts" if "-" not in releases and "," not in releases else "accept"  # one release
        if old and old in got.names:
            return old, f" (only {shown} {accept} it; this release calls it `{old}`)", True
        return "", f" (only {shown} {accept} it)", False
    close = suggestion(name, got.names)
    return (close, f" (did you mean `{close}`?)", False) if close else ("", "", False)


@rule(
    "PD217",
    "keyword-not-accepted",
    severity="error",
    phase="config",
    summary="A keyword or config key the library version in use does not accept: the job dies before training.",
    what="A keyword of `TrainingArguments` (and its subclasses, the script's own included), TRL's configs and "
    "trainers, `ModelConfig`, `BitsAndBytesConfig`, peft's `LoraConfig`, `Trainer(...)` or `from_pretrained` "
    "that the installed (or declared) release does not have; a key of a YAML/JSON recipe that "
    "`HfArgumentParser` / `TrlParser --config` reads and no dataclass of the parser has; a key of an "
    "LLaMA-Factory recipe that none of the five dataclasses `llamafactory-cli train` fills has (a warning where the "
    "launch sets ALLOW_EXTRA_ARGS: the key is dropped, its setting has no effect; not judged under USE_MCA or "
    "USE_MEGATRON_BRIDGE, whose classes are not read); an option after `--` that none has. Renamed "
    "keywords name their successor (`evaluation_strategy` -> `eval_strategy`, "
    "`warmup_ratio` -> `warmup_steps`), typos the field they miss (`learning_rat` -> `learning_rate`).",
    why="A dataclass's `__init__` refuses a keyword it has no field for; HfArgumentParser refuses unused recipe keys "
    "and command-line options; from_pretrained hands an unknown keyword to the model's `__init__`. The fields "
    "are each release's own: read from the installed package's source, else from a table generated from the "
    "released wheels (transformers 4.36-5.23, TRL 0.9-1.16, peft 0.7-0.21, sentence-transformers 3.0-6.2, "
    "LLaMA-Factory 0.7.1-0.9.5, each release). "
    "BitsAndBytesConfig takes any keyword and ignores it: a warning, the setting has no effect. An assumed "
    "version gives a warning; a declared range is what a fresh install gets, its newest release (as PD216 and "
    "PD406 read it), and the message names the range's last release that accepts the keyword. `Trainer(tokenizer=)` "
    "is PD216's, `from_pretrained(load_in_4bit=)` PD406's.",
    error="TypeError: TrainingArguments.__init__() got an unexpected keyword argument 'warmup_ratio'",
    fix="Use the keyword the version has (its new name), fix the typo, or pin the release the script was written for.",
    applicability=Applicability.SAFE,
    fix_safety="Safe for a rename to the same setting; a typo's correction and a removal are for review.",
    log=LogSignature(
        patterns=(
            _UNEXPECTED_KEYWORD,
            r"Some keys are not used by the HfArgumentParser",
            r"Some specified arguments are not used by the HfArgumentParser",
            r"Unknown arguments from config file",
            r"Some specified config arguments are not used by the TrlParser",
        )
    ),
    related=("PD216", "PD406", "PD703"),
    fires=[
        Example(
            _ARGS + "args = TrainingArguments('out', group_by_length=True)\nTrainer(model=None, args=args).train()\n",
            note="transformers 5.2 moved it into train_sampling_strategy: the fix keeps the behaviour",
            fixed=_ARGS + "args = TrainingArguments('out', train_sampling_strategy='group_by_length')\n"
            "Trainer(model=None, args=args).train()\n",
        ),
        Example(
            _ARGS + "args = TrainingArguments('out', warmup_ratio=0.1, bf16=True)\n"
            "Trainer(model=model, args=args).train()\n",
            fixed=_ARGS + "args = TrainingArguments('out', warmup_steps=0.1, bf16=True)\n"
            "Trainer(model=model, args=args).train()\n",
        ),
        Example(
            _ARGS + "args = TrainingArguments('out', evaluation_strategy='steps')\n"
            "Trainer(model=model, args=args).train()\n",
            fixed=_ARGS + "args = TrainingArguments('out', eval_strategy='steps')\n"
            "Trainer(model=model, args=args).train()\n",
            versions={"transformers": "4.57.1"},
        ),
        Example(
            _LLAMAFACTORY + "learnig_rate: 1.0e-4\n",
            name="train.yaml",
            versions={"llamafactory": "0.9.3", "transformers": "4.51.3"},
            note="LLaMA-Factory's parser refuses a key none of its dataclasses has",
        ),
        Example(
            _LLAMAFACTORY + "learnig_rate: 1.0e-4\n",
            name="train.yaml",
            note="LLaMA-Factory's version not known: any release read, a warning",
        ),
        Example(
            _LLAMAFACTORY + "learning_rate: 1.0e-4\nlora_rnak: 8\n",
            name="train.yaml",
            versions={"llamafactory": "0.8.3", "transformers": "4.43.4"},
            note="before 0.9.2 the training arguments are transformers' Seq2SeqTrainingArguments",
        ),
        Example(
            _LLAMAFACTORY + _MEGATRON,
            name="train.yaml",
            versions={"llamafactory": "0.9.5", "transformers": "4.57.1"},
            launcher="llamafactory-cli train train.yaml",
            note="Megatron keys parse only under USE_MEGATRON_BRIDGE (or USE_MCA)",
        ),
        Example(
            _LLAMAFACTORY + _MEGATRON,
            name="train.yaml",
            versions={"llamafactory": "0.9.5", "transformers": "4.57.1"},
            note="no launch given: the launch's variables decide, a warning",
        ),
        Example(
            _LLAMAFACTORY + "learnig_rate: 1.0e-4\n",
            name="train.yaml",
            versions={"llamafactory": "0.9.3", "transformers": "4.51.3"},
            launcher="ALLOW_EXTRA_ARGS=1 llamafactory-cli train train.yaml",
            note="the parser lets the typo through and drops it: the default learning rate trains, a warning",
        ),
        Example(
            _ARGS + "args = TrainingArguments('out', learning_rat=2e-5)\nTrainer(model=model, args=args).train()\n",
            note="a typo: the fix names the field it misses, for review",
            fixed=(
                "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
                "args = TrainingArguments('out', learning_rate=2e-5)\n"
                "Trainer(model=model, args=args).train()\n"
            ),
        ),
    ],
    silent=[
        Example(
            _ARGS + "args = TrainingArguments('out', warmup_steps=0.1, bf16=True)\n"
            "Trainer(model=model, args=args).train()\n"
        ),
        Example(
            _ARGS + "args = TrainingArguments('out', warmup_ratio=0.1, bf16=True)\n"
            "Trainer(model=model, args=args).train()\n",
            versions={"transformers": "4.57.1"},
            note="4.x still has warmup_ratio",
        ),
        Example(
            "from dataclasses import dataclass, field\n"
            + _ARGS
            + "@dataclass\nclass MyArgs(TrainingArguments):\n    lora_r: int = field(default=8)\n"
            "args = MyArgs('out', lora_r=16, eval_strategy='steps')\nTrainer(model=model, args=args).train()\n",
            note="a subclass's own field and an inherited one",
        ),
        Example(
            _LLAMAFACTORY + "learning_rate: 1.0e-4\nlora_rank: 16\n",
            name="train.yaml",
            versions={"llamafactory": "0.9.3", "transformers": "4.51.3"},
        ),
        Example(
            _LLAMAFACTORY + "learning_rate: 1.0e-4\n",
            name="train.yaml",
            versions={"llamafactory": "0.8.3", "transformers": "4.43.4"},
            note="before 0.9.2 the training arguments are transformers' Seq2SeqTrainingArguments",
        ),
        Example(
            _LLAMAFACTORY + _MEGATRON,
            name="train.yaml",
            versions={"llamafactory": "0.9.6.dev0", "transformers": "4.57.1"},
            launcher="USE_MEGATRON_BRIDGE=1 llamafactory-cli train train.yaml",
            note="its git tree (past 0.9.5) reads USE_MEGATRON_BRIDGE: Megatron Bridge's arguments, not read",
        ),
        Example(
            _LLAMAFACTORY + "learning_rate: 1.0e-4\n",
            name="train.yaml",
            versions={"llamafactory": "0.9.3", "transformers": "4.51.3"},
            launcher="ALLOW_EXTRA_ARGS=1 llamafactory-cli train train.yaml",
            note="every key is a field: ALLOW_EXTRA_ARGS lets nothing through that would be dropped",
        ),
        Example(
            _LLAMAFACTORY + _MEGATRON,
            name="train.yaml",
            versions={"llamafactory": "0.9.4", "transformers": "4.55.0"},
            launcher="USE_MCA=1 llamafactory-cli train train.yaml",
            note="mcore_adapter's arguments, not read, may have any key",
        ),
    ],
)
def keyword_not_accepted(script: ScriptFacts, stack: StackFacts, launch: LaunchFacts, machine: MachineFacts):
    for call in script.of(*_PHASE):
        if not call.text.startswith("(parsed") and not _guarded(call):  # parsed arguments: judged below
            yield from _judge_call(call, script, stack)
    for parsed in script.parsed:
        yield from _judge_parsed(parsed, script, stack)
    recipe = _llamafactory_recipe(script, stack, launch, job_env(launch, machine))
    if recipe is not None and _words_refused_before_overrides(launch, stack):
        yield _words_after_the_recipe(launch, stack)
    elif recipe is not None:
        parsed, judged_with, extra_allowed = recipe
        if extra_allowed:  # the parser lets every key through: one no class has sets nothing
            yield from _judge_parsed(parsed, script, judged_with, ignored=_EXTRA_ARGS_IGNORED)
        else:  # with no launch given its variables are not known: USE_MCA / USE_MEGATRON_BRIDGE add classes
            unsure = "" if launch.known or not _llamafactory_reads(stack, "USE_MCA") else _LAUNCH_DECIDES
            yield from _judge_parsed(parsed, script, judged_with, unsure)


def _llamafactory_recipe(
    script: ScriptFacts, stack: StackFacts, launch: LaunchFacts, env: dict[str, str]
) -> tuple[ParsedArguments, StackFacts, bool] | None:
    """An LLaMA-Factory training recipe as `get_train_args` parses it (hparams/parser.py), with the stack to judge
    it by and whether the launch turns ALLOW_EXTRA_ARGS on: HfArgumentParser over its five dataclasses, refusing
    any key none has, or ignoring it under ALLOW_EXTRA_ARGS. USE_MCA swaps in mcore_adapter's arguments and
    USE_MEGATRON_BRIDGE adds MegatronBridgeArguments, which the doctor does not read: such a launch is not judged
    (mcore_adapter has `moe_aux_loss_coeff` beside LLaMA-Factory's `moe_aux_loss_coef`: a near miss is no typo
    there). Each variable counts where the release reads it. A recipe that sets neither `stage` nor `do_train` (an
    eval, chat or export config) or a launch of another subcommand is another parser's."""
    recipe = script.recipe
    if recipe is None or recipe.family != "LLaMA-Factory":
        return None
    if not ({"stage", "do_train"} & set(recipe.settings)) or _other_subcommand(launch):
        return None

    def on(name: str) -> bool:
        return llamafactory_env_enabled(env, name) and _llamafactory_reads(stack, name)

    if on("USE_MCA") or on("USE_MEGATRON_BRIDGE"):
        return None
    stack = _with_llamafactorys_transformers(stack)
    training = LLAMAFACTORY_TRAIN[2]
    classes = tuple(
        LLAMAFACTORY_TRAINING_BEFORE if cid == training and accepted(training, stack) is None else cid
        for cid in LLAMAFACTORY_TRAIN
    )
    keys = {key: value for key, value in recipe.settings.items() if "." not in key}
    first = min((v.location for v in keys.values() if v.location is not None), default=None, key=_line_order)
    return (
        ParsedArguments(
            parser="llamafactory.HfArgumentParser",
            method="parse_dict",
            location=first or Location(script.path, 1),
            classes=classes,
            keys=keys,
            source="recipe",
            via=f"llamafactory-cli train {script.path}",
        ),
        stack,
        on("ALLOW_EXTRA_ARGS"),
    )


# hparams/parser.py read_args: before 0.9.3 a recipe is read only when it is the one argument (`len(sys.argv) == 2`);
# from 0.9.3 the words after it are merged over it (OmegaConf.from_cli)
_OVERRIDES_FROM = "0.9.3"


def _words_refused_before_overrides(launch: LaunchFacts, stack: StackFacts) -> bool:
    """`llamafactory-cli train x.yaml key=value` on a release that takes no words after the recipe (each word a
    `key=value`: other shapes are parsed as options, which this does not follow)."""
    words = launch.script_args
    return (
        launch.launcher == "llamafactory-cli"
        and _llamafactory_known(stack)
        and not at_least(stack, "llamafactory", _OVERRIDES_FROM)
        and bool(words)
        and all("=" in w and not w.startswith("-") for w in words)
    )


def _words_after_the_recipe(launch: LaunchFacts, stack: StackFacts) -> Draft:
    """What argparse then meets first (checked by parsing with 0.9.2's dataclasses on transformers 4.49): fields it
    requires, and nothing given as an option: `model_name_or_path` before 0.9.0 (its default came in 0.9.0,
    with a check in ModelArguments.__post_init__), `output_dir` before transformers 4.49 (its default came then)."""
    version = stack.get("llamafactory").describe()
    required = [
        option
        for option, missing in (
            ("--model_name_or_path", not at_least(stack, "llamafactory", "0.9.0")),
            ("--output_dir", not at_least(stack, "transformers", "4.49")),
        )
        if missing
    ]
    error = (
        f"error: the following arguments are required: {', '.join(required)}"
        if required
        else "ValueError: Please provide `model_name_or_path`."
    )
    return Draft(
        f"`{' '.join(launch.script_args)}` after the recipe: {version} reads a recipe only when it is the one "
        f"argument, so every word goes to its command-line parser, the recipe's name included (words after it are "
        f"merged over it from {_OVERRIDES_FROM})",
        evidence=(
            Evidence(
                None,
                launch.command,
                "hparams/parser.py read_args: a recipe is read when it is the only argument",
                "launcher",
            ),
        ),
        error=error,
        phase="config",
        fix=Fix(
            f"write {', '.join(w.split('=', 1)[0] for w in launch.script_args)} in the recipe, or use LLaMA-Factory "
            f"{_OVERRIDES_FROM} or later",
            applicability=Applicability.DISPLAY,
        ),
    )


def _other_subcommand(launch: LaunchFacts) -> bool:
    """`llamafactory-cli eval|export|chat|api|webchat x.yaml` (or `python -m llamafactory.cli ...`)."""
    words = launch.command.split()
    for i, word in enumerate(words[:-1]):
        if word.rsplit("/", 1)[-1] in (*LLAMAFACTORY_CLIS, "llamafactory.cli"):
            return words[i + 1] != "train"
    return False


def _llamafactory_known(stack: StackFacts) -> bool:
    return parse_version(stack.get("llamafactory").version) is not None


def _llamafactory_reads(stack: StackFacts, variable: str) -> bool:
    """Whether the job's LLaMA-Factory reads a launch variable (an unknown version may)."""
    return not _llamafactory_known(stack) or at_least(stack, "llamafactory", LLAMAFACTORY_PARSER_VARIABLES[variable])


def _with_llamafactorys_transformers(stack: StackFacts) -> StackFacts:
    """The stack a fresh install gets: a known LLaMA-Factory release caps transformers (its METADATA's
    `transformers<=X`, the table's transformers_caps), which a range or an assumed version must respect."""
    cap = table().get("transformers_caps", {}).get(stack.get("llamafactory").version, "")
    have = stack.get("transformers")
    if not cap or have.source not in (VersionSource.DECLARED, VersionSource.ASSUMED):
        return stack
    if have.source == VersionSource.DECLARED and have.spec.startswith(("==", "===")):
        return stack
    if (parse_version(have.version) or (0,)) <= (parse_version(cap) or (0,)) and have.version:
        return stack
    lf = stack.get("llamafactory").version
    capped = PackageVersion(
        "transformers",
        cap,
        VersionSource.DECLARED,
        spec=f"{have.spec},<={cap}" if have.spec else f"<={cap}",
        origin=f"newest llamafactory {lf} allows",
    )
    return replace(stack, packages={**stack.packages, "transformers": capped})


def _line_order(location: Location) -> tuple[str, int]:
    return location.path, location.line
