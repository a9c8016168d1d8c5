"""Where the doctor keeps its own state (fix's undo data, fetched hub configs): the user's XDG state folder,
never inside a repository it checks or stands in."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..model.errors import InputError

APP = "precision-doctor"


def state_home(environ: Mapping[str, str] | None = None) -> str:
    """$XDG_STATE_HOME (when absolute, as the XDG spec asks), else ~/.local/state."""
    environ = os.environ if environ is None else environ
    xdg = environ.get("XDG_STATE_HOME", "")
    return xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".local", "state")


def checked_state_home() -> str:
    """The state home, refused when it lies in a repository being checked or stood in (XDG_STATE_HOME=$PWD/.state):
    state found there (undo data, fetched configs) could have been written by whoever wrote the repository."""
    from .programs import inside, untrusted_repositories

    home = state_home()
    real = os.path.realpath(os.path.join(home, APP))
    repository = next((r for r in untrusted_repositories() if inside(real, [r])), None)
    if repository is not None:
        raise InputError(
            f"the doctor's state folder {os.path.join(home, APP)} is inside the repository {repository}: "
            f"it keeps its state outside what it checks; set XDG_STATE_HOME to a folder outside it"
        )
    return home
