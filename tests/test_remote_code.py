"""A checkpoint's own model code (config.json `auto_map`, loaded with trust_remote_code=True), read as text: what
gradient checkpointing does with its class, and PD307 where transformers will refuse it."""

import json

import pytest

from precision_doctor.probes.remote_code import remote_classes

AUTO_MAP = {"AutoConfig": "configuration_x.XConfig", "AutoModelForCausalLM": "modeling_x.XForCausalLM"}
HEAD = "from transformers import PreTrainedModel\n\n"
SCRIPT = (
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained({model!r}, trust_remote_code=True)\n"
    "{before}Trainer(model=model, args=TrainingArguments('out'{args}), train_dataset=data).train()\n"
)


def checkpoint(folder, modeling, auto_map=None, **files):
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "x", "auto_map": AUTO_MAP if auto_map is None else auto_map}
    (folder / "config.json").write_text(json.dumps(config))
    if modeling is not None:
        (folder / "modeling_x.py").write_text(modeling)
    for name, text in files.items():
        (folder / f"{name}.py").write_text(text)
    return folder


def judged(folder):
    (found,) = remote_classes(folder, json.loads((folder / "config.json").read_text())["auto_map"])
    return found


@pytest.mark.parametrize(
    "modeling,answer,line",
    [
        (HEAD + "class XForCausalLM(PreTrainedModel):\n    pass\n", "no", 3),
        (
            HEAD + "class XPre(PreTrainedModel):\n    supports_gradient_checkpointing = False\n\n"
            "class XForCausalLM(XPre):\n    pass\n",
            "no",
            4,
        ),
        (
            HEAD + "class XPre(PreTrainedModel):\n    supports_gradient_checkpointing: bool = True\n\n"
            "class XForCausalLM(XPre):\n    pass\n",
            "yes",
            4,
        ),
        (
            HEAD + "class XPre(PreTrainedModel):\n    supports_gradient_checkpointing = True\n\n"
            "    def _set_gradient_checkpointing(self, module, value=False):\n        pass\n\n"
            "class XForCausalLM(XPre):\n    pass\n",
            "old",
            6,
        ),
        (
            HEAD + "class XForCausalLM(PreTrainedModel):\n"
            "    def gradient_checkpointing_enable(self, **kw):\n        super().gradient_checkpointing_enable(**kw)\n",
            "no",
            3,
        ),
        (  # Python's order: PreTrainedModel's False comes before the mixin's True
            HEAD
            + "class Pre(PreTrainedModel):\n    pass\n\nclass Mixin:\n    supports_gradient_checkpointing = True\n\n"
            "class XForCausalLM(Pre, Mixin):\n    pass\n",
            "no",
            9,
        ),
        (  # ... and a diamond: both sides before their shared base
            HEAD + "class A(PreTrainedModel):\n    pass\n\nclass B(PreTrainedModel):\n"
            "    supports_gradient_checkpointing = True\n\nclass XForCausalLM(A, B):\n    pass\n",
            "yes",
            7,
        ),
    ],
    ids=["default-false", "set-false", "set-true", "old-setter", "enable-calls-super", "mixin-after-root", "diamond"],
)
def test_what_the_class_says_is_read_through_its_bases(tmp_path, modeling, answer, line):
    found = judged(checkpoint(tmp_path / "m", modeling))
    assert (found.name, found.checkpointing, found.answer_line) == ("XForCausalLM", answer, line)
    assert found.reason == ""


def test_a_base_in_another_file_of_the_folder_is_followed(tmp_path):
    folder = checkpoint(
        tmp_path / "m",
        "from .base_x import XPre as Base\n\nclass XForCausalLM(Base):\n    pass\n",
        base_x=HEAD + "class XPre(PreTrainedModel):\n    supports_gradient_checkpointing = True\n",
    )
    found = judged(folder)
    assert found.checkpointing == "yes" and found.answer_path.endswith("base_x.py") and found.answer_line == 4


@pytest.mark.parametrize(
    "modeling,auto_map,reason",
    [
        (
            "from transformers.models.llama.modeling_llama import LlamaPreTrainedModel\n\n"
            "class XForCausalLM(LlamaPreTrainedModel):\n    pass\n",
            None,
            "inherits from LlamaPreTrainedModel",
        ),
        (
            HEAD + "class XPre(PreTrainedModel):\n    supports_gradient_checkpointing = FLAG\n\n"
            "class XForCausalLM(XPre):\n    pass\n",
            None,
            "computed",
        ),
        (None, None, "modeling_x.py is not beside its config.json"),
        (HEAD, {"AutoModelForCausalLM": "org/code--modeling_x.XForCausalLM"}, "another repository"),
        (HEAD + "class Other(PreTrainedModel):\n    pass\n", None, "defines no class XForCausalLM"),
        ("class XForCausalLM(:\n", None, "cannot be read or parsed"),
        (
            HEAD + "class XForCausalLM(PreTrainedModel):\n    def gradient_checkpointing_enable(self, **kw):\n"
            "        self.apply(lambda m: None)\n",
            None,
            "switches checkpointing on its own way",
        ),
        (
            HEAD
            + "class XForCausalLM(PreTrainedModel):\n    pass\n\nXForCausalLM.supports_gradient_checkpointing = True\n",
            None,
            "in a way the doctor does not follow",
        ),
        (
            HEAD + "class XForCausalLM(PreTrainedModel):\n    supports_gradient_checkpointing = x = True\n",
            None,
            "in a way the doctor does not follow",
        ),
        (
            HEAD
            + "class XForCausalLM(PreTrainedModel):\n    if True:\n        supports_gradient_checkpointing = True\n",
            None,
            "in a way the doctor does not follow",
        ),
        (
            HEAD + "class XForCausalLM(PreTrainedModel):\n    def post_init(self):\n"
            "        self.supports_gradient_checkpointing = True\n",
            None,
            "in a way the doctor does not follow",
        ),
        (
            HEAD + "class XForCausalLM(PreTrainedModel):\n    pass\n\n"
            "setattr(XForCausalLM, 'supports_gradient_checkpointing', True)\n",
            None,
            "in a way the doctor does not follow",
        ),
    ],
    ids=[
        "library-base",
        "computed",
        "no-file",
        "other-repo",
        "no-class",
        "syntax-error",
        "own-enable",
        "set-after",
        "two-targets",
        "under-if",
        "on-the-instance",
        "setattr",
    ],
)
def test_what_cannot_be_read_is_unknown_with_its_reason(tmp_path, modeling, auto_map, reason):
    found = judged(checkpoint(tmp_path / "m", modeling, auto_map))
    assert found.checkpointing == "" and reason in found.reason


