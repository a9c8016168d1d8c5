"""benchmarks/real_world.py over a tiny tree built from the project's own fixtures."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("real_world", ROOT / "benchmarks" / "real_world.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prints_every_section_for_a_mixed_tree(bench, tmp_path, capsys):
    tree = tmp_path / "corpus"
    shutil.copytree(FIXTURES / "seed001_titan_fp16" / "buggy", tree / "titan")
    (tree / "shapes").mkdir()
    shutil.copy(FIXTURES / "shapes" / "runtime_values.py", tree / "shapes")
    (tree / "shapes" / "broken.py").write_text("def train(:\n")
    files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*.py"))
    lines = sum(len((tree / f).read_bytes().splitlines()) for f in files)
    out_json = tmp_path / "figures.json"

    assert bench.main([str(tree), "--target", "titan-rtx", "--limit", "1", "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    for section in (
        "== files",
        "== findings per rule",
        "== findings per severity",
        "== error-level findings",
        "== per-file vs folder-run differences",
        "== unknowns per file",
        "== not checked",
        "== stderr",
        "== time",
    ):
        assert section in text
    fig = json.loads(out_json.read_text())
    assert fig["files"] == len(files) and fig["lines"] == lines
    # --limit runs only the first file alone: the broken one, reported whether check refuses it or lists it
    assert fig["per_file_runs"] == 1
    assert "shapes/broken.py" in {**fig["single_failed"], **fig["not_checked_single"]}
    # seed 001's fp16 weights under fp16 AMP: an error, listed with the line it points at
    assert any(e["id"] == "PD201" and e["file"] == "titan/train.py" for e in fig["errors"])
    assert "PD201 titan/model_utility_configs.py:12" in text
    assert fig["per_rule"]["PD201"] >= 1 and fig["per_severity"]["error"] >= 1
    # a file that does not parse is not checked, with the reason; run-time values are unknowns
    assert "shapes/broken.py" in fig["not_checked"]
    assert fig["unknowns_per_file"]["shapes/runtime_values.py"] >= 2
    assert fig["unknown_reasons"] and "lines/s" in text


def test_differences_name_the_finding_and_where_the_folder_run_put_it(bench):
    def finding(rule, path, at, line, message="m"):
        return {
            "id": rule,
            "severity": "error",
            "path": path,
            "message": message,
            "locations": [{"path": at, "line": line}],
        }

    single = {
        "a.py": {
            "report": {
                "findings": [
                    finding("PD201", "a.py", "a.py", 3),
                    finding("PD214", "a.py", "helper.py", 9),
                    finding("PD101", "a.py", "a.py", 5, "per-file words"),
                ]
            }
        }
    }
    folder = {
        "a.py": [finding("PD301", "a.py", "a.py", 7), finding("PD101", "a.py", "a.py", 5, "folder words")],
        "helper.py": [finding("PD214", "helper.py", "helper.py", 9)],
    }
    kinds = {(d["id"], d["kind"]) for d in bench.compare(folder, single)}
    assert kinds == {
        ("PD201", "per-file only"),
        ("PD301", "folder only"),
        ("PD101", "message differs"),
        ("PD214", "folder run reports it under helper.py"),
    }


def test_reads_reports_with_missing_or_odd_fields(bench):
    assert bench.checked_files({}) == [] and bench.checked_files({"facts": {"scripts": "?"}}) == []
    assert bench.stack_line({"facts": {}}) == "?"
    per_file, not_checked = bench.unknowns_by_file({"unknowns": [{"what": "not checked", "path": "x.py"}, 3]})
    assert not_checked == {"x.py": ""} and not per_file
    assert bench.finding_key({}) == ("?", "?", "", None)
