"""Property tests: the script probe never raises on Python it can parse, never hangs, and never invents a
value (every value it calls known points at a literal really written at that place, or at a default or a
command-line argument)."""

import ast
import signal
from contextlib import contextmanager

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from precision_doctor.model.errors import InputError  # noqa: E402
from precision_doctor.model.facts import KNOWN  # noqa: E402
from precision_doctor.probes.script import probe_script  # noqa: E402
from tests.fuzzing import corpus, mutate_lines  # noqa: E402

SOURCES = corpus()
FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@contextmanager
def time_limit(seconds: int):
    def boom(*_):
        raise TimeoutError(f"the probe took more than {seconds}s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def mutated_sources():
    """The fuzz harness's mutations (tests/fuzzing.py), drawn from a hypothesis-seeded random."""
    return st.randoms(use_true_random=False).map(lambda rng: mutate_lines(rng, rng.choice(SOURCES), SOURCES))


def check_probe(tmp_path, source: str):
    path = tmp_path / "fuzzed.py"
    path.write_text(source, encoding="utf-8")
    try:
        with time_limit(10):
            facts = probe_script(path, ("--fp16", "--torch_dtype", "bfloat16"))
    except InputError:
        return  # not parseable, empty, ...: reported as bad input, which is the contract
    written = _expressions_by_line(source)
    for call in facts.calls:
        for value in list(call.kwargs.values()) + list(call.args):
            if value.state != KNOWN:
                continue
            literal = value.origins[-1] if value.origins else None
            assert literal is not None, f"{call.callee}: a known value with no origin"
            if literal.kind == "code" and literal.location is not None and literal.location.path == "fuzzed.py":
                # the expression the doctor says holds the value is really written there, whole
                assert literal.detail in written.get(literal.location.line, set()), (
                    literal,
                    written.get(literal.location.line),
                )


def _expressions_by_line(source: str) -> dict[int, set[str]]:
    """Every expression of the source, as ast.unparse writes it, by the line it starts on."""
    out: dict[int, set[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.expr):
            out.setdefault(node.lineno, set()).add(ast.unparse(node))
    return out


def _parses(line: str) -> bool:
    try:
        ast.parse(line.strip())
        return True
    except SyntaxError:
        return False


@FUZZ
@given(source=mutated_sources())
def test_mutated_fixtures_never_crash_hang_or_invent(tmp_path, source):
    check_probe(tmp_path, source)


@FUZZ
@given(source=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400))
def test_random_text_is_bad_input_or_facts(tmp_path, source):
    check_probe(tmp_path, source)
