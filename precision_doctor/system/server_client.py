"""The door to `precision-doctor server` (system/server.py), kept small: it runs before anything else on every
`check`, so it imports only what the interpreter has already loaded or builds in (`_socket`, `_signal`, `marshal`,
`zlib`).

A server is found by its socket, named after what decides the code it would run (this interpreter, its prefix, the
doctor's folder and version): `$XDG_RUNTIME_DIR/precision-doctor/` or `/tmp/precision-doctor-UID/`, a folder that
must be this user's own and closed to everyone else. The request carries the command line, the working directory,
the umask, the environment, the import path and how the three standard streams encode, and passes the streams
themselves; the server forks a process that takes all of them and runs the command as this process would.

Any doubt (no server, a folder not private, a refusal, no answer within seconds) returns None before the command
has started anywhere, and the caller runs it in this process: a server is only ever faster, never different.
"""

from __future__ import annotations

import os
import sys

PROTOCOL = 1
SERVED_COMMANDS = ("check",)  # the command a pre-commit hook or an editor runs on every save
NO_SERVER_OPTION = "--no-server"
NO_SERVER_VARIABLE = "PRECISION_DOCTOR_NO_SERVER"
AUTO_VARIABLE = "PRECISION_DOCTOR_SERVER"
LIVE_OPTION = "--live"  # never served: live mode's processes end with the doctor's, which is this one
EXIT_INTERNAL = 3  # (cli/_common.py's, not imported here: it would load the command line's modules)
_ANSWER_WAIT_S = 5.0  # a server that does not answer a request by then is skipped, before the command starts
_MAX_MESSAGE = 64 * 1024 * 1024


def identity() -> tuple:
    """What decides which code a server runs: a server serves only requests with exactly this."""
    import precision_doctor

    return (
        PROTOCOL,
        os.path.realpath(sys.executable),
        sys.prefix,
        os.path.dirname(os.path.abspath(precision_doctor.__file__)),
        precision_doctor.__version__,
        sys.version,
        tuple(sys.flags),  # (-B, -E, -X utf8 ... and the warnings filters: what a process started here would run)
        tuple(sys.warnoptions),
        tuple(sorted((str(k), str(v)) for k, v in sys._xoptions.items())),
    )


def state_folder() -> str:
    """Where this user's servers keep their sockets, locks and logs."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return os.path.join(runtime, "precision-doctor")
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", f"precision-doctor-{os.getuid()}")


def socket_path(ident: tuple) -> str:
    import zlib

    return os.path.join(state_folder(), f"server-{zlib.crc32(repr(ident).encode()):08x}.sock")


def private_folder(path: str) -> bool:
    """A real folder (not a link), this user's, that no one else may enter or write."""
    import stat

    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def send_message(sock, value, fds: tuple[int, ...] = ()) -> None:
    import marshal

    data = marshal.dumps(value)
    data = len(data).to_bytes(4, "big") + data
    if fds:
        import _socket

        rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
        sent = sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        data = data[sent:]
    if data:
        sock.sendall(data)


def receive_message(sock, first: bytes = b""):
    """One message (after `first`, bytes of it already read); None when the peer closed before a whole one."""
    import marshal

    data = bytearray(first)
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        if len(data) >= 4 and int.from_bytes(data[:4], "big") > _MAX_MESSAGE:
            return None
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    return marshal.loads(bytes(data[4 : 4 + int.from_bytes(data[:4], "big")]))


def _stream(stream) -> tuple | None:
    return (stream.encoding, stream.errors) if stream is not None and hasattr(stream, "encoding") else None


def servable(argv: list[str]) -> bool:
    """Whether a server may run this command line: a `check`, not live, not refused by the caller."""
    own = argv[: argv.index("--")] if "--" in argv else argv
    if not own or own[0] not in SERVED_COMMANDS or os.environ.get(NO_SERVER_VARIABLE) or not hasattr(os, "fork"):
        return False
    if any(len(word) > 5 and NO_SERVER_OPTION.startswith(word) for word in own):  # (as argparse takes `--no-serv`)
        return False
    return not any(len(word) > 3 and LIVE_OPTION.startswith(word) for word in own)  # live: its own process


def wants_a_server(argv: list[str]) -> bool:
    """PRECISION_DOCTOR_SERVER=auto: a check that found no server starts one for the next (pre-commit's own
    interpreter included, which no one starts a server for by hand)."""
    return os.environ.get(AUTO_VARIABLE) == "auto" and servable(argv)


def served(argv: list[str]) -> int | None:
    """The exit code of `argv` run by this interpreter's server, or None when no server took it (then nothing of it
    has run)."""
    if not servable(argv):
        return None
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
        cwd = os.getcwd()
    except OSError:  # a closed standard stream or a removed working folder: this process says what it says
        return None
    ident = identity()
    path = socket_path(ident)
    if not private_folder(os.path.dirname(path)) or not os.path.exists(path):
        return None
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(_ANSWER_WAIT_S)
        sock.connect(path)
        umask = os.umask(0o022)
        os.umask(umask)
        request = (
            "run",
            ident,
            sys.argv[0],
            list(argv),
            cwd,
            umask,
            dict(os.environ),
            list(sys.path),
            (_stream(sys.stdin), _stream(sys.stdout), _stream(sys.stderr)),
        )
        send_message(sock, request, (0, 1, 2))
        answer = receive_message(sock)
        if not (isinstance(answer, tuple) and len(answer) == 2 and answer[0] == "ready"):
            return None  # refused (another interpreter's request, or the doctor's files changed): run it here
        worker = int(answer[1])
        sock.sendall(b"go")  # from here on the command runs there, and only there
    except (OSError, ValueError, EOFError, TypeError):
        sock.close()
        return None
    return _wait_for(sock, worker)


def _wait_for(sock, worker: int) -> int:
    """The worker's exit code. Ctrl-C and termination signals sent to this process are passed on to it."""
    import _signal  # type: ignore[import-not-found]  # (signal itself loads enum: milliseconds)

    forwarded: list[int] = []

    def forward(signum, _frame) -> None:
        forwarded.append(signum)
        try:
            os.kill(worker, signum)
        except OSError:
            pass

    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"):
        if hasattr(_signal, name):
            _signal.signal(getattr(_signal, name), forward)
    sock.settimeout(None)
    try:
        code = receive_message(sock)
    except (OSError, ValueError, EOFError, TypeError):
        code = None
    finally:
        sock.close()
    if isinstance(code, int):
        return code
    if forwarded:
        return 128 + forwarded[-1]
    sys.stderr.write(
        "precision-doctor: internal error: the server's process ended without an exit code "
        f"(check again with {NO_SERVER_OPTION}, and please report it)\n"
    )
    return EXIT_INTERNAL
