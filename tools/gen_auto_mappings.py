"""Build precision_doctor/knowledge/data/auto_mappings.json: for each transformers Auto class training scripts load
through, the releases whose own mapping holds each model type (what `has_local_code` asks), so that PD308 can
judge a job whose transformers is not installed where the doctor looks.

    python tools/gen_auto_mappings.py WHEEL_FOLDER [--out FILE]

WHEEL_FOLDER holds transformers wheels (`pip download --no-deps transformers==X`), one per minor release the
signature table reads (the last patch of each, as tools/gen_signatures.py fetches them); each wheel's
models/auto/modeling_auto.py is read with `ast` by the reader the doctor uses on an installed transformers. Nothing
is imported or installed. A model type is stored as [first, last] indexes into `minors` (last null: still there).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from precision_doctor.knowledge.signatures import table_key  # noqa: E402
from precision_doctor.knowledge.versions import AUTO_MAPPING_CLASSES, version_tuple  # noqa: E402
from precision_doctor.probes.installed_signatures import AUTO_MODULE, auto_mappings_of  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("wheels")
    parser.add_argument("--out", default=str(ROOT / "precision_doctor/knowledge/data/auto_mappings.json"))
    opts = parser.parse_args()
    by_minor: dict[str, tuple[str, Path]] = {}
    for wheel in Path(opts.wheels).glob("transformers-*-py3-none-any.whl"):
        version = re.match(r"transformers-([\d.]+)-", wheel.name).group(1)  # type: ignore[union-attr]
        key = table_key("transformers", version)
        if key not in by_minor or version_tuple(version) > version_tuple(by_minor[key][0]):
            by_minor[key] = (version, wheel)
    minors = sorted(by_minor, key=version_tuple)
    classes: dict[str, dict[str, list]] = {name: {} for name in AUTO_MAPPING_CLASSES}
    for at, key in enumerate(minors):
        with zipfile.ZipFile(by_minor[key][1]) as zf:
            mappings = auto_mappings_of(zf.read(AUTO_MODULE).decode()) or {}
        for name in AUTO_MAPPING_CLASSES:
            for model_type in mappings.get(name, (frozenset(), 0))[0]:
                span = classes[name].setdefault(model_type, [at, at])
                span[1] = at
    for types in classes.values():
        for span in types.values():
            span[1] = None if span[1] == len(minors) - 1 else span[1]
    table = {
        "source": "models/auto/modeling_auto.py of " + ", ".join(by_minor[k][0] for k in minors),
        "minors": minors,
        "classes": {name: dict(sorted(types.items())) for name, types in classes.items() if types},
    }
    Path(opts.out).write_text(json.dumps(table, separators=(",", ":"), sort_keys=True) + "\n", encoding="utf-8")
    print(f"{opts.out}: {len(minors)} releases ({minors[0]}-{minors[-1]}), {len(table['classes'])} Auto classes")


if __name__ == "__main__":
    main()
