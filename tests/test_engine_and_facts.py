"""Facts round-trip through JSON; the engine stamps, ranks and survives a crashing check."""

import json

from precision_doctor import engine
from precision_doctor.model.facts import Facts, Location
from precision_doctor.model.findings import Draft, Evidence
from precision_doctor.rules.registry import REGISTRY, Example, rule


def test_facts_round_trip_through_json(run_check):
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "d = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16\n"
        "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=d)\n"
        "Trainer(model=m, args=TrainingArguments('o', fp16=True)).train()\n"
    )
    result, facts = run_check(code, target="t4")
    again = Facts.from_json(json.loads(json.dumps(facts.to_json())))
    assert again == facts
    assert [f.rule_id for f in engine.run(again).findings] == [f.rule_id for f in result.findings]


def test_ranking_puts_errors_first_then_the_earliest_phase(run_check):
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.bfloat16)\n"
        "Trainer(model=m, args=TrainingArguments('o', fp16=True, bf16=True)).train()\n"
    )
    result, _ = run_check(code)
    ids = [f.rule_id for f in result.findings]
    severities = [f.severity for f in result.findings]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)
    assert ids[0] == "PD209"  # the arguments refuse to construct before anything else runs


def test_crashing_check_is_reported_not_raised(run_check, monkeypatch):
    @rule(
        "PD999",
        "always-crashes",
        severity="error",
        phase="config",
        summary="s",
        what="w",
        why="y",
        error="e",
        fix="f",
        fires=[Example("x = 1\n")],
        silent=[Example("y = 2\n")],
    )
    def crashes(setup):
        raise RuntimeError("boom")
        yield  # pragma: no cover

    try:
        result, _ = run_check("x = 1\n")
        assert [c.rule_id for c in result.crashed] == ["PD999"]
        assert "boom" in result.crashed[0].reason
    finally:
        REGISTRY.pop("PD999")


def test_a_check_may_lower_but_not_raise_severity(run_check):
    @rule(
        "PD998",
        "lowers",
        severity="warning",
        phase="config",
        summary="s",
        what="w",
        why="y",
        error="e",
        fix="f",
        fires=[Example("x = 1\n")],
        silent=[Example("y = 2\n")],
    )
    def lowers(script):
        loc = Location(script.path, 1)
        yield Draft("raise me", evidence=(Evidence(loc, "x", "n"),), severity="error")
        yield Draft("lower me", evidence=(Evidence(loc, "x", "n"),), severity="info")

    try:
        result, _ = run_check("x = 1\n")
        got = {f.message: f.severity for f in result.findings if f.rule_id == "PD998"}
        assert got == {"raise me": "warning", "lower me": "info"}
    finally:
        REGISTRY.pop("PD998")


def test_a_rule_may_escalate_only_as_far_as_it_declares(run_check):
    @rule(
        "PD997",
        "escalates",
        severity="info",
        escalates_to="warning",
        phase="config",
        summary="s",
        what="w",
        why="y",
        error="e",
        fix="f",
        fires=[Example("x = 1\n")],
        silent=[Example("y = 2\n")],
    )
    def escalates(script):
        loc = Location(script.path, 1)
        yield Draft("to warning", evidence=(Evidence(loc, "x", "n"),), severity="warning")
        yield Draft("to error", evidence=(Evidence(loc, "x", "n"),), severity="error")

    try:
        result, _ = run_check("x = 1\n")
        got = {f.message: f.severity for f in result.findings if f.rule_id == "PD997"}
        assert got == {"to warning": "warning", "to error": "info"}
    finally:
        REGISTRY.pop("PD997")


def test_typed_values_survive_the_json_round_trip(run_check):
    """Tensors, call kinds and value states come back as their types, not as strings."""
    from precision_doctor.model.call_kinds import CallKind
    from precision_doctor.model.facts import State, TensorValue

    code = (
        "import torch\nmodel = torch.nn.Linear(16, 4).cuda().half()\nx = torch.randn(8, 16, device='cuda')\n"
        "loss = model(x).sum()\n"
    )
    _, facts = run_check(code)
    again = Facts.from_json(json.loads(json.dumps(facts.to_json())))
    assert again == facts
    calls = again.scripts[0].calls
    assert all(isinstance(c.kind, CallKind) for c in calls)
    values = [v for c in calls for v in c.args if isinstance(v.value, TensorValue)]
    assert values and values[0].value.dtype == "float32" and isinstance(values[0].state, State)