def test_only_model_classes_are_judged(tmp_path):
    auto_map = {**AUTO_MAP, "AutoTokenizer": ["tok.T", None], "AutoModel": "modeling_x.XModel"}
    folder = checkpoint(tmp_path / "m", HEAD + "class XModel(PreTrainedModel):\n    pass\n", auto_map)
    assert [(c.auto_class, c.name) for c in remote_classes(folder, auto_map)] == [
        ("AutoModel", "XModel"),
        ("AutoModelForCausalLM", "XForCausalLM"),
    ]


NO_SUPPORT = HEAD + "class XForCausalLM(PreTrainedModel):\n    pass\n"
# supported, with the flag transformers switches on a module
FLAGGED = (
    HEAD + "class XForCausalLM(PreTrainedModel):\n    supports_gradient_checkpointing = True\n\n"
    "    def __init__(self, config):\n        super().__init__(config)\n        self.gradient_checkpointing = False\n"
)
NO_FLAG = HEAD + "class XForCausalLM(PreTrainedModel):\n    supports_gradient_checkpointing = True\n"


def pd307(result):
    return [f for f in result.findings if f.rule_id == "PD307"]


@pytest.mark.parametrize(
    "before,args,versions,severity",
    [
        ("", ", gradient_checkpointing=True", {}, "error"),
        ("", ", activation_checkpointing=True", {}, "error"),
        ("model.gradient_checkpointing_enable()\n", "", {}, "error"),
        ("if use_gc:\n    model.gradient_checkpointing_enable()\n", "", {}, "warning"),
    ],
    ids=["trainer-argument", "5.24-name", "script-call", "under-a-branch"],
)
def test_pd307_fires_on_every_way_checkpointing_is_switched_on(run_check, tmp_path, before, args, versions, severity):
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    result, _ = run_check(SCRIPT.format(model="./ckpt", before=before, args=args), versions=versions)
    assert [f.severity for f in pd307(result)] == [severity]
    assert pd307(result)[0].error == "ValueError: XForCausalLM does not support activation checkpointing."


def test_pd307_trls_config_default_switches_it_on(run_check, tmp_path):
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    code = (
        "from transformers import AutoModelForCausalLM\nfrom trl import SFTConfig, SFTTrainer\n"
        "model = AutoModelForCausalLM.from_pretrained('./ckpt', trust_remote_code=True)\n"
        "SFTTrainer(model=model, args=SFTConfig('out'), train_dataset=data).train()\n"
    )
    assert [f.severity for f in pd307(run_check(code, versions={"trl": "0.22.0"})[0])] == ["error"]
    assert pd307(run_check(code, versions={"trl": "0.21.0"})[0]) == []  # before 0.22 TRL left it off


