"""`precision-doctor server start|stop|status`: the resident process that answers `check` without loading the
doctor again (system/server.py)."""

from __future__ import annotations

import time

from ..model.errors import InputError
from ._common import EXIT_OK, bounded

ACTIONS = ("start", "stop", "status")
SERVER_BODY = "precision_doctor.cli.program:serve_forever"  # what the started process runs


def register(sub) -> None:
    server = sub.add_parser(
        "server",
        help="start, stop or ask about the resident process that makes `check` start at once",
        description="A resident process that has loaded the doctor once: while it runs, every `check` started "
        "with this interpreter is run by a process forked from it (with your working folder, environment and "
        "terminal), which saves most of a lone check's time. It serves only your user, stops after "
        "--idle-minutes without a check, and stops by itself when the doctor's files change.",
    )
    server.add_argument("action", choices=ACTIONS, help="start it, stop it, or say whether it runs")
    server.add_argument(
        "--idle-minutes",
        type=bounded(float, 0.01, 7 * 24 * 60.0),
        default=60.0,
        metavar="N",
        help="with start: stop after N minutes without a check (default 60)",
    )


def run_server(opts, _script_args) -> int:
    import os

    if not hasattr(os, "fork"):
        raise InputError("the server needs fork() and Unix sockets, which this platform does not have")
    from ..system import server

    try:
        if opts.action == "start":
            print(_described(server.start(opts.idle_minutes, SERVER_BODY)))
        elif opts.action == "stop":
            answer = server.ask("stop")
            print(f"server {answer[1]} stopped" if answer else "no server was running for this interpreter")
        else:
            answer = server.ask("status")
            if answer is None:
                print("no server is running for this interpreter (start one with `precision-doctor server start`)")
            else:
                print(_described(answer))
    except server.ServerError as exc:
        raise InputError(str(exc)) from None
    return EXIT_OK


def _described(status: tuple) -> str:
    _, pid, started, served, idle, path, _version = status
    checks = f"{served} check{'' if served == 1 else 's'} served"
    return f"server {pid} running since {_when(started)} ({checks}; stops after {idle:g} idle minutes): {path}"


def _when(moment: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(moment))
