"""The training setup a script builds, derived from its facts: which model is trained, in which
dtype, with which trainable parameters, under which mixed-precision mode.

One place answers these questions for every check, so two rules can never disagree about, say,
the weights' dtype. Everything here is a pure function of `Facts`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..knowledge import bf16_checks, dtypes
from ..knowledge.versions import at_least, native_model_key
from ..model.facts import (
    ABSENT,
    CONDITIONAL,
    KNOWN,
    AttributeSet,
    Call,
    CheckpointFacts,
    CheckpointSource,
    Facts,
    Location,
    MachineFacts,
    Origin,
    Predicate,
    RemoteClass,
    ScriptFacts,
    StackFacts,
    Value,
    VersionSource,
    builds_from_config,
    config_load_of,
    model_source,
)
from ..model.findings import Evidence
from ..model.util import record
from .checkpoint import checkpoint_of, describe_source
from .launch import Sharding

# from_pretrained / from_config take `dtype=` from 4.56 (PR #39782; `torch_dtype=` warns from then on); before, only
# `torch_dtype=`, and a `dtype=` reaches the model's __init__: TypeError
DTYPE_KEYWORD_FROM = "4.56"


# Scripts written for another device than a CUDA GPU: the target GPU's questions (bf16, memory) are not theirs.
_OTHER_DEVICE_IMPORTS = ("torch_xla", "intel_extension_for_pytorch")


def other_device(script: ScriptFacts) -> str:
    """The non-CUDA device a script is written for, from its imports ("" for none)."""
    for name in script.imports:
        if name.split(".", 1)[0] in _OTHER_DEVICE_IMPORTS:
            return "a TPU (torch_xla)" if name.startswith("torch_xla") else "an Intel CPU (intel_extension_for_pytorch)"
    return ""


# --- hardware predicates ----------------------------------------------------------------------


def evaluate(p: Predicate, machine: MachineFacts, stack: StackFacts) -> bool | None:
    """What a script's hardware check returns on the target machine; None when it is not known."""
    if not machine.known:
        return None
    gpu = machine.gpus[0] if machine.gpus else None
    if p.kind == "cuda_available":
        return gpu is not None
    if p.kind == "mps_available":
        return False
    if p.kind == "bf16_supported":
        return bf16_checks.answers(gpu, stack, p.asked, p.emulation)
    if p.kind == "capability_at_least":
        return gpu is not None and gpu.capability >= tuple(p.number)
    if p.kind == "gpu_count_at_least":
        return len(machine.gpus) >= p.number[0]
    parts = [evaluate(q, machine, stack) for q in p.parts]
    if p.kind == "not":
        return None if parts[0] is None else not parts[0]
    if None in parts:
        return None
    return all(parts) if p.kind == "all" else any(parts)


def decide(v: Value, machine: MachineFacts, stack: StackFacts) -> Value:
    """A hardware-dependent value decided against the target; unchanged when it cannot be."""
    if v.state != CONDITIONAL or v.predicate is None:
        return v
    answer = evaluate(v.predicate, machine, stack)
    if answer is None:
        return v
    branch = decide(v.if_true if answer else v.if_false, machine, stack)
    note = f"{v.predicate.text} is {answer} on {machine.describe()}"
    if v.predicate.kind == "bf16_supported" and answer and machine.gpus and not machine.gpus[0].native_bf16:
        note += " " + bf16_checks.emulated_note(v.predicate.asked)
    return replace(
        branch, origins=branch.origins + (Origin("profile", note, v.location),), location=branch.location or v.location
    )


# --- derived facts ----------------------------------------------------------------------------


@record
class Fact:
    """A derived value with the evidence behind it. value None means unknown, and `unknown` says why (or is
    empty where the question does not arise, e.g. the adapter dtype of a model without adapters); a known
    negative is a value (False, "no"), never None."""

    value: Any = None
    evidence: tuple[Evidence, ...] = ()
    source: Value | None = None  # the expression a fix would edit
    call: Call | None = None  # the call that holds it
    inferred: bool = False  # from a library default or an assumed version, not written in the script
    unknown: str = ""

    @property
    def known(self) -> bool:
        return self.value is not None


@record
class Checkpointing:
    on: bool = False
    reentrant: bool = False
    evidence: tuple[Evidence, ...] = ()
    # switched on through the model's gradient_checkpointing_enable() (the Trainer from its arguments, the script,
    # peft), not only by FSDP's own wrapper: "always" on every path to training, "maybe" only under a branch,
    # "asks" only where the script asks the model first, "caught" only in a try (derive.placement.how_enabled)
    through_model: str = ""
    # the model's own code decides reentrance (an old-format remote class): checkpointing keyword arguments are ignored
    by_model_code: bool = False
    # the Trainer switches it on from its arguments, calling the model's gradient_checkpointing_enable with keywords
    by_trainer: bool = False


@record
class Placement:
    device_map: str = "none"  # see derive.launch.device_map_kind
    trainer_wrap: str = "none"  # DataParallel | none | unknown, on the machine's visible GPUs
    exempts_4bit: bool = False  # Trainer skips DataParallel for 4-bit models
    exempts_4bit_source: str = ""
    dataparallel_crash_reasons: tuple[Evidence, ...] = ()  # why a DataParallel wrap breaks this model
    checkpointing: Checkpointing = Checkpointing()


@record
class Setup:
    path: str
    trains: bool
    style: str  # trainer | accelerate | loop | none
    trainer: Call | None = None
    training_args: Call | None = None
    trl: bool = False
    model_load: Call | None = None
    load_traced: bool = False  # the load was followed from the training entry (not the file's only load, guessed)
    followed: bool = False  # ... through the recorded calls themselves: `chain` is all that wraps it
    model_names: frozenset = frozenset()
    family: str = ""
    dtype_keyword: str = "dtype"  # what the load takes its dtype as on this transformers: see DTYPE_KEYWORD_FROM
    weights: Fact = Fact(unknown="no model load found")  # what training starts from: the load's, then any cast
    loaded: Fact = Fact(unknown="no model load found")  # the dtype the load itself gives, before any cast
    quantized: Fact = Fact(unknown="no model load found")
    peft: Fact = Fact(False)
    adapter_dtype: Fact = Fact()
    modules_to_save: Fact = Fact(())
    amp: Fact = Fact(unknown="no training found")
    fp16: Fact = Fact()
    bf16: Fact = Fact()
    accelerator: Call | None = None
    casts: tuple[Call, ...] = ()  # dtype casts of the trained model, in order
    optimizers: tuple[Call, ...] = ()
    scalers: tuple[Call, ...] = ()
    autocasts: tuple[Call, ...] = ()
    methods: tuple[Call, ...] = ()
    clips: tuple[Call, ...] = ()
    chain: tuple[Call, ...] = ()  # wrappers between the load and the training entry
    # the class the load builds from the checkpoint's own code (a RemoteClass); False for a library's own class
    model_class: Fact = Fact(False)
    # that class's own gradient_checkpointing_enable (RemoteClass.enable_keywords), whatever else is known of it
    own_enable: Fact = Fact(False)
    # the load will be refused: the checkpoint brings its own code, transformers has no class of its own for it,
    # and trust_remote_code is not given (value: the model type); False where none of that holds
    untrusted_code: Fact = Fact(False)
    placement: Placement = Placement()  # filled by derive.derive_setup
    sharding: Sharding = Sharding()  # DeepSpeed / FSDP, wherever set up: filled by derive.derive_setup

    @property
    def amp_from_launch(self) -> bool:
        """A Trainer's mixed precision that its flags do not ask for: the launch (or the environment) set it."""
        return (
            self.style == "trainer"
            and self.amp.value in ("fp16", "bf16", "fp8")
            and not (self.fp16.value or self.bf16.value)
        )

    def trainable_dtypes(self) -> Fact:
        """The dtypes of the parameters that receive gradients."""
        if not self.weights.known:
            return Fact(unknown=self.weights.unknown)
        if not self.peft.value and self.quantized.value:
            # no trainable weights: the Trainer refuses a quantized model without adapters (PD404)
            return Fact(unknown=f"the {self.quantized.value}-quantized model has no adapters to train")
        if not self.peft.value:
            return Fact((self.weights.value,), self.weights.evidence, inferred=self.weights.inferred)
        out = []
        if self.adapter_dtype.known:
            out.append(self.adapter_dtype.value)
        if self.modules_to_save.value:
            out.append(self.weights.value)
        return Fact(
            tuple(dict.fromkeys(out)),
            self.adapter_dtype.evidence + self.modules_to_save.evidence,
            inferred=self.adapter_dtype.inferred,
        )