def test_pd307_reads_the_code_in_the_hugging_face_cache(run_check, tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--org--chat-x" / "snapshots" / "abc123"
    checkpoint(snapshot, NO_SUPPORT)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    result, _ = run_check(SCRIPT.format(model="org/chat-x", before="", args=", gradient_checkpointing=True"))
    (finding,) = pd307(result)
    assert any(e.location and e.location.path.endswith("modeling_x.py") for e in finding.evidence)


@pytest.mark.parametrize(
    "modeling,code_change",
    [
        (FLAGGED, {}),
        (NO_SUPPORT, {"trust_remote_code=True": "trust_remote_code=False"}),
        (NO_SUPPORT, {"AutoModelForCausalLM.from_pretrained": "XForCausalLM.from_pretrained"}),
        (NO_SUPPORT, {", gradient_checkpointing=True": ""}),
    ],
    ids=["supports", "trust-off", "named-class", "no-checkpointing"],
)
def test_pd307_silent_twins(run_check, tmp_path, modeling, code_change):
    checkpoint(tmp_path / "ckpt", modeling)
    code = SCRIPT.format(model="./ckpt", before="", args=", gradient_checkpointing=True")
    for old, new in code_change.items():
        code = code.replace(old, new)
    result, _ = run_check(code)
    assert pd307(result) == [] and not result.crashed


def test_pd307_says_unknown_when_the_code_is_not_on_this_machine(run_check, tmp_path):
    checkpoint(tmp_path / "ckpt", None)
    result, facts = run_check(SCRIPT.format(model="./ckpt", before="", args=", gradient_checkpointing=True"))
    assert pd307(result) == []
    from precision_doctor.report.unknowns import unknown_entries

    entries = [u for u in unknown_entries(result, facts) if "PD307" in u.silences]
    assert entries and "modeling_x.py is not beside its config.json" in entries[0].reason


def test_pd307_before_5_23_says_gradient_checkpointing(run_check, tmp_path):
    """The message named the feature "gradient checkpointing" up to 5.22 (4.57.1 modeling_utils.py:3689)."""
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    code = SCRIPT.format(model="./ckpt", before="", args=", gradient_checkpointing=True")
    (finding,) = pd307(run_check(code, versions={"transformers": "5.22.0"})[0])
    assert finding.error == "ValueError: XForCausalLM does not support gradient checkpointing."


AXOLOTL = (
    "base_model: ./ckpt\ntrust_remote_code: true\nadapter: lora\nlora_target_linear: true\n"
    "gradient_checkpointing: true\ndatasets:\n  - path: data.jsonl\n    type: alpaca\nbf16: true\nmicro_batch_size: 2\n"
)
LLAMAFACTORY = (
    "model_name_or_path: ./ckpt\ntrust_remote_code: true\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
    "dataset: alpaca_en_demo\ntemplate: default\noutput_dir: out\nbf16: true\n"
)


def test_pd307_on_an_axolotl_recipe(run_check, tmp_path):
    """Axolotl hands trust_remote_code to its Auto class and enables checkpointing on the model
    (loaders/model.py:446-453, 833-841): transformers refuses the class."""
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    result, _ = run_check(AXOLOTL, name="config.yml", launcher="axolotl train config.yml")
    assert [f.severity for f in pd307(result)] == ["error"]
    result, _ = run_check(AXOLOTL.replace("trust_remote_code: true\n", ""), name="config.yml")
    assert pd307(result) == []


def test_llamafactory_trains_such_a_model_without_checkpointing(run_check, tmp_path):
    """LLaMA-Factory asks the model first and, where it lacks support, warns and trains without checkpointing
    (model_utils/checkpointing.py:184-186): no error, and no checkpointing in what the job is modelled as."""
    from precision_doctor.derive import derive_setup

    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    result, facts = run_check(LLAMAFACTORY, name="sft.yaml", launcher="llamafactory-cli train sft.yaml")
    assert pd307(result) == []
    assert not derive_setup(facts.scripts[0], facts).placement.checkpointing.on
    checkpoint(
        tmp_path / "ckpt", HEAD + "class XForCausalLM(PreTrainedModel):\n    supports_gradient_checkpointing = True\n"
    )
    _, facts = run_check(LLAMAFACTORY, name="sft.yaml", launcher="llamafactory-cli train sft.yaml")
    assert derive_setup(facts.scripts[0], facts).placement.checkpointing.on


def test_pd307_a_supported_class_with_no_flag_to_switch(run_check, tmp_path):
    """From 4.35 transformers switches each module's `gradient_checkpointing` flag and refuses a model with none
    (modeling_utils.py:1881-1901): a class that says it supports checkpointing but never sets the flag dies."""
    checkpoint(tmp_path / "ckpt", NO_FLAG)
    code = SCRIPT.format(model="./ckpt", before="", args=", gradient_checkpointing=True")
    (finding,) = pd307(run_check(code)[0])
    assert finding.error.startswith("ValueError: XForCausalLM is not compatible with gradient checkpointing.")
    assert pd307(run_check(code, versions={"transformers": "4.34.1"})[0]) == []  # the old setter asked for none
    checkpoint(tmp_path / "ckpt", FLAGGED)
    assert pd307(run_check(code)[0]) == []


@pytest.mark.parametrize(
    "modeling,flags",
    [
        (NO_FLAG + "\nclass Block(GradientCheckpointingLayer):\n    pass\n", True),
        ("from transformers.models.llama.modeling_llama import LlamaDecoderLayer\n" + NO_FLAG, None),
        ("from .layers import Block\n" + NO_FLAG, None),  # a file of the folder that is not there
        ("import flash_attn\n" + NO_FLAG, None),
        (
            "import torch\nfrom torch import nn\nfrom transformers.modeling_outputs import CausalLMOutput\n" + NO_FLAG,
            False,
        ),
    ],
    ids=["checkpointing-layer", "library-layer", "missing-sibling", "other-package", "plain-imports"],
)
def test_the_flag_is_looked_for_in_every_module_the_model_can_hold(tmp_path, modeling, flags):
    assert judged(checkpoint(tmp_path / "m", modeling)).module_flags is flags


def test_the_flag_set_in_a_sibling_file_counts(tmp_path):
    folder = checkpoint(
        tmp_path / "m",
        "from .blocks import Block\n" + NO_FLAG,
        blocks="from torch import nn\n\nclass Block(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.gradient_checkpointing = False\n",
    )
    assert judged(folder).module_flags is True


@pytest.mark.parametrize(
    "patch,fires",
    [
        ("model.supports_gradient_checkpointing = True\n", False),
        ("type(model).supports_gradient_checkpointing = True\n", False),
        ("setattr(model, 'supports_gradient_checkpointing', True)\n", False),
        ("model.supports_gradient_checkpointing = False\n", True),
        ("model.config.supports_gradient_checkpointing = True\n", True),
    ],
    ids=["instance", "class", "setattr", "set-false", "on-its-config"],
)
def test_pd307_the_scripts_own_workaround(run_check, tmp_path, patch, fires):
    """`model.supports_gradient_checkpointing = True` is the workaround people find for this error: with a module
    flag to switch, the job then trains."""
    checkpoint(
        tmp_path / "ckpt",
        NO_SUPPORT.replace(
            "    pass\n",
            "    def __init__(self, config):\n"
            "        super().__init__(config)\n        self.gradient_checkpointing = False\n",
        ),
    )
    result, _ = run_check(SCRIPT.format(model="./ckpt", before=patch, args=", gradient_checkpointing=True"))
    assert bool(pd307(result)) is fires


FLAGGED_UNSUPPORTED = NO_SUPPORT.replace(
    "    pass\n",
    "    def __init__(self, config):\n        super().__init__(config)\n        self.gradient_checkpointing = False\n",
)
TRAIN_GC = (
    "Trainer(model=model, args=TrainingArguments('out', gradient_checkpointing=True), train_dataset=data).train()\n"
)
LOAD = "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n" + (
    "model = AutoModelForCausalLM.from_pretrained('./ckpt', trust_remote_code=True)\n"
)


@pytest.mark.parametrize(
    "script,fires",
    [
        (LOAD + "def patch(m):\n    m.supports_gradient_checkpointing = True\n\n" + TRAIN_GC, True),
        (
            LOAD + "def patch(model):\n    model.supports_gradient_checkpointing = True\n\npatch(model)\n" + TRAIN_GC,
            False,
        ),
        (LOAD + TRAIN_GC + "model.supports_gradient_checkpointing = True\n", True),
        (
            LOAD + "from peft import LoraConfig, get_peft_model\nmodel = get_peft_model(model, LoraConfig())\n"
            "model.supports_gradient_checkpointing = True\n" + TRAIN_GC,
            True,
        ),
        (
            LOAD + "model.supports_gradient_checkpointing = True\nfrom peft import LoraConfig, get_peft_model\n"
            "model = get_peft_model(model, LoraConfig())\n" + TRAIN_GC,
            False,
        ),
        (
            LOAD + "from transformers import TrainerCallback\n\nclass Fix(TrainerCallback):\n"
            "    def on_train_begin(self, args, state, control, model=None, **kw):\n"
            "        model.supports_gradient_checkpointing = True\n\n"
            + TRAIN_GC.replace("train_dataset=data", "train_dataset=data, callbacks=[Fix()]"),
            True,
        ),
        (
            LOAD + "class Patched:\n    def __init__(self, model):\n"
            "        model.supports_gradient_checkpointing = True\n\nPatched(model)\n" + TRAIN_GC,
            False,
        ),
    ],
    ids=[
        "function-never-called",
        "function-called",
        "after-training",
        "on-the-peft-wrapper",
        "before-the-peft-wrap",
        "in-a-callback",
        "in-a-constructor-called",
    ],
)
def test_pd307_a_workaround_where_it_never_takes_effect(run_check, tmp_path, script, fires):
    """The flag must be set on the model transformers asks, before checkpointing is switched on: a function
    nobody calls, a line after `train()`, peft's wrapper (it keeps the attribute; the base model reads its class's)
    and a callback (the Trainer switches checkpointing on before `on_train_begin`) leave the job dying."""
    checkpoint(tmp_path / "ckpt", FLAGGED_UNSUPPORTED)
    assert bool(pd307(run_check(script)[0])) is fires


@pytest.mark.parametrize(
    "before,severities",
    [
        ("if model.supports_gradient_checkpointing:\n    model.gradient_checkpointing_enable()\n", []),
        (
            "if getattr(model, 'supports_gradient_checkpointing', False):\n    model.gradient_checkpointing_enable()\n",
            [],
        ),
        ("if hasattr(model, 'gradient_checkpointing_enable'):\n    model.gradient_checkpointing_enable()\n", ["error"]),
        ("try:\n    model.gradient_checkpointing_enable()\nexcept ValueError:\n    pass\n", ["warning"]),
        ("if not model.supports_gradient_checkpointing:\n    model.gradient_checkpointing_enable()\n", ["warning"]),
        (
            "if model.supports_gradient_checkpointing:\n    pass\nelse:\n    model.gradient_checkpointing_enable()\n",
            ["warning"],
        ),
    ],
    ids=["asks-the-model", "asks-through-getattr", "has-the-method", "in-a-try", "negated", "else-side"],
)
def test_pd307_where_the_script_asks_first_or_catches_it(run_check, tmp_path, before, severities):
    """Asked first: never enabled. In a try: the handler may take the refusal, or re-raise it. A negated or
    else-side guard lets the call through where the run decides."""
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    found = pd307(run_check(SCRIPT.format(model="./ckpt", before=before, args=""))[0])
    assert [f.severity for f in found] == severities


@pytest.mark.parametrize(
    "modeling,flags",
    [
        (
            NO_FLAG + "    def __init__(self, config):\n        super().__init__(config)\n"
            "        from .blocks import Block\n        self.block = Block()\n",
            True,
        ),
        (NO_FLAG + "    def forward(self, x):\n        gradient_checkpointing = False\n        return x\n", False),
        (
            NO_FLAG + "\nclass XConfig(PretrainedConfig):\n    def __init__(self, **kw):\n"
            "        self.gradient_checkpointing = False\n        super().__init__(**kw)\n",
            False,
        ),
        (
            NO_FLAG + "    def __init__(self, config):\n        super().__init__(config)\n"
            "        for key in ('gradient_checkpointing',):\n            setattr(self, key, False)\n",
            None,
        ),
        (
            NO_FLAG + "    def __init__(self, config):\n        super().__init__(config)\n"
            "        self.__dict__.update(gradient_checkpointing=False)\n",
            None,
        ),
    ],
    ids=["import-in-init", "local-variable", "config-setting", "computed-setattr", "dict-update"],
)
def test_the_flag_is_a_modules_attribute(tmp_path, modeling, flags):
    blocks = (
        "from torch import nn\n\nclass Block(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.gradient_checkpointing = False\n"
    )
    folder = checkpoint(
        tmp_path / "m",
        modeling.replace(
            "from transformers import PreTrainedModel", "from transformers import PreTrainedModel, PretrainedConfig"
        ),
        blocks=blocks,
    )
    assert judged(folder).module_flags is flags


@pytest.mark.parametrize(
    "modeling,extra",
    [
        (
            "from .deco import supported\n" + HEAD + "@supported\nclass XForCausalLM(PreTrainedModel):\n    pass\n",
            {"deco": "def supported(cls):\n    cls.supports_gradient_checkpointing = True\n    return cls\n"},
        ),
        (
            HEAD
            + "class XForCausalLM(PreTrainedModel):\n    gradient_checkpointing_enable = lambda self, **kw: None\n",
            {},
        ),
        (HEAD + "class XForCausalLM(" + "(A if B else " * 400 + "C" + ")" * 400 + "):\n    pass\n", {}),
    ],
    ids=["decorator-in-another-file", "enable-bound-by-assignment", "deep-base-expression"],
)
def test_more_that_cannot_be_read_is_unknown(tmp_path, modeling, extra):
    found = judged(checkpoint(tmp_path / "m", modeling, **extra))
    assert found.checkpointing == "" and found.reason


def test_pd307_under_the_main_guard_is_certain(run_check, tmp_path):
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    code = (
        SCRIPT.format(model="./ckpt", before="", args="")
        .replace("model = Auto", "if __name__ == '__main__':\n    model = Auto")
        .replace("\nTrainer", "\n    model.gradient_checkpointing_enable()\n    Trainer")
    )
    assert [f.severity for f in pd307(run_check(code)[0])] == ["error"]


def test_pd307_points_at_the_local_checkpoint_as_the_script_names_it(run_check, tmp_path):
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    (finding,) = pd307(run_check(SCRIPT.format(model="./ckpt", before="", args=", gradient_checkpointing=True"))[0])
    assert [e.location.path for e in finding.evidence if e.location and "modeling" in e.location.path] == [
        "ckpt/modeling_x.py"
    ]


def test_the_cache_snapshot_is_the_one_huggingface_hub_loads(run_check, tmp_path, monkeypatch):
    """refs/main's snapshot (not the newest folder), and a pinned `revision=` its own: the flag PD307 reads, and
    every other fact, come from the code the job will run."""
    import os
    import time

    repo = tmp_path / "hub" / "models--org--two"
    checkpoint(repo / "snapshots" / "aaa111", FLAGGED)
    checkpoint(repo / "snapshots" / "bbb222", NO_SUPPORT)
    os.utime(repo / "snapshots" / "bbb222", (time.time() + 60, time.time() + 60))  # the newest folder
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("aaa111")
    (repo / "refs" / "v2").write_text("bbb222")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    code = SCRIPT.format(model="org/two", before="", args=", gradient_checkpointing=True")
    assert pd307(run_check(code)[0]) == []  # main: the class that supports it
    pinned = code.replace("trust_remote_code=True", "trust_remote_code=True, revision='v2'")
    assert len(pd307(run_check(pinned)[0])) == 1
    by_commit = code.replace("trust_remote_code=True", "trust_remote_code=True, revision='bbb222'")
    assert len(pd307(run_check(by_commit)[0])) == 1
    absent = code.replace("trust_remote_code=True", "trust_remote_code=True, revision='v3'")
    assert pd307(run_check(absent)[0]) == []  # not in the cache: not answered from another snapshot


def test_transformers_base_under_another_name_is_its_root(tmp_path):
    modeling = "from transformers import PreTrainedModel as Base\n\nclass XForCausalLM(Base):\n    pass\n"
    assert judged(checkpoint(tmp_path / "m", modeling)).checkpointing == "no"


# --- PD308: a checkpoint that needs its own code, loaded without trust_remote_code -----------------------------

UNTRUSTED = (
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained({model!r}{trust})\n"
    "Trainer(model=model, args=TrainingArguments('out'), train_dataset=data).train()\n"
)


def pd308(result):
    return [f for f in result.findings if f.rule_id == "PD308"]


def _fake_transformers(tmp_path, version, causal_lm_types):
    """A training environment with transformers `version` whose Auto classes know these model types."""
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    (site / f"transformers-{version}.dist-info").mkdir(parents=True)
    (site / f"transformers-{version}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n"
    )
    auto = site / "transformers" / "models" / "auto"
    auto.mkdir(parents=True)
    pairs = ", ".join(f"({t!r}, 'X')" for t in causal_lm_types)
    (auto / "modeling_auto.py").write_text(
        "from collections import OrderedDict\n"
        f"MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict([{pairs}])\n"
        "MODEL_FOR_CAUSAL_LM_MAPPING = _LazyAutoMapping(CONFIG_MAPPING_NAMES, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)\n"
        "class AutoModelForCausalLM(_BaseAutoModelClass):\n    _model_mapping = MODEL_FOR_CAUSAL_LM_MAPPING\n"
    )
    (tmp_path / "env" / "bin").mkdir()
    (tmp_path / "env" / "bin" / "python").write_text("")
    return tmp_path / "env" / "bin" / "python"


def _check_with(tmp_path, code, python):
    from precision_doctor import engine
    from precision_doctor.probes.collect import gather

    from .conftest import NO_NVML

    (tmp_path / "train.py").write_text(code)
    return engine.run(gather([str(tmp_path / "train.py")], environ={}, system=NO_NVML, python=str(python)))


@pytest.mark.parametrize(
    "trust,native,fires",
    [
        ("", [], True),
        (", trust_remote_code=False", [], True),
        (", trust_remote_code=True", [], False),
        ("", ["x"], False),
    ],
    ids=["unset", "false", "true", "transformers-has-it"],
)
def test_pd308_reads_the_installed_transformers_mapping(tmp_path, trust, native, fires):
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    python = _fake_transformers(tmp_path, "4.57.1", native or ["llama"])
    found = pd308(_check_with(tmp_path, UNTRUSTED.format(model="./ckpt", trust=trust), python))
    assert bool(found) is fires
    if fires:
        assert found[0].error.startswith("ValueError: The repository ./ckpt contains custom code")
        assert any("4.57.1 (installed) models/auto/modeling_auto.py:2" in e.excerpt for e in found[0].evidence)


def test_pd308_a_release_neither_installed_nor_in_the_table_is_unknown(run_check, tmp_path):
    from precision_doctor.report.unknowns import unknown_entries

    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    result, facts = run_check(UNTRUSTED.format(model="./ckpt", trust=""), versions={"transformers": "4.30.2"})
    assert pd308(result) == []
    assert any("PD308" in u.silences for u in unknown_entries(result, facts))
    result, _ = run_check(UNTRUSTED.format(model="./ckpt", trust=""))  # a release the table read
    assert len(pd308(result)) == 1


@pytest.mark.parametrize("release,fires", [("4.50.3", True), ("4.51.3", False), ("5.10.4", False)])
def test_pd308_a_model_type_transformers_took_in_later(run_check, tmp_path, release, fires):
    """A checkpoint with its own code for a model type transformers took in later (`qwen3`, in its mapping from
    4.51) loads without trust_remote_code only from that release on (the shipped table of its releases, by minor)."""
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps({**config, "model_type": "qwen3"}))
    result, _ = run_check(UNTRUSTED.format(model="./ckpt", trust=""), versions={"transformers": release})
    assert bool(pd308(result)) is fires


