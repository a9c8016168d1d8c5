"""Every check Axolotl and LLaMA-Factory run on a recipe that the doctor mirrors (knowledge/recipe_checks): its
firing recipe is reported by PD701 (refuses) or PD702 (warns) citing the framework's source, and its accepted
twin is not. Both recipes are checked as a user would: the YAML file alone, on the check's GPU."""

from pathlib import Path

import pytest

from precision_doctor.knowledge.recipe_checks import axolotl, llamafactory
from precision_doctor.knowledge.versions import CURRENT

from .conftest import check_code

CHECKS = list(axolotl.CHECKS) + list(llamafactory.CHECKS)
RULE = {"refuses": "PD701", "warns": "PD702", "advises": "PD702"}
SEVERITY = {"refuses": "error", "warns": "warning", "advises": "info"}


def _check(tmp_path, monkeypatch, check, recipe, target, versions, launcher=None):
    monkeypatch.chdir(tmp_path)
    for name, text in check.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    result, _ = check_code(
        tmp_path,
        recipe,
        target=target,
        name="config.yml",
        versions={**CURRENT, **versions},
        launcher=launcher or check.launcher or None,
    )
    return [
        f
        for f in result.findings
        if f.rule_id == RULE[check.action] and any(check.source in note for note in f.fix.notes)
    ]


@pytest.mark.parametrize("check", CHECKS, ids=[c.id.rsplit("/", 1)[-1] for c in CHECKS])
def test_the_firing_recipe_is_reported_with_the_frameworks_source(tmp_path, monkeypatch, check):
    found = _check(tmp_path, monkeypatch, check, check.fires, check.target, check.versions)
    assert found, f"{check.id} did not fire"
    finding = found[0]
    assert any(check.source in note for note in finding.fix.notes)
    assert finding.severity == SEVERITY[check.action]
    written = {e.location.line for e in finding.evidence if e.location and Path(e.location.path).name == "config.yml"}
    if any(f"{key.split('.')[0]}:" in check.fires for key in check.keys):
        assert written, "the evidence points at the recipe lines that write the settings"
    if check.reads_launch:
        assert any(e.origin == "launcher" for e in finding.evidence), "the launch it depends on is evidence"


@pytest.mark.parametrize("check", CHECKS, ids=[c.id.rsplit("/", 1)[-1] for c in CHECKS])
def test_the_accepted_twin_is_not(tmp_path, monkeypatch, check):
    found = _check(
        tmp_path,
        monkeypatch,
        check,
        check.accepted,
        check.accepted_target or check.target,
        check.accepted_versions,
        check.accepted_launcher,
    )
    assert not found, found[0].message


def test_a_check_that_asks_the_gpu_is_silent_without_one(tmp_path, monkeypatch):
    sage = next(c for c in axolotl.CHECKS if c.message.startswith("SageAttention supports"))
    assert _check(tmp_path, monkeypatch, sage, sage.fires, None, {}) == []


@pytest.mark.parametrize("target,refused", [("t4", True), ("a100", False), ("b200", True), ("h100", False)])
def test_sage_attention_follows_axolotls_allow_list_and_says_where_it_is_wrong(tmp_path, monkeypatch, target, refused):
    """Axolotl's allow-list refuses B200 (sm_100), which SageAttention supports: the doctor reports what Axolotl
    will do, and says so."""
    sage = next(c for c in axolotl.CHECKS if c.message.startswith("SageAttention supports"))
    found = _check(tmp_path, monkeypatch, sage, sage.fires, target, {})
    assert bool(found) is refused
    if found:
        assert "stricter than the hardware" in found[0].message


def test_recipe_keys_given_on_the_launch_line_are_judged(tmp_path, monkeypatch):
    """`axolotl train config.yml --load-in-8bit` makes the QLoRA recipe one Axolotl refuses."""
    check = next(c for c in axolotl.CHECKS if "Require cfg.load_in_4bit" in c.message)
    monkeypatch.chdir(tmp_path)
    recipe = check.accepted.replace("load_in_4bit: true\n", "")
    for launch, refused in (("axolotl train config.yml", True), ("axolotl train config.yml --load-in-4bit", False)):
        result, _ = check_code(tmp_path, recipe, target="a100", name="config.yml", launcher=launch)
        assert bool([f for f in result.findings if f.rule_id == "PD701"]) is refused, launch


