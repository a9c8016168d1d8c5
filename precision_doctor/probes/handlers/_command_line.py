"""How command lines spell values: shared by the argparse and HfArgumentParser handlers."""

from __future__ import annotations

BOOL_STRINGS = {
    "true": True,
    "1": True,
    "yes": True,
    "y": True,
    "t": True,
    "false": False,
    "0": False,
    "no": False,
    "n": False,
    "f": False,
}


def coerce(text: str, is_bool: bool) -> object:
    """A command-line word as the value a parser would make of it."""
    if is_bool and text.lower() in BOOL_STRINGS:
        return BOOL_STRINGS[text.lower()]
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text
