"""This host: the processes behind GPU contexts, the rendezvous ports, the launch environment and the
accelerate config file. Everything the OS refuses to tell is recorded as not known, never guessed."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from ..knowledge.launchers import LAUNCH_VARIABLES
from ..model.facts import BusyPort, GpuProcess, HostFacts
from ..model.redact import ACCELERATE_CONFIG_KEYS, describe_command, keep_read_keys, redact_text
from ..model.util import MAX_PORT, record, whole_number
from ..system.sources import Unreadable, is_regular_file, read_text_bounded

PORTS_TO_CHECK = tuple(range(29500, 29511))
_STATUS = {
    "zombie": "zombie",
    "stopped": "stopped",
    "tracing-stop": "stopped",
    "running": "running",
    "sleeping": "sleeping",
    "disk-sleep": "sleeping",
    "idle": "sleeping",
    "dead": "gone",
}


def launch_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: redact_text(environ[k])[:200] for k in sorted(LAUNCH_VARIABLES) if k in environ}


def describe_processes(pids: Iterable[int], psutil: Any = None, me: str | None = None) -> dict[int, GpuProcess]:
    """What the OS says about each pid: status, owner, executable and launcher, age, whether its parent is alive."""
    if psutil is None:
        import psutil as psutil_module

        psutil = psutil_module
    me = me or _current_user()
    out: dict[int, GpuProcess] = {}
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                status = _STATUS.get(proc.status(), proc.status())
                user = _safe(proc.username)
                command = describe_command(_safe(proc.cmdline, []) or [], _safe(proc.name) or "")
                started = _safe(proc.create_time, 0.0)
                ppid = _safe(proc.ppid)
            parent_alive = None
            if ppid is not None:
                parent_alive = ppid > 1 and psutil.pid_exists(ppid)
            out[pid] = GpuProcess(
                pid=pid,
                status=status,
                user=user or "",
                mine=(user == me) if user else None,
                command=command or "",
                started=started or 0.0,
                parent_alive=parent_alive,
            )
        except psutil.NoSuchProcess:
            out[pid] = GpuProcess(pid=pid, status="gone")
        except psutil.AccessDenied:
            out[pid] = GpuProcess(pid=pid, status="unknown")
        except Exception:  # e.g. a pid from another container's namespace
            out[pid] = GpuProcess(pid=pid, status="unknown")
    return out


def _check_ports(ports: Iterable[int], psutil: Any = None) -> tuple[tuple[int, ...], tuple[BusyPort, ...]]:
    """Bind-test each port on all interfaces (where the rendezvous store listens); name holders if allowed."""
    checked, busy = [], []
    for port in sorted(set(ports)):
        state = _bind_test(port)
        if state is None:
            continue
        checked.append(port)
        if not state:
            busy.append(port)
    holders = _port_holders(busy, psutil) if busy else {}
    return tuple(checked), tuple(holders.get(p, BusyPort(p)) for p in busy)


def _bind_test(port: int) -> bool | None:
    """True free, False in use, None could not tell."""
    import socket  # (here: a check of a named target never probes this host's ports)

    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            # like the rendezvous store: a port left in TIME_WAIT is reusable, a listener is not
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
            return True
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            if exc.errno in (errno.EACCES, errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                continue
            return None
        finally:
            s.close()
    return None


def _port_holders(ports: list[int], psutil: Any = None) -> dict[int, BusyPort]:
    if psutil is None:
        import psutil as psutil_module

        psutil = psutil_module
    found: dict[int, BusyPort] = {}
    try:
        conns = psutil.net_connections(kind="inet")
    except Exception:  # AccessDenied on some systems: the holder stays unnamed
        return found
    for c in conns:
        if not c.laddr or c.laddr.port not in ports or c.status not in ("LISTEN", "NONE") or c.pid is None:
            continue
        try:
            proc = psutil.Process(c.pid)
            found[c.laddr.port] = BusyPort(
                c.laddr.port,
                c.pid,
                describe_command(_safe(proc.cmdline, []) or [], _safe(proc.name) or ""),
                _safe(proc.username) or "",
            )
        except Exception:
            found[c.laddr.port] = BusyPort(c.laddr.port, c.pid)
    return found


# --- accelerate config -------------------------------------------------------------------------


def accelerate_config_path(environ: Mapping[str, str], explicit: str = "") -> Path:
    """Where `accelerate launch` reads its default config (accelerate's own rule)."""
    if explicit:
        return Path(explicit).expanduser()
    if environ.get("ACCELERATE_CONFIG_FILE"):
        return Path(environ["ACCELERATE_CONFIG_FILE"]).expanduser()
    hf_home = environ.get("HF_HOME") or os.path.join(environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(hf_home).expanduser() / "accelerate" / "default_config.yaml"


@record
class AccelerateConfigFile:
    """The settings of an accelerate config the rules read (nested as in the file), and the line each is written on,
    keyed by its dotted path ("deepspeed_config.zero_stage")."""

    settings: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)


# the nested sections the rules read; a file without them is read without PyYAML (most are flat)
_SECTIONS = ("deepspeed_config", "fsdp_config")
_EMPTY_SECTION = re.compile(rf"^(?:{'|'.join(_SECTIONS)}):\s*\{{\s*\}}\s*(?:#.*)?$")


def read_accelerate_config(path: Path, shown: str = "") -> AccelerateConfigFile:
    """An accelerate YAML (or JSON) config: the keys the rules read, nothing else. Unreadable or malformed: empty."""
    try:
        text = read_text_bounded(path)
    except Unreadable:
        return AccelerateConfigFile()
    if path.suffix == ".json" or _has_sections(text):
        from .config_files import ConfigError, parse_config

        try:
            doc = parse_config(text, shown or str(path), json_only=path.suffix == ".json")
        except ConfigError:
            return AccelerateConfigFile()
        kept = keep_read_keys(doc.data, ACCELERATE_CONFIG_KEYS)
        return AccelerateConfigFile(kept, {".".join(k): line for k, line in doc.lines.items() if _kept(kept, k)})
    out: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw or raw[0] in " \t#-" or ":" not in raw:
            continue
        key, _, value = raw.partition(":")
        value = value.split(" #", 1)[0].strip().strip("'\"")
        if value:
            out[key.strip()] = _scalar(value)
            lines[key.strip()] = number
    kept = keep_read_keys(out, ACCELERATE_CONFIG_KEYS)
    return AccelerateConfigFile(kept, {k: n for k, n in lines.items() if k in kept})


def _has_sections(text: str) -> bool:
    """A deepspeed_config / fsdp_config section with settings in it (`accelerate config` writes `{}` for none)."""
    return any(line.startswith(_SECTIONS) and not _EMPTY_SECTION.match(line.rstrip()) for line in text.splitlines())


def _kept(kept: dict, keys: tuple) -> bool:
    node: Any = kept
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            return False
        node = node[k]
    return True


def _scalar(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "~"):
        return None
    try:
        return int(text)
    except ValueError:
        return text


def probe_host(
    environ: Mapping[str, str], ports: Iterable[int] = (), config_file: str = "", psutil: Any = None, check_ports=None
) -> HostFacts:
    path = accelerate_config_path(environ, config_file)
    config_file_read = read_accelerate_config(path) if is_regular_file(path) else AccelerateConfigFile()
    config = config_file_read.settings
    wanted = set(PORTS_TO_CHECK) | set(ports)
    for source in (environ.get("MASTER_PORT", ""), str(config.get("main_process_port", ""))):
        port = whole_number(source, 1, MAX_PORT)  # another value is no port to test: unknown
        if port is not None:
            wanted.add(port)
    checked, busy = (check_ports or _check_ports)(wanted, psutil)
    import socket

    return HostFacts(
        hostname=socket.gethostname(),
        user=_current_user(),
        ports_checked=checked,
        busy_ports=busy,
        env=launch_env(environ),
        accelerate_config=config,
        accelerate_config_path=str(path) if config else "",
        accelerate_config_lines=config_file_read.lines,
        interfaces=network_interfaces(psutil),
        node_name=environ.get("SLURMD_NODENAME", ""),
    )


def network_interfaces(psutil: Any = None) -> dict[str, tuple[str, ...]]:
    """Each network interface's IPv4/IPv6 addresses (NCCL_SOCKET_IFNAME names interfaces; MASTER_ADDR may be an
    address); {} when the OS would not say."""
    if psutil is None:
        import psutil as psutil_module

        psutil = psutil_module
    try:
        found = psutil.net_if_addrs()
    except Exception:
        return {}
    import socket

    families = (socket.AF_INET, socket.AF_INET6)
    return {
        name: tuple(a.address.split("%")[0] for a in addrs if a.family in families)
        for name, addrs in sorted(found.items())
    }


def _current_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return ""


def _safe(fn, default=None):
    try:
        return fn()
    except Exception:
        return default
