"""The `precision-doctor` program, and the body of the server process that runs it for others.

A `check` is handed to this interpreter's resident server when one runs (`precision-doctor server start`,
system/server.py): what it prints and its exit code are this process's own. Nothing else is imported before that
is known: the doctor's modules are most of a lone check's time."""

from __future__ import annotations

import os
import sys


def entry() -> None:
    if sys.stdin is None:  # started with stdin closed (`<&-`): read as empty, never as a crash
        sys.stdin = open(os.devnull, encoding="utf-8")
    from ..system.server_client import served

    code = served(sys.argv[1:])
    if code is None:
        from .app import main

        code = main()
        _start_a_server_for_next_time(sys.argv[1:])
    sys.exit(code)


def _start_a_server_for_next_time(argv: list[str]) -> None:
    """With PRECISION_DOCTOR_SERVER=auto, start this interpreter's server in the background, silently: it changes
    nothing of this run (a folder that will not do, or any other failure, leaves it at that)."""
    from ..system.server_client import wants_a_server

    if not wants_a_server(argv):
        return
    try:
        from ..system import server
        from .server import SERVER_BODY

        server.launch(server.DEFAULT_IDLE_MINUTES, SERVER_BODY)
    except Exception:  # noqa: BLE001, S110 - a convenience for the next run, never this run's failure
        pass


def serve_forever(idle_minutes: float) -> int:
    """The server process (started by `precision-doctor server start`): it serves the command line."""
    from ..system import server
    from .app import main

    try:
        return server.serve(main, idle_minutes)
    except server.ServerError as exc:
        print(f"precision-doctor server: {exc}", file=sys.stderr, flush=True)
        return 2
