"""Build precision_doctor/knowledge/data/version_gates.json: for each release of a framework that checks the library
versions as it starts (LLaMA-Factory's `check_dependencies()`, extras/misc.py), the requirements it checks and
the DISABLE_VERSION_CHECK values that skip them, so that PD703 can judge a job whose framework is not installed
where the doctor looks.

    python tools/gen_version_gates.py WHEEL_FOLDER [--out FILE]

WHEEL_FOLDER holds the framework's wheels (`pip download --no-deps llamafactory==X`), one per release; each wheel's
file is read with `ast` by the reader the doctor uses on an installed package. Nothing is imported or installed.
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

from precision_doctor.knowledge.version_gates import GATED  # noqa: E402
from precision_doctor.knowledge.versions import version_tuple  # noqa: E402
from precision_doctor.probes.library_source import read_version_gate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("wheels")
    parser.add_argument("--out", default=str(ROOT / "precision_doctor/knowledge/data/version_gates.json"))
    opts = parser.parse_args()
    out: dict = {"generated_by": "tools/gen_version_gates.py", "frameworks": {}}
    for package, relative in GATED.items():
        releases: dict[str, dict] = {}
        for wheel in Path(opts.wheels).glob(f"{package}-*-py3-none-any.whl"):
            version = re.match(rf"{package}-([\d.]+)-", wheel.name).group(1)  # type: ignore[union-attr]
            with zipfile.ZipFile(wheel) as z:
                text = z.read(relative).decode("utf-8")
            requirements, disable = read_version_gate(text)
            if requirements:
                releases[version] = {
                    "requirements": [[r.requirement, r.line, r.mandatory] for r in requirements],
                    "disable_values": list(disable),
                }
        ordered = dict(sorted(releases.items(), key=lambda kv: version_tuple(kv[0])))
        out["frameworks"][package] = {"file": relative, "releases": ordered}
        print(f"{package}: {len(ordered)} releases ({', '.join(ordered)})")
    Path(opts.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