def trainer_fsdp_config(args: Call, machine: MachineFacts, stack: StackFacts) -> tuple[dict, Value]:
    """The Trainer's `fsdp_config` as transformers 5.24 reads it, its `fsdp_` prefixes dropped
    (training_args.py:2775-2795), with the value it came from; {} when not a known mapping."""
    v = decide(args.kwarg("fsdp_config"), machine, stack)
    if v.state != KNOWN or not isinstance(v.value, dict):
        return {}, v
    return {(k[5:] if isinstance(k, str) and k.startswith("fsdp_") else k): x for k, x in v.value.items()}, v


def evidence_of(v: Value, note: str, fallback: Call | None = None) -> Evidence:
    """Evidence for a value: where the value itself is written, and its origin."""
    literal = v.origins[-1] if v.origins else Origin("code", v.text)
    loc = v.location or literal.location or (fallback.location if fallback else None)
    excerpt = v.text or (fallback.text if fallback else "")
    external = [o for o in v.origins if o.kind != "code"]
    for o in external:
        note = f"{note} ({o.detail})"
    kind = min((o.kind for o in external), key=_ORIGIN_PRIORITY.index, default="code")
    trail = tuple(
        f"{o.location}  {o.detail}"
        for o in v.origins
        if o.kind == "code"
        and o.location
        and o is not literal
        and (loc is None or (o.location.path, o.location.line) != (loc.path, loc.line))
    )
    return Evidence(loc, excerpt, note, kind, trail)


_ORIGIN_PRIORITY = (
    "script-arg",
    "launcher",
    "env",
    "env-default",
    "config-file",
    "accelerate-config",
    "profile",
    "default",
    "assumed",
    "code",
)


def call_evidence(c: Call, note: str) -> Evidence:
    return Evidence(c.location, c.text, note, "code")


# --- the derivation ---------------------------------------------------------------------------


def derive_setup(script: ScriptFacts, facts: Facts) -> Setup:
    machine, stack, launch = facts.machine, script.stack or facts.stack, facts.launch
    by_key = {c.key: c for c in script.calls}
    trainers = script.of("trainer")
    trainer = trainers[0] if trainers else None
    args_call = by_key.get(trainer.refs.get("args", "")) if trainer else None
    if trainer and args_call is None:
        args_call = next(iter(script.of("training_args")), None) if len(script.of("training_args")) == 1 else None
    optimizers = tuple(script.of("optimizer"))
    accelerators = script.of("accelerator")
    methods = tuple(script.of("method"))
    style = "trainer" if trainer else "accelerate" if accelerators else "loop" if optimizers else "none"
    trains = bool(trainer or optimizers or any(m.callee.endswith((".backward", ".step")) for m in methods))

    entry = _training_entry(trainer, optimizers, script)
    load, chain = _follow_model(entry, by_key)
    traced = followed = load is not None
    loads = script.of("model_load")
    if load is None and len(loads) > 1:  # `from_pretrained` in one branch, `from_config` (from scratch) in another
        loads = [c for c in loads if not builds_from_config(c)]
    if load is None and len(loads) == 1:
        load = loads[0]
    names = _prepared_names(_model_names(load, chain, trainer, optimizers) | _bound_results(load, script), script)
    traced = traced or (load is not None and load.target in _model_names(None, (), trainer, optimizers))
    # casts of the trained model: in the scopes that build it (a helper's own parameter is another object)
    scopes = {c.scope for c in ((load,) if load else ()) + chain + optimizers + ((trainer,) if trainer else ())}
    casts = tuple(
        c for c in script.calls if c.kind == "cast" and c.receiver in names and c.scope in scopes and dtype_of_cast(c)
    ) + tuple(c for c in chain if c.kind == "cast" and dtype_of_cast(c))
    casts = tuple(sorted({c.key: c for c in casts}.values(), key=lambda c: (c.location.path, c.location.line)))

    family = _family(load, script)
    weights = loaded = _weights(load, script, machine, stack)
    pre_training = _first_training_line(trainer, optimizers, script)
    built = min(((o.location.path, o.location.line) for o in optimizers), default=None)
    for c in casts:  # (one under a condition in the training loop is PD203's: it may first run after a step)
        where = (c.location.path, c.location.line)
        conditional_in_loop = c.in_loop and c.in_branch and built and where > built
        if pre_training is None or where < pre_training and not conditional_in_loop:
            d = dtype_of_cast(c)
            weights = Fact(d, weights.evidence + (call_evidence(c, f"model cast to {d}"),), source=None, call=c)
    # a checkpoint stored quantized wins over what the load passes (transformers keeps the checkpoint's config)
    quantized = _stored_quantization(load, script, by_key) or _quantization(load, by_key, machine, stack)
    peft, adapter_dtype, modules_to_save = _peft(script, chain, trainer, by_key, weights, stack, names)
    if peft.value and quantized.value in ("4bit", "8bit") and not (load and load.callee.startswith("unsloth.")):
        # (Unsloth patches TRL's trainers to cast them back to fp32 under fp16: unsloth PR #4005)
        adapter_dtype = _trl_casts_adapters(trainer, script, stack) or adapter_dtype
    amp, fp16, bf16 = _amp(style, args_call, accelerators, script, machine, stack, launch)
    trl = bool((trainer and trainer.callee.startswith("trl")) or (args_call and args_call.callee.startswith("trl")))
    remote = _remote_entry(load, script, machine, stack)  # (the class auto_map names, asked once)
    return Setup(
        path=script.path,
        trains=trains,
        style=style,
        trainer=trainer,
        training_args=args_call,
        trl=trl,
        model_load=load,
        load_traced=traced,
        followed=followed,
        model_names=frozenset(names),
        family=family,
        dtype_keyword="dtype" if at_least(stack, "transformers", DTYPE_KEYWORD_FROM) else "torch_dtype",
        weights=weights,
        loaded=loaded,
        quantized=quantized,
        peft=peft,
        adapter_dtype=adapter_dtype,
        modules_to_save=modules_to_save,
        amp=amp,
        fp16=fp16,
        bf16=bf16,
        accelerator=accelerators[0] if accelerators else None,
        casts=casts,
        optimizers=optimizers,
        scalers=tuple(script.of("grad_scaler")),
        autocasts=tuple(script.of("autocast")),
        methods=methods,
        clips=tuple(script.of("clip_grad")),
        chain=chain,
        model_class=_remote_class(remote, load, script, frozenset(names)),
        own_enable=_own_enable(remote, load),
        untrusted_code=_untrusted_code(remote, load, stack),
    )


