"""The fuzz harness: hostile inputs through the whole command line, in-process.

Cases are generated programs (hypothesmith), mutations of the fixtures and of the rules' examples (lines deleted,
duplicated, swapped, truncated; tokens swapped; two files spliced) and mutated snapshots for --facts. Each runs as
`precision_doctor.cli.main(["check", FILE, "--format", "json", ...])` with stdout captured, and must end with
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
TOKENS = ["torch.float16", "torch.bfloat16", "True", "False", "None", "model", "args", "fp16", "bf16", "0", "1.5",
          "'auto'", "(", ")", ":", ",", "**kw", "x.half()", "if", "else", "for", "lambda: 0", "\n", "    ", "1e999",
          "float('nan')", "9" * 5000, "'²'", "-1", "10**100", "[]", "{}", "*", "\\", "'\x1b]0;title\x07'", "#"]
HOSTILE_VALUES = ["8.0", "", "²", -1, 0, 2**63 - 1, 1.5, True, None, [], {}, [[[[[]]]]], {"a": {"b": {"c": 1}}},
                  "x" * 300, [1, 2, 3], ["a"], {"0": 1}, 70000]
TARGETS = [None, "t4", "titan-rtx", "h100:2", "a100:8", "cpu", "l40s:2"]
LAUNCHERS = [None, "accelerate launch --num_processes 2 --mixed_precision bf16",
             "torchrun --nproc_per_node 4 --master_port 29501", "deepspeed --num_gpus 2", "python"]
TIME_LIMIT_S = 20


class CaseTimeout(BaseException):
    """Raised by the alarm: a BaseException, so that the CLI's own `except Exception` cannot swallow it."""


@dataclass(frozen=True)
class Case:
    kind: str  # generated | mutated | snapshot
    source: str  # the script
    args: tuple[str, ...] = ()  # besides check FILE --format json
    snapshot: str | None = None  # --facts content


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
    from precision_doctor.catalog import rules

    texts = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "fixtures").rglob("*.py"))]
    for r in rules():
        texts.extend(example.code for example in (*r.fires, *r.silent))
    return tuple(dict.fromkeys(texts))


@lru_cache(maxsize=1)
def snapshot_text() -> str:
    """A full snapshot (two GPUs with a process, host ports, env, accelerate config, stack) to mutate."""
    from dataclasses import replace

    from precision_doctor.collect import snapshot_json
    from precision_doctor.facts import BusyPort, GpuProcess, HostFacts, PackageVersion, StackFacts
    from precision_doctor.probes.target import machine_from_target

    machine = machine_from_target("a100:2")
    gpus = (replace(machine.gpus[0], processes=(GpuProcess(pid=77, used_mib=2048, status="stopped", user="ann"),)),
            machine.gpus[1])
    host = HostFacts(hostname="node", user="ann", ports_checked=(29500,), busy_ports=(BusyPort(29500, 77),),
                     env={"MASTER_PORT": "29500", "CUDA_VISIBLE_DEVICES": "0,1"},
                     accelerate_config={"mixed_precision": "bf16", "main_process_port": 29500, "num_processes": 2})
    stack = StackFacts(packages={"torch": PackageVersion("torch", "2.4.0", "installed")})
    return snapshot_json(replace(machine, gpus=gpus, host=host), stack)


# --- mutations -------------------------------------------------------------------------------------

def mutate_lines(rng: random.Random, text: str, others: tuple[str, ...] = ()) -> str:
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
            words[rng.randrange(len(words))] = rng.choice(TOKENS)
            lines[i] = " ".join(words)
        elif op == "truncate":
            lines[i] = lines[i][: rng.randint(0, len(lines[i]))]
        elif op == "splice" and others:
            other = rng.choice(others).splitlines()
            lines = lines[:i] + other[rng.randint(0, len(other)):] if other else lines[:i]
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
    from precision_doctor import cli

    script = folder / "fuzzed.py"
    script.write_bytes(case.source.encode("utf-8", "surrogatepass"))
    argv = ["check", str(script), "--format", "json", "--fail-on", "warning", *case.args]
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
    from hypothesis import HealthCheck, given, seed as hypothesis_seed, settings

    found: list[str] = []

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(hypothesmith.from_grammar())
    def collect(source: str) -> None:
        found.append(source)

    collect()
    return found[:count]


def cases(count: int, seed: int = 0, generated_share: float = 0.25, snapshot_share: float = 0.15) -> list[Case]:
    rng = random.Random(seed)
    n_generated = int(count * generated_share)
    n_snapshot = int(count * snapshot_share)
    out = [generated_case(src, rng) for src in generated_programs(n_generated, seed)]
    out += [snapshot_case(rng) for _ in range(n_snapshot)]
    out += [mutated_case(rng) for _ in range(count - len(out))]
    return out