_BASE = "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 2\ngradient_accumulation_steps: 4\nbf16: true\n"
_QLORA = _BASE + "adapter: qlora\nlora_r: 16\n"


def _refusals(tmp_path, monkeypatch, recipe, target="a100", launcher=None, versions=None, rules=("PD701",)):
    monkeypatch.chdir(tmp_path)
    result, _ = check_code(
        tmp_path, recipe, target=target, name="config.yml", launcher=launcher, versions={**CURRENT, **(versions or {})}
    )
    return [f.message.split(": ", 1)[1] for f in result.findings if f.rule_id in rules]


@pytest.mark.parametrize(
    "fsdp, warnings",
    [
        ("fsdp_config:\n  offload_params: false\n", ["FSDP1 is deprecated"]),  # unversioned: pinned to FSDP1
        ("fsdp_version: 2\nfsdp_config:\n  offload_params: false\n", []),
        ("fsdp_config:\n  version: 2\n  offload_params: false\n", []),  # moved to the top before the check
        ("fsdp_config:\n  fsdp_version: '2'\n  offload_params: false\n", []),
        ("fsdp_version: 1\nfsdp_config:\n  offload_params: false\n", ["FSDP1 is deprecated"]),
        # the prefix check sees fsdp_config as written
        ("fsdp_version: 2\nfsdp_config:\n  fsdp_offload_params: false\n", ["Configuring FSDP fields"]),
        ("fsdp_config:\n  fsdp_version: 2\n  offload_params: false\n", []),  # fsdp_version is no prefixed field
    ],
)
def test_axolotl_fsdp_deprecation_warnings_read_the_recipe_as_their_validators_do(
    tmp_path, monkeypatch, fsdp, warnings
):
    said = _refusals(tmp_path, monkeypatch, _BASE + fsdp, rules=("PD702",))
    deprecations = [m for m in said if m.startswith(("FSDP1", "Configuring FSDP"))]
    assert len(deprecations) == len(warnings), said
    assert all(m.startswith(w) for m, w in zip(deprecations, warnings, strict=True)), said


