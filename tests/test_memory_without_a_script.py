"""`precision-doctor memory --model ID` with the job's settings and no script: the same breakdown and verdict a
script gets, a table over GPUs with --compare, offline for the shipped table and a local config folder, one line
and exit 2 for what it cannot judge, and nothing written where it runs."""

import json
import subprocess
import sys

import pytest

from precision_doctor.derive.memory import MEASURED_UNDERESTIMATE

ENV = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HF_HUB_CACHE": "/nonexistent"}
QLORA_8B = ["--model", "meta-llama/Llama-3.1-8B", "--batch", "4", "--seq", "2048", "--qlora", "--amp", "bf16"]


def memory(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", "memory", *args],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
    )


def test_a_model_and_its_settings_get_the_breakdown_and_verdict(tmp_path):
    done = memory(tmp_path, *QLORA_8B, "--checkpointing", "--target", "a10g")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("--model meta-llama/Llama-3.1-8B\n")
    assert "LoRA r=16" in out and "4bit" in out and "batch 4 x 2048 tokens" in out and "checkpointing on" in out
    (entry,) = json.loads(
        memory(tmp_path, *QLORA_8B, "--checkpointing", "--target", "a10g", "--format", "json").stdout
    )["scripts"]
    assert 0 < entry["largest_batch_that_fits"] < 4  # batch 4 does not fit; a smaller one does, and the text says it
    assert (
        "will not fit" in out
        and f"largest per_device_train_batch_size that fits: {entry['largest_batch_that_fits']}" in out
    )
    assert "train.py" not in out  # the script the flags describe is the doctor's own
    assert list(tmp_path.iterdir()) == []  # nothing written where it runs


def test_the_settings_change_the_estimate_as_they_would_in_a_script(tmp_path):
    def peak(*extra):
        done = memory(tmp_path, *QLORA_8B, "--target", "a100-80gb", "--format", "json", *extra)
        assert done.returncode == 0, done.stderr
        (entry,) = json.loads(done.stdout)["scripts"]
        assert entry["path"] == "--model meta-llama/Llama-3.1-8B"
        return entry["per_gpu_bytes"]["peak"]

    assert peak("--checkpointing") < peak()


def test_compare_says_which_gpus_fit_and_at_what_batch(tmp_path):
    done = memory(tmp_path, *QLORA_8B, "--checkpointing", "--compare", "t4,a10g,a100-80gb", "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = {r["target"]: r for r in json.loads(done.stdout)["targets"]}
    assert set(rows) == {"t4", "a10g", "a100-80gb"}
    assert not rows["t4"]["fits"] and rows["a100-80gb"]["fits"]
    assert rows["t4"]["largest_batch"] < rows["a10g"]["largest_batch"] < rows["a100-80gb"]["largest_batch"]
    text = memory(tmp_path, *QLORA_8B, "--checkpointing", "--compare", "t4,a100-80gb").stdout
    assert "out of memory" in text.splitlines()[2] and "fits" in text.splitlines()[3]


def test_a_local_config_folder_works_offline(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 512,
                "intermediate_size": 1024,
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "num_key_value_heads": 8,
                "vocab_size": 32000,
                "torch_dtype": "bfloat16",
            }
        )
    )
    done = memory(tmp_path, "--model", "tiny", "--target", "t4")
    assert done.returncode == 0, done.stderr
    assert "LlamaForCausalLM" in done.stdout and "fits" not in done.stdout.split("verdict", 1)[0]


@pytest.mark.parametrize(
    "args,says",
    [
        (["--model", "someone/unknown-7b", "--target", "a100"], "--model-config someone/unknown-7b=config.json"),
        (["--model", "meta-llama/Llama-3.1-8B", "--offload", "--target", "a100"], "add --zero 2|3 or --fsdp"),
        (["--compare", "t4,a100"], "give the model with --model ID"),
        ([], "give a training script, or --model ID"),
    ],
)
def test_what_it_cannot_judge_is_one_line_and_exit_2(tmp_path, args, says):
    done = memory(tmp_path, *args)
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_plot_draws_the_estimate_against_the_batch_with_its_ranges(tmp_path):
    import xml.etree.ElementTree as ET

    plot = tmp_path / "out" / "memory.svg"
    plot.parent.mkdir()
    args = ["--model", "meta-llama/Llama-3.1-8B", "--lora", "16", "--amp", "bf16", "--dtype", "bf16"]
    done = memory(tmp_path, *args, "--checkpointing", "--batch", "16", "--target", "a100-80gb", "--plot", str(plot))
    assert done.returncode == 0, done.stderr
    svg = ET.parse(plot).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    layers = [p.find(f"{ns}title").text for p in svg.iter(f"{ns}polygon")]
    assert layers == [
        "weights",
        "optimizer state",
        "fp32 master copy",
        "activations / gradients",
        "CUDA context",
        "allocator reserve",
    ]
    texts = [t.text or "" for t in svg.iter(f"{ns}text")]
    assert any("80.0 GiB usable" in t for t in texts) and any(t == "batch 16" for t in texts)
    fits = json.loads(
        memory(tmp_path, *args, "--checkpointing", "--batch", "16", "--target", "a100-80gb", "--format", "json").stdout
    )["scripts"][0]["largest_batch_that_fits"]
    safe = next(int(t.split()[-1]) for t in texts if t.startswith("fits: up to "))
    assert safe < fits and any(t == f"will not fit: {fits + 1} and up" for t in texts)


