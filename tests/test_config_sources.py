"""Values that come from outside the script's Python: YAML/JSON recipes a parser or loader reads, inline DeepSpeed
JSON, and environment variables. Each feeds the same facts the rules read, and names its source in the evidence."""

from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.model.facts import DYNAMIC
from precision_doctor.probes.collect import gather
from precision_doctor.probes.script import probe_script

from .conftest import machine_probes

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "fixtures" / "configs" / "scripts"


def run(path, target, args=(), environ=None, **kw):
    facts = gather(
        [str(path)],
        target=target,
        script_args=tuple(args),
        stack_overrides=CURRENT,
        **machine_probes(environ=environ),
        **kw,
    )
    return engine.run(facts)


def fired(result) -> set[str]:
    return {f.rule_id for f in result.findings}


def training_args(tmp_path: Path, source: str, args=(), environ=(None, "")):
    path = tmp_path / "train.py"
    path.write_text(source)
    facts = probe_script(path, tuple(args), environ=environ)
    return next(c for c in facts.calls if c.kind == "training_args")


# --- TRL recipes: --config FILE, then the command line -------------------------------------------


def test_trl_recipe_fp16_weights_under_fp16_amp_points_at_the_yaml_lines(monkeypatch):
    monkeypatch.chdir(SCRIPTS / "trl_recipe")
    result = run("sft.py", "t4", ["--config", "recipes/qwen_sft.yaml"])
    pd201 = next(f for f in result.findings if f.rule_id == "PD201")
    where = {(e.location.path, e.location.line) for e in pd201.evidence if e.location}
    assert ("recipes/qwen_sft.yaml", 3) in where  # dtype: float16
    assert ("recipes/qwen_sft.yaml", 7) in where  # fp16: true
    assert any("--config recipes/qwen_sft.yaml" in e.note for e in pd201.evidence)


def test_trl_recipe_fixed_twin_is_clean(monkeypatch):
    monkeypatch.chdir(SCRIPTS / "trl_recipe")
    result = run("sft.py", "t4", ["--config", "recipes/qwen_sft_fixed.yaml"])
    assert not [f for f in result.findings if f.severity == "error"], [f.message for f in result.findings]


def test_command_line_overrides_the_recipe(monkeypatch):
    monkeypatch.chdir(SCRIPTS / "trl_recipe")
    result = run("sft.py", "t4", ["--config", "recipes/qwen_sft.yaml", "--fp16", "False"])
    assert "PD201" not in fired(result) and "PD204" in fired(result)  # fp16 weights, AMP now off


def test_parse_yaml_file_reads_the_file_a_literal_names(tmp_path):
    (tmp_path / "args.yaml").write_text("output_dir: out\nbf16: true\n")
    call = training_args(
        tmp_path,
        "from transformers import HfArgumentParser, TrainingArguments, Trainer\n"
        "parser = HfArgumentParser(TrainingArguments)\n"
        "(args,) = parser.parse_yaml_file('args.yaml')\n"
        "Trainer(model=None, args=args)\n",
    )
    bf16 = call.kwarg("bf16")
    assert bf16.is_(True) and bf16.location.line == 2 and bf16.location.path.endswith("args.yaml")


def test_parse_dict_of_a_literal_dict(tmp_path):
    call = training_args(
        tmp_path,
        "from transformers import HfArgumentParser, TrainingArguments, Trainer\n"
        "parser = HfArgumentParser(TrainingArguments)\n"
        "(args,) = parser.parse_dict({'output_dir': 'o', 'fp16': True})\n"
        "Trainer(model=None, args=args)\n",
    )
    assert call.kwarg("fp16").is_(True)


# --- loaders in the script -----------------------------------------------------------------------


def test_yaml_loaded_by_the_script_with_inline_deepspeed_json(monkeypatch):
    monkeypatch.chdir(ROOT)
    buggy = run(SCRIPTS / "yaml_loaded" / "train.py", "a100", ["config.yaml"])
    assert "PD501" in fired(buggy)  # inline "fp16": {"enabled": true} against bf16: true from the YAML
    fixed = run(SCRIPTS / "yaml_loaded" / "train.py", "a100", ["config_fixed.yaml"])
    assert not {"PD501", "PD212"} & fired(fixed)


@pytest.mark.parametrize(
    "load", ["yaml.safe_load(open('c.yaml'))", "json.load(open('c.json'))", "OmegaConf.load('c.yaml')"]
)
def test_loaded_values_are_followed_into_get_and_subscripts(tmp_path, load):
    (tmp_path / "c.yaml").write_text("train:\n  precision:\n    fp16: true\n")
    (tmp_path / "c.json").write_text('{"train": {"precision": {"fp16": true}}}')
    call = training_args(
        tmp_path,
        "import json, yaml\nfrom omegaconf import OmegaConf\n"
        "from transformers import TrainingArguments\n"
        f"cfg = {load}\n"
        "TrainingArguments('o', fp16=cfg['train'].get('precision')['fp16'],\n"
        "                  bf16=cfg.get('bf16', False))\n",
    )
    assert call.kwarg("fp16").is_(True) and call.kwarg("bf16").is_(False)
    assert call.kwarg("fp16").origins[0].kind == "config-file"


