"""`precision-doctor server`: a resident process that has imported the doctor once, so that a `check` started
afterwards skips the imports that are most of a lone check's time (a pre-commit hook, an editor on save).

Each request is run in a process forked for it, which takes the requesting process's standard streams (passed
over the socket), working folder, umask, environment, ignored signals and command line, then runs the command line
as `precision-doctor` would and sends back its exit code. The server itself runs no check: every forked process is
the first run in its process (no memo of an earlier run), its reads recorded and its answer cached exactly as a
fresh process's (system/run_answer.py).

What it will not do: serve another user (the socket's folder is private and the peer's uid is checked where the
OS tells it), serve a process that would run other code or may do other things (each request carries the identity
the socket is named after: interpreter, flags, import path, the doctor's folder and version, locale, groups,
limits, namespaces, confinement), run code its files no longer hold (it compares the package's files and folders
and every loaded module's file on each request and steps aside when one changed), import what static mode never
imports (torch, transformers, libcst: modules that need them are not loaded), or stay after `--idle-minutes`
without a check.
"""

from __future__ import annotations

import ast
import atexit
import fcntl
import importlib
import io
import os
import signal
import socket
import stat
import struct
import sys
import time
import traceback
from collections.abc import Callable

from .content_cache import doctor_files, doctor_fingerprint
from .server_client import (
    ANSWER_WAIT_S,
    EXIT_INTERNAL,
    identity,
    private_folder,
    receive_message,
    send_message,
    socket_path,
)

DEFAULT_IDLE_MINUTES = 60.0
NEVER_LOADED = frozenset({"torch", "transformers", "libcst", "accelerate", "peft", "bitsandbytes", "pynvml"})
_START_WAIT_S = 30.0


class ServerError(Exception):
    """A server could not be started, reached or stopped (one line for the user)."""


# --- the server process ----------------------------------------------------------------------------------------


def preload() -> list[str]:
    """Import every module of the doctor and every module it imports anywhere (inside functions too), except the
    ones static mode never loads and the doctor's modules that need them; the names of the doctor's modules left
    out."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    own: dict[str, set[str]] = {}  # module -> what it imports at its top level
    elsewhere: set[str] = set()  # what any module imports inside a function or a condition
    for folder, _, files in os.walk(package):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            parts = os.path.relpath(path[:-3], os.path.dirname(package)).split(os.sep)
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if module == "precision_doctor.__main__":  # (it runs the command line)
                continue
            with open(path, "rb") as handle:
                tree = ast.parse(handle.read(), path)
            top = own.setdefault(module, set())
            is_package = parts[-1] == "__init__"
            statements = {id(node) for node in tree.body}
            for node in ast.walk(tree):
                for imported in _imported(node, module, is_package):
                    (top if id(node) in statements else elsewhere).add(imported)
    left_out = {m for m, imports in own.items() if any(_root(i) in NEVER_LOADED for i in imports)}
    changed = True
    while changed:  # and the modules that import those at their top level
        grown = {m for m, imports in own.items() if imports & left_out}
        changed = not grown <= left_out
        left_out |= grown
    for module in sorted(own.keys() - left_out) + sorted(elsewhere - own.keys()):
        prefixes = {".".join(module.split(".")[:n]) for n in range(1, module.count(".") + 2)}
        if _root(module) in NEVER_LOADED or prefixes & left_out:  # (`x.y.name` loads x.y first)
            continue
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - an optional library that is not installed: loaded on demand, if ever
            continue
    from ..model.util import compile_record_inits

    compile_record_inits()
    loaded = sorted({_root(m) for m in sys.modules if _root(m) in NEVER_LOADED})
    if loaded:
        raise ServerError(f"loading the doctor imported {', '.join(loaded)}, which static checks never import")
    return sorted(left_out)


def _root(module: str) -> str:
    return module.split(".")[0]


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    if not base:
        return []
    # `from . import check`: the names may be modules; importing a name that is not one fails and is skipped
    return [base] + [f"{base}.{alias.name}" for alias in node.names if node.module is None or node.level]


def package_files() -> dict[str, tuple[int, int]]:
    """Each file the content cache's fingerprint of the doctor covers and each folder holding them (a file added or
    removed changes the folder's), with (modification time, size)."""
    return _stats(doctor_files(with_folders=True))


