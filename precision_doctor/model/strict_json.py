"""Every JSON document the doctor writes is strict JSON (RFC 8259), which every parser accepts.

Python's json writes a float that is infinite or not a number (`1e999` in a script, NaN in a config) as the bare
tokens `Infinity` / `NaN`, which strict parsers (jq, Go, Rust, browsers' JSON.parse) reject. Such a number is
written as the string "Infinity", "-Infinity" or "NaN" instead: the value stays visible and the document parses.
"""

from __future__ import annotations

import json
import math
from typing import Any

NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def finite(data: Any) -> Any:
    """`data` with every non-finite float replaced by its name (a string)."""
    if isinstance(data, float) and not math.isfinite(data):
        return "NaN" if math.isnan(data) else NON_FINITE[data]
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def dumps(data: Any, **kw: Any) -> str:
    return json.dumps(finite(data), allow_nan=False, **kw)