def test_a_tensor_moved_to_a_device_keeps_its_dtype(run_check):
    """`x.to(device)` on a tensor the script built is still a float32 tensor (this crashed the probe once)."""
    from precision_doctor.model.facts import TensorValue

    code = (
        "import torch\nmodel = torch.nn.Linear(16, 4).cuda().half()\n"
        "x = torch.randn(8, 16).to('cuda')\nloss = model(x).sum()\n"
    )
    result, facts = run_check(code)
    assert not result.crashed
    values = [v.value for c in facts.scripts[0].calls for v in c.args if isinstance(v.value, TensorValue)]
    assert values == [TensorValue("float32")]


def test_fact_records_behave_as_frozen_dataclasses():
    """The facts are built with `_util.record` (cheaper to define than a dataclass): equal, hashed, shown and
    frozen exactly as `@dataclass(frozen=True)` would make them."""
    import dataclasses
    import pickle

    from precision_doctor.model.facts import Call, Origin, Value

    here = Location("train.py", 3, 5)
    value = Value(state="known", value=1e-4, text="1e-4", origins=(Origin("code", "lr = 1e-4", here),), location=here)

    @dataclasses.dataclass(frozen=True)
    class Location2:
        path: str
        line: int
        column: int = 1

    twin = Location2("train.py", 3, 5)
    assert repr(here) == "Location(" + repr(twin).split("(", 1)[1] == "Location(path='train.py', line=3, column=5)"
    assert hash(here) == hash(twin) and here == Location("train.py", 3, 5) and here != Location("train.py", 3, 6)
    assert here.__eq__(twin) is NotImplemented  # another class is never equal, as with dataclasses
    assert dataclasses.is_dataclass(value) and [f.name for f in dataclasses.fields(Location)] == [
        "path",
        "line",
        "column",
    ]
    assert dataclasses.replace(value, text="x").text == "x" and pickle.loads(pickle.dumps(value)) == value
    try:
        here.line = 4
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("a fact must be immutable")
    call = Call(kind="trainer", callee="Trainer", location=here, scope="<module>", kwargs={"args": value})
    assert call == Call(kind="trainer", callee="Trainer", location=here, scope="<module>", kwargs={"args": value})


def test_a_record_has_its_dataclass_signature_before_its_first_instance_and_builds_the_same_after():
    """A record's `__init__` is compiled when its first instance is made: until then `inspect.signature`, its
    generated doc and `help()` already show the dataclass's, and the first and later instances are built alike."""
    import dataclasses
    import gc
    import inspect

    from precision_doctor.model.util import record

    class Shape:  # annotations as the doctor's modules write them (postponed: strings)
        name: "str"
        dims: "tuple" = ()
        tags: "dict" = dataclasses.field(default_factory=dict)

    twin = dataclasses.dataclass(frozen=True)(
        type(
            "Shape",
            (),
            {
                "__annotations__": dict(Shape.__annotations__),
                "dims": (),
                "tags": dataclasses.field(default_factory=dict),
            },
        )
    )
    made = record(Shape)
    assert "__record_first__" in vars(made.__init__)  # not compiled yet
    assert (
        str(inspect.signature(made))
        == str(inspect.signature(twin))
        == "(name: 'str', dims: 'tuple' = (), tags: 'dict' = <factory>) -> None"
    )
    assert made.__doc__ == twin.__doc__
    gc.collect()
    first, second = made("a"), made("b", (1, 2), tags={"x": 1})
    assert gc.collect() == 0  # the first-call __init__ it replaced leaves nothing to the collector
    assert "__record_first__" not in vars(made.__init__)
    assert (first.dims, first.tags, second.dims, second.tags) == ((), {}, (1, 2), {"x": 1})
    assert str(inspect.signature(made)) == str(inspect.signature(twin))
    try:
        made()
    except TypeError as exc:
        assert "name" in str(exc)
    else:
        raise AssertionError("a required field must be required")
