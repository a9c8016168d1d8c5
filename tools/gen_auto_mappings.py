"""Build precision_doctor/knowledge/data/auto_mappings.json: the model types each transformers Auto class used for
training builds with a class of its own, at one release (the one the rules are checked against), so that PD308 can
judge a job whose transformers is not installed where the doctor looks.

    python tools/gen_auto_mappings.py SITE_PACKAGES [--out FILE]

SITE_PACKAGES holds that transformers release; its models/auto/modeling_auto.py is read with `ast` through the
reader the doctor uses on an installed transformers (probes/installed_signatures.py); nothing is imported.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from precision_doctor.knowledge.versions import AUTO_MAPPING_CLASSES  # noqa: E402
from precision_doctor.probes.installed_signatures import _read_auto_mappings  # noqa: E402
from precision_doctor.probes.stack import installed_versions  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("site")
    parser.add_argument("--out", default=str(ROOT / "precision_doctor/knowledge/data/auto_mappings.json"))
    opts = parser.parse_args()
    version = installed_versions((opts.site,)).get("transformers")
    mappings = _read_auto_mappings((opts.site,))
    if not version or not mappings:
        raise SystemExit(f"{opts.site}: no transformers with models/auto/modeling_auto.py there")
    table = {
        "transformers": version,
        "source": "models/auto/modeling_auto.py",
        "classes": {
            name: {"line": mappings[name][1], "model_types": sorted(mappings[name][0])}
            for name in AUTO_MAPPING_CLASSES
            if name in mappings
        },
    }
    Path(opts.out).write_text(json.dumps(table, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{opts.out}: transformers {version}, {len(table['classes'])} Auto classes")


if __name__ == "__main__":
    main()
