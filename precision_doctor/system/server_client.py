"""The door to `precision-doctor server` (system/server.py), kept small: it runs before anything else on every
`check`, so it imports only what the interpreter has already loaded or builds in (`_socket`, `_signal`, `_locale`,
`marshal`, `zlib`).

A server is found by its socket, named after everything that decides what a process started here would run and
may do (`identity`): the interpreter, its flags and import path, the doctor's folder and version, the locale, the
user's groups, limits, priority, namespaces and confinement. It lives in `$XDG_RUNTIME_DIR/precision-doctor/` or
`/tmp/precision-doctor-UID/`, a folder that must be this user's own and closed to everyone else. The request
carries the command line, the working directory, the umask, the environment, the signals this process ignores and
how the three standard streams encode; once the server's forked process says it is ready, the streams themselves
are passed with the word to go, so a server that never answers holds none of them.

Any doubt (no server, a folder not private, a refusal, no answer within seconds) returns None before the command
has started anywhere, and the caller runs it in this process: a server is only ever faster, never different.
"""

from __future__ import annotations

import os
import sys

PROTOCOL = 2
SERVED_COMMANDS = ("check",)  # the command a pre-commit hook or an editor runs on every save
NO_SERVER_OPTION = "--no-server"
NO_SERVER_VARIABLE = "PRECISION_DOCTOR_NO_SERVER"
AUTO_VARIABLE = "PRECISION_DOCTOR_SERVER"
LIVE_OPTION = "--live"  # never served: live mode's processes end with the doctor's, which is this one
EXIT_INTERNAL = 3  # (cli/_common.py's, not imported here: it would load the command line's modules)
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")  # passed on to the served check, or ignored as here
ANSWER_WAIT_S = 3.0  # a server that does not answer a request by then is skipped, before the command starts
_MAX_MESSAGE = 64 * 1024 * 1024


def identity() -> tuple:
    """What decides what a process started here would run and may do: a server serves only requests with exactly
    this (and computes its own the same way, in the process `server start` started, which inherits all of it)."""
    import precision_doctor

    return (
        PROTOCOL,
        os.path.realpath(sys.executable),
        sys.prefix,
        os.path.dirname(os.path.abspath(precision_doctor.__file__)),
        precision_doctor.__version__,
        sys.version,
        tuple(sys.flags),  # -B, -E, -I, -O, -u, -X utf8, ...
        tuple(sys.warnoptions),
        tuple(sorted((str(k), str(v)) for k, v in sys._xoptions.items())),
        tuple(sys.path),  # (PYTHONPATH, and the folder `python -m` was started in: what a module is found as)
        sys.getfilesystemencoding(),
        sys.getfilesystemencodeerrors(),
        _locale(),
        _credentials(),
    )


def _locale() -> str:
    try:
        import _locale

        return str(_locale.setlocale(_locale.LC_CTYPE))
    except (ImportError, ValueError, OSError):
        return ""


