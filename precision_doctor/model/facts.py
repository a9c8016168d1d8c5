"""The facts every check reads: plain frozen data that round-trips through JSON.

A probe fills these; a check only reads them. Three states keep apart what the doctor knows,
what it could not learn (and why), and what the script decides only at run time.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import field
from functools import cached_property
from typing import Any

from .call_kinds import CallKind
from .util import StrEnum, record


class State(StrEnum):
    """How much the doctor knows of a value."""

    KNOWN = "known"
    ABSENT = "absent"  # the argument is not passed: the library default applies
    CONDITIONAL = "conditional"  # decided by the hardware the job runs on
    DYNAMIC = "dynamic"  # computed at run time in a way static reading cannot follow


KNOWN, ABSENT, CONDITIONAL, DYNAMIC = State.KNOWN, State.ABSENT, State.CONDITIONAL, State.DYNAMIC


@record
class Location:
    path: str
    line: int
    column: int = 1  # 1-based, in characters

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@record
class Origin:
    """One step of where an effective value came from."""

    kind: str  # code | default | script-arg | launcher | env | accelerate-config | profile | assumed
    detail: str
    location: Location | None = None


@record
class Predicate:
    """A hardware question a script asks at run time, e.g. torch.cuda.is_bf16_supported()."""

    # cuda_available | bf16_supported | capability_at_least | gpu_count_at_least | mps_available | not | all | any
    kind: str
    text: str
    emulation: bool = True  # bf16_supported: True is torch's default (including_emulation=True)
    asked: str = (
        "torch"  # bf16_supported: whose check answers (knowledge/bf16_checks.py: torch|transformers|capability)
    )
    number: tuple[int, ...] = ()  # capability_at_least (major, minor) / gpu_count_at_least (n,)
    parts: tuple[Predicate, ...] = ()
    location: Location | None = None  # where the check is written


@record
class TensorValue:
    """A tensor the script builds, as far as static reading knows it: its dtype."""

    dtype: str


@record
class Value:
    """An argument's effective value, where it came from, and how sure the doctor is of it."""

    state: State
    value: Any = None
    text: str = ""
    origins: tuple[Origin, ...] = ()
    location: Location | None = None  # where the expression that holds the value is written
    predicate: Predicate | None = None
    if_true: Value | None = None
    if_false: Value | None = None
    reason: str = ""  # why the value is dynamic

    @property
    def known(self) -> bool:
        return self.state == KNOWN

    def is_(self, expected: Any) -> bool:
        return self.state == KNOWN and self.value == expected


def absent(detail: str = "") -> Value:
    return Value(state=ABSENT, reason=detail)


@record
class Branch:
    """One run-time branch a call sits in: the `if` at `line` taken (or not), or a `try` body / handler."""

    line: int
    taken: bool  # True: the if's body (or the try body); False: its else (or an except handler)
    test: str = ""  # the condition as written, shortened
    # the code decides it: True when this side runs on every run, False when on none (the condition reads only
    # literals, such as a parameter every call site passes the same constant); None when the run decides
    decided: bool | None = None

    def describe(self) -> str:
        if not self.test:
            return f"the {'try body' if self.taken else 'except handler'} at line {self.line}"
        return f"`{self.test}` is {'true' if self.taken else 'false'} (line {self.line})"


@record
class Call:
    """A call the script makes that matters to training, with its resolved arguments."""

    kind: CallKind  # the closed set and how each is recognised: call_kinds.py
    callee: str  # dotted name as written, e.g. "torch.cuda.amp.GradScaler"
    location: Location
    scope: str  # "<module>" or the enclosing function's qualified name
    target: str = ""  # the name the result is assigned to ("model", "self.model")
    receiver: str = ""  # for method calls: the object ("model" in model.half())
    args: tuple[Value, ...] = ()
    kwargs: dict[str, Value] = field(default_factory=dict)
    text: str = ""  # first line of the call's source, for excerpts
    in_loop: bool = False
    in_branch: bool = False  # under an if/try of its scope: the script decides at run time whether it runs
    branches: tuple[Branch, ...] = ()  # those branches, outermost first
    loops: tuple[int, ...] = ()  # the lines of the loops it sits in (in its scope), outermost first
    refs: dict[str, str] = field(default_factory=dict)  # argument -> key of the recorded call it evaluates to
    in_try: bool = False  # in a try body or handler of its scope (an error it raises may be caught)

    @property
    def key(self) -> str:
        return f"{self.location.path}:{self.location.line}:{self.location.column}:{self.callee}"

    @property
    def never_runs(self) -> bool:
        """On a branch the code never takes (a condition every run decides the other way): dead code."""
        return any(b.decided is False for b in self.branches)

    def kwarg(self, name: str) -> Value:
        return self.kwargs.get(name) or absent(f"{name} not passed")

    def deepspeed_config(self) -> Value:
        """The config a `deepspeed.initialize(...)` call (kind deepspeed_initialize) is given: `config=` (a dict, or
        the JSON file it names), else its older name `config_params=`."""
        return self.kwarg("config") if "config" in self.kwargs else self.kwarg("config_params")