def loaded_files(before: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """`before` (the doctor's files, taken before it was loaded: one changed while loading is then found changed)
    and each loaded module's file: a request finds the server stale when one differs. They are what the content
    cache's fingerprint of the doctor covers, so the fingerprint taken here stands for every process forked while
    none has changed."""
    modules = [getattr(module, "__file__", None) for module in list(sys.modules.values())]
    return {**_stats([p for p in modules if isinstance(p, str)]), **before}


def _stats(paths: list[str]) -> dict[str, tuple[int, int]]:
    files = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        files[path] = (st.st_mtime_ns, st.st_size)
    return files


def changed_file(files: dict[str, tuple[int, int]]) -> str | None:
    for path, seen in files.items():
        try:
            st = os.stat(path)
        except OSError:
            return path
        if (st.st_mtime_ns, st.st_size) != seen:
            return path
    return None


def serve(run: Callable[[], int], idle_minutes: float = DEFAULT_IDLE_MINUTES) -> int:
    """Serve requests until stopped, `idle_minutes` without one, or the doctor's files change; the exit code. Each
    request is `run()` (the command line, reading sys.argv) in a process forked for it."""
    ident = identity()
    path = socket_path(ident)
    folder = os.path.dirname(path)
    _make_private(folder)
    lock = open(path[: -len(".sock")] + ".lock", "a")  # noqa: SIM115 - held for the server's whole life
    deadline = time.monotonic() + 5.0  # (a server stepping aside releases it as it exits)
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() > deadline:
                print("precision-doctor server: another server for this interpreter is running", file=sys.stderr)
                return 1
            time.sleep(0.05)
    before = package_files()
    preload()
    files = loaded_files(before)
    doctor_fingerprint()  # (kept for every forked process: `files` unchanged means it still holds)
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise ServerError(f"{path} is there and is no socket: remove it")
        os.unlink(path)  # (a server that died left it: the lock says none runs)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    idle_s = idle_minutes * 60.0
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked workers are reaped by the kernel
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    started, served = time.time(), 0
    last_check = time.monotonic()  # (a `status` or `stop` is no check: it keeps no idle server alive)
    print(f"precision-doctor server {os.getpid()} listening on {path}", flush=True)
    try:
        while True:
            listener.settimeout(max(last_check + idle_s - time.monotonic(), 0.001))
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if time.monotonic() < last_check + idle_s:
                    continue
                print(f"precision-doctor server: no check for {idle_minutes:g} minutes, stopping", flush=True)
                return 0
            with conn:
                verdict = _handle(conn, (listener, lock), run, ident, files, (started, served, idle_minutes, path))
            if verdict == "served":
                served += 1
                last_check = time.monotonic()
            elif verdict == "stop":
                return 0
    finally:
        listener.close()
        if os.path.lexists(path):  # (ours: the lock keeps a second server from binding until this one is gone)
            os.unlink(path)


def _handle(conn: socket.socket, own: tuple, run: Callable[[], int], ident: tuple, files: dict, info: tuple) -> str:
    """One connection: a status, a stop, or a check run in a forked process. `own` holds what a forked process must
    close (the listening socket, the lock)."""
    conn.settimeout(5.0)
    try:
        if not _same_user(conn):
            return "refused"
        try:
            request = receive_message(conn)
        except (ValueError, EOFError, TypeError):
            request = None
        if not (isinstance(request, tuple) and request and isinstance(request[0], str)):
            return "refused"
        kind = request[0]
        stale = changed_file(files)
        if stale is not None:  # (a status then says none runs, and the next start starts a fresh one)
            send_message(conn, ("refused", f"{stale} changed since the server started"))
            print(f"precision-doctor server: {stale} changed, stopping", flush=True)
            return "stop"
        if kind == "status":
            started, served, idle_minutes, path = info
            send_message(conn, ("status", os.getpid(), started, served, idle_minutes, path, ident[4]))
            return "status"
        if kind == "stop":
            send_message(conn, ("stopping", os.getpid()))
            return "stop"
        if kind != "run" or len(request) != 11 or request[1] != ident:
            send_message(conn, ("refused", "not this interpreter's or this doctor's request"))
            return "refused"
        # no signal between the fork and the forked process's own handlers: the server's would run in it
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            if os.fork() == 0:
                _run_worker(conn, own, run, request, mask)  # never returns
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return "served"
    except OSError:
        return "refused"


def _same_user(conn: socket.socket) -> bool:
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:  # (not Linux: the folder's permissions keep others out)
        return True
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    return uid == os.getuid()


_SIGNALS = {getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGCHLD") if hasattr(signal, n)}


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _run_worker(conn: socket.socket, own: tuple, run: Callable[[], int], request: tuple, mask: set) -> None:
    """In the forked process: become the requesting process, run its command line, send its exit code. Whatever
    happens, it ends here (os._exit): nothing unwinds into the server's loop."""
    code = EXIT_INTERNAL
    try:
        _, _, executable, orig_argv, program, argv, cwd, umask, environ, ignored, streams = request
        for name in ("SIGCHLD", "SIGTERM", "SIGHUP", "SIGQUIT"):
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for signum in ignored:  # as the requesting process ignores them (nohup, a background job)
            signal.signal(signum, signal.SIG_IGN)
        for closing in own:
            closing.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        try:
            send_message(conn, ("ready", os.getpid()))
            first, fds, _, _ = socket.recv_fds(conn, 64, 3)
            said = receive_message(conn, first) if first else None
        except BaseException:  # noqa: BLE001
            said, fds = None, []
        if said != "go" or len(fds) != 3:
            os._exit(0)  # the client gave up waiting: it runs the command itself, and nothing ran here
        conn.settimeout(None)
        _die_with_client(conn)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(cwd)
        os.umask(umask)
        os.environ.clear()
        os.environ.update(environ)
        sys.executable, sys.argv = executable, [program, *argv]
        if hasattr(sys, "orig_argv"):
            sys.orig_argv = orig_argv
        sys.stdin, sys.stdout, sys.stderr = (_text_stream(fd, how) for fd, how in enumerate(streams))
        for name in ("stdin", "stdout", "stderr"):
            setattr(sys, f"__{name}__", getattr(sys, name))
        try:
            code = run()
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except KeyboardInterrupt:  # before the command line's own handler took over
        code = 130
    except BaseException:  # noqa: BLE001 - as Python ends a program on an exception it does not catch
        code = 1
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        try:
            atexit._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
        except BaseException:  # noqa: BLE001 - a reader that went away: the exit code still goes back
            pass
        try:
            send_message(conn, int(code))
        except BaseException:  # noqa: BLE001
            pass
        os._exit(int(code) & 0xFF)


def _die_with_client(conn: socket.socket) -> None:
    """End this process when the client's end of the socket closes (killed, SIGKILL included), as a check in the
    client's own process would have ended: the client sends nothing more, so the socket turns readable only then,
    and the kernel's SIGIO, left at its default, terminates. Where the OS has no such signal the check runs on."""
    if not hasattr(signal, "SIGIO") or not hasattr(os, "O_ASYNC"):
        return
    try:
        signal.signal(signal.SIGIO, signal.SIG_DFL)
        fcntl.fcntl(conn.fileno(), fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(conn.fileno(), fcntl.F_SETFL, fcntl.fcntl(conn.fileno(), fcntl.F_GETFL) | os.O_ASYNC)
    except OSError:
        pass


def _text_stream(fd: int, how: tuple | None):
    """A standard stream on `fd` built as the requesting process's was (None where it had none): its encoding and
    errors, its buffering (line-buffered on a terminal and for stderr; written through under -u)."""
    if how is None:
        return None
    encoding, errors, line_buffering, write_through = how
    raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
    buffered = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        buffered, encoding=encoding, errors=errors, line_buffering=line_buffering, write_through=write_through
    )


def _make_private(folder: str) -> None:
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    if not private_folder(folder):
        raise ServerError(
            f"{folder} is not a private folder of this user (a link, another owner, or open to others): "
            f"remove it, or set XDG_RUNTIME_DIR to a folder of your own"
        )


# --- starting, asking and stopping it ---------------------------------------------------------------------------


def ask(kind: str) -> tuple | None:
    """The server's answer to `status` or `stop`; None when none runs for this interpreter (or the one there just
    stepped aside: its files changed)."""
    path = socket_path(identity())
    if not private_folder(os.path.dirname(path)) or not os.path.exists(path):
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(ANSWER_WAIT_S)
        try:
            sock.connect(path)
        except OSError:
            return None  # (a socket a dead server left)
        try:
            send_message(sock, (kind,))
            answer = receive_message(sock)
        except TimeoutError:
            raise ServerError(f"the server at {path} does not answer (stopped?): end it, then start again") from None
        except (OSError, ValueError, EOFError, TypeError):
            return None
    if isinstance(answer, tuple) and answer and answer[0] in ("status", "stopping"):
        return answer
    if isinstance(answer, tuple) and answer and answer[0] == "refused":
        time.sleep(0.2)  # (it steps aside: give it the moment it takes to go)
    return None


def start(idle_minutes: float, body: str) -> tuple:
    """Start a server for this interpreter in the background (or find the one running); its status. `body` is the
    server process's function, `module:function`, called with `idle_minutes`."""
    running = ask("status")
    if running is not None:
        return running
    process, log = launch(idle_minutes, body)
    deadline = time.monotonic() + _START_WAIT_S
    while time.monotonic() < deadline:
        status = ask("status")
        if status is not None:
            return status
        if process.poll() is not None:
            break
        time.sleep(0.05)
    if process.poll() is None:
        process.terminate()  # (one that never answered here: not left behind)
    try:
        with open(log) as out:  # noqa: PTH123
            said = out.read().strip().splitlines()
    except OSError:
        said = []
    raise ServerError(f"the server did not start{': ' + said[-1] if said else ''} (its log: {log})")


def launch(idle_minutes: float, body: str):
    """Start the server process and return at once: (the process, its log's path). It shares nothing with this one
    (a session of its own, no inherited descriptor: a caller reading this process's output to its end never
    waits for it), and is this interpreter as started here (its flags, -X options and import path: the same
    identity); a second one started meanwhile finds the lock taken and exits."""
    path = socket_path(identity())
    folder = os.path.dirname(path)
    _make_private(folder)
    module, function = body.split(":")
    code = (
        "import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
        f"from {module} import {function}; sys.exit({function}(float(sys.argv[2])))"
    )
    import json
    import subprocess

    flags = [a for a in subprocess._args_from_interpreter_flags() if a != "-X"]  # type: ignore[attr-defined]
    flags = [a for a in flags if not any(a == k or a.startswith(f"{k}=") for k in sys._xoptions)]
    for key, value in sys._xoptions.items():
        flags += ["-X", key if value is True else f"{key}={value}"]
    log = path[: -len(".sock")] + ".log"
    try:
        with open(log, "w") as out:  # noqa: PTH123
            process = subprocess.Popen(  # noqa: S603 - this interpreter, running the doctor's own module
                [sys.executable, *flags, "-c", code, json.dumps(sys.path), repr(idle_minutes)],
                cwd=folder,  # (`-c` puts its folder first on the path: the code above puts back this one's)
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
    except OSError as exc:
        raise ServerError(f"the server could not be started: {exc}") from None
    return process, log
