"""The fuzz harness: hostile inputs through the whole command line, in-process.

Cases are generated programs (hypothesmith), mutations of the fixtures and of the rules' examples (lines deleted,
duplicated, swapped, truncated; tokens swapped; two files spliced), mutated snapshots for --facts, and the other
inputs a repository hands the doctor: SLURM job scripts (with expansion and arithmetic bombs), Axolotl /
LLaMA-Factory / accelerate / TRL recipes, a checkpoint's config.json and safetensors header, and requirements files
(self-including ones too) read through a training environment that has none of the ML stack. Each runs as
`precision_doctor.cli.app.main(["check", FILE, "--format", "json", ...])` with stdout captured, and must end with
exit 0, 1 or 2 within a time limit, printing strict JSON whenever it exits 0 or 1. Used by tests/test_fuzz.py (a
few hundred cases) and benchmarks/fuzz.py (thousands, with figures).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import random
import signal
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKENS = [
    "torch.float16",
    "torch.bfloat16",
    "True",
    "False",
    "None",
    "model",
    "args",
    "fp16",
    "bf16",
    "0",
    "1.5",
    "'auto'",
    "(",
    ")",
    ":",
    ",",
    "**kw",
    "x.half()",
    "if",
    "else",
    "for",
    "lambda: 0",
    "\n",
    "    ",
    "1e999",
    "float('nan')",
    "9" * 5000,
    "'²'",
    "-1",
    "10**100",
    "[]",
    "{}",
    "*",
    "\\",
    "'\x1b]0;title\x07'",
    "#",
]
HOSTILE_VALUES = [
    "8.0",
    "",
    "²",
    -1,
    0,
    2**63 - 1,
    1.5,
    True,
    None,
    [],
    {},
    [[[[[]]]]],
    {"a": {"b": {"c": 1}}},
    "x" * 300,
    [1, 2, 3],
    ["a"],
    {"0": 1},
    70000,
]
TARGETS = [None, "t4", "titan-rtx", "h100:2", "a100:8", "cpu", "l40s:2"]
LAUNCHERS = [
    None,
    "accelerate launch --num_processes 2 --mixed_precision bf16",
    "torchrun --nproc_per_node 4 --master_port 29501",
    "deepspeed --num_gpus 2",
    "python",
]
TIME_LIMIT_S = 20


class CaseTimeout(BaseException):
    """Raised by the alarm: a BaseException, so that the CLI's own `except Exception` cannot swallow it."""


@dataclass(frozen=True)
class Case:
    kind: str  # generated | mutated | snapshot | jobscript | recipe | model | requirements
    source: str  # the file checked
    args: tuple[str, ...] = ()  # besides check FILE --format json
    snapshot: str | None = None  # --facts content
    name: str = "fuzzed.py"  # the checked file's name
    files: tuple[tuple[str, bytes], ...] = ()  # files beside it (relative path, content)


@dataclass(frozen=True)
class Outcome:
    case: Case
    code: int | None  # None: it did not finish within the time limit
    seconds: float
    problem: str = ""  # why the case failed; "" when it passed

    @property
    def failed(self) -> bool:
        return bool(self.problem)


# --- the corpus ------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def corpus() -> tuple[str, ...]:
    """Every fixture script and every rule example's code."""
    from precision_doctor.rules.catalog import rules

    texts = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "fixtures").rglob("*.py"))]
    for r in rules():
        texts.extend(example.code for example in (*r.fires, *r.silent) if example.name.endswith(".py"))
    return tuple(dict.fromkeys(texts))