def test_a_scripts_memory_can_be_plotted_too(tmp_path):
    (tmp_path / "train.py").write_text(
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B', dtype=torch.bfloat16)\n"
        "Trainer(model=model, args=TrainingArguments('out', bf16=True, per_device_train_batch_size=8)).train()\n"
    )
    done = memory(tmp_path, "train.py", "--target", "l4", "--plot", "plot.svg")
    assert done.returncode == 0, done.stderr
    assert "<polygon" in (tmp_path / "plot.svg").read_text()
    refused = memory(tmp_path, *QLORA_8B, "--compare", "t4,l4", "--plot", "plot.svg")
    assert refused.returncode == 2 and "give --target rather than --compare" in refused.stderr


def test_the_verdict_says_which_batches_the_measured_error_makes_uncertain(tmp_path):
    args = ["--model", "meta-llama/Llama-3.1-8B", "--lora", "16", "--dtype", "bf16", "--amp", "bf16"]
    args += ["--checkpointing", "--batch", "16", "--target", "a100-80gb"]
    (entry,) = json.loads(memory(tmp_path, *args, "--format", "json").stdout)["scripts"]
    safe, fits = entry["safe_batch"], entry["largest_batch_that_fits"]
    assert 0 < safe < fits
    text = memory(tmp_path, *args).stdout
    assert (
        f"that fits: {fits} (with the estimate's measured error, +{MEASURED_UNDERESTIMATE:.0%}: up to {safe}; "
        f"{safe + 1}-{fits} uncertain)" in text
    )


@pytest.mark.parametrize("target,over", [("a10g", True), ("a100-80gb", False)])
def test_the_breakdown_is_drawn_as_a_bar_against_the_gpu(tmp_path, target, over):
    text = memory(tmp_path, *QLORA_8B, "--checkpointing", "--target", target).stdout
    bar = next(line.strip() for line in text.splitlines() if line.strip().startswith("["))
    cells, rest = bar[1:].split("]", 1)
    inside, past = cells.split("|")
    assert len(inside) + len(past) >= 48 and inside.startswith("W") and "A" in cells
    assert bool(past.strip(".")) is over  # what does not fit runs past the GPU's edge
    assert rest.strip().startswith("peak ") and rest.strip().endswith(" GiB")


def test_settings_combine_as_a_user_writes_them(tmp_path):
    done = memory(tmp_path, *QLORA_8B, "--lora", "64", "--target", "a100")
    assert done.returncode == 0 and "4bit, LoRA r=64" in done.stdout, done.stderr
    done = memory(tmp_path, "--model", "meta-llama/Llama-3.1-8B", "--zero", "3", "--target", "a100-40gb:4")
    assert "ZeRO-3 over 4 GPUs" in done.stdout, done.stderr  # the GPUs per node from --target


@pytest.mark.parametrize(
    "args,says",
    [
        (["--gpus", "2", "--target", "a100:4"], "--gpus 2 and the GPUs per node in --target disagree"),
        (["--compare", ","], "name the GPUs"),
        (["--compare", "t4", "--target", "a100"], "drop --target"),
        ([], "name the GPU with --target NAME"),  # this machine has no GPU
    ],
)
def test_settings_that_contradict_or_miss_a_gpu_are_one_line(tmp_path, args, says):
    done = memory(tmp_path, "--model", "meta-llama/Llama-3.1-8B", *args)
    assert done.returncode == 2 and says in done.stderr, done.stderr


def test_the_flags_estimate_as_the_sft_script_they_describe(tmp_path):
    """The same job written by hand (TRL's SFTTrainer, settings written out) gets the same bytes and verdict."""
    (tmp_path / "sft.py").write_text(
        "import torch\nfrom peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training\n"
        "from transformers import AutoModelForCausalLM, BitsAndBytesConfig\nfrom trl import SFTConfig, SFTTrainer\n"
        "bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4',\n"
        "                         bnb_4bit_compute_dtype=torch.bfloat16)\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B', quantization_config=bnb)\n"
        "model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)\n"
        "model = get_peft_model(model, LoraConfig(r=16))\n"
        "args = SFTConfig('out', per_device_train_batch_size=4, max_length=2048, packing=True, bf16=True,\n"
        "                 fp16=False, gradient_checkpointing=True)\n"
        "SFTTrainer(model=model, args=args).train()\n"
    )
    by_hand = memory(tmp_path, "sft.py", "--target", "a10g", "--format", "json")
    flags = memory(tmp_path, *QLORA_8B, "--checkpointing", "--target", "a10g", "--format", "json")
    (hand,) = json.loads(by_hand.stdout)["scripts"]
    (flag,) = json.loads(flags.stdout)["scripts"]
    assert hand["per_gpu_bytes"] == flag["per_gpu_bytes"] and hand["verdict"] == flag["verdict"]
    assert hand["largest_batch_that_fits"] == flag["largest_batch_that_fits"]
