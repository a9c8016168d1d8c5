"""The small process that owns a live run's whole process tree, so nothing the script starts outlives the doctor.

    python -m precision_doctor.system.supervisor WATCH_FD PASS_FD -- COMMAND [ARGS...]

It becomes a subreaper (every orphaned descendant, double-forked daemons included, is re-parented to it and
can be found), starts COMMAND in a process group of its own that dies with it (PR_SET_PDEATHSIG), and ends
every descendant when any of these happens:

- COMMAND exits (what it left running is ended too);
- SIGINT/SIGHUP arrive: passed on to COMMAND's group, then SIGTERM, a grace, SIGKILL;
- SIGTERM arrives (the doctor's --timeout, or the doctor itself being ended): SIGTERM, a grace, SIGKILL;
- WATCH_FD reaches end of file: the doctor is gone, even by SIGKILL (it holds the other end).

It exits with COMMAND's exit code (128 + N when a signal N ended it). Linux gives all of this; elsewhere the
descendants still linked to COMMAND are ended and orphans are not found.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

FORWARD_WAIT = 0.5  # after passing on the doctor's SIGINT/SIGHUP, before SIGTERM: a script may clean up
GRACE = 1.0  # after SIGTERM, before SIGKILL
KILL_WAIT = 0.4  # SIGKILL is not refused; this only bounds a process stuck in the kernel
POLL = 0.02
ORPHAN_WAIT = 3.0  # SIGKILL rounds for what escaped the supervisor, at most
QUIET_ROUNDS = 5  # listings in a row that find nothing before the rounds end

_LIBC = None
if sys.platform.startswith("linux"):
    try:
        _LIBC = ctypes.CDLL(None, use_errno=True)  # loaded before any fork: calling it in a child is then safe
    except OSError:
        _LIBC = None


def _prctl(option: int, value: int) -> bool:
    if _LIBC is None:
        return False
    try:
        return _LIBC.prctl(option, value, 0, 0, 0) == 0
    except AttributeError:
        return False


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send `sig` to this process when its parent dies; exit at once if it already has.
    Call it in the child, right after the fork (the parent is the thread that forked)."""
    _prctl(PR_SET_PDEATHSIG, int(sig))
    if os.getppid() != parent_pid:
        os._exit(1)


def become_subreaper(on: bool = True) -> bool:
    return _prctl(PR_SET_CHILD_SUBREAPER, int(on))


def descendants() -> frozenset[tuple[int, float]]:
    """This process's descendants now, as (pid, start time): the ones end_orphans spares."""
    return frozenset(_identity(p) for p in Tree(None).living())


def end_orphans(spared: frozenset[tuple[int, float]] = frozenset()) -> None:
    """End every descendant this process has but those `spared` (its own, from before): what a live run left when
    its supervisor was killed (a process that called setsid() and killed the supervisor is re-parented here, this
    process being a subreaper). A process that keeps forking and exiting changes its pid faster than one round ends
    it: SIGKILL rounds go on, to each process and its group, until none is left or ORPHAN_WAIT has passed."""
    tree = Tree(None, spared)
    tree.end()
    deadline = time.monotonic() + ORPHAN_WAIT
    quiet = 0
    while time.monotonic() < deadline and quiet < QUIET_ROUNDS:
        # a listing can fall between a fork and an exit and show none: it takes several in a row, and the groups
        # seen must be empty too
        if tree.living() or any(_group_alive(g) for g in tree.groups - {os.getpgrp(), 0, 1}):
            quiet = 0
            tree._signal(signal.SIGKILL, every=True)
        else:
            quiet += 1
        time.sleep(POLL)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except OSError:  # none left, or someone else's: not ours to wait for
        return False
    return True


def _identity(process) -> tuple[int, float]:
    try:
        return process.pid, process.create_time()
    except Exception:  # noqa: BLE001 - gone meanwhile (psutil's NoSuchProcess and kin)
        return process.pid, 0.0


