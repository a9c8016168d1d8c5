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
    source = "import torch\nmodel = torch.nn.Linear(2, 2)\n" + "model = model.half()\n" * n + \
        "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
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