def test_a_config_path_from_the_command_line(tmp_path):
    (tmp_path / "run.yaml").write_text("bf16: true\n")
    call = training_args(
        tmp_path,
        "import sys, yaml\nfrom transformers import TrainingArguments\n"
        "cfg = yaml.safe_load(open(sys.argv[1]))\n"
        "TrainingArguments('o', bf16=cfg['bf16'])\n",
        args=[str(tmp_path / "run.yaml")],
    )
    assert call.kwarg("bf16").is_(True)


def test_a_missing_or_broken_config_stays_unknown(tmp_path):
    (tmp_path / "bad.yaml").write_text("bf16: [unclosed\n")
    for name in ("bad.yaml", "absent.yaml"):
        call = training_args(
            tmp_path,
            "import yaml\nfrom transformers import TrainingArguments\n"
            f"cfg = yaml.safe_load(open('{name}'))\n"
            "TrainingArguments('o', bf16=cfg['bf16'])\n",
        )
        assert call.kwarg("bf16").state == DYNAMIC


def test_yaml_tags_never_construct_objects(tmp_path):
    (tmp_path / "c.yaml").write_text("bf16: !!python/object/apply:os.system ['echo pwned']\nfp16: true\n")
    call = training_args(
        tmp_path,
        "import yaml\nfrom transformers import TrainingArguments\n"
        "cfg = yaml.load(open('c.yaml'), Loader=yaml.Loader)\n"
        "TrainingArguments('o', fp16=cfg['fp16'])\n",
    )
    assert call.kwarg("fp16").is_(True)


def test_alias_bombs_are_refused_not_expanded(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    (tmp_path / "c.yaml").write_text("\n".join(lines) + "\nbf16: true\n")
    call = training_args(
        tmp_path,
        "import yaml\nfrom transformers import TrainingArguments\n"
        "cfg = yaml.safe_load(open('c.yaml'))\n"
        "TrainingArguments('o', bf16=cfg['bf16'])\n",
    )
    assert call.kwarg("bf16").state == DYNAMIC


# --- environment -----------------------------------------------------------------------------------

ENV_SCRIPT = SCRIPTS / "environment" / "train.py"


def test_environment_default_fires_at_likely_confidence_and_says_so():
    result = run(ENV_SCRIPT, "t4")
    pd201 = next(f for f in result.findings if f.rule_id == "PD201")
    assert pd201.confidence == "likely"
    assert any("with PRECISION unset" in e.note for e in pd201.evidence)


def test_this_machines_environment_decides_the_value():
    result = run(ENV_SCRIPT, None, environ={"PRECISION": "bf16"})
    assert "PD201" not in fired(result)
    pd204 = next(f for f in result.findings if f.rule_id == "PD204")  # fp16 weights, bf16 AMP: pure fp16 math
    assert any("PRECISION=bf16 in this machine's environment" in e.note for e in pd204.evidence)


def test_no_default_stays_unknown_and_secrets_are_never_read(tmp_path):
    source = (
        "import os\nfrom transformers import TrainingArguments\n"
        "TrainingArguments('o', bf16=os.environ['USE_BF16'], run_name=os.environ.get('HF_TOKEN', 'x'))\n"
    )
    call = training_args(tmp_path, source, environ=({"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz"}, "this machine"))
    assert call.kwarg("bf16").state == DYNAMIC
    assert call.kwarg("run_name").state == DYNAMIC and "secret" in call.kwarg("run_name").reason


# --- Lightning ---------------------------------------------------------------------------------------


def test_lightning_bf16_mixed_on_a_v100_and_its_fp16_twin():
    assert "PD101" in fired(run(SCRIPTS / "lightning" / "train.py", "v100"))
    twin = run(SCRIPTS / "lightning" / "train_fixed.py", "v100")
    assert not [f for f in twin.findings if f.severity == "error"], [f.message for f in twin.findings]


@pytest.mark.parametrize(
    "precision,mode",
    [
        ("'16-mixed'", "fp16"),
        ("16", "fp16"),
        ("'bf16'", "bf16"),
        ("'bf16-mixed'", "bf16"),
        ("'transformer-engine'", "fp8"),
        ("'32-true'", "no"),
        (None, "no"),
    ],
)
def test_lightning_precision_strings_map_to_accelerate_modes(tmp_path, precision, mode):
    arg = f"precision={precision}" if precision else ""
    path = tmp_path / "train.py"
    path.write_text(f"import lightning as L\ntrainer = L.Trainer({arg})\n")
    call = next(c for c in probe_script(path).calls if c.kind == "accelerator")
    assert call.kwarg("mixed_precision").is_(mode)


def test_lightning_true_half_is_reported_unknown_not_guessed(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("from lightning.fabric import Fabric\nfabric = Fabric(precision='bf16-true')\n")
    facts = probe_script(path)
    assert any("bf16-true" in u.what for u in facts.unknowns)