def _training_entry(trainer: Call | None, optimizers: tuple[Call, ...], script: ScriptFacts) -> str:
    if trainer:
        return trainer.refs.get("model") or trainer.refs.get("0", "")
    for opt in optimizers:
        if "0" in opt.refs:
            return opt.refs["0"]
    for prep in script.of("prepare"):
        if "0" in prep.refs:
            return prep.refs["0"]
    return ""


def _follow_model(key: str, by_key: dict[str, Call]) -> tuple[Call | None, tuple[Call, ...]]:
    chain: list[Call] = []
    seen = set()
    while key and key in by_key and key not in seen:
        seen.add(key)
        c = by_key[key]
        if c.kind == "model_load":
            return c, tuple(reversed(chain))
        chain.append(c)
        if c.kind == "cast":
            key = c.refs.get("self", "")
        elif c.kind == "prepare":
            key = c.refs.get("0", "")
        else:
            key = c.refs.get("model") or c.refs.get("0", "")
    return None, tuple(reversed(chain))


def _model_names(
    load: Call | None, chain: tuple[Call, ...], trainer: Call | None, optimizers: tuple[Call, ...]
) -> set[str]:
    names: set[str] = set()
    for c in ((load,) if load else ()) + chain:
        for t in c.target.split(","):
            if t:
                names.add(t)
    if trainer:
        v = trainer.kwargs.get("model") or (trainer.args[0] if trainer.args else None)
        if v is not None and v.text.isidentifier():
            names.add(v.text)
    for opt in optimizers:
        if opt.args and opt.args[0].text.endswith(".parameters()"):
            names.add(opt.args[0].text[: -len(".parameters()")])
    if load and not names and load.target:
        names.add(load.target)
    return names


def _bound_results(load: Call | None, script: ScriptFacts) -> set[str]:
    """A load in a helper of the script (`def build_model(args): return AutoModel.from_pretrained(...)`) called once:
    the name its call binds, directly or through a cast of the result (`model = build_model(args).to(device)`). A
    call that unpacks several names is left out: which one is the model is not known."""
    if load is None or load.scope == "<module>":
        return set()
    helper = load.scope.rsplit(".", 1)[-1]
    calls = {
        c.key: c for c in script.calls if c.kind in ("local_call", "flow") and c.callee.rsplit(".", 1)[-1] == helper
    }
    if len(calls) != 1:  # called for a student and a teacher: which result is trained is not known
        return set()
    bound = list(calls.values()) + [c for c in script.calls if c.kind == "cast" and c.refs.get("self") in calls]
    return {c.target for c in bound if c.target and "," not in c.target}


def dtype_of_cast(c: Call) -> str | None:
    method = c.callee.rsplit(".", 1)[-1]
    if method in ("half",):
        return dtypes.FLOAT16
    if method == "bfloat16":
        return dtypes.BFLOAT16
    if method == "float":
        return dtypes.FLOAT32
    if method == "to":
        for v in list(c.args) + [c.kwargs[k] for k in ("dtype",) if k in c.kwargs]:
            if v.state == KNOWN:
                d = dtypes.from_string(v.value)
                if d and d != dtypes.AUTO and isinstance(v.value, str) and v.value.startswith("torch."):
                    return d
    return None


def _family(load: Call | None, script: ScriptFacts) -> str:
    if load is None:
        return ""
    source = model_source(load, script.calls)
    if source.state == KNOWN and isinstance(source.value, str):
        cfg = script.local_configs.get(source.value)
        if cfg and cfg.get("model_type"):
            return str(cfg["model_type"])
        checkpoint = checkpoint_of(load, script)
        return checkpoint.model_type if checkpoint and checkpoint.model_type else source.value.lower()
    return ""


def load_dtype_value(load: Call, dtype_keyword: bool = True) -> tuple[str, Value]:
    """The dtype argument as written (`dtype=` and `torch_dtype=` are one setting; `dtype_keyword=False`: a release
    before DTYPE_KEYWORD_FROM, where only `torch_dtype` is)."""
    for name in ("dtype", "torch_dtype") if dtype_keyword else ("torch_dtype",):
        if name in load.kwargs:
            return name, load.kwargs[name]
    return "", Value(state=ABSENT)


def _weights(load: Call | None, script: ScriptFacts, machine: MachineFacts, stack: StackFacts) -> Fact:
    if load is None:
        return Fact(unknown="the trained model's from_pretrained call was not found")
    name, raw = load_dtype_value(load)
    v = decide(raw, machine, stack)
    if (v.state == ABSENT or v.is_(None)) and builds_from_config(load):
        return _config_dtype(load, script, machine, stack)
    if v.state == ABSENT or v.is_(None):  # dtype=None is the library default
        if at_least(stack, "transformers", "5.0"):
            return _checkpoint_dtype(
                load,
                script,
                stack,
                Evidence(
                    load.location,
                    load.text,
                    f"no dtype passed: transformers {stack.get('transformers').version} loads the checkpoint's dtype",
                    "default",
                ),
                inferred=True,
            )
        return Fact(
            dtypes.FLOAT32,
            (Evidence(load.location, load.text, "no dtype passed: transformers < 5 loads float32", "default"),),
            call=load,
            inferred=True,
        )
    if v.state != KNOWN:
        return _undecided(name, v, load)
    d = dtypes.from_string(v.value)
    if d == dtypes.AUTO:
        return _checkpoint_dtype(
            load, script, stack, evidence_of(v, f"{name}='auto': the checkpoint's dtype", load), inferred=False
        )
    if d is None:
        return Fact(unknown=f"{name}={v.text} is not a dtype the doctor knows", call=load, source=v)
    return Fact(d, (evidence_of(v, f"weights loaded in {d}", load),), source=v, call=load)


