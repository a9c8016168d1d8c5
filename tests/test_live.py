"""Live mode on the CPU, offline: tiny models saved locally, real errors reproduced in the child, every way a
script can end (stopped, steps run, raised, exited, finished early, hung) reported clearly."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from precision_doctor import engine  # noqa: E402
from precision_doctor.knowledge.versions import CURRENT  # noqa: E402
from precision_doctor.probes.collect import gather  # noqa: E402
from precision_doctor.probes.live.runner import run_live  # noqa: E402

from .conftest import machine_probes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    os.environ["HF_HUB_OFFLINE"] = "1"
    cfg = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=128,
    )
    path = tmp_path_factory.mktemp("tiny") / "llama"
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def script(tmp_path, body: str, tiny=None) -> Path:
    p = tmp_path / "train.py"
    p.write_text(textwrap.dedent(body).replace("TINY", str(tiny)))
    return p


def live_check(path: Path, steps: int = 0, timeout: float = 120):
    live = run_live(str(path), (), steps=steps, timeout=timeout)
    facts = gather([str(path)], stack_overrides=CURRENT, **machine_probes())
    from dataclasses import replace

    facts = replace(facts, live=live)
    return engine.run(facts), live


TRAINER = """
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    model = AutoModelForCausalLM.from_pretrained("TINY", dtype=torch.float16)
    {between}
    ids = torch.randint(0, 128, (16,))
    data = [{{"input_ids": ids, "labels": ids}} for _ in range(8)]
    args = TrainingArguments(output_dir="out", use_cpu=True, report_to=[], per_device_train_batch_size=2)
    Trainer(model=model, args=args, train_dataset=data).train()
    raise SystemExit("training ran: the doctor should have stopped before it")
