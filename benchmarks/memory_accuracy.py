"""How close the memory estimator (precision_doctor/derive/memory.py) is to what training really holds.

For tiny models of several architectures built from configs (nothing downloaded), run a real forward, backward
and AdamW step on the CPU and count bytes: parameters, gradients and optimizer state by their storages, and
activations as every distinct non-parameter storage saved for backward (torch.autograd.graph.saved_tensors_hooks)
at the end of the forward. Under gradient checkpointing the saved tensors the hook sees are counted with the
layer inputs the checkpoints keep, plus one layer's activations recomputed in backward (measured without
checkpointing). Each component is compared with the estimate for the same config.

    python benchmarks/memory_accuracy.py            # the README table
    python benchmarks/memory_accuracy.py --quick    # a few rows (the test runs these)

Attention dropout > 0 on the CPU runs sdpa's math kernel, which materialises the scores; the estimate is told so
(on a GPU the memory-efficient kernel does not).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from precision_doctor.derive.memory import TrainingShape, activation_bytes, autocast_copies, estimate  # noqa: E402
from precision_doctor.model.facts import CheckpointSource  # noqa: E402
from precision_doctor.probes.checkpoint import from_config  # noqa: E402

TOLERANCE = 0.15


@dataclass(frozen=True)
class Case:
    arch: str
    batch: int
    sequence: int
    checkpointing: bool = False
    lora: int = 0  # LoRA rank; 0 = full fine-tune
    attention: str = "sdpa"
    precision: str = "fp32"  # fp32 | half (bf16 weights) | amp (fp32 weights); half and amp run under bf16 autocast


def build(arch: str, sequence: int):
    import transformers

    transformers.logging.set_verbosity_error()
    if arch == "llama":
        cfg = transformers.LlamaConfig(
            hidden_size=128,
            intermediate_size=344,
            num_hidden_layers=3,
            num_attention_heads=8,
            num_key_value_heads=2,
            vocab_size=512,
            max_position_embeddings=1024,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=0,
        )
        return transformers.LlamaForCausalLM(cfg)
    if arch == "gpt2":
        cfg = transformers.GPT2Config(
            n_embd=128, n_layer=3, n_head=4, vocab_size=512, n_positions=1024, bos_token_id=0, eos_token_id=1
        )
        return transformers.GPT2LMHeadModel(cfg)
    if arch == "t5":
        cfg = transformers.T5Config(
            d_model=128,
            d_ff=256,
            num_layers=3,
            num_heads=4,
            d_kv=32,
            vocab_size=512,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
        )
        return transformers.T5ForConditionalGeneration(cfg)
    if arch == "bert":
        cfg = transformers.BertConfig(
            hidden_size=128,
            intermediate_size=512,
            num_hidden_layers=3,
            num_attention_heads=4,
            vocab_size=512,
            max_position_embeddings=1024,
            pad_token_id=0,
        )
        return transformers.BertForMaskedLM(cfg)
    if arch == "vit":
        cfg = transformers.ViTConfig(
            hidden_size=128,
            intermediate_size=512,
            num_hidden_layers=3,
            num_attention_heads=4,
            image_size=sequence,
            patch_size=16,
            num_labels=10,
        )
        return transformers.ViTForImageClassification(cfg)
    if arch == "whisper":  # `sequence`: the labels; the encoder reads its fixed 2 x 150 mel frames
        cfg = transformers.WhisperConfig(
            d_model=128,
            encoder_layers=3,
            decoder_layers=3,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=512,
            decoder_ffn_dim=512,
            vocab_size=512,
            num_mel_bins=80,
            max_source_positions=WHISPER_FRAMES,
            max_target_positions=448,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=0,
            suppress_tokens=None,
            begin_suppress_tokens=None,
        )
        return transformers.WhisperForConditionalGeneration(cfg)
    raise ValueError(arch)


WHISPER_FRAMES = 150


def _storages(tensors) -> int:
    seen = {}
    for t in tensors:
        if t is not None:
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def measure(case: Case) -> dict[str, int]:
    """Bytes of parameters, gradients, optimizer state and activations of one real training step."""
    import torch

    torch.manual_seed(0)
    model = build(case.arch, case.sequence)
    model.config._attn_implementation = case.attention
    if case.precision == "half":
        model.to(torch.bfloat16)
    if case.lora:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=case.lora))
    if case.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            saved[st.data_ptr()] = st.nbytes()
        return t

    layer_inputs: dict[int, int] = {}
    if case.checkpointing:  # the checkpoints keep each layer's input alive until backward

        def keep(_module, args, kwargs):
            x = args[0] if args else kwargs.get("hidden_states")
            if x is not None:
                layer_inputs[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()

        for module in model.modules():
            if (
                type(module).__name__.endswith(("DecoderLayer", "Block", "Layer"))
                and hasattr(module, "forward")
                and getattr(module, "gradient_checkpointing", False)
            ):
                module.register_forward_pre_hook(keep, with_kwargs=True)
    batch = _inputs(case)
    if case.precision == "half" and case.arch in ("vit", "whisper"):
        key = "pixel_values" if case.arch == "vit" else "input_features"
        batch[key] = batch[key].bfloat16()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=case.precision != "fp32")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
        loss = model(**batch).loss
    activations = sum(saved.values()) + sum(v for k, v in layer_inputs.items() if k not in saved)
    loss.backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    optimizer.step()
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    return {
        "weights": _storages(model.parameters()),
        "gradients": _storages(p.grad for p in trainable),
        "optimizer": _storages(state),
        "activations": activations,
        "parameters": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in trainable),
    }


def _inputs(case: Case) -> dict:
    import torch

    if case.arch == "vit":
        return {
            "pixel_values": torch.randn(case.batch, 3, case.sequence, case.sequence),
            "labels": torch.randint(0, 10, (case.batch,)),
        }
    ids = torch.randint(2, 512, (case.batch, case.sequence))
    if case.arch == "whisper":
        return {"input_features": torch.randn(case.batch, 80, 2 * WHISPER_FRAMES), "labels": ids}
    return {"input_ids": ids, "labels": ids}


def estimated(case: Case) -> dict[str, int]:
    model = build(case.arch, case.sequence)
    facts = from_config(case.arch, CheckpointSource.LOCAL, "built from a config", model.config.to_dict())
    facts = replace(facts, parameters=sum(p.numel() for p in model.parameters()))
    dropout = any(getattr(model.config, k, 0) for k in ("attn_pdrop", "attention_probs_dropout_prob"))
    half = case.precision != "fp32"
    shape = TrainingShape(
        batch=case.batch,
        sequence=case.sequence,
        checkpointing=case.checkpointing,
        lora_rank=case.lora,
        weight_dtype="bfloat16" if case.precision == "half" else "float32",
        compute_dtype="bfloat16" if half else "float32",
        scores_materialised=case.attention == "eager" or bool(dropout),
    )
    b = estimate(facts, shape)
    return {
        "weights": b.weights,
        "gradients": b.gradients,
        "optimizer": b.optimizer,
        "activations": activation_bytes(facts, shape) + autocast_copies(facts, shape),
    }


QUICK = [
    Case("llama", 2, 64),
    Case("gpt2", 2, 64),
    Case("t5", 2, 32),
    Case("bert", 2, 64),
    Case("vit", 2, 64),
    Case("whisper", 2, 32, checkpointing=True, precision="amp"),
    Case("llama", 2, 64, checkpointing=True),
    Case("llama", 2, 64, lora=8),
    Case("llama", 2, 64, precision="half"),
    Case("llama", 2, 64, precision="amp"),
]
FULL = (
    [Case(a, b, s) for a in ("llama", "gpt2", "t5", "bert") for b, s in ((1, 128), (4, 64), (2, 256))]
    + [Case("vit", b, s) for b, s in ((1, 224), (4, 96))]
    + [Case("llama", 2, 128, attention="eager")]
    + [Case(a, 2, 128, checkpointing=True) for a in ("llama", "gpt2", "bert")]
    + [Case(a, 2, 128, lora=8) for a in ("llama", "gpt2", "bert")]
    + [Case("llama", 4, 64, lora=16)]
    + [Case(a, 2, 128, precision=p) for p in ("half", "amp") for a in ("llama", "gpt2", "bert", "t5")]
    + [Case("vit", 2, 96, precision=p) for p in ("half", "amp")]
    + [Case("llama", 2, 128, checkpointing=True, precision="amp"), Case("llama", 2, 128, lora=8, precision="half")]
    + [Case("whisper", b, s) for b, s in ((1, 32), (4, 96))]
    + [Case("whisper", 2, 64, precision=p) for p in ("half", "amp")]
    + [Case("whisper", 2, 64, checkpointing=True, precision=p) for p in ("fp32", "amp")]
)


def compare(cases) -> list[tuple[Case, dict, dict]]:
    warnings.filterwarnings("ignore")
    return [(c, measure(c), estimated(c)) for c in cases]


def table(rows) -> str:
    lines = [
        "| model | batch × seq | checkpointing | LoRA | component | measured | estimated | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case, got, est in rows:
        seq = f"{case.sequence}px" if case.arch == "vit" else str(case.sequence)
        for part in ("weights", "gradients", "optimizer", "activations"):
            err = est[part] / got[part] - 1 if got[part] else 0.0
            precision = {"half": ", bf16", "amp": ", bf16 autocast"}.get(case.precision, "")
            lines.append(
                f"| {case.arch}{' (eager)' if case.attention == 'eager' else ''}{precision} | "
                f"{case.batch} × {seq} | "
                f"{'on' if case.checkpointing else 'off'} | {f'r={case.lora}' if case.lora else '-'} | "
                f"{part} | {got[part] / 1024:,.0f} KiB | {est[part] / 1024:,.0f} KiB | {err:+.1%} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = compare(QUICK if args.quick else FULL)
    print(table(rows))
    worst = max(abs(e[p] / g[p] - 1) for _, g, e in rows for p in g if p in e and g[p])
    print(f"\nworst component error: {worst:.1%} (tolerance {TOLERANCE:.0%})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
