"""The libraries' own "is bf16 available?" checks, run on this CPU with torch.cuda answering as a T4 or an A100
would, against what the doctor predicts they answer (knowledge/bf16_checks.py)."""

import pytest
import torch
from transformers.utils import import_utils

from precision_doctor.knowledge import bf16_checks
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.model.facts import Gpu, PackageVersion, StackFacts, VersionSource

GPUS = {"t4": Gpu(0, "Tesla T4", (7, 5)), "a100": Gpu(0, "NVIDIA A100-SXM4-80GB", (8, 0))}


class _Properties:
    def __init__(self, gpu):
        self.major, self.minor = gpu.capability


@pytest.fixture
def cuda_like(monkeypatch):
    """torch.cuda as it answers on a real GPU of that kind: a bfloat16 tensor can be created on every CUDA GPU
    (that is what `including_emulation=True` tests), the capability is the card's."""

    def _on(gpu):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: _Properties(gpu))
        monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True)
        monkeypatch.setattr(torch.version, "hip", None)

    return _on


def installed() -> StackFacts:
    import transformers

    return StackFacts(
        packages={
            "torch": PackageVersion("torch", torch.__version__, VersionSource.INSTALLED),
            "transformers": PackageVersion("transformers", transformers.__version__, VersionSource.INSTALLED),
        }
    )


@pytest.mark.parametrize("name", sorted(GPUS))
def test_each_check_answers_what_the_doctor_predicts(cuda_like, name):
    gpu, stack = GPUS[name], installed()
    cuda_like(gpu)
    assert torch.cuda.is_bf16_supported() is bf16_checks.answers(gpu, stack, bf16_checks.TORCH)
    native = torch.cuda.is_bf16_supported(including_emulation=False)
    assert native is bf16_checks.answers(gpu, stack, bf16_checks.TORCH, emulation=False)
    helper = import_utils.is_torch_bf16_gpu_available()
    assert helper is bf16_checks.answers(gpu, stack, bf16_checks.TRANSFORMERS)
    assert bf16_checks.refusal(gpu, stack, "trainer") == ""  # nothing refuses bf16 on today's stack
    if name == "t4":
        assert helper and not native  # Axolotl's `bf16: auto` picks emulated bf16 on a T4


def test_older_releases_answer_for_native_bf16_only():
    """transformers 4.34.1 `is_torch_bf16_gpu_available` returns False below major 8 (its own test); 4.35.0 calls
    `torch.cuda.is_bf16_supported()`; torch 2.2 answers for native bf16 only."""
    t4 = GPUS["t4"]

    def stack(**versions):
        merged = {**CURRENT, **versions}
        return StackFacts(packages={k: PackageVersion(k, v, VersionSource.GIVEN) for k, v in merged.items()})

    assert not bf16_checks.answers(t4, stack(transformers="4.34.1"), bf16_checks.TRANSFORMERS)
    assert bf16_checks.answers(t4, stack(transformers="4.35.0"), bf16_checks.TRANSFORMERS)
    assert not bf16_checks.answers(t4, stack(torch="2.2.2"), bf16_checks.TRANSFORMERS)
    assert "transformers 4.34.1" in bf16_checks.refusal(t4, stack(transformers="4.34.1"), "trainer")
    assert "torch 2.2.2" in bf16_checks.refusal(t4, stack(torch="2.2.2"), "accelerate")
    assert bf16_checks.answers(GPUS["a100"], stack(torch="2.2.2", transformers="4.34.1"), bf16_checks.TRANSFORMERS)