# `from_config` with no dtype builds in the config's dtype, which AutoConfig.from_pretrained fills from config.json:
# `_from_config` pops `torch_dtype` with `config.torch_dtype` as its default from 4.49.0 (modeling_utils.py:1461),
# `dtype` with `config.dtype` from 4.56 (5.24 modeling_utils.py:1402). Through 4.48.3 it popped
# `torch.get_default_dtype()` (modeling_utils.py:1414): float32. The constructor, `LlamaForCausalLM(config)`, never
# reads the config's dtype.
FROM_CONFIG_TAKES_CONFIG_DTYPE = "4.49"


def _config_dtype(load: Call, script: ScriptFacts, machine: MachineFacts, stack: StackFacts) -> Fact:
    """The weights of `from_config(config)` with no dtype: the config's dtype, as its config load gives it."""
    if not at_least(stack, "transformers", FROM_CONFIG_TAKES_CONFIG_DTYPE):
        return Fact(
            dtypes.FLOAT32,
            (
                Evidence(
                    load.location,
                    load.text,
                    f"no dtype passed: from_config on transformers "
                    f"< {FROM_CONFIG_TAKES_CONFIG_DTYPE} builds in float32",
                    "default",
                ),
            ),
            call=load,
            inferred=True,
        )
    config = config_load_of(load, script.calls)
    if config is None:
        return Fact(
            unknown="from_config builds in its config's dtype, and the config is not read from a checkpoint "
            "the script names",
            call=load,
        )
    # AutoConfig.from_pretrained(id, torch_dtype=...) (or config.torch_dtype = ...) sets the config's dtype; `dtype`
    # only from 4.56, where the config has that attribute (before, it is kept aside and from_config never reads it)
    name, raw = load_dtype_value(config, at_least(stack, "transformers", DTYPE_KEYWORD_FROM))
    v = decide(raw, machine, stack)
    if v.state == KNOWN and v.value is not None:
        d = dtypes.from_string(v.value)
        if d and d != dtypes.AUTO:
            return Fact(
                d, (evidence_of(v, f"config dtype {d}: from_config builds in it", config),), source=v, call=load
            )
    elif v.state != ABSENT and not v.is_(None):
        return _undecided(name, v, config)
    return _checkpoint_dtype(
        load,
        script,
        stack,
        Evidence(
            load.location,
            load.text,
            f"no dtype passed: from_config on transformers {stack.get('transformers').version} "
            f"builds in the config's dtype, read from the checkpoint at line {config.location.line}",
            "default",
        ),
        inferred=True,
    )


def _checkpoint_dtype(load: Call, script: ScriptFacts, stack: StackFacts, ev: Evidence, inferred: bool) -> Fact:
    source = model_source(load, script.calls)
    cfg = script.local_configs.get(source.value) if source.state == KNOWN else None
    d = dtypes.from_string((cfg or {}).get("dtype") or (cfg or {}).get("torch_dtype"))
    if d and d != dtypes.AUTO:
        return Fact(
            d,
            (ev, Evidence(None, cfg.get("path", "config.json"), f"checkpoint dtype {d}", "code")),
            call=load,
            inferred=inferred,
        )
    checkpoint = checkpoint_of(load, script)  # the Hugging Face cache, else the doctor's table
    if checkpoint and checkpoint.torch_dtype:
        d = checkpoint.torch_dtype
        return Fact(
            d,
            (ev, checkpoint_says(checkpoint, f"checkpoint dtype {d}")),
            call=load,
            inferred=inferred or checkpoint.source != CheckpointSource.LOCAL,
        )
    what = f"'{source.value}'" if source.state == KNOWN else source.text
    return Fact(
        unknown=f"the weights take the checkpoint's dtype, which is not known for {what}",
        call=load,
        evidence=(ev,),
        inferred=inferred,
    )


def _quantization(load: Call | None, by_key: dict[str, Call], machine: MachineFacts, stack: StackFacts) -> Fact:
    """ "4bit" / "8bit", False when the load is not quantized, unknown (value None, with the reason) otherwise."""
    if load is None:
        return Fact(unknown="the trained model's from_pretrained call was not found")
    for flag, bits in (("load_in_4bit", "4bit"), ("load_in_8bit", "8bit")):
        v = decide(load.kwarg(flag), machine, stack)
        if v.is_(True):
            return Fact(bits, (evidence_of(v, f"{flag}=True", load),), call=load)
    qc = load.refs.get("quantization_config")
    if qc and qc in by_key:
        cfg = by_key[qc]
        for flag, bits in (("load_in_4bit", "4bit"), ("load_in_8bit", "8bit")):
            v = decide(cfg.kwarg(flag), machine, stack)
            if v.is_(True):
                return Fact(bits, (call_evidence(cfg, f"BitsAndBytesConfig({flag}=True)"),), call=cfg)
    if load.kwarg("quantization_config").state not in (ABSENT,) and not qc:
        return Fact(unknown="quantization_config cannot be followed", call=load)
    return Fact(False, call=load)


DEQUANTIZABLE = ("fp8", "mxfp4")  # FineGrainedFP8Config / Mxfp4Config(dequantize=True)


def _stored_quantization(load: Call | None, script: ScriptFacts, by_key: dict[str, Call]) -> Fact | None:
    """A checkpoint stored quantized (its config.json's quantization_config: GPTQ, AWQ, FP8, a saved bitsandbytes
    model) loads quantized: the value is its quant_method ("gptq"; "4bit" / "8bit" for bitsandbytes). A
    quantization_config the load passes does not undo it: transformers keeps the checkpoint's and merges only the
    given one's loading attributes (quantizers/auto.py merge_quantization_configs), so only FP8's and MXFP4's
    `dequantize=True` loads the weights unquantized."""
    if load is None:
        return None
    checkpoint = checkpoint_of(load, script)
    if checkpoint is None or not checkpoint.quantization:
        return None
    if checkpoint.quantization in DEQUANTIZABLE and load.kwarg("quantization_config").state != ABSENT:
        given = by_key.get(load.refs.get("quantization_config", ""))
        dequantize = given.kwarg("dequantize") if given is not None else None
        if dequantize is None or (dequantize.state != ABSENT and not dequantize.is_(False)):
            return None  # dequantize=True, or not known: the load's own config decides
    return Fact(checkpoint.quantization, (stored_quantization_says(checkpoint),), call=load)


def stored_quantization_says(checkpoint: CheckpointFacts) -> Evidence:
    return checkpoint_says(checkpoint, f"stored {checkpoint.quantization}-quantized (quantization_config)")


_RemoteEntry = tuple[str, Value, CheckpointFacts | None, RemoteClass | None]


def _remote_entry(
    load: Call | None, script: ScriptFacts, machine: MachineFacts, stack: StackFacts
) -> _RemoteEntry | None:
    """For a load through an Auto class: that class, trust_remote_code as decided, the checkpoint as found, and the
    class its `auto_map` names for that Auto class (None where it names none); None for any other load."""
    if load is None:
        return None
    auto_class = load.callee.rpartition(".")[0].rpartition(".")[2]
    if not auto_class.startswith("Auto"):
        return None  # a named class is transformers' own (or the script's)
    checkpoint = checkpoint_of(load, script)
    classes = checkpoint.remote_classes if checkpoint is not None else ()
    found = next((c for c in classes if c.auto_class == auto_class), None)
    return auto_class, decide(load.kwarg("trust_remote_code"), machine, stack), checkpoint, found


