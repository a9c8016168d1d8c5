"""The `precision-doctor` program."""

from __future__ import annotations

import os
import sys


def entry() -> None:
    if sys.stdin is None:  # started with stdin closed (`<&-`): read as empty, never as a crash
        sys.stdin = open(os.devnull, encoding="utf-8")
    from .app import main

    sys.exit(main())