def builds_from_config(load: Call) -> bool:
    """`AutoModelForCausalLM.from_config(config)`: a model built afresh in the config's shape, no weights read."""
    return load.callee.endswith(".from_config")


def config_load_of(load: Call, calls: tuple[Call, ...] | list[Call]) -> Call | None:
    """The recorded `AutoConfig.from_pretrained(...)` that a from_config load's config argument evaluates to."""
    key = load.refs.get("0") or load.refs.get("config")
    return next((c for c in calls if c.key == key and c.kind == CallKind.CONFIG_LOAD), None) if key else None


def model_source(load: Call, calls: tuple[Call, ...] | list[Call] = ()) -> Value:
    """The checkpoint id or path a model load reads: from_pretrained's first argument, or for from_config the one
    its config was read from (absent when the config is built in the script or cannot be followed)."""
    if builds_from_config(load):
        config = config_load_of(load, calls)
        if config is None:
            return absent("the config is not read from a checkpoint the script names")
        load = config
    return load.args[0] if load.args else load.kwarg("pretrained_model_name_or_path")


NOTHING_TO_CHECK = "nothing to check"  # Unknown.what for an empty file: reported as such, and no error


@record
class Unknown:
    what: str
    reason: str
    location: Location | None = None
    hardware: bool = False  # decided by the GPU: unknown only while the machine is
    launch: bool = False  # the launch itself: every rule that reads it stays silent


@record
class Suppression:
    """`# precision-doctor: ignore[PD201]` on a line; no ids means every rule."""

    location: Location
    ids: tuple[str, ...] = ()


class CheckpointSource(StrEnum):
    """Where the doctor learnt what a checkpoint is, in the order it looks."""

    LOCAL = "local"  # config.json in the directory the script names
    HF_CACHE = "hf-cache"  # the Hugging Face cache on this machine, read offline
    GIVEN = "given"  # a config.json the user named (--model-config) for a model the job downloads
    TABLE = "table"  # the table shipped with the doctor (precision_doctor/data/checkpoints.json)
    HUB = "hub"  # fetched from the Hugging Face Hub with --hub (config.json and safetensors index only)
    UNKNOWN = "unknown"


WATCHED_ATTRIBUTES = frozenset({"supports_gradient_checkpointing"})


@record
class RemoteClass:
    """A model class a checkpoint brings as its own code (config.json `auto_map`), as read from its file:
    what gradient checkpointing does with it (probes/remote_code.py)."""

    auto_class: str  # the auto_map key: AutoModelForCausalLM
    name: str  # the class it names: MPTForCausalLM
    path: str = ""  # the modeling file read ("" when it is not on this machine)
    line: int | None = None  # the class statement
    # yes: supports it | no: transformers raises | old: the pre-4.35 `_set_gradient_checkpointing(module, value)`,
    # whose checkpointing keyword arguments are ignored | "": unknown, `reason` says why
    checkpointing: str = ""
    answer_path: str = ""  # where the answer is written: supports_gradient_checkpointing, the old setter, the class
    answer_line: int | None = None
    answer_text: str = ""  # that line, as written
    # whether transformers' setter finds a module with a `gradient_checkpointing` flag to switch (False: none in
    # its code, which imports no other model code; True also where the class brings a setter of its own; None: not
    # known, its code imports model code not read)
    module_flags: bool | None = None
    reason: str = ""
    # old format: whether the class's own calls of torch's checkpoint are reentrant (None: not read), and the call
    # that decides it, as written
    own_reentrant: bool | None = None
    own_checkpoint: Location | None = None
    own_checkpoint_text: str = ""
    # its own `gradient_checkpointing_enable` (the first along its bases), which the Trainer calls with keywords:
    # the keywords it takes ("**" where it takes any), where it is defined, and the class that defines it
    # the script sets supports_gradient_checkpointing = True only under a condition the run decides
    workaround_conditional: bool = False
    enable_keywords: tuple[str, ...] | None = None
    enable_at: Location | None = None
    enable_text: str = ""
    enable_owner: str = ""


