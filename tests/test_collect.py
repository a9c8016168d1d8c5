"""Collection over many files: the workers' fate never takes the run down."""

import os

from precision_doctor import engine
from precision_doctor.probes import collect

from .conftest import machine_probes


def test_a_worker_that_dies_costs_only_its_file(tmp_path, monkeypatch):
    for i in range(40):
        (tmp_path / f"s{i:02d}.py").write_text("import torch\nx = torch.zeros(3)\n")
    (tmp_path / "poison.py").write_text("import torch\n")
    real = collect._probe

    def dies_on_poison(path, named, args, *environ):
        if path.name == "poison.py":
            os._exit(9)  # as a crash in a C extension or the OOM killer would end the worker
        return real(path, named, args, *environ)

    monkeypatch.setattr(collect, "_probe", dies_on_poison)  # the workers are forked: they see the patch
    facts = collect.gather([str(tmp_path)], target="t4", jobs=2, **machine_probes())
    lost = [s for s in facts.scripts if s.path.endswith("poison.py")]
    assert len(facts.scripts) == 41 and len(lost) == 1
    assert lost[0].unknowns[0].what == "not checked" and "exit code 9" in lost[0].unknowns[0].reason
    assert all(not s.unknowns for s in facts.scripts if s is not lost[0])
    assert engine.run(facts).crashed == ()