def _credentials() -> tuple:
    """The user's groups, resource limits, priority, namespaces and confinement (capabilities, seccomp, the
    security label): a process of the same user with other ones must not have a server act for it."""
    out: list = [os.getgid(), os.getegid(), tuple(sorted(os.getgroups()))]
    try:
        import resource

        out.append(
            tuple(resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_"))
        )
    except (ImportError, OSError, ValueError):
        out.append(None)
    try:
        out.append(os.getpriority(os.PRIO_PROCESS, 0))
    except (AttributeError, OSError):
        out.append(None)
    for kind in ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts"):
        try:
            out.append(os.readlink(f"/proc/self/ns/{kind}"))
        except OSError:
            out.append(None)
    for name, keep in (("/proc/self/cgroup", None), ("/proc/self/status", ("Cap", "Seccomp", "NoNewPrivs"))):
        try:
            with open(name, "rb") as handle:
                lines = handle.read(65536).decode("utf-8", "replace").splitlines()
        except OSError:
            lines = []
        out.append(tuple(line for line in lines if keep is None or line.startswith(keep)))
    try:
        with open("/proc/self/attr/current", "rb") as handle:
            out.append(handle.read(4096))
    except OSError:
        out.append(None)
    return tuple(out)


def state_folder() -> str:
    """Where this user's servers keep their sockets, locks and logs."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return os.path.join(runtime, "precision-doctor")
    temporary = os.environ.get("TMPDIR", "")
    temporary = temporary if os.path.isabs(temporary) and os.path.isdir(temporary) else "/tmp"
    return os.path.join(temporary, f"precision-doctor-{os.getuid()}")


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
    """How a standard stream encodes and buffers, for the server's process to build its own alike."""
    if stream is None or not hasattr(stream, "encoding"):
        return None
    return (
        stream.encoding,
        stream.errors,
        bool(getattr(stream, "line_buffering", False)),
        bool(getattr(stream, "write_through", False)),
    )


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
    if not private_folder(state_folder()):  # (no server has run here: nothing more to work out)
        return None
    ident = identity()
    path = socket_path(ident)
    if not os.path.exists(path):
        return None
    import _signal  # type: ignore[import-not-found]  # (signal itself loads enum: milliseconds)
    import _socket

    ignored = [getattr(_signal, n) for n in FORWARDED if hasattr(_signal, n)]
    ignored = [s for s in ignored if _signal.getsignal(s) == _signal.SIG_IGN]
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(ANSWER_WAIT_S)
        sock.connect(path)
        umask = os.umask(0o022)
        os.umask(umask)
        request = (
            "run",
            ident,
            sys.executable,
            list(sys.orig_argv) if hasattr(sys, "orig_argv") else [],
            sys.argv[0],
            list(argv),
            cwd,
            umask,
            dict(os.environ),
            ignored,
            (_stream(sys.stdin), _stream(sys.stdout), _stream(sys.stderr)),
        )
        send_message(sock, request)
        answer = receive_message(sock)
        if not (isinstance(answer, tuple) and len(answer) == 2 and answer[0] == "ready"):
            return None  # refused (another interpreter's request, or the doctor's files changed): run it here
        worker = int(answer[1])
        send_message(sock, "go", (0, 1, 2))  # from here on the command runs there, and only there
    except (OSError, ValueError, EOFError, TypeError):
        sock.close()
        return None
    return _wait_for(sock, worker, ignored)


def _wait_for(sock, worker: int, ignored: list[int]) -> int:
    """The worker's exit code. The signals this process does not ignore are passed on to it; one that ended it ends
    this process the same way. Ctrl-Z stops it with this process, and going on resumes it."""
    import _signal

    forwarded: list[int] = []

    def forward(signum, _frame) -> None:
        forwarded.append(signum)
        try:
            os.kill(worker, signum)
        except OSError:
            pass

    def suspend(_signum, _frame) -> None:
        try:
            os.kill(worker, _signal.SIGSTOP)  # (its process group is orphaned: SIGTSTP would be discarded)
        except OSError:
            pass
        _signal.signal(_signal.SIGTSTP, _signal.SIG_DFL)
        os.kill(os.getpid(), _signal.SIGTSTP)  # stops here until the shell continues it
        _signal.signal(_signal.SIGTSTP, suspend)
        try:
            os.kill(worker, _signal.SIGCONT)
        except OSError:
            pass

    for name in FORWARDED:
        if hasattr(_signal, name) and getattr(_signal, name) not in ignored:
            _signal.signal(getattr(_signal, name), forward)
    if hasattr(_signal, "SIGTSTP") and _signal.getsignal(_signal.SIGTSTP) != _signal.SIG_IGN:
        _signal.signal(_signal.SIGTSTP, suspend)
    sock.settimeout(None)
    try:
        code = receive_message(sock)
    except (OSError, ValueError, EOFError, TypeError):
        code = None
    finally:
        sock.close()
    if isinstance(code, int):
        return code
    if forwarded:  # ended by the signal passed on: end as a process of its own would have
        _signal.signal(forwarded[-1], _signal.SIG_DFL)
        os.kill(os.getpid(), forwarded[-1])
        return 128 + forwarded[-1]
    sys.stderr.write(
        "precision-doctor: internal error: the server's process ended without an exit code "
        f"(check again with {NO_SERVER_OPTION}, and please report it)\n"
    )
    return EXIT_INTERNAL
