"""What the checkpoint a script loads is: its shape, stored dtype and attention support.

Looked up, in order, in a local directory's config.json, the Hugging Face cache on this machine (read offline:
nothing is downloaded), and the table shipped with the doctor (data/checkpoints.json, one row per popular open
checkpoint with the reference it was written from); else unknown, with the reason. Every read goes through
sources.py, and only the config keys the rules use are kept (redact.MODEL_CONFIG_KEYS).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..knowledge import dtypes
from ..knowledge.families import ARCHITECTURE_SHAPES, attention_support, tied_by_default
from ..model.errors import InputError
from ..model.facts import DYNAMIC, KNOWN, Call, CheckpointFacts, CheckpointSource, model_source
from ..model.redact import MODEL_CONFIG_KEYS, keep_read_keys
from ..model.util import record
from ..system.reads import modified_time
from ..system.sources import Unreadable, is_regular_file, parse_json, read_prefix, read_text_bounded
from .remote_code import remote_classes

MAX_SNAPSHOTS = 8  # revisions of one model in the cache: the newest config is read
_BYTES = {dtypes.FLOAT32: 4, dtypes.FLOAT16: 2, dtypes.BFLOAT16: 2}


def model_ids(calls: list[Call] | tuple[Call, ...]) -> list[str]:
    """The model ids / paths the script's model loads (and the model configs from_config builds from) name, as
    resolved by the script probe."""
    out = []
    for call in calls:
        if call.kind not in ("model_load", "config_load"):
            continue
        source = model_source(call)
        if source.state == KNOWN and isinstance(source.value, str) and source.value:
            out.append(source.value)
    return list(dict.fromkeys(out))


def probe_checkpoints(script: Path, calls, environ: Mapping[str, str] | None = None) -> dict[str, CheckpointFacts]:
    environ = os.environ if environ is None else environ
    revisions = _revisions(calls)
    return {
        mid: checkpoint_facts(mid, (script.parent, Path.cwd()), environ, revisions.get(mid)) for mid in model_ids(calls)
    }


CONFLICTING = "\0"  # loads of one id at different revisions: no one snapshot answers for all of them


def _revisions(calls) -> dict[str, str]:
    """The revision the loads of a model id pin (`revision="v1.0"`, a branch, a tag or a commit), where they pin
    one; CONFLICTING where they do not agree (one pinned, one not, or two pins)."""
    seen: dict[str, set[str]] = {}
    for call in calls:
        source = model_source(call) if call.kind == "model_load" else None
        if source is None or source.state != KNOWN:
            continue
        revision = call.kwarg("revision")
        pinned = revision.value if revision.state == KNOWN and isinstance(revision.value, str) else ""
        seen.setdefault(str(source.value), set()).add("?" if revision.state == DYNAMIC else pinned)
    return {mid: (pins.pop() if len(pins) == 1 else CONFLICTING) for mid, pins in seen.items() if pins != {""}}


def checkpoint_facts(
    model_id: str, bases: tuple[Path, ...], environ: Mapping[str, str], revision: str | None = None
) -> CheckpointFacts:
    for base in bases:
        folder = base / model_id
        cfg = _read_json(folder / "config.json")
        if cfg is not None:
            return from_config(
                model_id,
                CheckpointSource.LOCAL,
                os.path.relpath(folder / "config.json"),
                cfg,
                _index_total(folder),
                stored_weights(folder),
                folder,
            )
    found = _from_cache(model_id, environ, revision)
    if found is not None:
        return found
    given = GIVEN_CONFIGS.get(model_id) or GIVEN_CONFIGS.get("")
    if given is not None:
        path, cfg = given
        return from_config(model_id, CheckpointSource.GIVEN, f"--model-config {path}", cfg)
    row = shipped_table().get(model_id) or shipped_table().get(model_id.lower())
    if row is not None:
        return _from_row(model_id, row)
    if HUB[0] and not model_id.startswith((".", "/", "~")):
        from .hub import fetch_model_files

        fetched = fetch_model_files(model_id, environ)
        if fetched.config is None:
            return CheckpointFacts(model_id, CheckpointSource.UNKNOWN, fetched.reason)
        index = fetched.index or {}
        total = index.get("metadata", {}).get("total_size") if isinstance(index.get("metadata"), dict) else None
        return from_config(
            model_id,
            CheckpointSource.HUB,
            f"{fetched.url}, fetched with --hub",
            fetched.config,
            total if isinstance(total, int) and total > 0 else None,
        )
    return CheckpointFacts(
        model_id,
        CheckpointSource.UNKNOWN,
        "no config.json next to the script, not in the Hugging Face cache on this machine, not "
        "in the doctor's table of popular checkpoints (give its config.json: --model-config ID=PATH)",
    )


# `--model-config [ID=]PATH`: the config.json of a model the job downloads, by model id ("" for every model id
# found nowhere else). Set once per run by the command line, before the scripts are probed.
GIVEN_CONFIGS: dict[str, tuple[Path, dict]] = {}  # read (and checked) once
HUB = [False]  # `--hub`: fetch the config of a model found nowhere else (hub.py)


def lookup_options() -> tuple:
    """What the command line told the checkpoint lookup (for the content cache's key)."""
    return tuple(sorted((mid, str(path), repr(cfg)) for mid, (path, cfg) in GIVEN_CONFIGS.items())), HUB[0]


def give_model_configs(specs: list[str] | tuple[str, ...], hub: bool = False) -> None:
    """Read `--model-config` values (a path that is no model config.json is bad input) and `--hub`."""
    GIVEN_CONFIGS.clear()
    HUB[0] = hub
    for spec in specs:
        model_id, _, raw = spec.partition("=") if "=" in spec else ("", "", spec)  # ids hold no `=`
        path = Path(raw).expanduser()
        path = path / "config.json" if path.is_dir() else path
        try:
            cfg = parse_json(read_text_bounded(path, what="model config"))
        except Unreadable as exc:
            raise InputError(
                f"--model-config {spec}: {exc.reason}; give a model's config.json (or its folder)"
            ) from None
        except ValueError:
            raise InputError(f"--model-config {spec}: not valid JSON; give a model's config.json") from None
        if not isinstance(cfg, dict) or not ("model_type" in cfg or "architectures" in cfg):
            raise InputError(f"--model-config {spec}: no model_type or architectures: not a model's config.json")
        GIVEN_CONFIGS[model_id] = (path, cfg)


def hub_cache_dir(environ: Mapping[str, str]) -> Path:
    """Where huggingface_hub keeps downloads: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"]).expanduser()
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"]).expanduser() / "hub"
    xdg = environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def _from_cache(model_id: str, environ: Mapping[str, str], revision: str | None = None) -> CheckpointFacts | None:
    """The snapshot huggingface_hub would load: the pinned revision's (a ref it resolved, or a commit folder), else
    refs/main's, else (a cache with no refs) the newest; a pinned revision not in the cache is not answered from
    another."""
    if model_id.count("/") > 1 or model_id.startswith((".", "/")):
        return None  # a path, not a hub id
    repo = hub_cache_dir(environ) / ("models--" + model_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    chosen = _snapshot_of(repo, revision or "main")
    if chosen is not None:
        paths = [str(chosen)]
    elif revision:
        return None
    else:
        try:
            entries = sorted(os.scandir(snapshots), key=lambda e: modified_time(e.path), reverse=True)
        except OSError:
            return None
        paths = [e.path for e in entries[:MAX_SNAPSHOTS]]
    for path in paths:
        folder = Path(path)
        cfg = _read_json(folder / "config.json")
        if cfg is not None:
            return from_config(
                model_id,
                CheckpointSource.HF_CACHE,
                str(folder / "config.json"),
                cfg,
                _index_total(folder),
                stored_weights(folder),
                folder,
            )
    return None


def _snapshot_of(repo: Path, revision: str) -> Path | None:
    """snapshots/<commit> for a ref huggingface_hub wrote (refs/<name> holds the commit) or a commit named itself."""
    if ".." in revision or revision.startswith("/") or revision in (CONFLICTING, "?"):
        return None
    commit = revision
    ref = repo / "refs" / revision
    if is_regular_file(ref):
        try:
            commit = read_text_bounded(ref, what="hub ref").strip()
        except Unreadable:
            return None
    folder = repo / "snapshots" / commit
    return folder if commit and "/" not in commit and ".." not in commit and os.path.isdir(folder) else None


def _read_json(path: Path) -> dict | None:
    if not is_regular_file(path):
        return None
    try:
        data = parse_json(read_text_bounded(path))
    except (Unreadable, ValueError):
        return None
    return data if isinstance(data, dict) else None


MAX_WEIGHTS_BYTES = 1 << 52  # 4 PiB: no checkpoint is larger; a bigger total_size is not a real one


def _index_total(folder: Path) -> int | None:
    index = _read_json(folder / "model.safetensors.index.json")
    metadata = (index or {}).get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if isinstance(total, bool) or not isinstance(total, (int, float)) or not 0 < total <= MAX_WEIGHTS_BYTES:
        return None
    return int(total)


# --- the weights' own header -----------------------------------------------------------------------------------

MAX_SAFETENSORS_HEADER = 16 * 1024 * 1024  # a header lists names, dtypes, shapes and offsets: ~100 bytes a tensor
_SAFETENSORS_DTYPES = {"F32": dtypes.FLOAT32, "F16": dtypes.FLOAT16, "BF16": dtypes.BFLOAT16, "F64": "float64"}


@record
class StoredWeights:
    dtype: str  # the first floating tensor's: what dtype="auto" takes when the config names none
    parameters: int | None  # elements of all tensors, when one file holds the whole model


def stored_weights(folder: Path) -> StoredWeights | None:
    """The stored dtype (and, for a single-file checkpoint, the parameter count) from the safetensors header:
    8 bytes of length, then JSON; the tensors themselves are never read."""
    try:
        files = sorted(e.path for e in os.scandir(folder) if e.name.endswith(".safetensors"))
    except OSError:
        return None
    if not files or not is_regular_file(Path(files[0])):
        return None
    try:
        head = read_prefix(files[0], 8)
        size = int.from_bytes(head, "little") if len(head) == 8 else 0
        if not 0 < size <= MAX_SAFETENSORS_HEADER:
            return None
        header = parse_json(read_prefix(files[0], 8 + size)[8:])
    except (OSError, Unreadable, ValueError):
        return None
    if not isinstance(header, dict):
        return None
    first, total = "", 0
    for name, entry in sorted(header.items()):  # safetensors' keys() order, which transformers walks
        if name == "__metadata__" or not isinstance(entry, dict):
            continue
        kind, shape = entry.get("dtype"), entry.get("shape")
        if not first and isinstance(kind, str) and kind in _SAFETENSORS_DTYPES:
            first = _SAFETENSORS_DTYPES[kind]
        if (
            isinstance(shape, list)
            and len(shape) <= 8
            and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_WEIGHTS_BYTES for n in shape)
        ):
            total += math.prod(shape)
    if total > MAX_WEIGHTS_BYTES:
        total = 0  # shapes no real checkpoint has: the count is not taken from them
    if not first:
        return None
    return StoredWeights(first, total if len(files) == 1 and total else None)


# --- a config.json as facts ---------------------------------------------------------------------------------

_ALIASES = {
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "decoder_layers", "n_layers"),
    "intermediate_size": ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "decoder_ffn_dim", "hidden_dim"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "decoder_attention_heads", "n_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv"),
    "head_dim": ("head_dim", "d_kv"),
    "vocab_size": ("vocab_size",),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "experts_per_token": ("num_experts_per_tok", "moe_topk"),
    "image_size": ("image_size",),
    "patch_size": ("patch_size",),
    "source_positions": ("max_source_positions",),
    "target_positions": ("max_target_positions",),
}


# the largest value of each field a real model has, with room to spare: past it a config is not judged (its values
# would overflow the memory estimate's arithmetic, and no GPU holds such a model anyway)
_LARGEST = {
    "hidden_size": 1 << 20,
    "layers": 1 << 16,
    "intermediate_size": 1 << 24,
    "heads": 1 << 16,
    "kv_heads": 1 << 16,
    "head_dim": 1 << 16,
    "vocab_size": 1 << 28,
    "experts": 1 << 16,
    "experts_per_token": 1 << 16,
    "image_size": 1 << 20,
    "patch_size": 1 << 16,
    "source_positions": 1 << 24,
    "target_positions": 1 << 24,
}


class _Impossible(ValueError):
    """A config.json value no real model has."""


def _pick(cfg: dict, field: str, names: tuple[str, ...]) -> int | None:
    for name in names:
        v = cfg.get(name)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            if v > _LARGEST[field]:
                shown = str(v) if v < 10**30 else f"a {len(str(v))}-digit number"
                raise _Impossible(f"{name} = {shown} is no real model's (at most {_LARGEST[field]:,})")
            return v
    return None


def from_config(
    model_id: str,
    source: CheckpointSource,
    detail: str,
    raw: dict,
    weights_bytes: int | None = None,
    weights: StoredWeights | None = None,
    folder: Path | None = None,
) -> CheckpointFacts:
    """Facts from a config.json (any family's spelling of the same fields; multimodal ones by their text
    model). Only the keys rules use are read; the code of the classes its `auto_map` names is read from `folder`
    (the config's own), when it is on this machine."""
    cfg = keep_read_keys(raw, MODEL_CONFIG_KEYS)
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    merged = {**cfg, **{k: v for k, v in text.items() if v is not None}}
    try:
        dims = {field: _pick(merged, field, names) for field, names in _ALIASES.items()}
    except _Impossible as exc:
        return CheckpointFacts(model_id, CheckpointSource.UNKNOWN, f"{detail}: {exc}")
    model_type = str(text.get("model_type") or cfg.get("model_type") or "")
    if dims["kv_heads"] is None and dims["heads"]:
        multi_query = merged.get("multi_query") is True and not merged.get("new_decoder_architecture")
        dims["kv_heads"] = 1 if multi_query else dims["heads"]
    expert_width = merged.get("moe_intermediate_size")
    if dims["experts"] and isinstance(expert_width, int) and 0 < expert_width <= _LARGEST["intermediate_size"]:
        dims["intermediate_size"] = expert_width  # Qwen-MoE, DeepSeek, OLMoE: each expert's own width
    if dims["intermediate_size"] is None and dims["hidden_size"]:
        dims["intermediate_size"] = 4 * dims["hidden_size"]  # GPT-2, BLOOM, Falcon: n_inner None means 4 * hidden
    tied = merged.get("tie_word_embeddings")
    tied = tied if isinstance(tied, bool) else tied_by_default(str(cfg.get("model_type") or model_type))
    stored = dtypes.from_string(
        cfg.get("dtype") or cfg.get("torch_dtype") or text.get("dtype") or text.get("torch_dtype")
    )
    torch_dtype = stored if stored and stored != dtypes.AUTO else ""
    if not torch_dtype and weights is not None:  # what dtype="auto" falls back to: the weights' own dtype
        torch_dtype = weights.dtype
    archs = cfg.get("architectures")
    stored_quantized = cfg.get("quantization_config")
    method = stored_quantized.get("quant_method") if isinstance(stored_quantized, dict) else None
    if method == "bitsandbytes":  # a saved bitsandbytes model loads as its bits say, as BitsAndBytesConfig would
        bits = [b for b in ("4bit", "8bit") if stored_quantized.get(f"load_in_{b}") is True]
        method = bits[0] if bits else method
    facts = CheckpointFacts(
        model_id=model_id,
        source=source,
        detail=detail,
        architecture=archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else "",
        model_type=model_type,
        tied_embeddings=tied,
        torch_dtype=torch_dtype,
        attention=attention_support(model_type),
        encoder_decoder=cfg.get("is_encoder_decoder") is True,
        weights_bytes=weights_bytes,
        quantization=str(method).lower() if isinstance(method, str) and method else "",
        # (auto_map holds `module.Class` names only: read whole, not through the kept keys)
        remote_classes=remote_classes(folder, raw.get("auto_map"), _shown(folder, source)) if folder else (),
        **dims,
    )
    params = weights.parameters if weights is not None else None
    if not params and weights_bytes and torch_dtype in _BYTES:
        params = weights_bytes // _BYTES[torch_dtype]
    return _with_parameters(facts, params)


def _shown(folder: Path, source: CheckpointSource) -> str:
    """A checkpoint folder as the report names it: a local one as the config's own path is shown."""
    return os.path.relpath(folder) if source == CheckpointSource.LOCAL else str(folder)


def _with_parameters(facts: CheckpointFacts, params: int | None) -> CheckpointFacts:
    from dataclasses import replace

    return replace(facts, parameters=params if params else count_parameters(facts))


def count_parameters(c: CheckpointFacts) -> int | None:
    """Parameters from the config's dimensions, for the families whose blocks are known (families.py);
    None for others (the table or the safetensors index gives them)."""
    shape = ARCHITECTURE_SHAPES.get(c.model_type)
    h, layers, inter, heads, vocab = c.hidden_size, c.layers, c.intermediate_size, c.heads, c.vocab_size
    if shape is None or not all((h, layers, inter, heads, vocab)):
        return None
    head_dim = c.head_dim or h // heads
    q, kv = heads * head_dim, (c.kv_heads or heads) * head_dim
    bias = shape["bias"]
    attention = h * q + 2 * h * kv + q * h
    if bias in ("qkv", "all"):
        attention += q + 2 * kv + (h if bias == "all" else 0)
    if shape.get("qk_norm"):
        attention += 2 * head_dim
    mlp = (3 if shape["gated"] else 2) * h * inter + (inter + h if bias == "all" else 0)
    if c.experts:
        mlp = mlp * c.experts + h * c.experts
    norm = h if shape["norm"] == "rms" else 2 * h
    norms = (1 if shape.get("parallel") else 2) + shape.get("extra_norms", 0)
    per_layer = attention + mlp + norms * norm
    total = layers * per_layer + vocab * h + norm
    if shape.get("pooler"):
        total += h * h + h + 2 * h  # the pooler, and two token-type embeddings
    if not c.tied_embeddings:
        total += vocab * h
    return total


# --- the shipped table ----------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def shipped_table() -> dict[str, dict[str, Any]]:
    """model id -> row, from data/checkpoints.json (ids are matched as written, then lower-cased)."""
    path = Path(__file__).resolve().parent.parent / "knowledge" / "data" / "checkpoints.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    rows: dict[str, dict] = {}
    for row in data["checkpoints"]:
        for mid in [row["id"], *row.get("aliases", ())]:
            rows[mid] = row
            rows.setdefault(mid.lower(), row)
    return rows


def _from_row(model_id: str, row: dict) -> CheckpointFacts:
    fields = {
        k: row[k]
        for k in (
            "architecture",
            "model_type",
            "parameters",
            "layers",
            "hidden_size",
            "intermediate_size",
            "heads",
            "kv_heads",
            "head_dim",
            "vocab_size",
            "tied_embeddings",
            "torch_dtype",
            "experts",
            "experts_per_token",
            "encoder_decoder",
            "image_size",
            "patch_size",
            "source_positions",
            "target_positions",
        )
        if k in row
    }
    facts = CheckpointFacts(
        model_id,
        CheckpointSource.TABLE,
        f"the doctor's table ({row['source']})",
        attention=attention_support(row.get("model_type", "")),
        **fields,
    )
    if facts.kv_heads is None and facts.heads:
        from dataclasses import replace

        facts = replace(facts, kv_heads=facts.heads)
    return facts if facts.parameters else _with_parameters(facts, None)
