"""Errors the user can act on: each becomes one line on stderr and exit code 2."""


class InputError(Exception):
    """Bad usage or unreadable input. The message says what is wrong and what to do."""


def did_you_mean(word: str, choices, normalise=str.lower) -> str:
    """ "; did you mean 'x'?" for the closest of `choices` to a mistyped `word`, or "" when none is close."""
    import difflib

    by_key = {normalise(str(c)): str(c) for c in choices}
    close = difflib.get_close_matches(normalise(str(word)), list(by_key), n=1, cutoff=0.6)
    return f"; did you mean {by_key[close[0]]!r}?" if close else ""


def rule_id_key(text: str) -> str:
    """A rule id as typed, for "did you mean": letters O and I/L read as the digits they are mistaken for."""
    head, tail = text[:2].upper(), text[2:].upper()
    return head + tail.translate(str.maketrans("OIL", "011"))