@record
class CheckpointFacts:
    """What a checkpoint a script loads is: its shape, its stored dtype, the attention kernels it supports.
    A field the source does not give is None (or empty)."""

    model_id: str
    source: CheckpointSource
    detail: str = ""  # the config.json read, the table row's reference, or why it is unknown
    architecture: str = ""
    model_type: str = ""
    parameters: int | None = None
    layers: int | None = None  # decoder layers (encoder-decoder: each stack)
    hidden_size: int | None = None
    intermediate_size: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    tied_embeddings: bool | None = None
    torch_dtype: str = ""  # the dtype the weights are stored in ("bfloat16")
    attention: tuple[str, ...] = ()  # implementations the architecture supports: eager, sdpa, flash_attention_2
    experts: int | None = None  # mixture of experts: experts per layer, and
    experts_per_token: int | None = None  # how many each token uses
    encoder_decoder: bool = False
    image_size: int | None = None  # vision encoders: tokens = (image_size / patch_size)^2 + 1
    patch_size: int | None = None
    source_positions: int | None = None  # speech encoders: the frames the encoder reads (Whisper: 1500, 30 s)
    target_positions: int | None = None  # ... and the longest label the decoder takes (Whisper: 448)
    weights_bytes: int | None = None  # safetensors index metadata.total_size
    # stored quantized: the config's quantization_config.quant_method ("gptq", "fp8"; a saved bitsandbytes model
    # as its bits, "4bit" / "8bit")
    quantization: str = ""
    remote_classes: tuple[RemoteClass, ...] = ()  # the model classes its own code defines (`auto_map`)

    @property
    def known(self) -> bool:
        return self.source != CheckpointSource.UNKNOWN


@record
class ClassFacts:
    """A class the script defines (a dataclass, or a subclass of a library's arguments or trainer): what its
    constructor takes besides what it inherits."""

    name: str
    location: Location
    bases: tuple[str, ...] = ()  # qualified as the script imports them: "transformers.TrainingArguments"
    fields: tuple[str, ...] = ()  # its own dataclass fields, or the keyword parameters of its own __init__
    dataclass: bool = False
    init: bool = False  # defines its own __init__ (which then decides what the constructor takes)
    forwards: bool = False  # that __init__ takes **kwargs and passes them on (to the base's __init__)


@record
class ParsedArguments:
    """What HfArgumentParser / TrlParser is given at run time: the dataclasses it fills and each key a recipe or the
    command line sets, with the line that writes it."""

    parser: str  # "transformers.HfArgumentParser" | "trl.TrlParser"
    method: str  # parse_args_and_config | parse_args_into_dataclasses | parse_yaml_file | parse_json_file | parse_dict
    location: Location  # the parse call
    classes: tuple[str, ...]  # the dataclasses, qualified as the script names them
    keys: dict[str, Value] = field(default_factory=dict)  # key -> its value, where it is written and how it came
    source: str = "recipe"  # recipe (a YAML/JSON file or a dict) | command line
    via: str = ""  # "--config recipes/sft.yaml", "parse_yaml_file('sft.yaml')", "arguments after --"
    strict: bool = True  # an unknown key raises (allow_extra_keys / return_remaining_strings not set)
    options: tuple[str, ...] = ()  # options the script adds itself with parser.add_argument


@record
class AttributeSet:
    """A watched attribute (WATCHED_ATTRIBUTES) the script sets: `model.supports_gradient_checkpointing = True`,
    `setattr(type(model), ...)`, `trainer.model.… = …`."""

    name: str
    owner: str  # the name the object is reached through: "model", "trainer", "self"
    scope: str  # where it is set: "<module>" or the function's qualified name
    value: Value
    on_class: bool = False  # `type(model).x` / `model.__class__.x`: the class, so every instance of it
    inner: bool = False  # `model.base_model.model.x` / `model.get_base_model().x`: the model peft wraps
    held: bool = False  # `trainer.model.x` / `self.model.x`: the model an object holds (a Trainer's)
    conditional: bool = False  # under a condition the run decides


@record
class RecipeFacts:
    """A recipe as its framework reads it (Axolotl, LLaMA-Factory): every setting written, by dotted key path
    (`fsdp_config.offload_params`), each pointing at the line that writes it or the launch-line word that sets it.
    What the framework itself refuses or warns about is judged from these (knowledge/recipe_checks)."""

    family: str
    version: str  # the framework release whose behaviour the reader mirrors
    settings: dict[str, Value] = field(default_factory=dict)
    model_type: str = ""  # the trained checkpoint's, where the doctor knows it
    memory_unmodelled: str = ""  # why the memory rules cannot judge it (a parallelism the doctor does not model)
    chunked_loss: str = ""  # the setting that computes the loss in chunks, never holding the logits (Liger, CCE)
    # the recipe's key for each Trainer keyword a fix names ("per_device_train_batch_size" -> "micro_batch_size")
    spelling: dict[str, str] = field(default_factory=dict)
    # where the framework keeps the embeddings, output layer and norms of half weights in fp32 (a full fine-tune
    # under Axolotl), what says so; "" otherwise
    fp32_embeddings: str = ""


