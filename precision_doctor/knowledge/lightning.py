"""PyTorch Lightning as its connectors decide: the precision modes (`MIXED`), and how a Trainer or Fabric spreads the
job (strategy, devices, num_nodes), mirrored from Lightning 2.x without importing it."""

from __future__ import annotations

import ast
from dataclasses import replace

from ..model.call_kinds import LIGHTNING_CLASSES
from ..model.facts import KNOWN, Call, Value
from ..model.python_source import literal, parse_quietly
from ..model.util import record

MIXED = {
    "16-mixed": "fp16",
    "16": "fp16",
    16: "fp16",
    "bf16-mixed": "bf16",
    "bf16": "bf16",
    "transformer-engine": "fp8",
    "transformer-engine-float16": "fp8",
    "32-true": "no",
    "32": "no",
    32: "no",
    "64-true": "no",
    "64": "no",
    64: "no",
}


# --- Lightning's launch: strategy, devices, num_nodes -----------------------------------------------------------
# Lightning 2.6's registered strategies (`register_strategies` of DDPStrategy, DeepSpeedStrategy, FSDPStrategy and
# Fabric's DataParallelStrategy): each name, how it spreads the job and what it shards.
_DDP_STARTS = ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook")
DDP_STRATEGIES = set(_DDP_STARTS) | {f"{s}_find_unused_parameters_{b}" for s in _DDP_STARTS for b in ("true", "false")}
DEEPSPEED_STRATEGIES = {
    "deepspeed": (2, False, False),
    "deepspeed_stage_1": (1, False, False),
    "deepspeed_stage_2": (2, False, False),
    "deepspeed_stage_2_offload": (2, True, False),
    "deepspeed_stage_3": (3, False, False),
    "deepspeed_stage_3_offload": (3, True, True),
    "deepspeed_stage_3_offload_nvme": (3, True, True),
}  # name -> (stage, offload optimizer, params)
FSDP_STRATEGIES = {"fsdp": False, "fsdp_cpu_offload": True}  # name -> cpu offload
ONE_PROCESS_STRATEGIES = {"single_device", "dp"}  # Fabric's "dp" is nn.DataParallel in one process
_STRATEGY_CLASSES = {
    "DDPStrategy": "ddp",
    "DeepSpeedStrategy": "deepspeed",
    "FSDPStrategy": "fsdp",
    "ModelParallelStrategy": "ddp",
    "SingleDeviceStrategy": "single",
    "DataParallelStrategy": "single",
}
_FSDP_NAMES = {
    "FULL_SHARD": "full_shard",
    "SHARD_GRAD_OP": "shard_grad_op",
    "NO_SHARD": "no_shard",
    "HYBRID_SHARD": "hybrid_shard",
    "_HYBRID_SHARD_ZERO2": "hybrid_shard",
}


@record
class LightningLaunch:
    """How a Lightning Trainer / Fabric spreads the job, as its accelerator connector decides it."""

    strategy: str  # auto | ddp | deepspeed | fsdp | single | unknown
    devices: int | None  # per node; None: every visible GPU ("auto", -1)
    num_nodes: int = 1
    stage: int = 0  # DeepSpeed
    offload_optimizer: bool = False
    offload_params: bool = False
    fsdp: str = ""  # FSDP sharding strategy
    on_gpu: bool = True  # False: accelerator="cpu" / "tpu" / "mps": no GPU processes to place
    device_ids: tuple[int, ...] = ()  # the GPU ids a list or "0,3" names; () for a count or "auto"


def lightning_launch(call: Call) -> LightningLaunch | None:
    """`strategy=`, `devices=`, `num_nodes=` and `accelerator=` of a Lightning Trainer / Fabric call, mirroring
    `_AcceleratorConnector`: devices "auto" / -1 / "-1" are every visible GPU, an int N the first N, a list or "0,1"
    those ids; strategy "auto" is DDP over several devices or nodes, one device otherwise. None when the call is not
    Lightning's, a value is computed at run time, or Lightning refuses it (devices=0, num_nodes=0)."""
    if call.callee not in LIGHTNING_CLASSES:
        return None
    accelerator = call.kwarg("accelerator")
    if accelerator.state == KNOWN and str(accelerator.value).lower() not in ("auto", "gpu", "cuda"):
        return LightningLaunch("unknown", None, on_gpu=False)
    devices = _devices(call.kwarg("devices"))
    nodes_v = call.kwarg("num_nodes")
    nodes = nodes_v.value if nodes_v.state == KNOWN and isinstance(nodes_v.value, int) else 1
    if devices is False or nodes < 1 or nodes_v.state not in (KNOWN, "absent"):
        return None
    found = _strategy(call.kwarg("strategy"))
    return replace(
        found or LightningLaunch("unknown", None),
        devices=devices,
        num_nodes=nodes,
        device_ids=_device_ids(call.kwarg("devices")),
    )