def _own_enable(entry: _RemoteEntry | None, load: Call | None) -> Fact:
    """The checkpoint's own class where it overrides gradient_checkpointing_enable: the keywords that method takes
    decide a call to it before its body runs, whether or not the rest of its checkpointing is read."""
    if entry is None or load is None:
        return Fact(False)
    _, trust, _, found = entry
    if not (trust.state == KNOWN and trust.value) or found is None or found.enable_keywords is None:
        return Fact(False)
    return Fact(found, (evidence_of(trust, "trust_remote_code=True: the checkpoint's own model code", load),))


def _remote_class(entry: _RemoteEntry | None, load: Call | None, script: ScriptFacts, names: frozenset) -> Fact:
    """The checkpoint's own model class, where an Auto class loads it with trust_remote_code=True: transformers
    takes the class `auto_map` names for that Auto class over its own (auto_factory.py:380-391 in 5.24,
    `has_remote_code and trust_remote_code`; the same test since 4.x)."""
    if entry is None or load is None:
        return Fact(False)
    auto_class, trust, checkpoint, found = entry
    if trust.state == ABSENT or (trust.state == KNOWN and not trust.value):
        return Fact(False)
    if checkpoint is None:
        return Fact(
            unknown="trust_remote_code=True, and the checkpoint's config.json (whose auto_map names its own model "
            "code) is not on this machine",
            source=trust,
            call=load,
        )
    if found is None:
        # no auto_map entry for this Auto class: transformers' own class (the table holds only such checkpoints)
        return Fact(False)
    if not found.checkpointing:
        return Fact(unknown=f"{found.name} is the checkpoint's own code, and {found.reason}", source=trust, call=load)
    if found.checkpointing == "yes" and found.module_flags is None:
        return Fact(
            unknown=f"whether a module of {found.name} (the checkpoint's own code) has the gradient_checkpointing "
            "flag transformers switches is not known: the code imports model code the doctor does not read",
            source=trust,
            call=load,
        )
    at = Location(found.answer_path, found.answer_line) if found.answer_line else None
    evidence = (
        evidence_of(trust, "trust_remote_code=True: the checkpoint's own model code", load),
        Evidence(at, found.answer_text, _says(found, auto_class), "code"),
    )
    patches = [a for a in script.attribute_sets if a.name == "supports_gradient_checkpointing"]
    patches = [a for a in patches if _on_the_model(script, load, names, a) and _takes_effect(script, a)]
    if patches and found.checkpointing in ("no", "yes"):
        # the script sets the flag itself (the workaround for the error): on the instance or the class, it is what
        # gradient_checkpointing_enable() reads
        if not all(a.value.state == KNOWN and isinstance(a.value.value, bool) for a in patches):
            where = patches[0].value.location
            line = f" (line {where.line})" if where else ""
            return Fact(
                unknown=f"the script sets supports_gradient_checkpointing{line}", source=patches[0].value, call=load
            )
        last = patches[-1]  # (in source order: the last one set before training)
        if last.conditional and last.value.value and found.checkpointing == "no":
            # set only where the run takes a condition: the job dies where it does not
            found = replace(found, workaround_conditional=True)
        else:
            found = replace(found, checkpointing="yes" if last.value.value else "no")
        said = f"supports_gradient_checkpointing = {last.value.value}, set by the script"
        evidence += (evidence_of(last.value, said + (" under a condition" if last.conditional else ""), load),)
    return Fact(found, evidence, source=trust, call=load)


# the calls whose result is no model: a flag set on what they return is not the model's
_NOT_MODELS = ("config_load", "trainer", "training_args", "bnb_config", "peft_config", "accelerator", "optimizer")


def _on_the_model(script: ScriptFacts, load: Call, names: frozenset, a: AttributeSet) -> bool:
    """Whether a flag set through this name reaches the trained model: not a second model the script loads, not
    a config or Trainer it builds (a helper's parameter, or a class patched before the load, may well be the
    model's); through `trainer.model` / `self.model` only where peft does not wrap the model (the Trainer then holds
    peft's wrapper, which keeps the attribute on itself)."""
    if a.held:
        wraps = [c for c in script.calls if c.kind in ("get_peft_model", "peft_load")]
        # `peft_model.model` is the model peft wraps (forwarded to base_model.model); `trainer.model` the wrapper
        return not wraps or any(c.target == a.owner for c in wraps)
    others = {c.target for c in script.of("model_load") if c is not load and c.target} - names
    not_models = {c.target for c in script.calls if c.kind in _NOT_MODELS and c.target} - names
    return a.owner not in others and a.owner not in not_models


def _takes_effect(script: ScriptFacts, a: AttributeSet) -> bool:
    """Whether the model reads this `supports_gradient_checkpointing` when checkpointing is switched on: not when
    a training or enable call on every path sits above it in its scope (too late), or above every call of the
    function it is set in; not when the name holds peft's wrapper there (PeftModel keeps the attribute on itself;
    the call is forwarded to the base model, which reads its own class's); not on an instance the name no longer
    holds when training starts (the model loaded again)."""
    where = a.value.location
    if where is None:
        return True
    if _too_late(script, a.scope, where):
        return False
    helper_calls = [c for c in script.of("local_call") if c.callee == a.scope]
    if helper_calls and all(_too_late(script, c.scope, c.location) for c in helper_calls):
        return False
    if a.inner or a.held:
        return True
    same = [c for c in script.calls if c.scope == a.scope and c.location.path == where.path]
    above = [c for c in same if c.location.line < where.line]
    bound = [c for c in above if c.target == a.owner and c.kind in ("model_load", "get_peft_model", "peft_load")]
    if bound and bound[-1].kind != "model_load":
        return False  # (`type(wrapper)` is PeftModel's class)
    if a.on_class:
        return True  # (a model loaded again is of the same class)
    starts = min(
        (c.location.line for c in same if c.kind in ("train", "gc_enable") and c.location.line > where.line),
        default=None,
    )
    reloaded = [
        c
        for c in same
        if c.kind == "model_load"
        and c.target == a.owner
        and c.location.line > where.line
        and (starts is None or c.location.line < starts)
    ]
    return not reloaded


def _too_late(script: ScriptFacts, scope: str, where: Location) -> bool:
    """A training or enable call on every path sits above this line in its scope."""
    return any(
        c.kind in ("train", "gc_enable") and not c.branches and c.location.line < where.line
        for c in script.calls
        if c.scope == scope and c.location.path == where.path
    )