class Tree:
    """This process's descendants: reaps them as they end, remembers the exit status of the command. Without a
    command (the doctor itself, after its supervisor is gone), only the descendants found are reaped, by pid:
    the doctor's other children are its subprocess module's to wait for."""

    def __init__(self, command_pid: int | None, spared: frozenset[tuple[int, float]] = frozenset()):
        import psutil

        self.command_pid = command_pid
        self.spared = spared
        self.groups: set[int] = set()  # process groups the descendants were seen in
        self.command_status: int | None = None
        self._me = psutil.Process()
        self._gone = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)
        self._zombie = psutil.STATUS_ZOMBIE

    def reap(self) -> None:
        if self.command_pid is None:
            for child in self._children(recursive=False):
                if _identity(child) in self.spared:
                    continue
                try:
                    os.waitpid(child.pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            return
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.command_pid:
                self.command_status = status

    def _children(self, recursive: bool) -> list:
        try:
            return self._me.children(recursive=recursive)
        except self._gone:
            return []

    def living(self) -> list:
        found = self._children(recursive=True)
        for p in found:  # before reaping: a process that forks on and exits is, for a moment, a zombie child here
            if not (self.spared and _identity(p) in self.spared):
                try:
                    self.groups.add(os.getpgid(p.pid))
                except OSError:
                    pass
        self.reap()
        alive = []
        for p in found:
            if self.spared and _identity(p) in self.spared:
                continue
            try:
                if p.status() != self._zombie:
                    alive.append(p)
            except self._gone:
                pass
        return alive

    def end(self, first: int | None = None) -> None:
        """End every descendant: `first` (a forwarded SIGINT/SIGHUP) to the command's group, then SIGTERM to all,
        then SIGKILL to all; each stage waits only while something is left."""
        stages = [(first, FORWARD_WAIT)] if first not in (None, signal.SIGTERM) else []
        stages += [(signal.SIGTERM, GRACE), (signal.SIGKILL, KILL_WAIT)]
        for sig, wait in stages:
            if not self.living():
                return
            self._signal(sig, every=sig in (signal.SIGTERM, signal.SIGKILL))
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                time.sleep(POLL)
                left = self.living()
                if not left:
                    return
                if sig == signal.SIGKILL:  # whatever forked while we were killing
                    self._signal(sig, every=True)

    def _signal(self, sig: int, every: bool) -> None:
        try:
            if self.command_pid is not None:
                os.killpg(self.command_pid, sig)  # the command leads its group, like a terminal's foreground job
        except OSError:
            pass
        if every:
            living = self.living()
            if sig == signal.SIGKILL:  # each group any descendant was seen in, whole and at once: a process that
                for group in self.groups - {os.getpgrp(), 0, 1}:  # forks on and exits keeps its group
                    try:
                        os.killpg(group, sig)
                    except OSError:
                        pass
            for p in living:
                try:
                    p.send_signal(sig)
                except self._gone:
                    pass


def main(argv: list[str]) -> int:
    watch_fd, pass_fd, separator, *command = argv
    if separator != "--" or not command:
        print(
            "usage: python -m precision_doctor.system.supervisor WATCH_FD PASS_FD -- COMMAND [ARGS...]", file=sys.stderr
        )
        return 2
    watch_fd, pass_fd = int(watch_fd), int(pass_fd)
    requested: list[int] = []

    def on_signal(signum, _frame):
        requested.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)  # a handler, not SIG_IGN: exec gives the command the default back
    become_subreaper()
    me = os.getpid()

    def in_child():  # between fork and exec: its own group, and it dies with this process
        os.setpgid(0, 0)
        die_with_parent(me)

    child = subprocess.Popen(command, pass_fds=(pass_fd,), preexec_fn=in_child)
    os.close(pass_fd)
    tree = Tree(child.pid)
    first: int | None = None
    while tree.command_status is None:
        if requested:
            first = requested[0]
            break
        ready, _, _ = select.select([watch_fd], [], [], 0.1)
        if ready and not os.read(watch_fd, 1):  # the doctor never writes: readable means it is gone
            first = signal.SIGTERM
            break
        tree.reap()
    tree.end(first)
    tree.reap()
    child.returncode = 0  # reaped here already: keep subprocess from waiting on it again
    if tree.command_status is None:
        return 128 + signal.SIGKILL
    code = os.waitstatus_to_exitcode(tree.command_status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
