"""Strings from outside the doctor (scripts, config files, logs, other processes, the environment) on their
way into facts and reports: credentials are redacted and terminal control characters are made visible.

Reports are uploaded as CI artifacts and snapshots are committed, so what the doctor records of another
process or a config file is only what its rules read, and every recorded string goes through `redact_text`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

REDACTED = "<redacted>"

# The parts of a name (split on _ - . and spaces) that mark its value as a credential.
_SECRET_PARTS = {
    "token",
    "secret",
    "secrets",
    "password",
    "passwd",
    "passphrase",
    "auth",
    "oauth",
    "authorization",
    "credential",
    "credentials",
    "apikey",
    "cookie",
}
_SECRET_ENDINGS = ("token", "secret", "password", "passwd", "apikey", "credential", "credentials")
# In a training script `token` is mostly a vocabulary token (pad_token_id, max_new_tokens): those are not secrets.
_VOCABULARY_PARTS = {
    "pad",
    "eos",
    "bos",
    "unk",
    "sep",
    "cls",
    "mask",
    "id",
    "ids",
    "type",
    "types",
    "max",
    "min",
    "num",
    "new",
    "special",
    "added",
    "length",
    "len",
    "count",
    "level",
    "start",
    "end",
    "image",
    "video",
    "audio",
    "vision",
    "decoder",
    "encoder",
    "per",
    "chat",
    "template",
    "embedding",
}
# `key` and `pwd` alone are a sort key and the working directory far more often than a secret: they count only
# next to a word that makes them one (api_key, AWS_SECRET_ACCESS_KEY, db_pwd).
_KEY_PARTS = {"key", "pwd"}
_KEY_QUALIFIERS = {
    "api",
    "access",
    "private",
    "signing",
    "encryption",
    "license",
    "master",
    "service",
    "account",
    "ssh",
    "aws",
    "openai",
    "anthropic",
    "wandb",
    "hf",
    "hub",
    "client",
    "app",
    "subscription",
    "db",
    "user",
    "admin",
    "root",
    "comet",
    "neptune",
    "azure",
    "gcp",
    "s3",
}
_NOT_SECRET_VALUES = {"", "true", "false", "none", "null", "auto", "yes", "no", REDACTED.lower()}

# Credentials that announce themselves, wherever they appear.
_SHAPED = re.compile(
    r"\bhf_[A-Za-z0-9]{16,}"  # Hugging Face
    r"|\bapi_org_[A-Za-z0-9]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|\bglpat-[A-Za-z0-9_\-]{16,}"  # GitLab
    r"|\bsk-[A-Za-z0-9_\-]{16,}|\bsk_(?:live|test)_[A-Za-z0-9]{16,}"  # OpenAI, Anthropic, Stripe
    r"|\bxox[abposr]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key id
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"  # JWT
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    re.DOTALL,
)
_BEARER = re.compile(r"\b(Bearer)(\s+)[A-Za-z0-9._~+/=\-]{12,}")
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)([^\s/@:'\"]*):([^\s/@'\"]+)@")
# name=value, name: value, "name": "value", --name value; the name is tested by `secret_name`.
_NAMED_VALUE = re.compile(
    r"""(?:(?P<flag>--?[A-Za-z][\w.\-]*)|(?P<word>[A-Za-z_][\w.\-]*))(?P<q0>['"]?)"""
    r"""(?P<sep>\s*[=:]\s*|(?(flag)\s+|(?!)))"""
    r"""(?:(?P<q>['"])(?P<quoted>(?:(?!(?P=q)).)*)(?P=q)|(?P<bare>(?:(?:Bearer|Basic)\s+)?[^\s'",;)}\]]+))"""
)
# parser.add_argument("--hub_token", default="...") names the secret in one string and holds it in another
_ARGUMENT_DEFAULT = re.compile(
    r"""(['"])(?P<flag>--?[\w.\-]+)\1(?P<between>[^'"]*?\bdefault\s*=\s*)"""
    r"""(?P<q>['"])(?P<value>(?:(?!(?P=q)).)*)(?P=q)"""
)
# one search that rules out most strings: nothing here, nothing to redact
_ANY_HINT = re.compile(
    r"hf_|api_org_|gh[pousr]_|github_pat_|glpat-|sk[-_]|xox|akia|asia|eyj|private key|://|bearer"
    r"|token|secret|pass|pwd|auth|credential|key|cookie"
)  # searched in the lowercased text
_NAME_HINT = re.compile("token|secret|pass|pwd|auth|credential|key|cookie", re.IGNORECASE)
_DOTTED_OR_CALL = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+|[A-Za-z_][\w.]*[(\[].*")

# C0 controls but tab, DEL, C1 controls, and the bidi overrides and isolates that reorder what a terminal shows.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_KEEP_NEWLINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@lru_cache(maxsize=4096)
def secret_name(name: str) -> bool:
    """A name (argument, flag, environment variable, config key) whose value is a credential."""
    parts = set(p for p in re.split(r"[_\-.\s]+", name.lower().lstrip("-")) if p)
    if parts & _KEY_PARTS and parts & (_KEY_QUALIFIERS | _SECRET_PARTS):
        return True
    if parts & _VOCABULARY_PARTS:
        return False
    return any(p in _SECRET_PARTS or p.endswith(_SECRET_ENDINGS) for p in parts)


def _secret_value(value: str) -> bool:
    value = value.strip()
    return value.lower() not in _NOT_SECRET_VALUES and not re.fullmatch(r"-?\d{1,11}", value)


def redact_text(text: str) -> str:
    """The text with every value that looks like a credential replaced by <redacted>."""
    if not text or not _ANY_HINT.search(text.lower()):
        return text
    return _redact(text)


@lru_cache(maxsize=8192)  # facts repeat the same strings (states, paths, call texts) many times
def _redact(text: str) -> str:
    text = _SHAPED.sub(REDACTED, text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    if not _NAME_HINT.search(text):
        return text
    text = _ARGUMENT_DEFAULT.sub(_argument_default, text)
    out: list[str] = []
    pos = 0
    while (m := _NAMED_VALUE.search(text, pos)) is not None:
        replacement = _named_value(m)
        if replacement is None:  # not a secret: look again right after the name (its value may be `NAME=secret`)
            name_end = m.end("flag") if m.group("flag") else m.end("word")
            out.append(text[pos:name_end])
            pos = name_end
            continue
        out.append(text[pos : m.start()] + replacement)
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def _argument_default(m: re.Match) -> str:
    if not secret_name(m.group("flag")) or not _secret_value(m.group("value")):
        return m.group(0)
    q = m.group("q")
    return f"{m.group(1)}{m.group('flag')}{m.group(1)}{m.group('between')}{q}{REDACTED}{q}"


def _named_value(m: re.Match) -> str | None:
    name, sep = m.group("flag") or m.group("word"), m.group("sep")
    if not secret_name(name):
        return None
    if m.group("q") is not None:
        value = m.group("quoted")
        if not _secret_value(value):
            return None
        q = m.group("q")
        return f"{name}{m.group('q0')}{sep}{q}{REDACTED}{q}"
    value = m.group("bare")
    if not _secret_value(value) or value.startswith("-") and not sep.strip() or _DOTTED_OR_CALL.fullmatch(value):
        return None  # `--token --lr`, `token=args.hub_token`, `token=os.environ[...]`: not the secret itself
    return f"{name}{m.group('q0')}{sep}{REDACTED}"


MIN_ENVIRONMENT_SECRET = 4  # characters: a shorter value would be redacted out of ordinary words


def environment_secrets(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The values of the variables whose names mark a credential (MY_DB_PASSWORD, WANDB_API_KEY, HF_TOKEN) in an
    environment the doctor hands to a script, longest first: wherever the script prints or raises one, it is
    redacted."""
    import json

    values = {
        v
        for k, v in environ.items()
        if secret_name(k) and _secret_value(v) and len(v.strip()) >= MIN_ENVIRONMENT_SECRET
    }
    # as a script may show them: the value, its repr (a KeyError doubles a backslash) and its JSON string
    shown = {
        form
        for v in values
        for form in (v, repr(v)[1:-1], json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1])
    }
    return tuple(sorted(shown, key=len, reverse=True))


def without_values(obj: Any, values: tuple[str, ...]) -> Any:
    """A JSON-like structure (or a string) with each of `values` replaced by <redacted> in every string."""
    if not values:
        return obj
    if isinstance(obj, str):
        for value in values:
            if value in obj:
                obj = obj.replace(value, REDACTED)
        return obj
    if isinstance(obj, dict):
        return {k: without_values(v, values) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [without_values(v, values) for v in obj]
    return obj


def shown_data(obj: Any) -> Any:
    """A JSON-like structure on its way into a report: redacted (redact_data), and every string's control characters
    but newlines and tabs shown as escapes, so that a report printed raw (`jq -r`) cannot drive a terminal."""
    return redact_data(obj, shown=True)


def redact_data(obj: Any, under_secret: bool = False, shown: bool = False) -> Any:
    """A JSON-like structure with credentials redacted: every string under a secret-named key, and every
    credential-shaped value anywhere. Keys, numbers and booleans are kept. `shown`: each string also made printable
    (shown_data), in the same walk."""
    if isinstance(obj, dict):
        return {
            k: redact_data(v, k not in _STRUCTURAL and (under_secret or (isinstance(k, str) and secret_name(k))), shown)
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [redact_data(v, under_secret, shown) for v in obj]
    if isinstance(obj, str):
        text = REDACTED if under_secret and _secret_value(obj) else redact_text(obj)
        return printable(text, keep_newlines=True) if shown else text
    return obj


# Fields of the facts' own records (a Value's state, a Location's path) stay readable under a secret name.
_STRUCTURAL = {"state", "kind", "path", "callee", "scope", "location", "line", "column"}


# --- what the rules read from files named by the script, the launcher or the machine -----------------------
# A shape maps each key kept to True (keep a scalar) or to a nested shape. Rules: checks/distributed.py
# (DeepSpeed), derive.py (model config.json), checks/launch.py and derive.py (accelerate config).

DEEPSPEED_KEYS = {
    "fp16": {"enabled": True, "loss_scale": True},
    "bf16": {"enabled": True},
    "bfloat16": {"enabled": True},
    "zero_optimization": {"stage": True, "offload_optimizer": {"device": True}, "offload_param": {"device": True}},
}
_MODEL_SHAPE_KEYS = {
    k: True
    for k in (
        "model_type",
        "torch_dtype",
        "dtype",
        "hidden_size",
        "n_embd",
        "d_model",
        "dim",
        "num_hidden_layers",
        "n_layer",
        "num_layers",
        "decoder_layers",
        "n_layers",
        "intermediate_size",
        "n_inner",
        "d_ff",
        "ffn_dim",
        "decoder_ffn_dim",
        "hidden_dim",
        "num_attention_heads",
        "n_head",
        "num_heads",
        "decoder_attention_heads",
        "n_heads",
        "num_key_value_heads",
        "num_kv_heads",
        "n_head_kv",
        "multi_query",
        "new_decoder_architecture",
        "head_dim",
        "d_kv",
        "vocab_size",
        "tie_word_embeddings",
        "num_local_experts",
        "moe_intermediate_size",
        "num_experts",
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_topk",
        "image_size",
        "patch_size",
        "is_encoder_decoder",
        "max_source_positions",
        "max_target_positions",
    )
}
# checkpoint facts (probes/checkpoint.py): the architecture, its shape and stored dtype; multimodal configs nest
# the language model's under text_config
MODEL_CONFIG_KEYS = {
    **_MODEL_SHAPE_KEYS,
    "architectures": True,
    "text_config": _MODEL_SHAPE_KEYS,
    # a checkpoint stored quantized (GPTQ, AWQ, FP8, MXFP4, a saved bitsandbytes model): its method
    "quantization_config": {"quant_method": True, "load_in_4bit": True, "load_in_8bit": True},
}
ACCELERATE_CONFIG_KEYS = {
    "mixed_precision": True,
    "num_processes": True,
    "main_process_port": True,
    "distributed_type": True,
    "num_machines": True,
    "use_cpu": True,
    # derive/sharding.py: DeepSpeed and FSDP as `accelerate launch` sets them up
    "deepspeed_config": {
        k: True
        for k in (
            "zero_stage",
            "offload_optimizer_device",
            "offload_param_device",
            "zero3_init_flag",
            "deepspeed_config_file",
        )
    },
    "fsdp_config": {
        k: True
        for k in (
            "fsdp_sharding_strategy",
            "fsdp_offload_params",
            "fsdp_version",
            "fsdp_reshard_after_forward",
            "fsdp_auto_wrap_policy",
            "sharding_strategy",
            "offload_params",
            "version",
            "reshard_after_forward",
            "fsdp_use_orig_params",
            "use_orig_params",
        )
    },
}


def keep_read_keys(data: Any, shape: dict) -> dict:
    """Only the keys the rules read (scalars, or lists of scalars), each string value redacted."""
    if not isinstance(data, dict):
        return {}
    out: dict = {}
    for key, inner in shape.items():
        if key not in data:
            continue
        value = data[key]
        if isinstance(inner, dict):
            if isinstance(value, dict):
                out[key] = keep_read_keys(value, inner)
        elif _scalar(value):
            out[key] = redact_data(value)
        elif isinstance(value, list) and all(_scalar(v) for v in value):
            out[key] = redact_data(value)
    return out


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 200)


# --- other processes ---------------------------------------------------------------------------------------

_LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "accelerate.commands.launch": "accelerate launch",
    "accelerate.commands.accelerate_cli": "accelerate",
    "deepspeed.launcher.runner": "deepspeed",
    "deepspeed.launcher.launch": "deepspeed",
}


def describe_command(argv: list[str] | tuple[str, ...], name: str = "") -> str:
    """Another process as the doctor records it: its executable and the launcher kind, never its arguments
    (a colleague's `--hub_token` must not land in a report). E.g. `torchrun`, `accelerate launch`,
    `python`, `python -m vllm`."""
    argv = [a for a in argv if isinstance(a, str)]
    exe = os.path.basename(argv[0]) if argv else (name or "")
    exe = printable(redact_text(exe))[:40]
    if not exe:
        return ""
    if exe == "accelerate" and len(argv) > 1 and argv[1] == "launch":
        return "accelerate launch"
    if exe.startswith("python") and "-m" in argv[1:-1]:
        module = argv[argv.index("-m", 1) + 1]
        if module in _LAUNCHER_MODULES:
            return _LAUNCHER_MODULES[module]
        package = module.split(".")[0]
        if re.fullmatch(r"[A-Za-z_][\w]{0,40}", package):
            return f"{exe} -m {package}"
    return exe


# --- terminals ---------------------------------------------------------------------------------------------


def printable(text: str, keep_newlines: bool = False) -> str:
    """The text with control characters shown as escapes (\\x1b, \\u202e), so a line from a script or a log
    cannot retitle the window, clear the screen or reorder what is shown."""
    pattern = _CONTROL_KEEP_NEWLINES if keep_newlines else _CONTROL
    return pattern.sub(_escape_control, text)


def _escape_control(m: re.Match) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: Any, keep_newlines: bool = False) -> str:
    """A string from outside on its way to a terminal: redacted, controls made visible."""
    return printable(redact_text(str(text)), keep_newlines)


def markup(text: Any) -> str:
    """A string from outside as rich markup: redacted, controls made visible, `[red]` shown literally."""
    return escape_markup(shown(text, keep_newlines=True))


# A tag as rich's markup reads it: `[` then a letter, `#`, `/` or `@`, up to the next `]`, with the backslashes before
# it (an odd count makes the tag text, each pair is one backslash). Markup is escaped here, and read back as text by
# report.text.plain, as rich does both (tests hold each equal to rich's own), so that a plain report needs no rich.
MARKUP_TAG = re.compile(r"(\\*)\[([a-z#/@][^[]*?)]")


def escape_markup(text: str) -> str:
    """`text` inside rich markup: each tag-like `[...]` preceded by a backslash (the backslashes already there
    doubled), and a final lone backslash doubled, so that nothing in it is read as markup."""
    out = MARKUP_TAG.sub(lambda m: f"{2 * m.group(1)}\\[{m.group(2)}]", text)
    return out + "\\" if out.endswith("\\") and not out.endswith("\\\\") else out