@record
class ScriptFacts:
    path: str
    calls: tuple[Call, ...] = ()
    imports: tuple[str, ...] = ()  # dotted modules and names imported
    unknowns: tuple[Unknown, ...] = ()
    local_configs: dict[str, dict] = field(default_factory=dict)  # model path -> its config.json
    files: tuple[str, ...] = ()  # the script and the local modules it imports
    configs_read: tuple[str, ...] = ()  # the recipes its values come from (a folder run judges them with it)
    suppressions: tuple[Suppression, ...] = ()
    deepspeed_configs: dict[str, dict] = field(default_factory=dict)  # deepspeed="ds.json" -> its contents
    stack: StackFacts | None = None  # the versions this script trains with (its project's); None: the run's
    checkpoints: dict[str, CheckpointFacts] = field(default_factory=dict)  # model id or path -> what it is
    classes: dict[str, ClassFacts] = field(default_factory=dict)  # the classes it defines, by name
    parsed: tuple[ParsedArguments, ...] = ()  # what its argument parsers are given
    recipe: RecipeFacts | None = None  # a recipe checked as itself: its settings as written
    # attributes the rules watch, as the script sets them on an object it names, where the script runs that code,
    # in source order
    attribute_sets: tuple[AttributeSet, ...] = ()

    def of(self, *kinds: str) -> list[Call]:
        if len(kinds) == 1:
            return list(self._calls_by_kind.get(kinds[0], ()))
        return [c for c in self.calls if c.kind in kinds]

    @cached_property
    def _calls_by_kind(self) -> dict[str, list[Call]]:
        """The calls of each kind, in order: the rules ask `of(kind)` some 15,000 times over a large tree. Kept in
        the instance's dict (not a field: not compared, shown or serialised)."""
        out: dict[str, list[Call]] = {}
        for c in self.calls:
            out.setdefault(c.kind, []).append(c)
        return out


@record
class GpuProcess:
    """A process holding a CUDA context on a GPU, with what the OS says about it."""

    pid: int
    used_mib: int = 0
    status: str = "unknown"  # running | sleeping | stopped | zombie | gone | unknown
    user: str = ""
    mine: bool | None = None  # None: the OS would not say
    command: str = ""
    started: float = 0.0  # epoch seconds
    parent_alive: bool | None = None

    @property
    def stale(self) -> bool:
        """Holds a context but will never run again (or not without help)."""
        return self.status in ("zombie", "stopped", "gone") or self.parent_alive is False


@record
class Gpu:
    index: int
    name: str
    capability: tuple[int, int]
    memory_total_mib: int = 0
    memory_used_mib: int = 0
    uuid: str = ""
    compute_mode: str = "Default"  # Default | Exclusive_Process | Prohibited
    mig: bool = False
    processes: tuple[GpuProcess, ...] = ()

    @property
    def native_bf16(self) -> bool:
        return self.capability >= (8, 0)

    @property
    def tf32(self) -> bool:
        return self.capability >= (8, 0)

    @property
    def fp8(self) -> bool:
        return self.capability >= (8, 9)

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"


class MachineOrigin(StrEnum):
    THIS_MACHINE = "this-machine"  # probed here (NVML, psutil, sockets)
    TARGET = "target"  # a named --target profile
    SNAPSHOT = "snapshot"  # a --facts file taken on the node


@record
class MachineFacts:
    """The machine the job will run on. `known` False means: the doctor could not tell."""

    known: bool
    source: str  # for people: "target titan-rtx", "snapshot node.json", "this machine"
    origin: MachineOrigin = MachineOrigin.THIS_MACHINE
    gpus: tuple[Gpu, ...] = ()
    reason: str = ""  # why unknown
    driver_version: str = ""
    cuda_driver_version: str = ""
    host: HostFacts | None = None  # processes and ports; None for a bare --target profile
    probed_at: float = 0.0  # epoch seconds when this machine was probed (0: a profile, never probed)
    # a multi-node snapshot: every node of the allocation (this record is the first node's GPUs without their
    # processes, so that the per-node rules name the node); empty for one machine
    nodes: tuple[MachineFacts, ...] = ()
    allocation: Allocation | None = None

    def describe(self) -> str:
        if not self.known:
            return (
                f"{len(self.nodes)} nodes, GPUs unknown ({self.reason})" if self.nodes else f"unknown ({self.reason})"
            )
        if not self.gpus:
            return f"no GPU ({self.source})"
        first = self.gpus[0]
        if self.nodes:
            return f"{len(self.nodes)} nodes, {len(self.gpus)}× {first.name} ({first.sm}) each ({self.source})"
        return f"{len(self.gpus)}× {first.name} ({first.sm}) ({self.source})"

    @property
    def node_name(self) -> str:
        return (self.host.node_name or self.host.hostname if self.host else "") or self.source