# Recipes written the ways users write them, with what Axolotl 0.18.0's validators do with each (checked by
# loading its schema at 067b021): pydantic runs "before" validators in reverse order of definition, so the float8
# all-gather check and the FSDP2 torch floor see the recipe as written, the pin-memory and FSDP2 + RL checks see
# it after fsdp_config's version moved to the top and its `fsdp_` prefixes went; "after" validators see typed
# fields; a key left blank is null.
AXOLOTL_AS_WRITTEN = [
    # blank keys are not set
    (_BASE + "optimizer: muon\nfsdp:\nfsdp_config:\n", []),
    (_BASE + "fsdp_version: 2\noptimizer: adamw_bnb_8bit\nfsdp_config:\n", []),
    (_BASE + "adapter: lora\ngpu_memory_limit: 20GiB\nmax_memory:\n", []),
    (_QLORA + "load_in_4bit: true\nmodel_quantization_config:\n", []),
    # the FSDP version written inside fsdp_config, as `version`, or with the legacy prefix
    (
        _BASE + "fsdp_config:\n  fsdp_version: 2\n  offload_params: true\n  cpu_offload_pin_memory: false\n",
        [],
    ),
    (_BASE + "fsdp_config:\n  version: 2\n  offload_params: true\n  cpu_offload_pin_memory: false\n", []),
    (
        _BASE + "fsdp_version: 2\nfsdp_config:\n  fsdp_offload_params: true\n  cpu_offload_pin_memory: false\n",
        [],
    ),
    (
        _BASE + "fsdp_config:\n  fsdp_offload_params: true\n  fsdp_cpu_offload_pin_memory: false\n",
        ["FSDP1 does not support disabling cpu_offload_pin_memory"],
    ),
    (_BASE + "fsdp_config:\n  fsdp_offload_params: true\noptimizer: adamw_8bit\n", ["FSDP Offload not compatible"]),
    (
        _BASE + "fsdp_version: 2\nfsdp_config:\n  offload_params: false\n  cpu_offload_pin_memory: false\n",
        ["disabling cpu_offload_pin_memory requires enabling offload_params"],
    ),
    # the float8 all-gather check reads the top-level key as written, before it is normalised
    (
        _BASE + "fp8: true\nfp8_enable_fsdp_float8_all_gather: true\nfsdp_config:\n  fsdp_version: 2\n",
        ["fp8_enable_fsdp_float8_all_gather requires FSDP2"],
    ),
    (
        _BASE + "fp8: true\nfp8_enable_fsdp_float8_all_gather: true\nfsdp_version: '2'\nfsdp_config:\n"
        "  reshard_after_forward: true\n",
        ["fp8_enable_fsdp_float8_all_gather requires FSDP2"],
    ),
    # FSDP2 + preference training + k-bit, the version from fsdp_config
    (_QLORA + "load_in_4bit: true\nrl: dpo\nfsdp_config:\n  version: 2\n", ["FSDP2 does not support load_in_8bit"]),
    # typed fields in the after-validators
    (_QLORA + "load_in_4bit: 'false'\n", ["Require cfg.load_in_4bit to be True for qlora"]),
    (_BASE + "adapter: lora\nlora_dropout: '0.0'\nlora_target_parameters:\n  - mlp.experts.gate_up_proj\n", []),
    # each branch its own message
    (_QLORA + "load_in_8bit: true\n", ["Can't load qlora in 8bit"]),
    (_QLORA + "load_in_4bit: true\nmerge_lora: true\n", ["Can't merge qlora if loaded in 4bit"]),
    (
        _BASE + "optimizer: flash_lion\nfsdp_config:\n  offload_params: false\n",
        ["flash_lion optimizer is only compatible with FSDP2"],
    ),
    (_BASE + "fp32_norms: true\n", ["fp32_norms requires FSDP to be enabled"]),
]


@pytest.mark.parametrize("recipe,expected", AXOLOTL_AS_WRITTEN, ids=[str(i) for i in range(len(AXOLOTL_AS_WRITTEN))])
def test_axolotl_checks_read_the_recipe_as_each_validator_sees_it(tmp_path, monkeypatch, recipe, expected):
    said = _refusals(tmp_path, monkeypatch, recipe)
    assert len(said) == len(expected), said
    for message, start in zip(said, expected, strict=True):
        assert message.startswith(start), (message, start)


def test_no_flag_on_the_launch_line_turns_a_boolean_off(tmp_path, monkeypatch):
    """Axolotl's CLI has `--flag/--no-flag` for every boolean field (cli/utils/args.py)."""
    recipe = _QLORA + "load_in_4bit: true\n"
    assert _refusals(tmp_path, monkeypatch, recipe, launcher="axolotl train config.yml") == []
    said = _refusals(tmp_path, monkeypatch, recipe, launcher="axolotl train config.yml --no-load-in-4bit")
    assert said == ["Require cfg.load_in_4bit to be True for qlora"]


def test_llamafactory_names_the_lora_only_option_that_is_set(tmp_path, monkeypatch):
    recipe = (
        "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\ndo_train: true\nfinetuning_type: full\n"
        "dataset: alpaca_en_demo\ntemplate: llama3\noutput_dir: out\nbf16: true\nuse_rslora: true\n"
    )
    assert _refusals(tmp_path, monkeypatch, recipe) == ["`use_rslora` is only valid for LoRA training."]


