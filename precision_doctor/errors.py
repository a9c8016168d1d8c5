"""Errors the user can act on: each becomes one line on stderr and exit code 2."""


class InputError(Exception):
    """Bad usage or unreadable input. The message says what is wrong and what to do."""