@record
class Allocation:
    """The scheduler allocation a multi-node snapshot was taken in."""

    scheduler: str = "slurm"
    job_id: str = ""
    hosts: tuple[str, ...] = ()  # the allocation's node names, in the scheduler's order (the first is the master)


@record
class BusyPort:
    port: int
    pid: int | None = None  # None: the OS would not say who holds it
    command: str = ""
    user: str = ""


@record
class HostFacts:
    """Ports and environment of the machine the job starts on."""

    hostname: str = ""
    user: str = ""
    ports_checked: tuple[int, ...] = ()
    busy_ports: tuple[BusyPort, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # CUDA_VISIBLE_DEVICES, ACCELERATE_*, MASTER_PORT, NCCL_*, ...
    accelerate_config: dict[str, Any] = field(default_factory=dict)
    accelerate_config_path: str = ""
    accelerate_config_lines: dict[str, int] = field(default_factory=dict)  # "deepspeed_config.zero_stage" -> 7
    interfaces: dict[str, tuple[str, ...]] = field(default_factory=dict)  # network interface -> its addresses
    node_name: str = ""  # the scheduler's name for this node (SLURMD_NODENAME), when probed in an allocation

    def port_state(self, port: int) -> BusyPort | bool | None:
        """The holder when busy, True when checked and free, None when not checked."""
        for b in self.busy_ports:
            if b.port == port:
                return b
        return True if port in self.ports_checked else None


@record
class LaunchFacts:
    """How the job is started: `python`, `accelerate launch`, `torchrun`, `deepspeed`."""

    known: bool
    launcher: str = ""  # python | accelerate | torchrun | deepspeed
    command: str = ""
    num_processes: Value = field(default_factory=lambda: absent("launch not given"))
    mixed_precision: Value = field(default_factory=lambda: absent("launch not given"))
    main_process_port: Value = field(default_factory=lambda: absent("launch not given"))
    script_args: tuple[str, ...] = ()
    num_machines: int = 1
    config_file: str = ""
    standalone: bool = False
    # accelerate launch: the options given on its command line beyond the three above (use_deepspeed, zero_stage,
    # use_fsdp, ...), the config file it reads (--config_file) with each setting's line, and the DeepSpeed JSON
    # that --deepspeed_config_file or the config's deepspeed_config_file names
    options: dict[str, Value] = field(default_factory=dict)
    accelerate_config: dict[str, Any] = field(default_factory=dict)
    accelerate_config_path: str = ""
    accelerate_config_lines: dict[str, int] = field(default_factory=dict)
    deepspeed_config: dict[str, Any] = field(default_factory=dict)
    deepspeed_config_path: str = ""
    unknowns: tuple[Unknown, ...] = ()
    # the command as the doctor read it: the launcher as typed ("llamafactory-cli train", "axolotl train (accelerate
    # launch)"), what it runs (a script, a recipe or a module, as written), the environment it sets (`VAR=value`,
    # `env`, `mpirun -x`; launch variables only, redacted), the layers around it (`nohup`, `srun (2 tasks per
    # node)`), and the copies of the launcher each node starts (srun tasks, mpirun ranks; None: unknown, and why)
    shown: str = ""
    script: str = ""
    module: str = ""
    env: dict[str, str] = field(default_factory=dict)
    env_unset: tuple[str, ...] = ()  # inherited variables the line removes (`env -u X`, `unset X;`); "*": `env -i`
    through: tuple[str, ...] = ()
    # where, in the command's shell words, the command that launches starts (of a list: the one judged)
    segment_start: int = 0
    copies: int | None = 1
    copies_reason: str = ""
    job_file: str = ""  # `sbatch FILE`: the job script, read as a job (probes/jobscript.py)
    job_options: dict[str, str] = field(default_factory=dict)
    unknown_launcher: str = ""  # the command's name when it is no launcher the doctor knows
    not_training: bool = False  # ... a tool it knows, told to do something else (`llamafactory-cli eval`)

    def describe(self) -> str:
        """The launch as the report's header names it."""
        if self.unknown_launcher and self.not_training:
            return f"`{self.unknown_launcher}` is not a training command: processes per node unknown"
        if self.unknown_launcher:
            return f"launcher `{self.unknown_launcher}` is not known: processes per node unknown"
        if not self.known:
            return "not given (--launcher)"
        return self.shown or self.launcher


class VersionSource(StrEnum):
    INSTALLED = "installed"  # read from the environment's package metadata
    DECLARED = "declared"  # from the project's requirements / pyproject
    ASSUMED = "assumed"  # neither: the current release the rules were checked against
    GIVEN = "given"  # set by the caller (tests, examples)


@record
class JobSetting:
    """One value a job script sets (an #SBATCH directive, an exported variable), and the line that sets it."""

    value: str
    line: int


@record
class JobFacts:
    """A batch job script (SLURM): what it asks the scheduler for, what it exports, how it launches."""

    path: str
    directives: dict[str, JobSetting] = field(default_factory=dict)  # long option name (nodes, gres, ...) -> value
    env: dict[str, JobSetting] = field(default_factory=dict)  # exported launch variables (redacted)
    launch: str = ""  # the launch line, continuations joined, variables expanded where the script sets them
    launch_line: int = 0
    srun: bool = False  # started through srun (one copy per task) rather than once on the first node
    srun_options: dict[str, str] = field(default_factory=dict)  # srun's own -N / --ntasks-per-node / --gpus...
    script: str = ""  # the training script (or config file) it runs, as found
    partition_gpu: str = ""  # the GPU profile of its partition, and where that came from
    partition_source: str = ""
    unknowns: tuple[Unknown, ...] = ()
    # launches that run at the same time as another (`torchrun ... &` twice): (line, the rendezvous port as written or
    # by the launcher's fixed default, "" for a free one or none, the group of launches that overlap)
    background: tuple[tuple[int, str, int], ...] = ()

    def number(self, name: str) -> int | None:
        s = self.directives.get(name)
        return int(s.value) if s and s.value.isdigit() else None

    def line_of(self, *names: str) -> int:
        return next((self.directives[n].line for n in names if n in self.directives), self.launch_line)

    @property
    def nodes(self) -> int:
        raw = self.srun_options.get("nodes") or (self.directives["nodes"].value if "nodes" in self.directives else "1")
        return int(raw.split("-")[0]) if raw.split("-")[0].isdigit() else 1

    @property
    def tasks_per_node(self) -> int | None:
        raw = self.srun_options.get("ntasks-per-node") or (
            self.directives["ntasks-per-node"].value if "ntasks-per-node" in self.directives else ""
        )
        if raw.isdigit():
            return int(raw)
        total = self.srun_options.get("ntasks") or (
            self.directives["ntasks"].value if "ntasks" in self.directives else ""
        )
        if total.isdigit() and int(total) % self.nodes == 0:
            return int(total) // self.nodes
        return None if total else 1

    @property
    def gpus_per_node(self) -> int | None:
        """GPUs each node gets: --gpus-per-node, --gres=gpu[:type]:N, or --gpus-per-task times the tasks."""
        per_node = self.directives.get("gpus-per-node")
        if per_node:
            count = per_node.value.rsplit(":", 1)[-1]
            return int(count) if count.isdigit() else None
        gres = self.directives.get("gres")
        if gres:
            for item in gres.value.split(","):
                parts = item.split(":")
                if parts[0] == "gpu":
                    count = parts[-1].split("(")[0] if len(parts) > 1 else "1"
                    return int(count) if count.isdigit() else None
        per_task = self.number("gpus-per-task")
        if per_task is not None and self.tasks_per_node:
            return per_task * self.tasks_per_node
        return None

    @property
    def gpu_type(self) -> str:
        """The GPU type the job names (`--gres=gpu:a100:4`, `--gpus-per-node=h100:8`), or ""."""
        for name in ("gpus-per-node", "gres"):
            s = self.directives.get(name)
            for item in s.value.split(",") if s else ():
                parts = item.split(":")
                if name == "gres" and parts[0] != "gpu":
                    continue
                parts = parts[1:] if name == "gres" else parts
                if len(parts) == 2:
                    return parts[0]
        return ""


@record
class PackageVersion:
    name: str
    version: str  # "" when not determined
    source: VersionSource
    spec: str = ""  # the declared range, when the version was decided from one: ">=4.28"
    origin: str = ""  # where it was read: "newest allowed, FastChat/pyproject.toml", the environment's folder

    @property
    def exact(self) -> bool:
        """The release the job runs, not one picked for it: installed, given, or pinned with `==`."""
        if not self.version:
            return False
        if self.source == VersionSource.DECLARED:
            return self.spec.startswith(("==", "===")) and "*" not in self.spec
        return self.source in (VersionSource.INSTALLED, VersionSource.GIVEN)

    def describe(self) -> str:
        if self.spec and not self.spec.startswith("=="):
            return f"{self.name} {self.spec} → {self.version} ({self.origin or self.source})"
        if not self.version:  # neither installed, declared nor one the rules were checked against
            return f"{self.name} (version not known)"
        return f"{self.name} {self.version} ({self.source}{', ' + self.origin if self.origin else ''})"


@record
class LibraryBehaviour:
    """What an installed library's source shows it does, read without importing it."""

    value: bool
    evidence: str  # the package, file and line that show it: "transformers 5.23.0 trainer.py:2210 ..."


@record
class Signature:
    """The keywords one library class or function accepts, read from the installed package's source."""

    names: tuple[str, ...]  # its own fields or parameters, and the deprecated names it still takes
    bases: tuple[str, ...] = ()  # the classes it inherits keywords from (ids of signatures.py)
    open: str = ""  # takes **kwargs: "forwards" them on | "ignores" them | "" (does not take them)
    init: bool = False  # a plain class with its own __init__ (a dataclass's fields add up along its bases)
    evidence: str = ""  # "transformers 5.23.0 training_args.py:179"


@record
class GateRequirement:
    """One library range a framework's start-up check asks for, as its source writes it."""

    requirement: str  # "transformers>=4.55.0,<=5.6.0"
    line: int
    mandatory: bool = False  # DISABLE_VERSION_CHECK does not skip it


@record
class VersionGate:
    """A framework's own check of the library versions as it starts (LLaMA-Factory's `check_dependencies()`), read
    from its source: the installed package's, else the doctor's table of its releases."""

    framework: str  # the package: "llamafactory"
    version: str
    requirements: tuple[GateRequirement, ...] = ()
    disable_values: tuple[str, ...] = ()  # DISABLE_VERSION_CHECK values (lower-cased) that skip the others
    where: str = ""  # "llamafactory 0.9.5 (installed) llamafactory/extras/misc.py"
    installed: bool = False  # the framework is installed in the environment read: the libraries there are its


@record
class StackFacts:
    packages: dict[str, PackageVersion] = field(default_factory=dict)
    behaviours: dict[str, LibraryBehaviour] = field(default_factory=dict)  # see probes/stack.py for the keys
    signatures: dict[str, Signature] = field(default_factory=dict)  # read from installed source, by class id
    version_gates: tuple[VersionGate, ...] = ()

    def get(self, name: str) -> PackageVersion:
        return self.packages.get(name) or PackageVersion(name, "", VersionSource.ASSUMED)


@record
class LiveAdapter:
    type: str = ""
    r: int | None = None
    target_modules: tuple[str, ...] = ()
    modules_to_save: tuple[str, ...] = ()


@record
class LiveModel:
    """The real model when training was about to start. Dtype counts are parameters per dtype."""

    architecture: str = ""
    param_dtypes: dict[str, dict[str, int]] = field(default_factory=dict)  # module prefix -> dtype -> count
    trainable_dtypes: dict[str, int] = field(default_factory=dict)
    adapter_dtypes: dict[str, int] = field(default_factory=dict)  # LoRA adapters apart
    trainable_by_prefix: dict[str, dict[str, int]] = field(default_factory=dict)
    buffer_dtypes: dict[str, int] = field(default_factory=dict)
    device_map: dict[str, str] | None = None  # hf_device_map
    devices: tuple[str, ...] = ()
    quantized: dict[str, int] = field(default_factory=dict)  # bitsandbytes module class -> count
    compute_dtypes: tuple[str, ...] = ()
    peft: dict[str, LiveAdapter] = field(default_factory=dict)
    gradient_checkpointing: bool = False
    is_parallelizable: bool = False
    model_parallel: bool = False
    is_loaded_in_4bit: bool = False
    is_loaded_in_8bit: bool = False
    config_dtype: str = ""


@record
class LiveTrainer:
    """The Trainer's arguments after `__post_init__`, and the wrap `_wrap_model` applies."""

    n_gpu: int | None = None
    is_model_parallel: bool = False
    fp16: bool = False
    bf16: bool = False
    wrap: str = "none"  # DataParallel | DistributedDataParallel | none
    train_batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    gradient_checkpointing: bool = False
    gradient_checkpointing_kwargs: dict[str, Any] | None = None
    max_steps: int | None = None


@record
class LiveAccelerator:
    mixed_precision: str = ""
    scaler: bool = False  # accelerate created a GradScaler
    distributed_type: str = ""
    num_processes: int | None = None


@record
class LiveOptimizerGroup:
    dtypes: dict[str, int] = field(default_factory=dict)
    foreach: bool | None = None
    fused: bool | None = None


@record
class LiveOptimizer:
    class_name: str = ""
    groups: tuple[LiveOptimizerGroup, ...] = ()
    state_dtype_mismatches: int = 0  # state tensors whose dtype differs from their parameter's


@record
class LiveScaler:
    enabled: bool = True


@record
class LiveFrame:
    file: str = ""
    line: int = 0
    function: str = ""
    code: str = ""


@record
class LiveError:
    type: str = ""
    message: str = ""
    frames: tuple[LiveFrame, ...] = ()  # the script's own frames, innermost last
    traceback: str = ""


@record
class LiveFacts:
    """What the script's real objects were when training was about to start (`check --live`). A part that was
    not seen is None."""

    ended: str  # stopped | steps done | finished | exited | raised | timed out | crashed
    stopped_at: str = ""  # Trainer.train | Accelerator.prepare | Optimizer.step
    model: LiveModel | None = None
    trainer: LiveTrainer | None = None
    accelerator: LiveAccelerator | None = None
    optimizer: LiveOptimizer | None = None
    grad_scaler: LiveScaler | None = None
    error: LiveError | None = None
    exit_code: int | None = None
    optimizer_steps: int = 0
    losses: tuple[Any, ...] = ()
    loss_scales: tuple[float, ...] = ()
    log_path: str = ""
    log_tail: tuple[str, ...] = ()
    wall_s: float = 0.0
    peak_rss_mib: float = 0.0

    @property
    def reached_training(self) -> bool:
        return bool(self.stopped_at)

    @property
    def known(self) -> bool:
        """The real model was seen (rules that need it run)."""
        return self.model is not None

    def trainable(self) -> set[str]:
        return {d for d, n in self.model.trainable_dtypes.items() if n} if self.model else set()

    @classmethod
    def from_json(cls, data: dict) -> LiveFacts:
        """From the live child's report (or a test's dict): unknown keys are dropped, missing or empty parts are
        None."""
        parts = ("model", "trainer", "accelerator", "optimizer", "grad_scaler", "error")
        return _from_jsonable(cls, {k: v for k, v in data.items() if v or k not in parts})


@record
class Facts:
    scripts: tuple[ScriptFacts, ...]
    machine: MachineFacts
    launch: LaunchFacts
    stack: StackFacts
    live: LiveFacts | None = None
    job: JobFacts | None = None  # the batch job script that launches the scripts
    # the job scripts a folder run found, each checked as its own run: its launch, its partition's machine, the
    # scripts it runs (which the folder run then does not judge again without their launch)
    jobs: tuple[Facts, ...] = ()
    # scripts read only because a named helper module runs through them: judged for the helper's sake, their own
    # findings are theirs, not the helper's (a per-file gate on the helper never fails for another file's bug)
    context: tuple[str, ...] = ()

    @property
    def all_scripts(self) -> tuple[ScriptFacts, ...]:
        """The scripts of this run and of the job runs inside it, each once."""
        seen = {s.path for s in self.scripts}
        extra = [s for run in self.jobs for s in run.all_scripts if s.path not in seen]
        return self.scripts + tuple(extra)

    def to_json(self) -> dict:
        return _to_jsonable(self)

    @classmethod
    def from_json(cls, data: dict) -> Facts:
        return _from_jsonable(cls, data)


# --- JSON round trip -------------------------------------------------------------------------

_TENSOR_KEY = "tensor_dtype"  # a TensorValue held where any value may be (Value.value) is {"tensor_dtype": ...}


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, TensorValue):
        return {_TENSOR_KEY: obj.dtype}
    if dataclasses.is_dataclass(obj):
        return {f.name: _to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    return obj


def _from_jsonable(tp: Any, data: Any) -> Any:
    import typing

    if data is None:
        return None
    if isinstance(data, dict) and set(data) == {_TENSOR_KEY}:
        return TensorValue(str(data[_TENSOR_KEY]))
    if isinstance(tp, str):
        tp = _TYPES[tp.split("|")[0].strip()]
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        return tp(data)
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise TypeError(f"{tp.__name__}: expected an object, got {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        kwargs = {f.name: _from_jsonable(hints[f.name], data[f.name]) for f in dataclasses.fields(tp) if f.name in data}
        return tp(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_jsonable(args[0], v) for v in data)
        return tuple(data)
    if origin is dict:
        _, value_type = typing.get_args(tp)
        return {k: _from_jsonable(value_type, v) for k, v in data.items()}
    if origin is typing.Union or type(tp).__name__ == "UnionType":
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _from_jsonable(inner[0], data) if inner else data
    return data


_TYPES: dict[str, Any] = {}
for _cls in (
    Location,
    Origin,
    Predicate,
    Value,
    Branch,
    Call,
    Unknown,
    Suppression,
    CheckpointFacts,
    ClassFacts,
    ParsedArguments,
    Signature,
    RecipeFacts,
    ScriptFacts,
    GpuProcess,
    Gpu,
    MachineFacts,
    BusyPort,
    HostFacts,
    LaunchFacts,
    Allocation,
    JobSetting,
    JobFacts,
    PackageVersion,
    LibraryBehaviour,
    StackFacts,
    LiveAdapter,
    LiveModel,
    LiveTrainer,
    LiveAccelerator,
    LiveOptimizerGroup,
    LiveOptimizer,
    LiveScaler,
    LiveFrame,
    LiveError,
    LiveFacts,
    Facts,
):
    _TYPES[_cls.__name__] = _cls


def dumps(facts: Facts) -> str:
    return json.dumps(facts.to_json(), indent=2, sort_keys=True)