def test_galore_takes_transformers_default_optimizer_as_the_installed_release_sets_it(tmp_path, monkeypatch):
    """LLaMA-Factory's GaLore/APOLLO build their optimizer only from adamw_torch (and a few 8-bit ones): the
    installed transformers' default on this torch is what the check assumes, and the message is what
    LLaMA-Factory's f-string prints for it."""
    transformers = pytest.importorskip("transformers")
    from precision_doctor.knowledge.recipe_checks.llamafactory import GALORE_OPTIMIZERS

    default = transformers.TrainingArguments(str(tmp_path / "out"), report_to=[]).optim
    assert default.value == "adamw_torch_fused" and default.value not in GALORE_OPTIMIZERS
    recipe = (
        "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\ndo_train: true\nfinetuning_type: full\n"
        "dataset: alpaca_en_demo\ntemplate: llama3\noutput_dir: out\nbf16: true\nuse_galore: true\n"
    )
    assert _refusals(tmp_path, monkeypatch, recipe) == [f"Unknown optim: {default}."]
    # before torch 2.8 the default is adamw_torch, which GaLore takes
    assert _refusals(tmp_path, monkeypatch, recipe, versions={"torch": "2.7.1"}) == []


@pytest.mark.parametrize(
    "launcher,refused",
    [
        ("llamafactory-cli train config.yml", True),  # one GPU: llamafactory-cli trains in its own process
        ("FORCE_TORCHRUN=1 llamafactory-cli train config.yml", False),
        ("torchrun --nproc_per_node 1 src/train.py config.yml", False),
        (None, None),  # no launch given: not judged
    ],
)
def test_llamafactory_deepspeed_needs_a_distributed_launch(tmp_path, monkeypatch, launcher, refused):
    recipe = (
        "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        "dataset: alpaca_en_demo\ntemplate: llama3\noutput_dir: out\nbf16: true\ndeepspeed: ds.json\n"
    )
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}}\n')
    said = _refusals(tmp_path, monkeypatch, recipe, target="a100:1", launcher=launcher)
    assert ("Please use `FORCE_TORCHRUN=1` to launch DeepSpeed training." in said) is bool(refused)


@pytest.mark.parametrize(
    "launcher,target,said",
    [
        ("NPROC_PER_NODE=1 llamafactory-cli train config.yml", "a100:2", None),  # torchrun all the same
        ("CUDA_VISIBLE_DEVICES=0 llamafactory-cli train config.yml", "a100:2", "FORCE_TORCHRUN"),
        ("FORCE_TORCHRUN=yes llamafactory-cli train config.yml", "a100:1", "FORCE_TORCHRUN"),  # not "true/y/1"
        ("FORCE_TORCHRUN=y llamafactory-cli train config.yml", "a100:1", None),
        ("USE_MCA=1 llamafactory-cli train config.yml", "a100:1", None),
        ("python src/train.py config.yml", "a100:2", "Please launch distributed training"),
        ("python src/train.py config.yml", "a100:1", "FORCE_TORCHRUN"),
    ],
)
def test_llamafactory_launches_decide_as_its_launcher_does(tmp_path, monkeypatch, launcher, target, said):
    recipe = (
        "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        "dataset: alpaca_en_demo\ntemplate: llama3\noutput_dir: out\nbf16: true\ndeepspeed: ds.json\n"
    )
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}}\n')
    found = _refusals(tmp_path, monkeypatch, recipe, target=target, launcher=launcher)
    if said is None:
        assert not found, found
    else:
        assert len(found) == 1 and said in found[0], found


_MEGATRON = (
    "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\ndo_train: true\nfinetuning_type: full\n"
    "dataset: alpaca_en_demo\ntemplate: llama3\noutput_dir: out\nbf16: true\n"
)


@pytest.mark.parametrize(
    "written,launcher,said",
    [
        # get_train_args sets use_megatron_bridge from the launch variables, not from the recipe (parser.py:395-411)
        ("use_megatron_bridge: true\ndeepspeed: ds.json\n", "FORCE_TORCHRUN=1 llamafactory-cli train config.yml", None),
        (
            "deepspeed: ds.json\n",
            "USE_MEGATRON_BRIDGE=1 llamafactory-cli train config.yml",
            "incompatible with DeepSpeed",
        ),
        (
            "use_megatron_bridge: false\ndeepspeed: ds.json\n",
            "USE_MEGATRON_BRIDGE=true llamafactory-cli train config.yml",
            "DeepSpeed",
        ),
        ("use_megatron_bridge: true\n", "USE_MCA=1 llamafactory-cli train config.yml", "together with MCA"),
        ("use_mca: true\n", "USE_MEGATRON_BRIDGE=1 llamafactory-cli train config.yml", "together with MCA"),
        ("use_mca: true\n", "FORCE_TORCHRUN=1 llamafactory-cli train config.yml", None),  # USE_MCA not set: off
    ],
)
def test_llamafactory_megatron_bridge_is_turned_on_by_the_launch(tmp_path, monkeypatch, written, launcher, said):
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}}\n')
    found = _refusals(tmp_path, monkeypatch, _MEGATRON + written, "a100:1", launcher)
    megatron = [m for m in found if "Megatron Bridge" in m]
    if said is None:
        assert not megatron, megatron
    else:
        assert len(megatron) == 1 and said in megatron[0], found


