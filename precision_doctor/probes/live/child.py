"""The child process of `check --live`: runs the user's script with hooks at the points where training begins,
gathers the real model, args and optimizer there, and stops (or runs N real steps).

Runs in the user's training environment: torch and the libraries are imported by the script itself; the
hooks patch them as their modules finish loading, so nothing is imported earlier than the script would.

    python -m precision_doctor.probes.live.child REPORT_FD MODE STEPS SCRIPT [ARGS...]
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import math
import os
import re
import runpy
import sys
import traceback
from collections import Counter, defaultdict
from typing import Any


class StopTraining(BaseException):
    """Raised from a hook once the facts are gathered: unwinds the script without running a training step."""


LOSS_SOURCES = ("trainer", "accelerator", "scaler")  # which hook's view of a step's loss wins


class Reporter:
    def __init__(self, fd: int, mode: str, steps: int):
        self.out = os.fdopen(fd, "w", buffering=1)
        self.mode = mode  # "stop" | "steps"
        self.steps = steps
        self.facts: dict[str, Any] = {}
        self.optimizer_steps = 0
        self.losses: list[float] = []  # one per training step
        self.scales: list[float] = []
        self.sent_facts = False
        self.window: dict[str, list[float]] = {}  # the losses seen since the last step ended, by where they came from

    def send(self, **message) -> None:
        try:
            self.out.write(json.dumps(message, default=str) + "\n")
        except (OSError, ValueError):
            pass

    def phase(self, name: str) -> None:
        self.send(phase=name)

    def record_loss(self, loss, source: str) -> None:
        """A loss seen on its way to backward. One step's loss passes several hooks (Trainer.training_step,
        Accelerator.backward, GradScaler.scale): each is kept until the step ends, then one value is recorded."""
        value = _loss_value(loss) if hasattr(loss, "detach") else None
        if value is not None:
            self.window.setdefault(source, []).append(value)

    def step_ended(self) -> None:
        """The optimizer stepped (or the scaler skipped the step): record this step's loss once, from the hook
        that sees it whole (the Trainer's, else accelerate's, else the scaler's), averaged over gradient
        accumulation's micro-batches; and tell the status line which step this was."""
        source = next((s for s in LOSS_SOURCES if self.window.get(s)), None)
        if source is None:
            return
        values = self.window[source]
        value = sum(values) / len(values)
        self.window = {}
        self.losses.append(value)
        self.send(loss=value if math.isfinite(value) else str(value), step=len(self.losses))

    def gathered(self, where: str, **facts) -> None:
        self.facts.update({k: v for k, v in facts.items() if v is not None})
        self.facts["stopped_at"] = where
        if not self.sent_facts or self.mode == "steps":
            self.send(facts=self.facts)
            self.sent_facts = True
        if self.mode == "stop":
            raise StopTraining(where)


REPORTER: Reporter | None = None
SCRIPT = ""


# --- what the real objects say ---------------------------------------------------------------


def _short_dtype(dtype) -> str:
    return str(dtype).replace("torch.", "")


ADAPTER = re.compile(r"\.(lora_[A-Za-z_]+|ia3_l|vera_[A-Za-z_]+|modules_to_save|adapter_\w+)\.")


def _prefix(name: str) -> str:
    """`model.layers.3.self_attn.q_proj.weight` -> `model.layers`; `lm_head.weight` -> `lm_head`."""
    for wrapper in ("base_model.model.", "module."):
        if name.startswith(wrapper):
            name = name[len(wrapper) :]
    parts = name.split(".")
    out = []
    for p in parts[:-1]:
        if p.isdigit():
            break
        out.append(p)
        if len(out) == 2:
            break
    return ".".join(out) or parts[0]


def model_facts(model) -> dict:
    inner = model
    for attr in ("module",):  # DataParallel / DDP wrappers
        inner = getattr(inner, attr, inner)
    by_prefix: dict[str, Counter] = defaultdict(Counter)
    trainable: Counter = Counter()
    trainable_prefix: dict[str, Counter] = defaultdict(Counter)
    adapters: Counter = Counter()
    for name, p in inner.named_parameters():
        d = _short_dtype(p.dtype)
        if ADAPTER.search(name):
            adapters[d] += 1  # adapters are meant to differ from the base (peft keeps LoRA in fp32)
        else:
            by_prefix[_prefix(name).replace("base_model.model.", "")][d] += 1
        if p.requires_grad:
            trainable[d] += 1
            trainable_prefix[_prefix(name)][d] += 1
    buffers: Counter = Counter(_short_dtype(b.dtype) for _, b in inner.named_buffers())
    quantized: Counter = Counter()
    compute = set()
    for m in inner.modules():
        cls = type(m).__name__
        if cls in ("Linear4bit", "Linear8bitLt", "Params4bit"):
            quantized[cls] += 1
            if getattr(m, "compute_dtype", None) is not None:
                compute.add(_short_dtype(m.compute_dtype))
    device_map = getattr(inner, "hf_device_map", None)
    config = getattr(inner, "config", None)
    peft = {}
    peft_config = getattr(inner, "peft_config", None)
    if isinstance(peft_config, dict):
        for name, cfg in peft_config.items():
            peft[name] = {
                "type": str(getattr(cfg, "peft_type", "")),
                "r": getattr(cfg, "r", None),
                "target_modules": sorted(map(str, getattr(cfg, "target_modules", None) or [])),
                "modules_to_save": sorted(map(str, getattr(cfg, "modules_to_save", None) or [])),
            }
    return {
        "architecture": type(inner).__name__,
        "param_dtypes": {k: dict(v) for k, v in sorted(by_prefix.items())},
        "trainable_dtypes": dict(trainable),
        "adapter_dtypes": dict(adapters),
        "trainable_by_prefix": {k: dict(v) for k, v in sorted(trainable_prefix.items())},
        "buffer_dtypes": dict(buffers),
        "device_map": {str(k): str(v) for k, v in device_map.items()} if isinstance(device_map, dict) else None,
        "devices": sorted({str(p.device) for p in inner.parameters()}),
        "quantized": dict(quantized),
        "compute_dtypes": sorted(compute),
        "peft": peft,
        "gradient_checkpointing": bool(getattr(inner, "is_gradient_checkpointing", False)),
        "is_parallelizable": bool(getattr(inner, "is_parallelizable", False)),
        "model_parallel": bool(getattr(inner, "model_parallel", False)),
        "is_loaded_in_4bit": bool(getattr(inner, "is_loaded_in_4bit", False)),
        "is_loaded_in_8bit": bool(getattr(inner, "is_loaded_in_8bit", False)),
        "config_dtype": _short_dtype(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or ""),
    }


def optimizer_facts(opt) -> dict:
    inner = getattr(opt, "optimizer", opt)  # accelerate's AcceleratedOptimizer
    groups = []
    mismatched = 0
    for g in getattr(inner, "param_groups", []):
        dtypes = Counter(_short_dtype(p.dtype) for p in g["params"])
        groups.append({"dtypes": dict(dtypes), "foreach": g.get("foreach"), "fused": g.get("fused")})
    for p, state in getattr(inner, "state", {}).items():
        for k, v in state.items():
            if (
                k != "step"
                and hasattr(v, "dtype")
                and getattr(v, "is_floating_point", lambda: False)()
                and v.dtype != p.dtype
            ):
                mismatched += 1
    return {"class_name": type(inner).__name__, "groups": groups, "state_dtype_mismatches": mismatched}


def trainer_facts(trainer) -> dict:
    args = trainer.args
    wrap = "none"
    if getattr(args, "deepspeed", None):
        wrap = "DeepSpeed"
    elif getattr(trainer, "is_fsdp_enabled", False):
        wrap = "FSDP"
    elif getattr(args, "parallel_mode", None) is not None and "DISTRIBUTED" in str(args.parallel_mode):
        wrap = "DistributedDataParallel"
    elif (
        args.n_gpu > 1
        and not getattr(trainer.model, "is_loaded_in_8bit", False)
        and not getattr(trainer.model, "is_loaded_in_4bit", False)
    ):
        wrap = "DataParallel"
    return {
        "n_gpu": args.n_gpu,
        "is_model_parallel": bool(getattr(trainer, "is_model_parallel", False)),
        "fp16": bool(args.fp16),
        "bf16": bool(args.bf16),
        "wrap": wrap,
        "train_batch_size": getattr(args, "train_batch_size", None),
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "gradient_checkpointing": bool(args.gradient_checkpointing),
        "gradient_checkpointing_kwargs": args.gradient_checkpointing_kwargs,
        "max_steps": args.max_steps,
    }


def accelerator_facts(acc) -> dict:
    state = getattr(acc, "state", None)
    return {
        "mixed_precision": str(getattr(acc, "mixed_precision", "")),
        "scaler": getattr(acc, "scaler", None) is not None,
        "distributed_type": str(getattr(state, "distributed_type", "")),
        "num_processes": getattr(acc, "num_processes", None),
    }


def _script_models(script: str) -> list:
    """The modules a plain loop trains: in the script's frames on the stack, else its globals; biggest first."""
    try:
        import torch
    except ImportError:
        return []
    found = {}
    frame = sys._getframe(1)
    while frame is not None:
        if os.path.abspath(frame.f_code.co_filename) == script:
            for value in list(frame.f_locals.values()) + list(frame.f_globals.values()):
                if isinstance(value, torch.nn.Module):
                    found[id(value)] = value
        frame = frame.f_back
    return sorted(found.values(), key=lambda m: -sum(p.numel() for p in m.parameters()))


def _loss_value(loss) -> float | None:
    try:
        return float(loss.detach().float().mean().item())
    except Exception:
        return None


# --- hooks ---------------------------------------------------------------------------------------


def _patch_trainer(module) -> None:
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None or getattr(trainer_cls.train, "_pd_hooked", False):
        return
    original_train = trainer_cls.train
    original_step = trainer_cls.training_step

    def train(self, *args, **kwargs):
        REPORTER.phase("building the trainer")
        facts = {"trainer": trainer_facts(self), "model": model_facts(self.model)}
        if REPORTER.mode == "steps":
            self.args.max_steps = REPORTER.steps
        REPORTER.gathered("Trainer.train", **facts)
        REPORTER.phase("stepping")
        return original_train(self, *args, **kwargs)

    def training_step(self, *args, **kwargs):
        loss = original_step(self, *args, **kwargs)
        REPORTER.record_loss(loss, "trainer")
        return loss

    train._pd_hooked = True
    trainer_cls.train = train
    trainer_cls.training_step = training_step


def _patch_accelerate(module) -> None:
    acc_cls = getattr(module, "Accelerator", None)
    if acc_cls is None or getattr(acc_cls.prepare, "_pd_hooked", False):
        return
    original_prepare = acc_cls.prepare
    original_backward = acc_cls.backward

    def prepare(self, *objects, **kwargs):
        result = original_prepare(self, *objects, **kwargs)
        outs = result if isinstance(result, tuple) else (result,)
        facts: dict[str, Any] = {"accelerator": accelerator_facts(self)}
        for obj in outs:
            if hasattr(obj, "named_parameters") and "model" not in facts:
                facts["model"] = model_facts(obj)
            elif hasattr(obj, "param_groups") or hasattr(getattr(obj, "optimizer", None), "param_groups"):
                facts["optimizer"] = optimizer_facts(obj)
        if "model" in facts and REPORTER.mode == "stop":
            REPORTER.gathered("Accelerator.prepare", **facts)
        else:
            REPORTER.facts.update(facts)
        return result

    def backward(self, loss, **kwargs):
        REPORTER.record_loss(loss, "accelerator")
        return original_backward(self, loss, **kwargs)

    prepare._pd_hooked = True
    acc_cls.prepare = prepare
    acc_cls.backward = backward


def _patch_optimizer(module) -> None:
    opt_cls = getattr(module, "Optimizer", None)
    if opt_cls is None or getattr(opt_cls, "_pd_hooked", False):
        return
    opt_cls._pd_hooked = True
    original_init = opt_cls.__init__

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        original_step = self.step  # each optimizer class wraps step itself: hook this instance's

        def step(*a, **kw):
            if REPORTER.optimizer_steps == 0 and not REPORTER.sent_facts:
                facts = {"optimizer": optimizer_facts(self)}
                models = _script_models(SCRIPT)
                if models:
                    facts["model"] = model_facts(models[0])
                REPORTER.gathered("Optimizer.step", **facts)
            result = original_step(*a, **kw)
            REPORTER.optimizer_steps += 1
            REPORTER.step_ended()
            if (
                REPORTER.mode == "steps"
                and REPORTER.optimizer_steps >= REPORTER.steps
                and "Trainer.train" != REPORTER.facts.get("stopped_at")
            ):
                REPORTER.facts["optimizer_after"] = optimizer_facts(self)
                raise StopTraining("steps done")
            return result

        self.step = step

    opt_cls.__init__ = __init__


def _patch_grad_scaler(module) -> None:
    scaler_cls = getattr(module, "GradScaler", None)
    if scaler_cls is None or getattr(scaler_cls, "_pd_hooked", False):
        return
    scaler_cls._pd_hooked = True
    original_scale = scaler_cls.scale
    original_update = scaler_cls.update

    def scale(self, outputs):
        REPORTER.record_loss(outputs, "scaler")
        REPORTER.facts.setdefault("grad_scaler", {"enabled": bool(getattr(self, "_enabled", True))})
        return original_scale(self, outputs)

    def update(self, *args, **kwargs):
        REPORTER.step_ended()  # a step the scaler skipped (inf/NaN gradients) still ends here
        result = original_update(self, *args, **kwargs)
        try:
            REPORTER.scales.append(float(self.get_scale()))
        except Exception:
            pass
        return result

    scaler_cls.scale = scale
    scaler_cls.update = update


HOOKS = {
    "transformers.trainer": _patch_trainer,
    "accelerate.accelerator": _patch_accelerate,
    "torch.optim.optimizer": _patch_optimizer,
    "torch.amp.grad_scaler": _patch_grad_scaler,
}


class _HookFinder(importlib.abc.MetaPathFinder):
    """Patches a hooked module right after it executes, whoever imports it."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
            if spec is not None and spec.loader is not None:
                original_exec = spec.loader.exec_module

                def exec_module(module, _orig=original_exec, _name=fullname):
                    _orig(module)
                    HOOKS[_name](module)

                spec.loader.exec_module = exec_module
                return spec
        return None


def _frames(exc: BaseException, script: str) -> list[dict]:
    frames = []
    for fs in traceback.extract_tb(exc.__traceback__):
        if fs.filename.endswith(os.path.join("live", "child.py")) or "runpy" in fs.filename:
            continue
        keep = fs.filename == script or re.search(
            r"(torch|transformers|accelerate|peft|bitsandbytes|trl)/", fs.filename
        )
        if keep:
            frames.append({"file": fs.filename, "line": fs.lineno, "function": fs.name, "code": fs.line or ""})
    return frames[-12:]


def main(argv: list[str]) -> int:
    global REPORTER, SCRIPT
    fd, mode, steps, script, *args = argv
    REPORTER = Reporter(int(fd), mode, int(steps))
    SCRIPT = os.path.abspath(script)
    sys.meta_path.insert(0, _HookFinder())
    for name in HOOKS:  # already imported by sitecustomize or the like: patch now
        if name in sys.modules:
            HOOKS[name](sys.modules[name])
    sys.argv = [script] + args
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    REPORTER.phase("importing and loading the model")
    outcome: dict[str, Any] = {}
    try:
        runpy.run_path(script, run_name="__main__")
        outcome["ended"] = "finished" if REPORTER.optimizer_steps == 0 and not REPORTER.sent_facts else "steps done"
    except StopTraining as stop:
        outcome["ended"] = "stopped" if str(stop) != "steps done" else "steps done"
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        outcome["ended"] = "exited"
        outcome["exit_code"] = code
    except BaseException as exc:  # the diagnosis: keep type, message and the frames that matter
        outcome["ended"] = "raised"
        outcome["error"] = {
            "type": type(exc).__name__,
            "message": str(exc)[:2000],
            "frames": _frames(exc, os.path.abspath(script)),
            "traceback": "".join(traceback.format_exception(exc))[-6000:],
        }
        traceback.print_exc()
    REPORTER.step_ended()  # the loss of a step that raised before the optimizer stepped
    outcome["optimizer_steps"] = REPORTER.optimizer_steps
    outcome["losses"] = [x if math.isfinite(x) else str(x) for x in REPORTER.losses[:1000]]
    outcome["loss_scales"] = REPORTER.scales[:1000]
    REPORTER.send(facts=REPORTER.facts, outcome=outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
