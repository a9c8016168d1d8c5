"""Size (issue 18 §4): the work of resolving a script grows linearly with its length. Counted, not timed:
how many recorded assignments the probe touches for one name reassigned n and 4n times."""

from precision_doctor.probes import script as script_probe
from precision_doctor.probes.script import parse


class CountingList(list):
    touched = 0

    def __iter__(self):
        for item in super().__iter__():
            CountingList.touched += 1
            yield item

    def __getitem__(self, index):
        found = super().__getitem__(index)
        CountingList.touched += len(found) if isinstance(index, slice) else 1
        return found


def assignments_touched(tmp_path, n: int) -> int:
    source = (
        "import torch\nmodel = torch.nn.Linear(2, 2)\n"
        + "model = model.half()\n" * n
        + "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
    )
    path = tmp_path / f"reassigned_{n}.py"
    path.write_text(source)
    collector = script_probe._Collector(str(path), source, parse(path, source), ())
    for scope in collector.index.scopes:
        scope.assigns = {name: CountingList(events) for name, events in scope.assigns.items()}
    CountingList.touched = 0
    collector.collect()
    assert sum(c.kind == "cast" for c in collector.calls) == n
    return CountingList.touched


def test_lookups_of_a_name_reassigned_many_times_grow_linearly(tmp_path):
    small, large = assignments_touched(tmp_path, 150), assignments_touched(tmp_path, 600)
    assert large <= 5 * small, (small, large)  # linear: 4x; rescanning every assignment per lookup: 16x


# what scripts and library sources hold: read without ast.literal_eval; then the rare forms it is left to
COMMON_LITERALS = [
    "1",
    "(1, 2.5, 'a')",
    "[1, [2, -3]]",
    "{'a': (1,), 2: None}",
    "-4",
    "+4.5",
    "(8, 0)",
    "{}",
    "x",
    "{**a}",
    "[*a]",
    "(1,2)[0]",
    "f(1)",
    "{[1]: 2}",
    "torch.float16",
]
LITERALS = COMMON_LITERALS + ["set()", "{1, 2}", "1+2j", "-True", "-'a'"]


def _outcome(read, node):
    try:
        value = read(node)
        return "ok", type(value), value
    except Exception as exc:  # the kind of failure is part of what callers rely on
        return "error", type(exc)


def test_literals_are_read_as_literal_eval_reads_them_without_making_garbage():
    import ast
    import gc

    from precision_doctor.model.python_source import literal

    nodes = [ast.parse(text, mode="eval").body for text in LITERALS]
    assert [_outcome(literal, n) for n in nodes] == [_outcome(ast.literal_eval, n) for n in nodes]
    gc.collect()
    gc.disable()
    try:
        for node in nodes[: len(COMMON_LITERALS)] * 20:
            _outcome(literal, node)
        assert gc.collect() < 20  # ast.literal_eval leaves a cycle of closures behind on every call: 4 per call
    finally:
        gc.enable()


def test_a_folder_run_leaves_no_cycles_for_the_collector(tmp_path):
    import gc

    from precision_doctor.probes.collect import gather

    for i in range(40):
        (tmp_path / f"train_{i}.py").write_text(
            "import argparse, torch\nfrom transformers import TrainingArguments\n"
            "p = argparse.ArgumentParser()\np.add_argument('--lr', type=float, default=1e-4)\n"
            "p.add_argument('--bf16', action='store_true')\nargs = p.parse_args()\n"
            "if torch.cuda.get_device_capability() >= (8, 0):\n    dtype = torch.bfloat16\n"
            "TrainingArguments('o', learning_rate=args.lr, bf16=args.bf16, adam_betas=(0.9, 0.95))\n"
        )
    gc.collect()
    facts = gather([str(tmp_path)], target="a100", environ={}, jobs=1)
    assert len(facts.scripts) == 40 and all(s.calls for s in facts.scripts)
    assert gc.collect() < 40  # each rebuilt parser and literal used to leave dozens of objects to it


class _SelfReferencing:
    def __init__(self):
        self.me = self


def test_a_program_that_checks_again_and_again_does_not_pile_up_its_own_garbage(tmp_path):
    import gc

    from precision_doctor.probes.collect import gather

    (tmp_path / "train.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).half()\n")
    gc.collect()
    for _ in range(30):  # an editor or a test runner: its own cyclic garbage between checks
        junk = [_SelfReferencing() for _ in range(300)]
        del junk
        gather([str(tmp_path / "train.py")], target="a100", environ={})
    assert gc.collect() < 300  # the caller's garbage was collected as usual, not moved where no collection looks