@pytest.mark.parametrize(
    "sizes,launcher,target,said",
    [
        (
            "tensor_model_parallel_size: 4\n",
            "USE_MEGATRON_BRIDGE=1 llamafactory-cli train config.yml",
            "a100:2",
            "(4) exceeds `world_size` (2)",
        ),
        (
            "tensor_model_parallel_size: 4\n",
            "USE_MEGATRON_BRIDGE=1 NNODES=2 llamafactory-cli train config.yml",
            "a100:2",
            None,
        ),
        (
            "tensor_model_parallel_size: 3\n",
            "USE_MEGATRON_BRIDGE=1 llamafactory-cli train config.yml",
            "a100:4",
            "(3) must divide `world_size` (4)",
        ),
        (
            "context_parallel_size: 2\nexpert_model_parallel_size: 2\n",
            "USE_MEGATRON_BRIDGE=1 NPROC_PER_NODE=2 llamafactory-cli train config.yml",
            "a100:8",
            "(4) exceeds `world_size` (2)",
        ),
        (
            "tensor_model_parallel_size: 8\n",
            "USE_MEGATRON_BRIDGE=1 torchrun --nnodes $NNODES --nproc_per_node 4 src/train.py config.yml",
            "a100:4",
            None,
        ),  # nodes not read: not judged
        (
            "tensor_model_parallel_size: 8\n",
            "USE_MEGATRON_BRIDGE=1 torchrun --nnodes 2 --nproc_per_node 4 src/train.py config.yml",
            "a100:4",
            None,
        ),
        (
            "tensor_model_parallel_size: 8\n",
            "USE_MEGATRON_BRIDGE=1 torchrun --nproc_per_node 4 src/train.py config.yml",
            "a100:4",
            "(8) exceeds `world_size` (4)",
        ),
        ("tensor_model_parallel_size: 8\n", "llamafactory-cli train config.yml", "a100:4", None),  # no Megatron Bridge
        # a quoted size stays a string in the dataclass (parse_dict converts nothing): not this refusal
        (
            'tensor_model_parallel_size: "4"\n',
            "USE_MEGATRON_BRIDGE=1 llamafactory-cli train config.yml",
            "a100:2",
            None,
        ),
        # accelerate's num_processes is the total over its machines (accelerate/utils/launch.py: // num_machines)
        (
            "tensor_model_parallel_size: 4\n",
            "USE_MEGATRON_BRIDGE=1 accelerate launch --num_processes 2 --num_machines 2 src/train.py config.yml",
            "a100:2",
            "(4) exceeds `world_size` (2)",
        ),
        # PET_NNODES is torchrun's default for --nnodes, not a value over the flag as written
        (
            "tensor_model_parallel_size: 4\n",
            "USE_MEGATRON_BRIDGE=1 PET_NNODES=2 torchrun --nnodes 1 --nproc_per_node 2 src/train.py config.yml",
            "a100:2",
            "(4) exceeds `world_size` (2)",
        ),
        (
            "tensor_model_parallel_size: 8\n",
            "USE_MEGATRON_BRIDGE=1 torchrun --nnodes 1:2 --nproc_per_node 4 src/train.py config.yml",
            "a100:4",
            None,  # an elastic range: the world size is not known before the job runs
        ),
        (
            "tensor_model_parallel_size: 3\n",
            "USE_MEGATRON_BRIDGE=1 NNODES=2 RDZV_ID=x MIN_NNODES=1 MAX_NNODES=2 llamafactory-cli train config.yml",
            "a100:2",
            None,  # llamafactory-cli's elastic launch (launcher.py:85-91)
        ),
    ],
)
def test_megatron_bridge_parallel_sizes_are_judged_against_the_launchs_world_size(
    tmp_path, monkeypatch, sizes, launcher, target, said
):
    found = [m for m in _refusals(tmp_path, monkeypatch, _MEGATRON + sizes, target, launcher) if "parallel size" in m]
    if said is None:
        assert not found, found
    else:
        assert len(found) == 1 and said in found[0], found


