"""The memory estimate against a trace of the real model at full size, with no GPU and no memory.

Each job builds the checkpoint's architecture from the doctor's table at its real size under torch's
FakeTensorMode (tensors with shapes and dtypes, no storage), then runs two training steps (forward, the loss,
backward, the optimizer step) while torch.distributed._tools.mem_tracker.MemTracker follows every storage's
lifetime: the peak of what tensors hold at once, parameters, gradients, optimizer state, activations and
temporaries (the fp32 logits the loss upcasts, the fused optimizer's scratch) included. That is the allocated
peak; the estimate's counterpart is its peak without the CUDA context and the allocator reserve. A GPU adds what
its caching allocator keeps unallocated (docs/memory.md), which this trace does not see.

The trace runs on the CPU's kernels: attention through SDPA's CPU flash kernel (its math kernel, which keeps the
scores, where the architecture has attention dropout, as GPT-2 does: the estimate is told so), autocast with the
CPU's op lists.

    python benchmarks/memory_trace.py            # every job (a few minutes on two cores)
    python benchmarks/memory_trace.py --quick    # two jobs
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from precision_doctor.derive.memory import GIB, TrainingShape, estimate  # noqa: E402
from precision_doctor.probes.checkpoint import checkpoint_facts  # noqa: E402


@dataclass(frozen=True)
class Job:
    model: str
    weights: str  # the parameters' dtype
    amp: str = ""  # autocast dtype, "" for none
    batch: int = 4
    sequence: int = 1024
    lora: int = 0  # LoRA rank on peft's default modules; 0: full fine-tune
    checkpointing: bool = False
    fp32_embeddings: bool = False  # Axolotl's full fine-tune: embeddings, output layer and norms cast to float32

    def describe(self) -> str:
        what = f"LoRA r={self.lora}" if self.lora else "full"
        amp = f" + {self.amp} autocast" if self.amp else ""
        gc = ", checkpointing" if self.checkpointing else ""
        fp32 = ", fp32 embeddings" if self.fp32_embeddings else ""
        return f"{self.model.split('/')[-1]} {what}, {self.weights}{amp}{gc}{fp32}, {self.batch}x{self.sequence}"


JOBS = [
    Job("Qwen/Qwen2.5-0.5B", "bfloat16", batch=4),
    Job("Qwen/Qwen2.5-0.5B", "bfloat16", batch=16),  # a 152k vocabulary: the logits dominate
    Job("meta-llama/Llama-3.2-1B", "bfloat16", batch=2),
    Job("meta-llama/Llama-3.2-1B", "bfloat16", batch=8, lora=16, checkpointing=True),
    Job("HuggingFaceTB/SmolLM2-360M", "float32", batch=4),
    Job("HuggingFaceTB/SmolLM2-360M", "float32", amp="bfloat16", batch=4),
    Job("openai-community/gpt2-medium", "float32", amp="bfloat16", batch=8),
    Job("openai-community/gpt2-medium", "bfloat16", batch=8, lora=16, checkpointing=True),
    # Axolotl's full fine-tune: embeddings, output layer and norms kept in fp32 under bf16 autocast
    Job("meta-llama/Llama-3.2-1B", "bfloat16", amp="bfloat16", batch=8, fp32_embeddings=True),
    Job("Qwen/Qwen2.5-0.5B", "bfloat16", amp="bfloat16", batch=4, checkpointing=True, fp32_embeddings=True),
]
QUICK = [JOBS[0], JOBS[3]]


def config_for(c):
    """A transformers config of the checkpoint's shape (the table's fields)."""
    from transformers import AutoConfig

    if c.model_type == "gpt2":
        fields = dict(n_embd=c.hidden_size, n_layer=c.layers, n_head=c.heads, n_inner=c.intermediate_size)
    else:
        fields = dict(
            hidden_size=c.hidden_size,
            intermediate_size=c.intermediate_size,
            num_hidden_layers=c.layers,
            num_attention_heads=c.heads,
            num_key_value_heads=c.kv_heads or c.heads,
        )
        if c.head_dim:
            fields["head_dim"] = c.head_dim
    # given at construction: a config derives some fields (head_dim) from others as it is built
    config = AutoConfig.for_model(
        c.model_type, vocab_size=c.vocab_size, tie_word_embeddings=bool(c.tied_embeddings), **fields
    )
    config._attn_implementation = "sdpa"
    return config


def attention_dropout(c) -> float:
    """The architecture's default attention dropout (GPT-2's 0.1): with it the CPU's SDPA takes its math kernel,
    which materialises the scores (a GPU's memory-efficient kernel does not), and the estimate is told so."""
    config = config_for(c)
    return float(getattr(config, "attn_pdrop", getattr(config, "attention_dropout", 0.0)) or 0.0)


def trace(job: Job, c) -> dict[str, float]:
    """The peak bytes tensors hold over two training steps, by category."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, job.weights)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    patched = _fake_friendly(torch)
    try:
        with FakeTensorMode():
            model = AutoModelForCausalLM.from_config(config_for(c))
            if job.fp32_embeddings:  # as Axolotl's loader does (loaders/model.py:422-436, 1025-1047)
                for name, module in model.named_modules():
                    if "norm" in name or name.endswith(("embed_tokens", "lm_head")):
                        module.to(torch.float32)
            if job.checkpointing:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if job.lora:
                from peft import LoraConfig, get_peft_model

                model = get_peft_model(model, LoraConfig(r=job.lora))
                if job.checkpointing:
                    model.enable_input_require_grads()
            model.train()
            trainable = [p for p in model.parameters() if p.requires_grad]
            optimizer = torch.optim.AdamW(trainable, lr=1e-5, fused=True)
            ids = torch.randint(0, c.vocab_size, (job.batch, job.sequence))
            tracker = MemTracker()
            tracker.track_external(model, optimizer)
            with tracker:
                for _step in range(2):
                    amp = torch.autocast("cpu", dtype=getattr(torch, job.amp)) if job.amp else _nothing()
                    with amp:
                        loss = model(input_ids=ids, labels=ids).loss
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    del loss
                    tracker.reset_mod_stats()  # per-module statistics only: the peak is kept across steps
            snapshot = tracker.get_tracker_snapshot("peak")
    finally:
        torch.set_default_dtype(previous)
        for owner, name, original in patched:
            setattr(owner, name, original)
    device = next(iter(snapshot))
    return {str(k).rsplit(".", 1)[-1].lower(): v for k, v in snapshot[device].items()}


class _NoHook:
    def remove(self) -> None:
        pass


def _fake_friendly(torch) -> list[tuple[object, str, object]]:
    """Two things fake tensors refuse, worked around for the trace: Module.to() swaps parameters (peft moves its
    adapters to the base layer's device and dtype), and MemTracker hooks every parameter, frozen ones included.
    Returns what was replaced, to put back."""
    module_to = torch.nn.Module.to
    register_hook = torch.Tensor.register_hook
    post_hook = torch.Tensor.register_post_accumulate_grad_hook

    def to_in_place(self, *args, **kwargs):
        for t in [*self.parameters(), *self.buffers()]:
            t.data = t.data.to(*args, **kwargs)
        return self

    torch.nn.Module.to = to_in_place
    torch.Tensor.register_hook = lambda self, hook: register_hook(self, hook) if self.requires_grad else _NoHook()
    torch.Tensor.register_post_accumulate_grad_hook = lambda self, hook: (
        post_hook(self, hook) if self.requires_grad else _NoHook()
    )
    return [
        (torch.nn.Module, "to", module_to),
        (torch.Tensor, "register_hook", register_hook),
        (torch.Tensor, "register_post_accumulate_grad_hook", post_hook),
    ]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def shape_for(job: Job, c) -> TrainingShape:
    return TrainingShape(
        scores_materialised=attention_dropout(c) > 0,
        weight_dtype=job.weights,
        compute_dtype=job.amp or job.weights,
        lora_rank=job.lora,
        optimizer="adamw",
        batch=job.batch,
        sequence=job.sequence,
        checkpointing=job.checkpointing,
        fp32_embeddings=job.fp32_embeddings,
    )


def _parameter_bytes(job: Job, c) -> float:
    """What the table's parameters weigh in the job's dtype, adapters aside (a check that the trace built the
    checkpoint's shape)."""
    from precision_doctor.derive.memory import BYTES, embedding_parameters, lora_parameters

    adapters = lora_parameters(c, job.lora) * 4 if job.lora else 0  # peft keeps adapters in float32
    upcast = embedding_parameters(c) * (4 - BYTES[job.weights]) if job.fp32_embeddings else 0
    return (c.parameters or 0) * BYTES[job.weights] + adapters + upcast


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two jobs")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    print(f"{'job':<64} {'traced':>8} {'estimate':>9} {'diff':>7}  seconds")
    worst = 0.0
    for job in QUICK if args.quick else JOBS:
        c = checkpoint_facts(job.model, (Path("/nonexistent"),), {"HF_HUB_CACHE": "/nonexistent"})
        start = time.perf_counter()
        traced = trace(job, c)
        seconds = time.perf_counter() - start
        if traced["param"] and abs(traced["param"] - _parameter_bytes(job, c)) > 0.01 * traced["param"]:
            print(f"{job.describe()}: the traced model's parameters differ from the table's; skipped")
            continue
        b = estimate(c, shape_for(job, c))
        allocated = b.peak - b.context - b.reserve
        diff = allocated / traced["total"] - 1
        worst = max(worst, abs(diff))
        print(
            f"{job.describe():<64} {traced['total'] / GIB:>7.2f}G {allocated / GIB:>8.2f}G {diff:>+7.1%}  {seconds:.0f}"
        )
    print(f"largest difference: {worst:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