@lru_cache(maxsize=1)
def snapshot_text() -> str:
    """A full snapshot (two GPUs with a process, host ports, env, accelerate config, stack) to mutate."""
    from dataclasses import replace

    from precision_doctor.model.facts import BusyPort, GpuProcess, HostFacts, PackageVersion, StackFacts
    from precision_doctor.probes.collect import snapshot_json
    from precision_doctor.probes.target import machine_from_target

    machine = machine_from_target("a100:2")
    gpus = (
        replace(machine.gpus[0], processes=(GpuProcess(pid=77, used_mib=2048, status="stopped", user="ann"),)),
        machine.gpus[1],
    )
    host = HostFacts(
        hostname="node",
        user="ann",
        ports_checked=(29500,),
        busy_ports=(BusyPort(29500, 77),),
        env={"MASTER_PORT": "29500", "CUDA_VISIBLE_DEVICES": "0,1"},
        accelerate_config={"mixed_precision": "bf16", "main_process_port": 29500, "num_processes": 2},
    )
    stack = StackFacts(packages={"torch": PackageVersion("torch", "2.4.0", "installed")})
    return snapshot_json(replace(machine, gpus=gpus, host=host), stack)


# --- mutations -------------------------------------------------------------------------------------


def mutate_lines(rng: random.Random, text: str, others: tuple[str, ...] = (), tokens: list[str] = TOKENS) -> str:
    """Up to six edits: a line deleted, duplicated, swapped with another, truncated; a token swapped for a
    hostile one; the file spliced with another (its head, the other's tail)."""
    lines = text.splitlines()
    for _ in range(rng.randint(1, 6)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        op = rng.choice(("delete", "duplicate", "swap", "token", "truncate", "splice"))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "token" and lines[i].strip():
            words = lines[i].split(" ")
            words[rng.randrange(len(words))] = rng.choice(tokens)
            lines[i] = " ".join(words)
        elif op == "truncate":
            lines[i] = lines[i][: rng.randint(0, len(lines[i]))]
        elif op == "splice" and others:
            other = rng.choice(others).splitlines()
            lines = lines[:i] + other[rng.randint(0, len(other)) :] if other else lines[:i]
    return "\n".join(lines) + ("\n" if rng.random() < 0.9 else "")


def mutate_snapshot(rng: random.Random, text: str) -> str:
    """Either a line-level mutation of the JSON text, or a leaf of the parsed snapshot replaced with a value of
    another type (a string for a number, a list for an object, deep nesting, a 70000 port, ...)."""
    if rng.random() < 0.3:
        return mutate_lines(rng, text)
    data = json.loads(text)
    for _ in range(rng.randint(1, 3)):
        parent, key = _random_slot(rng, data)
        if parent is not None:
            parent[key] = copy.deepcopy(rng.choice(HOSTILE_VALUES))
    return json.dumps(data)


def _random_slot(rng: random.Random, data):
    """A (container, key) pair somewhere in the snapshot, mostly inside the machine and the stack."""
    parent, key, node = None, None, data
    if rng.random() < 0.9:
        parent, key = data, rng.choice(("machine", "stack"))
        node = data[key]
    for _ in range(rng.randint(1, 6)):
        if isinstance(node, dict) and node:
            parent, key = node, rng.choice(sorted(node))
        elif isinstance(node, list) and node:
            parent, key = node, rng.randrange(len(node))
        else:
            break
        node = parent[key]
        if rng.random() < 0.25:
            break
    return parent, key


def mutated_case(rng: random.Random) -> Case:
    texts = corpus()
    source = mutate_lines(rng, rng.choice(texts), texts)
    return Case("mutated", source, _machine_args(rng))


def snapshot_case(rng: random.Random) -> Case:
    return Case("snapshot", rng.choice(corpus()), _launcher_args(rng), snapshot=mutate_snapshot(rng, snapshot_text()))


def generated_case(source: str, rng: random.Random) -> Case:
    return Case("generated", source, _machine_args(rng))


def _machine_args(rng: random.Random) -> tuple[str, ...]:
    target = rng.choice(TARGETS)
    return (("--target", target) if target else ()) + _launcher_args(rng)


def _launcher_args(rng: random.Random) -> tuple[str, ...]:
    launcher = rng.choice(LAUNCHERS)
    return ("--launcher", launcher) if launcher else ()


# --- running a case --------------------------------------------------------------------------------


def _no_constants(name: str):
    raise ValueError(f"not strict JSON: {name}")


def run_case(case: Case, folder: Path, time_limit: float = TIME_LIMIT_S) -> Outcome:
    """The case through `cli.main` in this process: the exit code, the time, and what was wrong, if anything."""
    import shutil

    from precision_doctor.cli import app as cli

    folder = folder / "case"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for name, data in case.files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    script = folder / case.name
    script.write_bytes(case.source.encode("utf-8", "surrogatepass"))
    args = [a.replace("{case}", str(folder)) for a in case.args]
    argv = ["check", str(script), "--format", "json", "--fail-on", "warning", *args]
    if case.snapshot is not None:
        facts = folder / "node.json"
        facts.write_text(case.snapshot, encoding="utf-8")
        argv += ["--facts", str(facts)]
    out, err = io.StringIO(), io.StringIO()

    def alarm(*_):
        raise CaseTimeout

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, time_limit)
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(argv)
    except CaseTimeout:
        return Outcome(case, None, time.perf_counter() - start, f"no result within {time_limit:g}s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    seconds = time.perf_counter() - start
    return Outcome(case, code, seconds, _problem(code, out.getvalue(), err.getvalue()))


def _problem(code: int, stdout: str, stderr: str) -> str:
    if code not in (0, 1, 2):
        return f"exit {code}: {stderr.strip()[:300]}"
    if code == 2:
        lines = stderr.strip().splitlines()
        return "" if len(lines) == 1 and "Traceback" not in stderr else f"exit 2 without one line: {stderr[:300]}"
    try:
        doc = json.loads(stdout, parse_constant=_no_constants)
    except ValueError as exc:
        return f"exit {code} with output that is not strict JSON ({exc})"
    if doc.get("crashed"):
        return f"rules crashed: {doc['crashed'][:2]}"
    return ""


def run_cases(cases, time_limit: float = TIME_LIMIT_S) -> list[Outcome]:
    with tempfile.TemporaryDirectory(prefix="pd-fuzz-") as folder:
        return [run_case(c, Path(folder), time_limit) for c in cases]


def generated_programs(count: int, seed: int = 0) -> list[str]:
    """`count` programs from hypothesmith's grammar strategy (deterministic for a seed)."""
    import hypothesmith
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed

    found: list[str] = []

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(hypothesmith.from_grammar())
    def collect(source: str) -> None:
        found.append(source)

    collect()
    return found[:count]


def cases(
    count: int,
    seed: int = 0,
    generated_share: float = 0.25,
    snapshot_share: float = 0.15,
    repository_share: float = 0.0,
) -> list[Case]:
    """`count` cases: generated programs, mutated snapshots, and (`repository_share`, split evenly) job scripts,
    recipes, model facts and requirements files; the rest mutated scripts."""
    rng = random.Random(seed)
    n_generated = int(count * generated_share)
    n_snapshot = int(count * snapshot_share)
    n_each = int(count * repository_share / len(REPOSITORY_KINDS))
    out = [generated_case(src, rng) for src in generated_programs(n_generated, seed)]
    out += [snapshot_case(rng) for _ in range(n_snapshot)]
    for make in REPOSITORY_KINDS:
        out += [make(rng) for _ in range(n_each)]
    out += [mutated_case(rng) for _ in range(count - len(out))]
    return out


# --- the other files a repository hands the doctor -------------------------------------------------------------

SHELL_TOKENS = [
    "$((1/0))",
    "$((2**63))",
    "$((-9223372036854775807-1))",
    "$(shuf -i 20000-30000 -n 1)",
    "`hostname`",
    "${UNSET:-${ALSO:-x}}",
    "$V$V$V$V",
    "$SLURM_PROCID",
    "$((",
    "))",
    "((((",
    "\\",
    "'",
    '"',
    "&",
    ";",
    "&&",
    "|",
    "\x1b[31mred",
    "\u202e",
    "9" * 400,
    "-1",
    "0",
    "70000",
    "--master_port",
    "--nproc_per_node",
    "--nnodes",
    "$((X*X))",
    "${#V}",
    "$1",
    "$@",
    "srun",
    "torchrun",
    "accelerate launch",
    "python -m",
    "for i in 1 2 3; do",
    "done",
    "wait",
    "cd ..",
    "export",
    "#SBATCH --nodes=999999999999",
]
JOB_TEMPLATES = [
    "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:a100:4\n"
    'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
    "export MASTER_PORT=$((10000 + SLURM_JOB_ID % 50000))\nN=$((SLURM_NNODES * 4))\n"
    "srun torchrun --nnodes $SLURM_NNODES --nproc_per_node 4 --rdzv_backend c10d "
    '--rdzv_endpoint "$MASTER_ADDR:$MASTER_PORT" train.py --bf16 True\n',
    "#!/bin/bash\n#SBATCH -N 1\n#SBATCH --gpus-per-node=2\n#SBATCH -p gpu\nexport ACCELERATE_MIXED_PRECISION=bf16\n"
    "cd $SLURM_SUBMIT_DIR\naccelerate launch --num_processes 2 --main_process_port $((29500 + 1)) train.py\n",
    "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:4\nfor lr in 1e-5 3e-5; do\n"
    "  torchrun --nproc_per_node 2 --master_port 29500 train.py --lr $lr &\ndone\nwait\n",
    "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=2\n#SBATCH --gres=gpu:v100:2\n"
    "export MASTER_PORT=$(shuf -i 20000-30000 -n 1)\nsrun python train.py --fp16\n",
    "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:h100:8\nV1=abcdefgh\n"
    + "".join(f'V{i}="$V{i - 1}$V{i - 1}$V{i - 1}$V{i - 1}"\n' for i in range(2, 30))
    + "X=2\n"
    + "X=$((X*X))\n" * 20
    + "P=$((1"
    + "*3" * 400
    + "))\n"
    "deepspeed --num_gpus 8 --master_port $P train.py --deepspeed ds.json\n",
]
YAML_TOKENS = [
    "bf16: auto",
    "fp16: true",
    "bf16: [1, 2]",
    "load_in_4bit: {a: 1}",
    ": : :",
    "&a [*a, *a]",
    "!!python/object/apply:os.system ['true']",
    "[" * 200 + "]" * 200,
    "10" * 200,
    "~",
    "- -",
    "'",
    "\t",
    "base_model: ./ckpt",
    "stage: sft",
    "finetuning_type: lora",
    "quantization_bit: 99",
    "deepspeed: ds.json",
    "adapter: qlora",
    "fp8: true",
    "num_processes: -1",
    "main_process_port: 70000",
    "mixed_precision: fp8",
    "distributed_type: DEEPSPEED",
    "gradient_checkpointing: {use_reentrant: [true]}",
    "\x1b]0;t\x07",
]
MODEL_HOSTILE = [
    10**300,
    -1,
    0,
    1e308,
    float("inf"),
    "nan",
    "bfloat16",
    ["float16"],
    {"a": 1},
    True,
    None,
    2**64,
    "x" * 5000,
    [[[[[]]]]],
    3.5,
    "float16",
]
BASE_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "text_config": {"hidden_size": 2048, "model_type": "llama"},
}
MODEL_SCRIPT = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('./ckpt', device_map='auto')\n"
    "args = TrainingArguments(output_dir='o', fp16=True, per_device_train_batch_size=8,\n"
    "                         gradient_checkpointing=True)\n"
    "Trainer(model=model, args=args).train()\n"
)
REQUIREMENT_LINES = [
    "torch==2.1.0",
    "transformers>=4.31",
    "transformers==4.56.0.dev0",
    "torch>=2.3.0a0",
    "peft",
    "trl @ git+https://example.invalid/trl",
    "accelerate~=1.0",
    "bitsandbytes<0.40; python_version<'3'",
    "-r requirements.txt",
    "-r more.txt",
    "--requirement=requirements.txt",
    "-c constraints.txt",
    "transformers==" + "9" * 5000,
    "torch===weird",
    "[[[",
    "\x00",
    "-e .",
    "--index-url x",
    "#",
    "",
    "transformers[torch]>=4.40,<5",
]
ENVIRONMENT = (
    ("env/lib/python3.11/site-packages/.keep", b""),
    ("env/bin/python", b""),
    ("env/pyvenv.cfg", b"home = /usr/bin\ninclude-system-site-packages = false\n"),
)