@pytest.mark.parametrize(
    "name,recipe,launcher",
    [
        (
            "config.yml",
            "base_model: ./ckpt\nadapter: lora\nlora_target_linear: true\ndatasets:\n  - path: d.jsonl\n"
            "    type: alpaca\nbf16: true\nmicro_batch_size: 2\n",
            "axolotl train config.yml",
        ),
        (
            "sft.yaml",
            "model_name_or_path: ./ckpt\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
            "dataset: alpaca_en_demo\ntemplate: default\noutput_dir: out\nbf16: true\n",
            "llamafactory-cli train sft.yaml",
        ),
    ],
    ids=["axolotl", "llamafactory"],
)
def test_pd308_on_recipes_names_the_recipe_key(run_check, tmp_path, name, recipe, launcher):
    """Both frameworks hand trust_remote_code (default False) to from_pretrained."""
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    (finding,) = pd308(run_check(recipe, name=name, launcher=launcher)[0])
    assert "trust_remote_code: true" in finding.fix.description and not finding.fix.edits
    assert pd308(run_check(recipe + "trust_remote_code: true\n", name=name, launcher=launcher)[0]) == []


def test_loads_of_one_model_at_different_revisions_are_not_answered_from_one_snapshot(run_check, tmp_path, monkeypatch):
    repo = tmp_path / "hub" / "models--org--two"
    checkpoint(repo / "snapshots" / "aaa111", FLAGGED)
    checkpoint(repo / "snapshots" / "bbb222", NO_SUPPORT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("aaa111")
    (repo / "refs" / "v2").write_text("bbb222")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    code = SCRIPT.format(model="org/two", before="", args=", gradient_checkpointing=True")
    code = code.replace("Trainer(", "ref = AutoModelForCausalLM.from_pretrained('org/two', revision='v2')\nTrainer(")
    result, facts = run_check(code)
    assert pd307(result) == [] and not facts.scripts[0].checkpoints["org/two"].known


def test_pd307_a_second_models_flag_is_not_the_trained_ones(run_check, tmp_path):
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    before = "other = AutoModelForCausalLM.from_pretrained('gpt2')\nother.supports_gradient_checkpointing = True\n"
    assert pd307(run_check(SCRIPT.format(model="./ckpt", before=before, args=", gradient_checkpointing=True"))[0])


OLD_SETTER = (
    "{imports}from transformers import PreTrainedModel\n\n\n"
    "class XForCausalLM(PreTrainedModel):\n    supports_gradient_checkpointing = True\n\n"
    "    def _set_gradient_checkpointing(self, module, value=False):\n        module.gradient_checkpointing = value\n\n"
    "    def forward(self, x):\n        return {call}\n"
)


@pytest.mark.parametrize(
    "imports,call,reentrant,line",
    [
        ("import torch.utils.checkpoint\n", "torch.utils.checkpoint.checkpoint(self.block, x)", True, 12),
        (
            "from torch.utils.checkpoint import checkpoint\n",
            "checkpoint(self.block, x, use_reentrant=False)",
            False,
            12,
        ),
        ("from torch.utils import checkpoint\n", "checkpoint.checkpoint(self.block, x, use_reentrant=True)", True, 12),
        (
            "import torch.utils.checkpoint\n",
            "torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=flag)",
            None,
            0,
        ),
        ("", "self.block(x)", None, 0),
        ("from mylib import checkpoint\n", "checkpoint(self.block, x)", None, 0),
    ],
    ids=["torch-default", "imported-non-reentrant", "module-imported", "computed", "no-call", "not-torchs"],
)
def test_an_old_format_class_is_read_for_its_own_checkpoint_calls(tmp_path, imports, call, reentrant, line):
    """The pre-4.35 setter: transformers ignores the checkpointing keyword arguments, and the class's own calls of
    torch's checkpoint decide reentrance (torch's default where they pass none); unknown where a call computes it,
    none is found, or the function is not torch's."""
    found = judged(checkpoint(tmp_path / "ckpt", OLD_SETTER.format(imports=imports, call=call)))
    assert found.checkpointing == "old" and found.own_reentrant is reentrant
    assert (found.own_checkpoint.line if found.own_checkpoint else 0) == line


OWN_ENABLE = (
    HEAD + "class XForCausalLM(PreTrainedModel):\n    supports_gradient_checkpointing = True\n\n"
    "    def __init__(self, config):\n        super().__init__(config)\n        self.gradient_checkpointing = False\n\n"
    "    def gradient_checkpointing_enable(self{params}):\n        {body}\n"
)


@pytest.mark.parametrize(
    "params,body,before,args,versions,expected",
    [
        (
            "",
            "super().gradient_checkpointing_enable()",
            "",
            ", gradient_checkpointing=True",
            {},
            ("error", "gradient_checkpointing_kwargs"),
        ),
        (
            ", gradient_checkpointing_kwargs=None",
            "super().gradient_checkpointing_enable(gradient_checkpointing_kwargs)",
            "",
            ", gradient_checkpointing=True",
            {"transformers": "5.15.0"},
            None,
        ),
        (
            ", gradient_checkpointing_kwargs=None, every_n_layers=1",
            "super().gradient_checkpointing_enable(gradient_checkpointing_kwargs)",
            "",
            ", gradient_checkpointing=True",
            {"transformers": "5.22.0"},
            None,
        ),
        (
            ", gradient_checkpointing_kwargs=None, every_n_layers=1",
            "super().gradient_checkpointing_enable(gradient_checkpointing_kwargs)",
            "",
            ", gradient_checkpointing=True",
            {"transformers": "5.24.0"},
            ("error", "offload"),
        ),
        (
            "",
            "self.gradient_checkpointing = True",
            "",
            ", gradient_checkpointing=True",
            {},
            ("error", "gradient_checkpointing_kwargs"),
        ),
        ("", "super().gradient_checkpointing_enable()", "model.gradient_checkpointing_enable()\n", "", {}, None),
        (
            "",
            "super().gradient_checkpointing_enable()",
            "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': False})\n",
            "",
            {},
            ("error", "gradient_checkpointing_kwargs"),
        ),
        (
            "",
            "super().gradient_checkpointing_enable()",
            "if use_gc:\n    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={})\n",
            "",
            {},
            ("warning", "gradient_checkpointing_kwargs"),
        ),
        (
            "",
            "super().gradient_checkpointing_enable()",
            "if model.supports_gradient_checkpointing:\n"
            "    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={})\n",
            "",
            {},
            ("error", "gradient_checkpointing_kwargs"),
        ),
    ],
    ids=[
        "no-keywords",
        "before-5.16",
        "every-n-layers-5.22",
        "offload-5.24",
        "own-way-no-super",
        "script-call-fits",
        "script-call-refused",
        "script-call-in-branch",
        "script-call-asks-a-model-that-says-yes",
    ],
)
def test_pd307_an_own_enable_method_refuses_the_keywords_it_is_given(
    run_check, tmp_path, params, body, before, args, versions, expected
):
    """The Trainer passes gradient_checkpointing_kwargs from 4.35, every_n_layers from 5.16 and offload from 5.23 to
    the model's gradient_checkpointing_enable; a class overriding it with fewer is refused by Python (TypeError on
    the first keyword it lacks), whatever its body does. The script's own call is judged by the keywords it writes."""
    checkpoint(tmp_path / "ckpt", OWN_ENABLE.format(params=params, body=body))
    found = pd307(run_check(SCRIPT.format(model="./ckpt", before=before, args=args), versions=versions)[0])
    if expected is None:
        assert not found
        return
    severity, keyword = expected
    assert [f.severity for f in found] == [severity]
    assert found[0].error == (
        f"TypeError: XForCausalLM.gradient_checkpointing_enable() got an unexpected keyword argument '{keyword}'"
    )


_PEFT = "from peft import LoraConfig, get_peft_model\n"
_WRAP = "model = get_peft_model(model, LoraConfig())\n"
_FLAG_ON = "supports_gradient_checkpointing = True\n"


@pytest.mark.parametrize(
    "script,severities",
    [
        (
            LOAD + "from transformers import TrainerCallback\n\nclass Fix(TrainerCallback):\n"
            "    def on_init_end(self, args, state, control, model=None, **kw):\n        model."
            + _FLAG_ON
            + "\n"
            + TRAIN_GC.replace("train_dataset=data", "train_dataset=data, callbacks=[Fix()]"),
            [],
        ),
        (
            "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n\ndef main():\n"
            "    model = AutoModelForCausalLM.from_pretrained('./ckpt', trust_remote_code=True)\n    model."
            + _FLAG_ON
            + "    "
            + TRAIN_GC,
            [],
        ),
        (
            LOAD + "import functools\n\n@functools.lru_cache\ndef patch():\n    model." + _FLAG_ON + "\n" + TRAIN_GC,
            ["error"],
        ),
        (LOAD + "class Patcher:\n    def run(self):\n        model." + _FLAG_ON + "\n" + TRAIN_GC, ["error"]),
        (LOAD + "model.__class__." + _FLAG_ON + TRAIN_GC, []),
        (LOAD + _PEFT + _WRAP + "model.base_model.model." + _FLAG_ON + TRAIN_GC, []),
        (LOAD + _PEFT + _WRAP + "model.get_base_model()." + _FLAG_ON + TRAIN_GC, []),
        (LOAD + _PEFT + _WRAP + "type(model)." + _FLAG_ON + TRAIN_GC, ["error"]),
        (
            LOAD
            + TRAIN_GC.replace(".train()", "").replace("Trainer(", "trainer = Trainer(")
            + "trainer.model."
            + _FLAG_ON
            + "trainer.train()\n",
            [],
        ),
        (
            LOAD
            + _PEFT
            + _WRAP
            + TRAIN_GC.replace(".train()", "").replace("Trainer(", "trainer = Trainer(")
            + "trainer.model."
            + _FLAG_ON
            + "trainer.train()\n",
            ["error"],
        ),
        (LOAD + _PEFT + _WRAP + "model.model." + _FLAG_ON + TRAIN_GC, []),
        (LOAD + "model." + _FLAG_ON + LOAD.splitlines(keepends=True)[1] + TRAIN_GC, ["error"]),
        (LOAD + "if False:\n    model." + _FLAG_ON + TRAIN_GC, ["error"]),
        (LOAD + "import os\nif os.environ.get('PATCH'):\n    model." + _FLAG_ON + TRAIN_GC, ["warning"]),
        (
            LOAD.replace(
                "model = ", "config = AutoConfig.from_pretrained('./ckpt', trust_remote_code=True)\nmodel = "
            ).replace("import AutoModel", "import AutoConfig, AutoModel")
            + "config."
            + _FLAG_ON
            + TRAIN_GC,
            ["error"],
        ),
        (LOAD + "def patch():\n    model." + _FLAG_ON + "\n" + TRAIN_GC + "patch()\n", ["error"]),
    ],
    ids=[
        "callback-on-init-end",
        "main-that-trains",
        "cached-never-called",
        "class-never-made",
        "dunder-class",
        "peft-base-model",
        "peft-get-base-model",
        "type-of-peft-wrapper",
        "trainer-model",
        "trainer-model-is-peft-wrapper",
        "peft-wrapper-model",
        "model-loaded-again",
        "if-false",
        "run-decided",
        "on-the-config",
        "helper-called-after-training",
    ],
)
def test_pd307_where_a_workaround_reaches_the_model(run_check, tmp_path, script, severities):
    """Reviewed against real one-step runs (CPU, transformers 5.24, peft 0.21): where the flag the script sets is
    the one gradient_checkpointing_enable reads when the Trainer calls it, the job trains; where it is not, it dies;
    where the run decides, a warning."""
    checkpoint(tmp_path / "ckpt", FLAGGED_UNSUPPORTED)
    assert [f.severity for f in pd307(run_check(script)[0])] == severities


@pytest.mark.parametrize(
    "guard,severities",
    [
        ("if hasattr(model, 'supports_gradient_checkpointing'):\n", ["error"]),
        ("if getattr(model, 'supports_gradient_checkpointing', True):\n", []),
    ],
)
def test_pd307_guards_every_model_passes_or_that_ask_it(run_check, tmp_path, guard, severities):
    checkpoint(tmp_path / "ckpt", NO_SUPPORT)
    before = guard + "    model.gradient_checkpointing_enable()\n"
    found = pd307(run_check(SCRIPT.format(model="./ckpt", before=before, args=""))[0])
    assert [f.severity for f in found] == severities