"""


def test_stops_at_trainer_train_and_sees_the_real_model(tmp_path, tiny):
    result, live = live_check(script(tmp_path, TRAINER.format(between=""), tiny))
    assert live.ended == "stopped" and live.stopped_at == "Trainer.train"
    assert live.model.trainable_dtypes == {"float16": 21}
    assert live.model.param_dtypes["model.layers"] == {"float16": 18}
    assert live.trainer.n_gpu == 0 and live.trainer.wrap == "none"
    pd204 = [f for f in result.findings if f.rule_id == "PD204"]
    assert pd204 and "live:" in pd204[0].message and not result.withdrawn


def test_the_live_model_withdraws_a_static_finding(tmp_path, tiny):
    # an upcast the static reading cannot follow: the live model is fp32, so PD204 is withdrawn
    body = TRAINER.format(between='model = getattr(model, "float")()')
    result, live = live_check(script(tmp_path, body, tiny))
    assert live.model.trainable_dtypes == {"float32": 21}
    assert "PD204" not in {f.rule_id for f in result.findings}
    assert [w.rule_id for w in result.withdrawn] == ["PD204"] and "float32 x21" in result.withdrawn[0].reason


def test_real_steps_reproduce_unscale_fp16_and_map_it_to_pd201(tmp_path, tiny):
    body = """
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained("TINY", dtype=torch.float16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(3):
            ids = torch.randint(0, 128, (2, 8))
            scaler.scale(model(input_ids=ids, labels=ids).loss).backward()
            scaler.step(opt)
            scaler.update()
    """
    result, live = live_check(script(tmp_path, body, tiny), steps=2)
    assert live.ended == "raised" and live.error.message == "Attempting to unscale FP16 gradients."
    pd201 = [f for f in result.findings if f.rule_id == "PD201" and "live run raised" in f.message]
    assert pd201 and pd201[0].error == "ValueError: Attempting to unscale FP16 gradients."
    assert any(e.location and e.location.path.endswith("train.py") for e in pd201[0].evidence)


def test_mixed_dtypes_and_a_cast_after_the_optimizer(tmp_path, tiny):
    body = """
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained("TINY", dtype=torch.float32)
        model.model.layers.to(torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

        def evaluate(m):
            m.to(torch.bfloat16)  # an eval helper casting in place (seed 000)

        for step in range(4):
            ids = torch.randint(0, 128, (2, 8))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            if step == 0:
                evaluate(model)
    """
    path = script(tmp_path, body, tiny)
    result, live = live_check(path)  # stop at the first optimizer step
    assert live.stopped_at == "Optimizer.step"
    pd306 = [f for f in result.findings if f.rule_id == "PD306"]
    assert pd306 and "model.layers: bfloat16" in pd306[0].message and "float32" in pd306[0].message
    result, live = live_check(path, steps=3)
    assert live.ended == "raised" and "expected dtype float for `end`" in live.error.message
    assert any(f.rule_id == "PD203" and "live run raised" in f.message for f in result.findings)


def test_frozen_inputs_under_reentrant_checkpointing(tmp_path):
    body = """
        import torch
        from torch.utils.checkpoint import checkpoint
        emb = torch.nn.Embedding(32, 16).requires_grad_(False)
        block = torch.nn.Linear(16, 16)
        opt = torch.optim.SGD(block.parameters(), lr=0.1)
        for _ in range(2):
            out = checkpoint(block, emb(torch.randint(0, 32, (4, 8))), use_reentrant=True)
            out.sum().backward()
            opt.step()
    """
    result, live = live_check(script(tmp_path, body), steps=1)
    assert live.ended == "raised"
    assert any(f.rule_id == "PD403" and "live run raised" in f.message for f in result.findings)


@pytest.mark.parametrize(
    "body,ended,check",
    [
        ("import sys\nprint('bye')\nsys.exit(3)\n", "exited", lambda live: live.exit_code == 3),
        ("x = 1\nprint('done without training')\n", "finished", lambda live: not live.reached_training),
        (
            "raise RuntimeError('no data found in /data/train')\n",
            "raised",
            lambda live: live.error.type == "RuntimeError" and any("no data found" in line for line in live.log_tail),
        ),
    ],
)
def test_scripts_that_never_train_get_a_clear_report(tmp_path, body, ended, check):
    path = script(tmp_path, body)
    live = run_live(str(path), (), timeout=60)
    assert live.ended == ended and check(live)
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", str(path), "--live", "--quiet", "--target", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "live run" in proc.stdout and (
        "exited with code 3" in proc.stdout or "without reaching" in proc.stdout or "raised before" in proc.stdout
    )


def test_a_hanging_script_is_ended_with_its_children(tmp_path):
    pidfile = tmp_path / "pids"
    body = f"""
        import os, subprocess, time
        child = subprocess.Popen(["sleep", "600"])
        open({str(pidfile)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(600)
    """
    start = time.monotonic()
    live = run_live(str(script(tmp_path, body)), (), timeout=3)
    assert live.ended == "timed out" and time.monotonic() - start < 20
    time.sleep(0.3)
    for pid in map(int, pidfile.read_text().split()):
        try:
            os.kill(pid, 0)
            alive = not open(f"/proc/{pid}/status").read().count("zombie")
        except (ProcessLookupError, FileNotFoundError):
            alive = False
        assert not alive, f"pid {pid} survived the timeout"


def test_accelerate_prepare_is_a_stop_point_and_json_stays_clean(tmp_path):
    body = """
        import torch
        from accelerate import Accelerator
        acc = Accelerator(mixed_precision="no", cpu=True)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model, opt = acc.prepare(model, opt)
        raise SystemExit("prepared: the doctor should have stopped before")
    """
    path = script(tmp_path, body)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "precision_doctor",
            "check",
            str(path),
            "--live",
            "--format",
            "json",
            "--target",
            "cpu",
            "--include-facts",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    doc = json.loads(proc.stdout)  # status lines went to stderr
    live = doc["facts"]["live"]
    assert live["stopped_at"] == "Accelerator.prepare" and live["optimizer"]["class_name"] == "AdamW"
    assert live["accelerator"]["mixed_precision"] == "no" and "live" in proc.stderr


def test_pd301_is_confirmed_from_the_live_trainer_on_this_machine(run_check):
    live = {
        "ended": "stopped",
        "stopped_at": "Trainer.train",
        "model": {
            "param_dtypes": {"model.layers": {"uint8": 196, "bfloat16": 141}},
            "trainable_dtypes": {"float32": 64},
            "quantized": {"Linear4bit": 196},
            "device_map": {"": "0"},
            "devices": ["cuda:0"],
        },
        "trainer": {"n_gpu": 2, "is_model_parallel": False, "fp16": False, "bf16": True, "wrap": "DataParallel"},
    }
    result, _ = run_check(
        "import torch\nfrom transformers import Trainer\nTrainer(model=m, args=a).train()\n",
        machine="h100_8x",
        live=live,
    )
    pd301 = [f for f in result.findings if f.rule_id == "PD301"]
    assert pd301 and "confirmed by the live Trainer" in pd301[0].message and "4-bit" in pd301[0].message
    live["trainer"]["wrap"] = "none"
    result, _ = run_check(
        "import torch\nfrom transformers import Trainer\nTrainer(model=m, args=a).train()\n",
        machine="h100_8x",
        live=live,
    )
    assert "PD301" not in {f.rule_id for f in result.findings}


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=128, bos_token_id=0, eos_token_id=0)
    ).save_pretrained(root / "gpt2")
    transformers.T5ForConditionalGeneration(
        transformers.T5Config(d_model=32, d_ff=64, num_layers=1, num_heads=2, vocab_size=128, d_kv=16)
    ).save_pretrained(root / "t5")
    vl = getattr(transformers, "Qwen2VLConfig", None)
    if vl is not None:
        cfg = vl(
            text_config=dict(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=2,
                vocab_size=256,
                rope_scaling={"type": "mrope", "mrope_section": [2, 2, 4]},
            ),
            vision_config=dict(
                depth=1,
                embed_dim=32,
                hidden_size=32,
                num_heads=2,
                mlp_ratio=2,
                in_chans=3,
                patch_size=14,
                spatial_merge_size=2,
                temporal_patch_size=2,
            ),
            vocab_size=256,
        )
        transformers.Qwen2VLForConditionalGeneration(cfg).save_pretrained(root / "qwen2vl")
    return root


@pytest.mark.parametrize(
    "family,loader,dtype,after,expect",
    [
        ("gpt2", "AutoModelForCausalLM", "float32", "", {"transformer.h": {"float32": 12}}),
        ("t5", "AutoModelForSeq2SeqLM", "bfloat16", "", {"encoder.block": {"bfloat16": 9}}),
        (
            "qwen2vl",
            "Qwen2VLForConditionalGeneration",
            "bfloat16",
            "model.model.visual.float()",
            {"model.visual": {"float32": 19}},
        ),
    ],
)
def test_families_and_a_vision_tower_left_in_fp32(tmp_path, families, family, loader, dtype, after, expect):
    if not (families / family).exists():
        pytest.skip(f"this transformers has no {family}")
    body = f"""
        import torch
        import transformers
        from torch.utils.data import DataLoader
        model = transformers.{loader}.from_pretrained({str(families / family)!r}, dtype=torch.{dtype})
        {after}
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for batch in DataLoader([torch.zeros(4)], batch_size=1):
            opt.step()
    """
    result, live = live_check(script(tmp_path, body))
    assert live.stopped_at == "Optimizer.step"
    for prefix, counts in expect.items():
        assert live.model.param_dtypes[prefix] == counts, live.model.param_dtypes
    mixed = [f for f in result.findings if f.rule_id == "PD306"]
    assert bool(mixed) == (family == "qwen2vl")
    if mixed:
        assert "model.visual: float32" in mixed[0].message and "model.language_model: bfloat16" in mixed[0].message


def test_a_collapsing_loss_scale_is_reported(run_check):
    live = {
        "ended": "steps done",
        "stopped_at": "Optimizer.step",
        "model": {"trainable_dtypes": {"float32": 4}},
        "loss_scales": (65536.0, 16384.0, 256.0, 2.0, 0.25),
    }
    result, _ = run_check("import torch\n", live=live)
    assert any(f.rule_id == "PD210" and "fell from 65536 to 0.25" in f.message for f in result.findings)
    live["loss_scales"] = (65536.0, 65536.0, 131072.0)
    result, _ = run_check("import torch\n", live=live)
    assert "PD210" not in {f.rule_id for f in result.findings}


SCALER_LOOP = """
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained("TINY", dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(5):
        ids = torch.randint(0, 128, (2, 8))
        scaler.scale(model(input_ids=ids, labels=ids).loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
"""


def test_each_steps_loss_is_recorded_once_and_the_status_counts_steps(tmp_path, tiny):
    """A step's loss passes several hooks (GradScaler.scale, then the optimizer step and the scaler update that
    both end the step): one unscaled value per step, and the status line says which step is running."""
    seen: list[str] = []
    live = run_live(
        str(script(tmp_path, SCALER_LOOP, tiny)),
        (),
        steps=3,
        timeout=120,
        status=lambda elapsed, phase: seen.append(phase),
    )
    assert live.ended == "steps done" and live.optimizer_steps == 3, (live.ended, live.log_tail)
    assert len(live.losses) == 3 and all(0 < float(x) < 20 for x in live.losses)
    assert any(p.endswith(("step 1/3", "step 2/3")) for p in seen), set(seen)