def _untrusted_code(entry: _RemoteEntry | None, load: Call | None, stack: StackFacts) -> Fact:
    """transformers refuses a checkpoint whose auto_map names its own class for the Auto class used, when it has no
    class of its own for the model type and trust_remote_code is not true (dynamic_module_utils.py
    resolve_trust_remote_code, auto_factory.py:358-375 in 5.24: `has_remote_code and not has_local_code and not
    trust_remote_code`; with it unset, a terminal is asked for 15 s first, a job without one dies)."""
    if entry is None or load is None:
        return Fact(False)
    auto_class, trust, checkpoint, found = entry
    trusted = trust.state == KNOWN and trust.value
    if trusted or trust.state not in (KNOWN, ABSENT) or checkpoint is None or found is None:
        return Fact(False)
    if not checkpoint.model_type:
        return Fact(False)  # (the mapping is asked by model type)
    native = stack.behaviours.get(native_model_key(auto_class, checkpoint.model_type))
    if native is None:
        return Fact(
            unknown=f"whether transformers {stack.get('transformers').version} has a class of its own for model type "
            f"{checkpoint.model_type!r} is not known here (it is not installed where the doctor looks)",
            source=trust if trust.state == KNOWN else None,
            call=load,
        )
    if native.value:
        return Fact(False)
    written = "trust_remote_code=False" if trust.state == KNOWN else "no trust_remote_code"
    return Fact(
        checkpoint.model_type,
        (
            call_evidence(load, f"{auto_class} with {written}"),
            checkpoint_says(checkpoint, f"auto_map names its own {found.name} for {auto_class}"),
            Evidence(
                None, native.evidence, f"no {auto_class} class for model type {checkpoint.model_type!r}", "default"
            ),
        ),
        source=trust if trust.state == KNOWN else None,
        call=load,
    )


def _says(found: RemoteClass, auto_class: str) -> str:
    """What the line read from the checkpoint's code tells."""
    named = f"{found.name} ({auto_class} in its auto_map)"
    if found.checkpointing == "no" and "supports_gradient_checkpointing" not in found.answer_text:
        return f"{named}: neither it nor its bases set supports_gradient_checkpointing (PreTrainedModel: False)"
    if found.checkpointing == "old":
        return f"{named}: enables checkpointing the pre-4.35 way, ignoring its keyword arguments"
    if found.checkpointing == "yes" and found.module_flags is False:
        return f"{named}: supports it, but no module of its code has a gradient_checkpointing flag to switch"
    return named


def checkpoint_says(checkpoint: CheckpointFacts, what: str) -> Evidence:
    """Evidence read from the checkpoint's config: a local file's lines are code, the cache's or the table's a
    default the job inherits."""
    return Evidence(
        None,
        checkpoint.detail,
        f"{what}: {describe_source(checkpoint)}",
        "code" if checkpoint.source == CheckpointSource.LOCAL else "default",
    )


def _trainable_cast(script: ScriptFacts, attach: Call, names) -> Fact | None:
    """diffusers' `cast_training_params(model, dtype=torch.float32)` after the adapters are attached: the trainable
    parameters (the adapters) in that dtype, the frozen base left as it is."""
    for c in script.of("cast_trainable"):
        target = c.args[0].text if c.args else c.kwarg("model").text
        if target not in names or (c.location.path, c.location.line) < (attach.location.path, attach.location.line):
            continue
        v = c.kwarg("dtype")
        d = dtypes.FLOAT32 if v.state == ABSENT else dtypes.from_string(v.value) if v.state == KNOWN else None
        if d:
            return Fact(d, (call_evidence(c, f"trainable parameters cast to {d}"),), call=c)
    return None


def _merged_before_training(script: ScriptFacts, wrapper: Call | None, trainer: Call | None, names) -> Call | None:
    """peft's `merge_and_unload()` / `unload()` on the trained model after its adapters were attached and before
    the trainer is built (same file, in that order): the model handed on is the base without adapters."""
    if wrapper is None or trainer is None or wrapper.kind == "training_args":
        return None
    for c in script.of("merge_adapters"):
        same_file = c.location.path == wrapper.location.path == trainer.location.path
        if (
            same_file
            and wrapper.location.line <= c.location.line < trainer.location.line
            and (c.target in names or c.receiver in names or c.receiver == wrapper.target)
        ):
            return c
    return None


def _peft(
    script: ScriptFacts,
    chain: tuple[Call, ...],
    trainer: Call | None,
    by_key: dict[str, Call],
    weights: Fact,
    stack: StackFacts,
    names: set[str] | frozenset[str] = frozenset(),
) -> tuple[Fact, Fact, Fact]:
    # a wrapper on a branch the code never takes attaches nothing (`if use_lora:` with False at every call)
    wrappers = [c for c in chain if c.kind in ("get_peft_model", "peft_load") and not c.never_runs]
    if not wrappers:  # the file's one get_peft_model: it injects the adapters into the model it is given, in place
        live = [c for c in script.of("get_peft_model") if not c.never_runs]
        wrappers = live if len(live) == 1 else []
    if not wrappers:
        wrappers = [c for c in script.of("add_adapter") if c.receiver in names and not c.never_runs]
    config_call = None
    peft = Fact(False)
    if wrappers:
        w = wrappers[-1]
        if w.kind == "peft_load" and not w.kwarg("is_trainable").is_(True):
            return Fact(False, (call_evidence(w, "adapters loaded frozen (is_trainable not set)"),)), Fact(), Fact(())
        peft = Fact(True, (call_evidence(w, "LoRA adapters attached"),), call=w)
        config_call = adapter_config(w, by_key)
    elif trainer and trainer.kwarg("peft_config").state not in (ABSENT,) and not trainer.kwarg("peft_config").is_(None):
        peft = Fact(
            True,
            (evidence_of(trainer.kwarg("peft_config"), "adapters attached by the trainer", trainer),),
            call=trainer,
        )
        config_call = adapter_config(trainer, by_key)
    if not peft.value:
        return peft, Fact(), Fact(())
    merged = _merged_before_training(script, peft.call, trainer, names)
    if merged is not None:  # the base the Trainer gets has its adapters folded in and removed: nothing to train
        return (
            Fact(
                False,
                (call_evidence(merged, f"{merged.callee.rsplit('.', 1)[-1]}() removes the adapters"),),
                call=merged,
            ),
            Fact(),
            Fact(()),
        )
    w = peft.call
    peft_version = stack.get("peft")
    opt_out = w.kwarg("autocast_adapter_dtype") if w.kind in ("get_peft_model", "peft_load") else Value(state=ABSENT)
    upcast = _trainable_cast(script, w, names)
    if upcast is not None:
        adapter = upcast
    elif w.kind == "add_adapter":  # inject_adapter_in_model has no autocast: adapters take the base's dtype
        adapter = Fact(
            weights.value, (call_evidence(w, "add_adapter creates adapters in the base dtype"),), call=w, inferred=True
        )
    elif opt_out.is_(False):
        adapter = Fact(weights.value, (evidence_of(opt_out, "adapters kept in the base dtype", w),), call=w)
    elif at_least(stack, "peft", "0.12"):
        adapter = Fact(
            dtypes.FLOAT32,
            (
                Evidence(
                    w.location,
                    w.text,
                    f"peft {peft_version.version} ({peft_version.source}) creates LoRA adapters in float32",
                    peft_version.source,
                ),
            ),
            call=w,
            inferred=True,
        )
    else:
        adapter = Fact(
            weights.value,
            (
                Evidence(
                    w.location,
                    w.text,
                    f"peft {peft_version.version} < 0.12 keeps adapters in the base dtype",
                    peft_version.source,
                ),
            ),
            call=w,
            inferred=True,
        )
    modules = Fact(())
    if config_call is not None:
        v = config_call.kwarg("modules_to_save")
        if v.state == KNOWN and v.value:
            modules = Fact(
                tuple(v.value),
                (evidence_of(v, "modules_to_save copies stay in the base dtype", config_call),),
                call=config_call,
                source=v,
            )
    return peft, adapter, modules