def test_a_missing_megatron_bridge_is_the_only_refusal_llamafactory_reaches(tmp_path, monkeypatch):
    """USE_MEGATRON_BRIDGE with the package missing raises ImportError before the recipe is parsed
    (parser.py:399-404): no DeepSpeed refusal, no check_version message after it."""
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}}\n')
    found = _refusals(
        tmp_path,
        monkeypatch,
        _MEGATRON + "deepspeed: ds.json\n",
        "a100:1",
        "USE_MEGATRON_BRIDGE=1 llamafactory-cli train config.yml",
        versions={"llamafactory": "0.9.6"},
    )
    assert [m for m in found if "egatron" in m] == [llamafactory.MEGATRON_BRIDGE_MISSING], found


@pytest.mark.parametrize(
    "written,launcher,refused",
    [
        ("use_mca: true\n", "FORCE_TORCHRUN=1 llamafactory-cli train config.yml", True),  # reset to False: checked
        ("", "USE_MCA=1 llamafactory-cli train config.yml", False),  # MCA on: LF skips the check
        ("use_megatron_bridge: true\n", "FORCE_TORCHRUN=1 llamafactory-cli train config.yml", True),
    ],
)
def test_llamafactory_fp8_with_quantization_asks_the_launch_for_mca(tmp_path, monkeypatch, written, launcher, refused):
    recipe = (
        "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        "dataset: alpaca_en_demo\ntemplate: llama3\noutput_dir: out\nbf16: true\nquantization_bit: 4\nfp8: true\n"
    )
    found = _refusals(tmp_path, monkeypatch, recipe + written, "h100:2", launcher)
    assert any("FP8 training is not compatible with quantization" in m for m in found) is refused, found


@pytest.mark.parametrize("target,refused", [("a100:2", True), ("a100:1", False)])
def test_axolotl_reentrant_qlora_rl_refusal_needs_more_than_one_rank(tmp_path, monkeypatch, target, refused):
    recipe = (
        "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 2\nadapter: qlora\nload_in_4bit: true\n"
        "lora_target_linear: true\nbf16: true\nrl: dpo\ngradient_checkpointing: true\n"
        "gradient_checkpointing_kwargs:\n  use_reentrant: true\n"
    )
    said = _refusals(tmp_path, monkeypatch, recipe, target, "axolotl train config.yml")
    assert any("distributed RL training with QLoRA" in m for m in said) is refused, said


# Checks that ask the job's environment (a package installed or missing): they answer where the environment read
# is the job's (the framework is installed there, or given with --stack), and stay silent where it is not.
_NEEDS_PACKAGES = [c for c in CHECKS if c.versions.get("axolotl") or c.versions.get("llamafactory")]


@pytest.mark.parametrize("check", _NEEDS_PACKAGES, ids=[c.id.rsplit("/", 1)[-1] for c in _NEEDS_PACKAGES])
def test_a_check_on_the_jobs_packages_is_silent_when_that_environment_is_not_read(tmp_path, monkeypatch, check):
    """A laptop checking a cluster recipe: the framework is not installed here, so a package missing here says
    nothing about the job."""
    assert _check(tmp_path, monkeypatch, check, check.fires, check.target, {}) == []