def _device_ids(v: Value) -> tuple[int, ...]:
    """GPU ids as `_parse_gpu_ids` reads them: a list, or a string with a comma ("0,3"; "3" alone is a count)."""
    raw = v.value if v.state == KNOWN else None
    if isinstance(raw, str) and "," in raw:
        parts = [p.strip() for p in raw.split(",") if p.strip()]
        return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()
    if isinstance(raw, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
        return tuple(raw)
    return ()


def _devices(v: Value) -> int | None | bool:
    """Devices per node, None for every visible GPU, False when not known statically (or refused: 0, [])."""
    if v.state == "absent":
        return None
    if v.state != KNOWN or isinstance(v.value, bool):
        return False
    raw = v.value
    if isinstance(raw, str):
        text = raw.strip()
        if text in ("auto", "-1"):
            return None
        if "," in text:
            return len([p for p in text.split(",") if p.strip()]) or False
        raw = int(text) if text.isdigit() else 0
    if isinstance(raw, int):
        return None if raw == -1 else raw if raw > 0 else False
    if isinstance(raw, (list, tuple)):
        return len(raw) or False
    return False


def _strategy(v: Value) -> LightningLaunch | None:
    if v.state == "absent":
        return LightningLaunch("auto", None)
    if v.state == KNOWN and isinstance(v.value, str):
        name = v.value.lower()
        if name == "auto":
            return LightningLaunch("auto", None)
        if name in DDP_STRATEGIES:
            return LightningLaunch("ddp", None)
        if name in DEEPSPEED_STRATEGIES:
            stage, optimizer, params = DEEPSPEED_STRATEGIES[name]
            return LightningLaunch("deepspeed", None, stage=stage, offload_optimizer=optimizer, offload_params=params)
        if name in FSDP_STRATEGIES:
            return LightningLaunch("fsdp", None, offload_params=FSDP_STRATEGIES[name], fsdp="full_shard")
        if name in ONE_PROCESS_STRATEGIES:
            return LightningLaunch("single", None)
        return LightningLaunch("unknown", None)  # a name Lightning refuses, or a strategy registered elsewhere
    return _strategy_object(v.text)


def _strategy_object(text: str) -> LightningLaunch | None:
    """`DeepSpeedStrategy(stage=3, offload_optimizer=True)` written in the call: its class and literal keywords
    (the source is parsed, never run)."""
    try:
        node = parse_quietly(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    kind = _STRATEGY_CLASSES.get(name)
    if kind is None:
        return None
    keywords = {}
    for kw in node.keywords:
        try:
            keywords[kw.arg] = literal(kw.value)
        except (ValueError, SyntaxError, TypeError, RecursionError):
            keywords[kw.arg] = None
    if kind == "deepspeed":
        stage = keywords.get("stage", 2)
        return LightningLaunch(
            "deepspeed",
            None,
            stage=stage if isinstance(stage, int) else 2,
            offload_optimizer=bool(keywords.get("offload_optimizer")),
            offload_params=bool(keywords.get("offload_parameters")),
        )
    if kind == "fsdp":
        sharding = str(keywords.get("sharding_strategy") or "FULL_SHARD").upper()
        return LightningLaunch(
            "fsdp", None, fsdp=_FSDP_NAMES.get(sharding, "full_shard"), offload_params=bool(keywords.get("cpu_offload"))
        )
    return LightningLaunch(kind, None)


def lightning_precision_sections(call: Call) -> dict:
    """The precision section Lightning's DeepSpeed strategy writes into its config (`_format_precision_config`):
    fp16 for "16-mixed" / "16-true", bf16 for "bf16-mixed" / "bf16-true", none for "32-true"."""
    v = call.kwarg("precision")
    if v.state != KNOWN:
        return {} if v.state == "absent" else {"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}
    mode = MIXED.get(v.value) or {"16-true": "fp16", "bf16-true": "bf16"}.get(v.value)
    return {"fp16": {"enabled": True}} if mode == "fp16" else {"bf16": {"enabled": True}} if mode == "bf16" else {}