def adapter_config(attach: Call | None, by_key: dict[str, Call]) -> Call | None:
    """The peft config (LoraConfig ...) the call that attaches adapters is given: get_peft_model's second argument,
    add_adapter's first, a trainer's `peft_config=`; None where it is not a config call the script makes."""
    if attach is None:
        return None
    if attach.kind == "trainer":
        key = attach.refs.get("peft_config", "")
    else:
        key = attach.refs.get("0" if attach.kind == "add_adapter" else "1") or attach.refs.get("peft_config", "")
    return by_key.get(key) if key else None


# TRL's trainers cast every trainable parameter of a 4- or 8-bit model to bfloat16 when they are built, whatever
# fp16/bf16 say (1.16 trl/trainer/sft_trainer.py:908-911, PR #4577): SFT, GRPO and reward from 0.26.0, RLOO from
# 0.27.0, DPO from 0.29.0, KTO from 1.4.0, Distillation in every release read from 1.10.0 (1.16
# distillation_trainer.py:376). Before, only norms and embeddings were cast, under bf16=True (4-bit).
TRL_CASTS_QUANTIZED_ADAPTERS = {
    "SFTTrainer": "0.26",
    "GRPOTrainer": "0.26",
    "RewardTrainer": "0.26",
    "RLOOTrainer": "0.27",
    "DPOTrainer": "0.29",
    "KTOTrainer": "1.4",
    "DistillationTrainer": "1.10",
}  # (Distillation: read from 1.10 on)


def _trl_casts_adapters(trainer: Call | None, script: ScriptFacts, stack: StackFacts) -> Fact | None:
    """The adapters' dtype after a TRL trainer that casts them is built (a quantized model's), or None: also when
    the script casts them back after building it (`for p in trainer.model.parameters(): p.data = p.data.float()`,
    or peft's cast_mixed_precision_params)."""
    since = TRL_CASTS_QUANTIZED_ADAPTERS.get(trainer.callee.rsplit(".", 1)[-1], "") if trainer else ""
    if not since or not trainer.callee.startswith("trl") or not at_least(stack, "trl", since):
        return None
    built = (trainer.location.path, trainer.location.line)
    if any(
        (c.location.path, c.location.line) > built
        and (c.kind == "cast_mixed" or (c.receiver.endswith(".data") and dtype_of_cast(c) == dtypes.FLOAT32))
        for c in script.of("cast", "cast_mixed")
    ):
        return None
    trl = stack.get("trl")
    return Fact(
        dtypes.BFLOAT16,
        (
            call_evidence(
                trainer,
                f"trl {trl.version} ({trl.source}) casts a quantized model's "
                f"trainable parameters to bfloat16 (from {since})",
            ),
        ),
        call=trainer,
        inferred=trl.source == VersionSource.ASSUMED,
    )


def _amp(
    style: str,
    args_call: Call | None,
    accelerators: list[Call],
    script: ScriptFacts,
    machine: MachineFacts,
    stack: StackFacts,
    launch,
) -> tuple[Fact, Fact, Fact]:
    if style == "trainer":
        if args_call is None:
            return Fact(unknown="the Trainer's args= cannot be followed"), Fact(), Fact()
        trl = args_call.callee.startswith("trl")
        fp16 = _flag(args_call, "fp16", False, machine, stack)
        if trl and args_call.kwarg("bf16").state == ABSENT:
            bf16 = Fact(
                None if fp16.value is None else not fp16.value,
                (
                    Evidence(
                        args_call.location, args_call.text, "bf16 unset: TRL turns it on when fp16 is off", "default"
                    ),
                ),
                call=args_call,
                inferred=True,
                unknown=fp16.unknown,
            )
        else:
            bf16 = _flag(args_call, "bf16", False, machine, stack)
        if not fp16.known or not bf16.known:
            return Fact(unknown=fp16.unknown or bf16.unknown), fp16, bf16
        if fp16.value and bf16.value:  # the arguments never construct (PD209): no mode to reason about
            return Fact(unknown="fp16 and bf16 are both on"), fp16, bf16
        fp8 = decide(args_call.kwarg("fp8"), machine, stack)
        if fp8.is_(True):  # a recipe tool's own argument: it builds the Accelerator with mixed_precision="fp8"
            return (
                Fact("fp8", (evidence_of(fp8, "fp8=True: Accelerator(mixed_precision='fp8')", args_call),)),
                fp16,
                bf16,
            )
        mode = "fp16" if fp16.value else "bf16" if bf16.value else "no"
        ev = fp16.evidence if fp16.value else bf16.evidence if bf16.value else fp16.evidence + bf16.evidence
        # (a deepspeed= config of its own: transformers fills its "auto" precision from the flags before accelerate
        # sees the launch's, and accelerate only fills "auto")
        launched = (
            launch_precision(machine, launch, config_without_launcher=False)
            if mode == "no"
            and at_least(stack, "transformers", TRAINER_READS_LAUNCH_PRECISION)
            and args_call.kwarg("deepspeed").state == ABSENT
            else None
        )
        if launched is not None and launched.value != "no":  # TrainingArguments hands accelerate what the launch set
            return Fact(launched.value, ev + launched.evidence, call=args_call, inferred=launched.inferred), fp16, bf16
        return Fact(mode, ev, call=args_call, inferred=fp16.inferred and bf16.inferred), fp16, bf16
    if style == "accelerate":
        return accelerate_precision(accelerators[0], machine, stack, launch), Fact(), Fact()
    scalers = [s for s in script.of("grad_scaler") if not decide(s.kwarg("enabled"), machine, stack).is_(False)]
    if scalers:
        return (
            Fact("fp16", (call_evidence(scalers[0], "GradScaler: fp16 loss scaling"),), call=scalers[0]),
            Fact(),
            Fact(),
        )
    autocasts = script.of("autocast")
    if autocasts:
        return Fact("autocast", tuple(call_evidence(a, "autocast") for a in autocasts[:1])), Fact(), Fact()
    return Fact("no", (), inferred=True), Fact(), Fact()


