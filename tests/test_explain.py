"""`explain`: real tracebacks produced on the CPU, the seed stories' logs, an unrelated log, a large log."""

import json
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pytest

from precision_doctor.diagnose import _declared_signature, diagnose
from precision_doctor.rules.catalog import rules

ROOT = Path(__file__).resolve().parents[1]


def top(log: str) -> list[str]:
    return [d.rule.id for d in diagnose(log.splitlines(keepends=True))]


@pytest.mark.parametrize(
    "rule",
    [r for r in rules() if _declared_signature(r) and r.log.from_logs and r.log.error_is_signature],
    ids=lambda r: r.id,
)
def test_every_declared_error_is_recognised(rule):
    ids = top(f'Traceback (most recent call last):\n  File "train.py", line 1\n{rule.error}\n')
    assert rule.id in ids


REPRODUCTIONS = {
    "PD201": """
        import torch
        m = torch.nn.Linear(4, 4).half(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        s = torch.amp.GradScaler("cpu"); s.scale(m(torch.randn(2, 4).half()).sum()).backward(); s.unscale_(opt)
    """,
    "PD203": """
        import torch
        m = torch.nn.Linear(4, 4); opt = torch.optim.AdamW(m.parameters(), foreach=True)
        m(torch.randn(2, 4)).sum().backward(); opt.step(); m.to(torch.bfloat16)
        m(torch.randn(2, 4, dtype=torch.bfloat16)).sum().backward(); opt.step()
    """,
    "PD208": """
        import torch
        torch.nn.Linear(4, 4).half()(torch.randn(2, 4))
    """,
    "PD403": """
        import torch
        from torch.utils.checkpoint import checkpoint
        emb = torch.nn.Embedding(8, 4).requires_grad_(False)
        checkpoint(torch.nn.Linear(4, 4), emb(torch.tensor([[1, 2]])), use_reentrant=True).sum().backward()
    """,
}


@pytest.mark.parametrize("rule_id", sorted(REPRODUCTIONS))
def test_real_cpu_tracebacks(rule_id):
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(REPRODUCTIONS[rule_id])], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0, proc.stdout
    assert top(proc.stderr)[0] == rule_id, (top(proc.stderr), proc.stderr[-500:])


# The same mismatch the other way round (float32 weights, half tensors), as torch 2.x words it per op
HALF_INTO_FLOAT = {
    "bmm": "import torch\ntorch.bmm(torch.randn(1, 2, 2), torch.randn(1, 2, 2).half())",
    "conv": "import torch\ntorch.nn.Conv1d(4, 4, 1)(torch.randn(1, 4, 3).half())",
    "lstm": "import torch\ntorch.nn.LSTM(4, 4)(torch.randn(2, 1, 4).half())",
    "linear": "import torch\ntorch.nn.Linear(4, 4)(torch.randn(2, 4).half())",
}


@pytest.mark.parametrize("op", sorted(HALF_INTO_FLOAT))
def test_half_tensors_into_float_weights_are_named(op):
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-c", HALF_INTO_FLOAT[op]], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, proc.stdout
    assert top(proc.stderr)[:1] == ["PD208"], (top(proc.stderr), proc.stderr[-300:])