def jobscript_case(rng: random.Random) -> Case:
    text = rng.choice(JOB_TEMPLATES)
    if rng.random() < 0.7:
        text = mutate_lines(rng, text, tokens=SHELL_TOKENS)
    return Case(
        "jobscript",
        text,
        _machine_args(rng) if rng.random() < 0.3 else (),
        name="job.sbatch",
        files=(("train.py", rng.choice(corpus()).encode("utf-8", "surrogatepass")),),
    )


def recipe_case(rng: random.Random) -> Case:
    path = rng.choice(_recipe_paths())
    text = mutate_lines(rng, path.read_text(encoding="utf-8"), tokens=YAML_TOKENS)
    return Case("recipe", text, _machine_args(rng), name=path.name)


def model_case(rng: random.Random) -> Case:
    config = copy.deepcopy(BASE_MODEL_CONFIG)
    for _ in range(rng.randint(1, 4)):
        parent, key = _random_slot_in(rng, config)
        parent[key] = copy.deepcopy(rng.choice(MODEL_HOSTILE))
    text = json.dumps(config) if rng.random() < 0.9 else '{"a": ' + "[" * 100000 + "]" * 100000 + "}"
    files = [("ckpt/config.json", text.encode())]
    if rng.random() < 0.5:
        entry = {
            "dtype": rng.choice(["F16", "BF16", ["F16"], 7, None, {"x": 1}]),
            "shape": rng.choice([[2, 2], [2**62, 2**62], [-1], "x", [1.5], [[1]]]),
            "data_offsets": [0, 8],
        }
        header = json.dumps({"__metadata__": {"format": "pt"}, "w": entry}).encode()
        size = len(header) if rng.random() < 0.8 else rng.choice([0, 2**63, len(header) + 100])
        files.append(("ckpt/model.safetensors", size.to_bytes(8, "little") + header + b"\0" * 8))
    if rng.random() < 0.3:
        total = rng.choice([10**300, -5, "x", 2**60, 1e300, 123456789])
        files.append(("ckpt/model.safetensors.index.json", json.dumps({"metadata": {"total_size": total}}).encode()))
    return Case("model", MODEL_SCRIPT, ("--target", rng.choice(["a100", "t4", "h100:2"])), files=tuple(files))


