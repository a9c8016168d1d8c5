"""The declared table of call kinds: which call the doctor records as what (issue 10: one definition of the
call kinds, a lookup in priority order instead of an if-chain)."""

import json

import pytest

from precision_doctor.model.call_kinds import FROM_CONTEXT, RECOGNISERS, CallKind, CallSite, kind_of
from precision_doctor.model.facts import ScriptFacts, _from_jsonable, _to_jsonable
from precision_doctor.probes.script import probe_script

HEADER = """import torch
import torch.distributed as dist
from torch.cuda.amp import GradScaler
from torch.nn.parallel import DistributedDataParallel
from accelerate import Accelerator
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training, PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig, Trainer, TrainingArguments
from trl import SFTConfig, SFTTrainer
"""

CASES = [
    ("torch.autocast('cuda', dtype=torch.bfloat16)", "autocast"),
    ("GradScaler()", "grad_scaler"),
    ("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)", "clip_grad"),
    ("accelerator.clip_grad_norm_(model.parameters(), 1.0)", "clip_grad"),
    ("TrainingArguments(output_dir='o')", "training_args"),
    ("SFTConfig(output_dir='o')", "training_args"),
    ("MyArgs(output_dir='o')", "training_args"),  # a local subclass of TrainingArguments
    ("Trainer(model=model)", "trainer"),
    ("SFTTrainer(model=model)", "trainer"),
    ("MyTrainer(model=model)", "trainer"),  # a local subclass of Trainer
    ("Accelerator(mixed_precision='bf16')", "accelerator"),
    ("torch.cuda.set_device(0)", "set_device"),
    ("dist.init_process_group('nccl')", "init_process_group"),
    ("DistributedDataParallel(model)", "ddp"),
    ("BitsAndBytesConfig(load_in_4bit=True)", "bnb_config"),
    ("LoraConfig(r=8)", "peft_config"),
    ("get_peft_model(model, config)", "get_peft_model"),
    ("prepare_model_for_kbit_training(model)", "prepare_kbit"),
    ("torch.optim.AdamW(model.parameters())", "optimizer"),
    ("torch.optim.lr_scheduler.LambdaLR(opt, f)", None),
    ("AutoModelForCausalLM.from_pretrained('m')", "model_load"),
    ("PeftModel.from_pretrained(model, 'adapter')", "peft_load"),
    ("AutoTokenizer.from_pretrained('m')", None),
    ("model.half()", "cast"),
    ("model.to(torch.bfloat16)", "cast"),
    ("model.gradient_checkpointing_enable()", "gc_enable"),
    ("model.enable_input_require_grads()", "input_grads"),
    ("loss.backward()", "method"),
    ("scaler.step(opt)", "method"),
    ("accelerator.prepare(model, opt)", "prepare"),
    ("trainer.train()", "train"),
    ("trainer.train(resume_from_checkpoint=True)", "train"),
    ("model.train(False)", None),
    ("print('hello')", None),
]


@pytest.mark.parametrize("line, expected", CASES)
def test_a_call_is_recorded_as_its_kind(tmp_path, line, expected):
    source = (
        HEADER
        + (
            "class MyArgs(TrainingArguments):\n    pass\n\nclass MyTrainer(Trainer):\n    pass\n\n"
            "model = torch.nn.Linear(2, 2)\n"
        )
        + line
        + "\n"
    )
    path = tmp_path / "train.py"
    path.write_text(source)
    last_line = source.count("\n")
    facts = probe_script(path)
    kinds = [c.kind for c in facts.calls if c.location.line == last_line and c.kind not in FROM_CONTEXT]
    assert kinds[:1] == ([expected] if expected else [])


def test_every_kind_has_a_way_to_be_recognised():
    recognised = {r.kind for r in RECOGNISERS}
    assert recognised | set(FROM_CONTEXT) == set(CallKind)
    assert not recognised & set(FROM_CONTEXT)


def test_a_library_name_wins_over_a_generic_method_of_the_same_name():
    """`torch.nn.utils.clip_grad_norm_` is a library call, `x.step()` a loop method, `torch.optim.SGD` an
    optimizer even though `.to`, `.step` are generic: the table puts library names first."""
    assert kind_of(CallSite("torch.nn.utils.clip_grad_norm_", method="clip_grad_norm_")) == CallKind.CLIP_GRAD
    assert kind_of(CallSite("accelerate.Accelerator")) == CallKind.ACCELERATOR
    assert kind_of(CallSite("torch.cuda.set_device", method="set_device")) == CallKind.SET_DEVICE
    generic_first = [
        i
        for i, r in enumerate(RECOGNISERS)
        if r.methods
        and not r.names
        and not r.last
        and not r.prefixes
        and r.kind not in (CallKind.PEFT_LOAD, CallKind.MODEL_LOAD)
    ]
    library = [i for i, r in enumerate(RECOGNISERS) if r.names or r.last or r.prefixes]
    assert max(library) < min(generic_first)


def test_kinds_compare_format_and_serialise_as_their_names(tmp_path):
    assert CallKind.TRAINER == "trainer" and f"{CallKind.TRAINER}" == "trainer" and str(CallKind.CAST) == "cast"
    path = tmp_path / "train.py"
    path.write_text(HEADER + "args = TrainingArguments(output_dir='o', bf16=True)\n")
    facts = probe_script(path)
    dumped = json.loads(json.dumps(facts.calls[0].kind))
    assert dumped == "training_args"
    script = ScriptFacts(path="x", calls=facts.calls)
    assert script.of("training_args") == list(facts.calls)
    again = _from_jsonable(ScriptFacts, json.loads(json.dumps(_to_jsonable(script))))
    assert again.of(CallKind.TRAINING_ARGS)[0].kwarg("bf16").is_(True)