def test_a_missing_package_is_judged_in_the_environment_read_with_the_framework_installed(tmp_path, monkeypatch):
    """`precision-doctor check config.yml --python <the training env>`: LLaMA-Factory is installed there and
    liger-kernel is not, so `enable_liger_kernel` dies in its dependency check; installed, it passes."""
    from .test_versions import _fake_env

    recipe = tmp_path / "config.yml"
    recipe.write_text(_LF_LORA + "enable_liger_kernel: true\n", encoding="utf-8")
    for packages, refused in (
        ({"llamafactory": "0.9.6", "transformers": "5.8.0"}, True),
        ({"llamafactory": "0.9.6", "transformers": "5.8.0", "liger-kernel": "0.6.2"}, False),
        ({"transformers": "5.8.0"}, False),  # the framework is not here: not the job's environment
    ):
        env = tmp_path / f"env{len(packages)}{refused}"
        python = _fake_env(env, packages)
        said = _refusals_with_python(tmp_path, recipe, python)
        assert any("'liger-kernel' distribution was not found" in m for m in said) is refused, (packages, said)


_LF_LORA = (
    "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\ndo_train: true\ndataset: alpaca_en_demo\n"
    "template: llama3\noutput_dir: saves/llama3-1b\nper_device_train_batch_size: 2\nbf16: true\n"
    "finetuning_type: lora\nlora_target: all\n"
)


@pytest.mark.parametrize("installed, said", [({}, "not installed, use eager"), ({"flash-attn": "2.8.3"}, "fa2")])
def test_gemma_2_attention_follows_what_is_installed(tmp_path, monkeypatch, installed, said):
    """LLaMA-Factory picks Gemma 2's attention by whether flash-attn is installed (attention.py:46-54)."""
    check = next(c for c in llamafactory.CHECKS if c.source.endswith("attention.py:46-54"))
    recipe = _LF_LORA.replace("meta-llama/Llama-3.2-1B", "google/gemma-2-2b")
    found = _check(tmp_path, monkeypatch, check, recipe, "a100", {"llamafactory": "0.9.6", **installed})
    assert len(found) == 1 and said in found[0].message


def test_packages_in_a_system_pythons_dist_packages_count_as_installed(tmp_path):
    """A virtualenv made with --system-site-packages on Debian/Ubuntu (and the NGC and CUDA images built on them)
    sees the base Python's dist-packages: ring-flash-attn installed there is installed for the job."""
    from .test_versions import _fake_env

    base = tmp_path / "base" / "usr"
    dist = base / "local" / "lib" / "python3.11" / "dist-packages"
    (base / "bin").mkdir(parents=True)
    _installed(dist, "ring-flash-attn", "0.1.8")
    recipe = tmp_path / "config.yml"
    recipe.write_text(_AX_CONTEXT_PARALLEL, encoding="utf-8")
    for system, refused in ((True, False), (False, True)):
        python = _fake_env(tmp_path / f"venv-{system}", {"axolotl": "0.18.0"})
        cfg = python.parent.parent / "pyvenv.cfg"
        cfg.write_text(f"home = {base / 'bin'}\ninclude-system-site-packages = {str(system).lower()}\n")
        said = _refusals_with_python(tmp_path, recipe, python)
        assert any("ring_flash_attn is not installed" in m for m in said) is refused, (system, said)


def test_llamafactory_makes_the_checkpointed_inputs_require_grad_itself(tmp_path, monkeypatch):
    """On transformers 4.x, LoRA on a frozen base under reentrant checkpointing needs an input that requires grad
    (PD403). LLaMA-Factory's checkpointing wrapper sets it on each trainable layer's hidden states
    (model_utils/checkpointing.py:100-123): its LoRA recipes are not PD403's, the same job as a plain script is."""
    monkeypatch.chdir(tmp_path)
    result, _ = check_code(
        tmp_path, _LF_LORA, target="a100", name="config.yml", versions={**CURRENT, "transformers": "4.57.1"}
    )
    assert "PD403" not in {f.rule_id for f in result.findings}
    script = (
        "from peft import LoraConfig, get_peft_model\n"
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', dtype='bfloat16')\n"
        "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': True})\n"
        "model = get_peft_model(model, LoraConfig(r=8, target_modules=['q_proj']))\n"
        "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n"
    )
    result, _ = check_code(tmp_path, script, target="a100", versions={**CURRENT, "transformers": "4.57.1"})
    assert "PD403" in {f.rule_id for f in result.findings}