SEED_LOGS = {
    "seed000": (
        """UserWarning: Mismatch dtype between input and weight: input dtype = c10::BFloat16, weight dtype = float
  File "/opt/conda/lib/python3.11/site-packages/torch/optim/adam.py", line 501, in _multi_tensor_adam
    torch._foreach_lerp_(device_exp_avgs, device_grads, 1 - beta1)
RuntimeError: expected dtype float for `end` but got dtype c10::BFloat16
""",
        "PD203",
        {"PD113"},
    ),
    "seed001": (
        """  File "/usr/lib/python3/site-packages/accelerate/accelerator.py", line 2379, in unscale_gradients
    self.scaler.unscale_(opt)
  File "/usr/lib/python3/site-packages/torch/amp/grad_scaler.py", line 342, in unscale_
    optimizer_state["found_inf_per_device"] = self._unscale_grads_(
ValueError: Attempting to unscale FP16 gradients.
""",
        "PD201",
        set(),
    ),
    "seed003": (
        """Stage 1 training:   0%|          | 0/136 [00:00<?, ?it/s]
Stage 1 training: 100%|##########| 136/136 [41:02<00:00, 18.1s/it]
Stage 2 training:   0%|          | 0/68 [00:00<?, ?it/s]
  File "/home/u/.venv/lib/python3.10/site-packages/torch/nn/parallel/data_parallel.py", line 186, in forward
    outputs = self.parallel_apply(replicas, inputs, module_kwargs)
  File "/home/u/.venv/lib/python3.10/site-packages/peft/peft_model.py", line 1850, in forward
  File "/home/u/.venv/lib/python3.10/site-packages/transformers/models/qwen2_vl/modeling_qwen2_vl.py", line 1404
    logits = self.lm_head(hidden_states)
RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16
""",
        "PD301",
        set(),
    ),
    "port": (
        """[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).
RuntimeError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use
""",  # noqa: E501
        "PD110",
        set(),
    ),
    "exclusive": ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n", "PD108", set()),
    "bnb": (
        "ValueError: `.to` is not supported for `4-bit` or `8-bit` bitsandbytes models. Please use the model as it "
        "is, since the model has already been set to the correct devices and casted to the correct `dtype`.\n",
        "PD401",
        set(),
    ),
    "nan": (
        "{'loss': 2.31, 'grad_norm': 1.2, 'epoch': 0.1}\n{'loss': nan, 'grad_norm': nan, 'epoch': 0.2}\n",
        "PD204",
        {"PD210"},
    ),
    "storm": (
        "".join(
            f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {2 ** (16 - i)}\n"
            f"Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to {2 ** (15 - i)}\n"
            for i in range(8)
        ),
        "PD503",
        set(),
    ),
}


@pytest.mark.parametrize("name", sorted(SEED_LOGS))
def test_seed_and_catalogue_logs(name):
    log, expected, also = SEED_LOGS[name]
    found = diagnose(log.splitlines(keepends=True))
    ids = [d.rule.id for d in found]
    assert ids[0] == expected, ids
    assert also <= set(ids)
    if name == "seed003":
        assert found[0].confidence > 0.9  # the error, the DataParallel frames and the halved step count agree
        assert any("0/68" in text for _, text in found[0].tells)


def test_a_device_mismatch_in_either_of_torchs_wordings_is_pd305():
    """A CUDA Linear fed a CPU batch raises the kernel check's wording (seen on an H200, torch 2.11), not the
    TensorIterator one the rule declares; both are PD305 (the strings are in libtorch)."""
    gpu = (
        "RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cpu, different from other "
        "tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)\n"
    )
    iterator = (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!\n"
    )
    for line in (gpu, iterator):
        assert top(f'Traceback (most recent call last):\n  File "train.py", line 9\n{line}')[:1] == ["PD305"]
    assert top("RuntimeError: Expected all tensors to have the same dtype\n")[:1] != ["PD305"]


def test_unrelated_log_has_no_known_cause():
    log = "epoch 1 loss 2.3\nepoch 2 loss 1.9\nSaving checkpoint to out/checkpoint-500\nDone.\n"
    assert diagnose(log.splitlines(keepends=True)) == []
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "explain"],
        input=log,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0 and "no known cause" in proc.stdout


def test_json_and_script_link(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(SEED_LOGS["seed001"][0])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "precision_doctor",
            "explain",
            str(log),
            "--format",
            "json",
            "--script",
            "fixtures/seed001_titan_fp16/buggy/train.py",
            "--target",
            "titan-rtx",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["version"] == 1
    first = doc["diagnoses"][0]
    assert {"name", "id", "confidence", "evidence", "fix"} <= set(first)
    assert first["id"] == "PD201" and "Attempting to unscale FP16 gradients." in first["evidence"][-1]
    assert any(s["path"].endswith("model_utility_configs.py") and s["line"] == 12 for s in first["script"])


def test_unreadable_log_is_exit_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "explain", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "directory" in proc.stderr


def test_a_large_log_is_streamed(tmp_path):
    log = tmp_path / "big.log"
    line = "step 1234 | loss 2.3456 | lr 1.0e-05 | tokens/s 18234.5 | " + "x" * 60 + "\n"
    with open(log, "w") as fh:
        for _ in range(300_000):  # ~40 MB
            fh.write(line)
        fh.write("ValueError: Attempting to unscale FP16 gradients.\n")
    tracemalloc.start()
    with open(log, encoding="utf-8", errors="replace") as fh:
        found = diagnose(fh)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert found[0].rule.id == "PD201" and found[0].evidence[0][0] == 300_001
    assert peak < 5 * 2**20, f"peak {peak / 2**20:.1f} MiB: the log was not streamed"