def requirements_case(rng: random.Random) -> Case:
    lines = [rng.choice(REQUIREMENT_LINES) for _ in range(rng.randint(1, 12))]
    files = [("requirements.txt", "\n".join(lines).encode("utf-8", "surrogatepass")), *ENVIRONMENT]
    if rng.random() < 0.5:
        files.append(("more.txt", "\n".join(rng.choice(REQUIREMENT_LINES) for _ in range(5)).encode()))
    if rng.random() < 0.3:
        files.append(
            (
                "pyproject.toml",
                rng.choice(
                    [
                        b"[project]\ndependencies = ['transformers>=4.31', 'torch==2.0']\n",
                        b"[project\n",
                        b"[project]\ndependencies = 7\n",
                        b"[tool.poetry.dependencies]\ntransformers = {version = 3}\n",
                    ]
                ),
            )
        )
    return Case("requirements", rng.choice(corpus()), ("--python", "{case}/env/bin/python"), files=tuple(files))


REPOSITORY_KINDS = (jobscript_case, recipe_case, model_case, requirements_case)


@lru_cache(maxsize=1)
def _recipe_paths() -> tuple[Path, ...]:
    configs = ROOT / "fixtures" / "configs"
    return tuple(sorted(p for p in configs.rglob("*") if p.suffix in (".yml", ".yaml") and p.is_file()))


def _random_slot_in(rng: random.Random, data):
    parent, key, node = None, None, data
    for _ in range(rng.randint(1, 3)):
        if isinstance(node, dict) and node:
            parent, key = node, rng.choice(sorted(node))
        elif isinstance(node, list) and node:
            parent, key = node, rng.randrange(len(node))
        else:
            break
        node = parent[key]
    return (parent, key) if parent is not None else (data, rng.choice(sorted(data)))
