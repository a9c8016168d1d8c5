"""A fix edits a value where it is written, unless another call reads that same written value: then the keyword is
set at the trained model's load, so the other reader (a frozen reference model, a teacher) keeps its value."""

import pytest

pytest.importorskip("libcst")

from .test_fix_verified import assert_not_worse, fix_all  # noqa: E402

HEAD = """import argparse
import torch
from transformers import AutoModelForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="float16")
cli = parser.parse_args()
dtype = getattr(torch, cli.dtype)
model = AutoModelForCausalLM.from_pretrained("gpt2", dtype=dtype)
"""
REFERENCE = """reference = AutoModelForCausalLM.from_pretrained("gpt2", dtype=dtype)
reference.eval()
"""
LOOP = """optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for batch in range(10):
    loss = model(batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def _fix(tmp_path, code):
    script = tmp_path / "train.py"
    script.write_text(code)
    before, after, texts, screen = fix_all([script], script, target="titan-rtx")
    assert_not_worse([script], before, after, texts, screen)
    assert "PD204" in {f.rule_id for f in before} and "PD204" not in {f.rule_id for f in after}, screen
    return script.read_text(), before


def test_a_default_shared_with_a_reference_model_is_left_and_the_keyword_set_at_the_trained_load(tmp_path):
    text, before = _fix(tmp_path, HEAD + REFERENCE + LOOP)
    assert 'parser.add_argument("--dtype", default="float16")' in text  # the reference still loads in fp16
    assert 'reference = AutoModelForCausalLM.from_pretrained("gpt2", dtype=dtype)' in text
    assert 'model = AutoModelForCausalLM.from_pretrained("gpt2", dtype=torch.float32)' in text
    fix = next(f.fix for f in before if f.rule_id == "PD204")
    assert "also read by the load of `reference` at train.py:10" in fix.description  # says which, and why
    assert fix.variants and fix.variants[0][0].kind == "replace_value"  # the default stays a fallback


def test_a_default_only_the_trained_load_reads_is_edited_where_it_is_written(tmp_path):
    text, before = _fix(tmp_path, HEAD + LOOP)
    assert 'parser.add_argument("--dtype", default="float32")' in text
    assert 'model = AutoModelForCausalLM.from_pretrained("gpt2", dtype=dtype)' in text
    assert "also read by" not in next(f.fix for f in before if f.rule_id == "PD204").description


def test_the_keyword_at_the_call_brings_its_import(tmp_path):
    code = (
        HEAD.replace("import torch\n", "from torch.optim import AdamW\n")
        .replace("dtype = getattr(torch, cli.dtype)\n", "")
        .replace("dtype=dtype", "dtype=cli.dtype")
    )
    code += 'teacher = AutoModelForCausalLM.from_pretrained("gpt2-large", dtype=cli.dtype)\n'
    code += LOOP.replace("torch.optim.AdamW", "AdamW")
    text, _ = _fix(tmp_path, code)
    assert "import torch\n" in text and 'default="float16"' in text
    assert 'model = AutoModelForCausalLM.from_pretrained("gpt2", dtype=torch.float32)' in text
    assert 'teacher = AutoModelForCausalLM.from_pretrained("gpt2-large", dtype=cli.dtype)' in text


def test_an_added_import_goes_to_the_top_block_even_when_the_files_only_torch_import_comes_later(tmp_path):
    """`import torch` lands before the code that needs it, not next to a mid-file `from torch... import`."""
    code = (
        HEAD.replace("import torch\n", "")
        .replace("dtype = getattr(torch, cli.dtype)\n", "")
        .replace("dtype=dtype", "dtype=cli.dtype")
    )
    code += 'teacher = AutoModelForCausalLM.from_pretrained("gpt2-large", dtype=cli.dtype)\n'
    code += "from torch.optim import AdamW\n" + LOOP.replace("torch.optim.AdamW", "AdamW")
    text, _ = _fix(tmp_path, code)
    lines = text.split("\n")
    assert lines.index("import torch") < next(i for i, line in enumerate(lines) if "dtype=torch.float32" in line)
    assert 'default="float16"' in text  # the keyword was set at the trained load: no fallback to the default