# TrainingArguments with neither fp16 nor bf16 set (an explicit False included) hands accelerate
# ACCELERATE_MIXED_PRECISION, which `accelerate launch` sets from its flag or config. Since transformers 4.30.0
# (PR #23148: training_args.py:1607-1614 writes it back, trainer.py:3956 builds Accelerator() without
# mixed_precision); 5.x reads it into args.mixed_precision (5.24 training_args.py:1614) and passes it
# (trainer.py:744). Before 4.30 Trainer made no Accelerator and read only its flags.
TRAINER_READS_LAUNCH_PRECISION = "4.30"


def accelerate_precision(acc: Call, machine: MachineFacts, stack: StackFacts, launch) -> Fact:
    """Accelerator's effective mixed precision, resolved as accelerate does: the argument, else
    ACCELERATE_MIXED_PRECISION, which `accelerate launch` sets from its flag, else from its config file."""
    v = decide(acc.kwarg("mixed_precision"), machine, stack)
    if v.state == KNOWN:
        return Fact(
            str(v.value), (evidence_of(v, f"Accelerator(mixed_precision={v.value!r})", acc),), call=acc, source=v
        )
    if v.state != ABSENT:
        return Fact(unknown=f"mixed_precision={v.text}: {v.reason or 'depends on the GPU'}", call=acc)
    bare = call_evidence(acc, "Accelerator() without mixed_precision")
    found = launch_precision(machine, launch, config_without_launcher=True)
    if found is not None:
        return Fact(found.value, (bare,) + found.evidence, call=acc, inferred=found.inferred)
    if launch.known:
        return Fact("no", (bare,), call=acc, inferred=True)
    return Fact(
        unknown="Accelerator() takes mixed_precision from the launch (accelerate config or "
        "--mixed_precision); pass --launcher to decide",
        call=acc,
    )


def launch_precision(machine: MachineFacts, launch, config_without_launcher: bool) -> Fact | None:
    """The mixed precision accelerate takes from the launch when the code names none: `accelerate launch
    --mixed_precision`, else ACCELERATE_MIXED_PRECISION, else the accelerate config under `accelerate launch` (or,
    with `config_without_launcher`, when the launch is not known: a script written for Accelerator is launched
    with it). None: the launch sets none."""
    host = machine.host
    env = host.env if host else {}
    config = host.accelerate_config if host else {}
    flag = launch.mixed_precision if launch.known else Value(state=ABSENT)
    if flag.state == KNOWN:
        return Fact(
            str(flag.value),
            (
                Evidence(
                    None,
                    launch.command,
                    f"mixed_precision={flag.value} ({flag.origins[0].detail if flag.origins else 'launch'})",
                    flag.origins[0].kind if flag.origins else "launcher",
                ),
            ),
        )
    under_accelerate = launch.known and launch.launcher == "accelerate"
    if env.get("ACCELERATE_MIXED_PRECISION") and not under_accelerate:  # accelerate launch writes its own
        value = env["ACCELERATE_MIXED_PRECISION"]
        return Fact(
            value,
            (Evidence(None, f"ACCELERATE_MIXED_PRECISION={value}", f"mixed_precision={value} (environment)", "env"),),
        )
    if config.get("mixed_precision") is not None and (
        under_accelerate or (config_without_launcher and not launch.known)
    ):
        value = str(config["mixed_precision"])
        note = f"mixed_precision: {value} in the accelerate config" + (
            "" if under_accelerate else ", which `accelerate launch` applies"
        )
        return Fact(
            value,
            (Evidence(None, host.accelerate_config_path, note, "accelerate-config"),),
            inferred=not under_accelerate,
        )
    return None


def _flag(call: Call, name: str, default: bool, machine: MachineFacts, stack: StackFacts) -> Fact:
    v = decide(call.kwarg(name), machine, stack)
    if v.state == ABSENT:
        return Fact(
            default,
            (Evidence(call.location, call.text, f"{name} not set (default {default})", "default"),),
            call=call,
            inferred=True,
        )
    if v.state != KNOWN:
        return _undecided(name, v, call)
    return Fact(bool(v.value), (evidence_of(v, f"{name}={v.value}", call),), source=v, call=call)


def _undecided(name: str, v: Value, call: Call) -> Fact:
    """An argument the doctor cannot decide: hardware-dependent without a machine, or computed at run time."""
    if v.state == CONDITIONAL:
        return Fact(
            unknown=f"{name}={v.text} depends on the GPU ({v.predicate.text}); pass --target to decide",
            call=call,
            source=v,
        )
    return Fact(unknown=f"{name}={v.text}: {v.reason}", call=call, source=v)


def _first_training_line(
    trainer: Call | None, optimizers: tuple[Call, ...], script: ScriptFacts
) -> tuple[str, int] | None:
    """Where training starts: the Trainer, or an optimizer's first step (its state takes the parameters' dtype
    there, so a cast between building the optimizer and that step is the dtype it trains in)."""
    points = [(trainer.location.path, trainer.location.line)] if trainer else []
    for opt in optimizers:
        steps = [
            (s.location.path, s.location.line)
            for s in optimizer_steps(opt, script)
            if s.scope == opt.scope and s.location.path == opt.location.path and s.location.line > opt.location.line
        ]
        points.append(min(steps) if steps else (opt.location.path, opt.location.line))
    return min(points) if points else None


def _prepared_names(names: set[str] | frozenset[str], script: ScriptFacts) -> set[str]:
    """`names` and what accelerate's prepare hands them back as: `net, opt = accelerator.prepare(model, optimizer)`."""
    names = set(names)
    for prep in script.of("prepare"):
        targets = prep.target.split(",")
        for i, arg in enumerate(prep.args):
            if arg.text in names and i < len(targets) and targets[i]:
                names.add(targets[i])
    return names


def optimizer_steps(opt: Call, script: ScriptFacts) -> list[Call]:
    """Where the optimizer steps: `opt.step()`, `scaler.step(opt)` (where none names it, stepped under another name:
    every `.step()` that is not a scheduler's, nor one given something other than an optimizer, as `env.step(action)`
    is), and calls of the script's own functions that step one, through their callers."""
    names = _prepared_names({opt.target}, script) if opt.target else set()
    methods = [
        m
        for m in script.of("method")
        if m.callee.endswith(".step")
        and "sched" not in m.receiver.lower()
        and (not m.args or "scaler" in m.receiver.lower() or m.args[0].text in names)
    ]
    named = [m for m in methods if m.receiver in names or (m.args and m.args[0].text in names)]
    stepping = {m.scope.rsplit(".", 1)[-1] for m in methods if m.scope != "<module>"}
    local = script.of("local_call")
    while True:  # and the functions that call them: fit() -> train_epoch() -> step() -> opt.step()
        callers = {
            c.scope.rsplit(".", 1)[-1]
            for c in local
            if c.callee.rsplit(".", 1)[-1] in stepping and c.scope != "<module>"
        } - stepping
        if not callers:
            break
        stepping |= callers
    return (named or methods) + [c for c in local if c.callee.rsplit(".", 1)[-1] in stepping]