def test_packages_installed_with_pip_user_count_for_an_interpreter_that_reads_them(tmp_path):
    """`pip install --user ring-flash-attn` puts it in ~/.local, which a venv with the system site-packages reads
    (unless PYTHONNOUSERSITE is set): installed for the job, not refused."""
    import os

    from .test_versions import _fake_env

    home = tmp_path / "home"
    _installed(home / ".local" / "lib" / "python3.11" / "site-packages", "ring-flash-attn", "0.1.8")
    python = _fake_env(tmp_path / "venv", {"axolotl": "0.18.0"})
    (python.parent.parent / "pyvenv.cfg").write_text(
        f"home = {tmp_path / 'nowhere' / 'bin'}\ninclude-system-site-packages = true\n"
    )
    recipe = tmp_path / "config.yml"
    recipe.write_text(_AX_CONTEXT_PARALLEL, encoding="utf-8")
    for no_user_site, refused in (("", False), ("1", True)):
        env = {**os.environ, "HOME": str(home), "PYTHONUSERBASE": "", "PYTHONNOUSERSITE": no_user_site}
        env = {k: v for k, v in env.items() if v}
        said = _refusals_with_python(tmp_path, recipe, python, env)
        assert any("ring_flash_attn is not installed" in m for m in said) is refused, (no_user_site, said)


_AX_CONTEXT_PARALLEL = (
    "base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_r: 16\nlora_target_linear: true\nbf16: true\n"
    "attn_implementation: flash_attention_2\ncontext_parallel_size: 2\n"
)


def _installed(folder: Path, name: str, version: str) -> None:
    """A distribution's metadata in a package folder, as pip leaves it (nothing that could run)."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _refusals_with_python(tmp_path: Path, recipe: Path, python: Path, env: dict | None = None) -> list[str]:
    """PD701's messages from `precision-doctor check RECIPE --python PYTHON` run as a user runs it."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", str(recipe), "--python", str(python)]
        + ["--format", "json", "--fail-on", "never", "--target", "a100"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    return [f["message"] for f in json.loads(out.stdout)["findings"] if f["id"] == "PD701"]


@pytest.mark.parametrize(
    "extra,said",
    [
        ("attn_implementation: sdpa\n", "attn_implementation='sdpa' is currently not supported on Ascend NPU."),
        # legacy flags are mapped before the NPU check runs (config.py:1525-1575): its own branch is never reached
        ("flash_attention: true\n", "attn_implementation='flash_attention_2' is currently not supported"),
        ("flash_attention: true\nxformers_attention: true\n", None),  # xformers wins the mapping
        ("sdp_attention: true\nattn_implementation: eager\n", None),  # refused for the pair, before
        ("optimizer: adamw_bnb_8bit\n", "adamw_bnb_8bit is currently not supported in Ascend npu"),
        ("load_in_8bit: true\n", "please disable load_in_8bit"),
        ("tf32: true\n", "tf32 dtype is currently not supported in Ascend npu"),
        ("attn_implementation: eager\noptimizer: adamw_torch_fused\ntf32: false\n", None),
    ],
)
def test_axolotl_refuses_what_ascend_npus_lack_where_the_job_runs_on_one(tmp_path, monkeypatch, extra, said):
    recipe = "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 2\nadapter: lora\nbf16: true\n" + extra
    npu = {"axolotl": "0.18.0", "torch-npu": "2.7.1"}

    def npu_refusals(target: str, versions: dict) -> list[str]:
        return [m for m in _refusals(tmp_path, monkeypatch, recipe, target, versions=versions) if "npu" in m.lower()]

    found = npu_refusals("cpu", npu)  # a machine with no NVIDIA GPU and torch_npu installed: an Ascend node
    assert len(found) == (said is not None) and all(said in m for m in found), found
    # the same recipe checked for an NVIDIA GPU, or with no torch_npu in the job's environment: not an NPU job
    assert not npu_refusals("a100", npu)
    assert not npu_refusals("cpu", {"axolotl": "0.18.0"})
