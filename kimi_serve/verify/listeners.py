"""Which sockets does the server listen on, TCP and UDP? Read from /proc, no psutil.

The server is the process holding the API port's listening socket, all its descendants (SGLang: the launcher with
uvicorn, its scheduler and detokenizer processes), and every process that left the tree but not the server: one in
the same cgroup (a systemd unit's, read from ``/proc/PID/cgroup``; not the root cgroup, which is everyone's) or the
same session (``/proc/PID/stat``; a double fork keeps it). A descendant that detached (double fork, ``setsid``) is so
still seen. Its sockets come from ``/proc/PID/net/{tcp,tcp6}`` (listening, state ``0A``) and ``{udp,udp6}`` (bound and
unconnected, state ``07``: a UDP socket takes datagrams from anyone) matched by inode to the ``socket:[INODE]`` links
in ``/proc/PID/fd``. Anything bound beyond loopback other than the API port (and ports the caller expects, e.g. a
separate metrics port) is a stray listener: ZMQ, torch's distributed-init store (TCPStore binds every interface), NCCL
bootstrap, a debugger. Reading another user's ``/proc/PID/fd`` needs that user or root; otherwise the check is
skipped with the reason.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from kimi_serve.core.findings import PASS, SKIP, WARN, Finding
from kimi_serve.core.net import host_port, ip_of, is_unspecified
from kimi_serve.verify.report import verdict

LISTEN = "0A"
UDP_UNCONNECTED = "07"
PROC = Path("/proc")


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    pid: int
    command: str
    protocol: str = "tcp"
    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("loopback",)

    @property
    def endpoint(self) -> str:
        where = host_port(self.address, self.port)
        return where if self.protocol == "tcp" else f"{where} ({self.protocol.upper()})"

    @property
    def loopback(self) -> bool:
        ip = ipaddress.ip_address(self.address)
        mapped = getattr(ip, "ipv4_mapped", None)
        return bool((mapped or ip).is_loopback)


def _address(hex_addr: str) -> str:
    """/proc/net/tcp{,6} hex (each 32-bit word in host = little-endian order) to text."""
    raw = bytes.fromhex(hex_addr)
    swapped = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(swapped))


def parse_proc_net(text: str, state: str = LISTEN) -> list[tuple[str, int, int]]:
    """``(address, port, inode)`` of each socket in ``state`` in a /proc/net/{tcp,tcp6,udp,udp6} table (for UDP:
    state 07, unconnected, with a bound port)."""
    found = []
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10 or cols[3] != state or cols[1].endswith(":0000"):
            continue
        addr, _, port = cols[1].partition(":")
        found.append((_address(addr), int(port, 16), int(cols[9])))
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""


def listening_table(
    pid: int | str = "self", proc: Path = PROC, *, udp: bool = False
) -> dict[int, tuple[str, int, str]]:
    """inode -> (address, port, protocol) for every listening TCP socket (and with ``udp``, every bound, unconnected
    UDP socket) in ``pid``'s network namespace."""
    table: dict[int, tuple[str, int, str]] = {}
    tables = [("tcp", LISTEN), ("tcp6", LISTEN)] + (
        [("udp", UDP_UNCONNECTED), ("udp6", UDP_UNCONNECTED)] if udp else []
    )
    for name, state in tables:
        for addr, port, inode in parse_proc_net(_read(proc / str(pid) / "net" / name), state):
            table[inode] = (addr, port, name.rstrip("6"))
    return table


def socket_inodes(pid: int, proc: Path = PROC) -> set[int]:
    """Inodes of the sockets ``pid`` holds; raises PermissionError when its fds cannot be read."""
    inodes = set()
    try:
        names = os.listdir(proc / str(pid) / "fd")
    except FileNotFoundError:
        return set()
    for fd in names:
        try:
            link = os.readlink(proc / str(pid) / "fd" / fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def _pids(proc: Path) -> list[int]:
    return [int(p) for p in os.listdir(proc) if p.isdigit()]


def _stat_field(pid: int, proc: Path, index: int) -> int | None:
    """A numeric field of /proc/PID/stat after the command (0: state, 1: ppid, 2: pgrp, 3: session)."""
    stat = _read(proc / str(pid) / "stat")
    try:
        return int(stat.rsplit(")", 1)[1].split()[index])
    except (IndexError, ValueError):
        return None


def _cgroup(pid: int, proc: Path) -> str | None:
    """The unified (v2) cgroup of ``pid``, else the v1 systemd one, when it is a systemd service's own (``*.service``);
    None otherwise: the root cgroup is every process's, and a login session's scope (``session-N.scope``, where a
    server `up` started sits) holds the user's other programs too."""
    lines = _read(proc / str(pid) / "cgroup").splitlines()
    path = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    if path in (None, "/"):
        path = next((ln.split(":", 2)[2] for ln in lines if ":name=systemd:" in ln), None)
    return path if path and path.rstrip("/").endswith(".service") else None


def _pid_namespace(pid: int, proc: Path) -> str | None:
    """``pid``'s PID namespace (``pid:[INODE]``), None when unreadable. Containers booted without a host systemd
    share one cgroup path (``/payload/...``), so a cgroup alone does not tell two containers' processes apart; a
    server's members never leave its PID namespace."""
    try:
        return os.readlink(proc / str(pid) / "ns" / "pid")
    except OSError:
        return None


def _children(proc: Path) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid in _pids(proc):
        parent = _stat_field(pid, proc, 1)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    return children


def _descendants(roots: Iterable[int], children: dict[int, list[int]]) -> set[int]:
    tree, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, []))
    return tree


def process_tree(root: int, proc: Path = PROC) -> list[int]:
    """``root`` and every descendant."""
    return sorted(_descendants([root], _children(proc)))


def server_processes(root: int, proc: Path = PROC) -> list[int]:
    """``root``'s tree, plus what left it but is still the server's (and their descendants): every process in
    ``root``'s cgroup (unless that is the root cgroup, everyone's) and every process in a session a member of the tree
    leads (systemd makes a service's main process a session leader; a double fork keeps the session, ``setsid``
    leaves it, the cgroup stays). This process (verify) is not counted unless it is ``root``."""
    children = _children(proc)
    tree = _descendants([root], children)
    group, space = _cgroup(root, proc), _pid_namespace(root, proc)
    joined = []
    for pid in _pids(proc):
        if pid in tree or (space is not None and _pid_namespace(pid, proc) not in (None, space)):
            continue  # another container's process, whatever its cgroup's path reads (see _pid_namespace)
        if (group is not None and _cgroup(pid, proc) == group) or _stat_field(pid, proc, 3) in tree:
            joined.append(pid)
    members = tree | _descendants(joined, children)
    if root != os.getpid():
        members.discard(os.getpid())
    return sorted(members)


def owner_of_port(port: int, proc: Path = PROC) -> int | None:
    """The topmost process holding a socket listening on ``port`` (a forked child may share it), or None;
    raises PermissionError when a candidate's fds are unreadable and no owner was found."""
    return _holder({inode for inode, (_, p, _) in listening_table("self", proc).items() if p == port}, port, proc)


@dataclass(frozen=True)
class Holder:
    """A process listening on a port that is not the expected server's: ``pid`` None when it cannot be told (its open
    files are another user's, or it closed the socket meanwhile)."""

    pid: int | None
    command: str


def _reaches(address: str, host: str) -> bool:
    """A socket listening on ``address`` takes a connection to ``host`` (a name or a wildcard: any address may)."""
    want = ip_of(host)
    if want is None or is_unspecified(host) or is_unspecified(address):
        return True
    ip = ip_of(address)
    return ip is None or ip == want


def _sockets(pids: Iterable[int], proc: Path) -> Iterator[tuple[int, set[int]]]:
    """(pid, its socket inodes) for each of ``pids`` whose open files can be read."""
    for pid in pids:
        try:
            yield pid, socket_inodes(pid, proc)
        except PermissionError:
            continue


def _held(pids: Iterable[int], proc: Path) -> set[int]:
    return set[int]().union(*(inodes for _, inodes in _sockets(pids, proc)))


def foreign_listener(port: int, root: int, host: str = "", proc: Path = PROC) -> Holder | None:
    """Who else listens on ``port`` where a client connecting to ``host`` lands: None when every such listening
    socket (in ``root``'s network namespace) is held by ``root``'s server (:func:`server_processes`), or when none is
    seen (``root`` gone, no /proc: nothing to tell); else the topmost holder of one that is not. A server that has not
    bound its port yet while another process answers there is so told apart from one that serves it."""
    wanted = {i for i, (addr, p, _) in listening_table(root, proc).items() if p == port and _reaches(addr, host)}
    if wanted:
        wanted -= _held(process_tree(root, proc), proc)
    if wanted:  # a member that left the tree (double fork, setsid) but not the server
        wanted -= _held(server_processes(root, proc), proc)
    if not wanted:
        return None
    try:
        pid = _holder(wanted, port, proc)
    except PermissionError:
        pid = None
    return Holder(pid, _read(proc / str(pid) / "comm").strip() if pid is not None else "")


def _holder(wanted: set[int], port: int, proc: Path) -> int | None:
    """The topmost process holding one of the sockets ``wanted`` (see :func:`owner_of_port`)."""
    if not wanted:
        return None
    owners, denied = set(), False
    for pid in _pids(proc):
        try:
            if socket_inodes(pid, proc) & wanted:
                owners.add(pid)
        except PermissionError:
            denied = True
    if not owners:
        if denied:
            raise PermissionError(f"cannot read the open files of the process serving port {port}")
        return None
    return next((pid for pid in sorted(owners) if _stat_field(pid, proc, 1) not in owners), min(owners))


def tree_listeners(root: int, proc: Path = PROC) -> list[Listener]:
    """Every listening TCP and bound UDP socket held by the server of ``root`` (:func:`server_processes`)."""
    table = listening_table(root, proc, udp=True)
    found = set()
    for pid, inodes in _sockets(server_processes(root, proc), proc):
        command = _read(proc / str(pid) / "comm").strip()
        found |= {Listener(table[i][0], table[i][1], pid, command, table[i][2]) for i in inodes if i in table}
    return sorted(found, key=lambda lst: (lst.port, lst.address, lst.pid))


def check_listeners(port: int, expected: Iterable[int] = (), proc: Path = PROC) -> tuple[list[Listener], list[Finding]]:
    """The listeners of the tree serving ``port``, and a finding per stray one (non-loopback, not ``port``, not in
    ``expected``); a single PASS or SKIP finding when there is none or the tree cannot be read."""
    try:
        owner = owner_of_port(port, proc)
    except PermissionError as exc:
        why, fix = f"{exc}", "run verify as the service user or root"
        return [], [verdict("listeners", SKIP, f"{why}; listeners not checked", fix)]
    if owner is None:
        why = f"no local process listens on port {port} (a remote server, or another network namespace)"
        return [], [verdict("listeners", SKIP, f"{why}; listeners not checked")]
    listeners = tree_listeners(owner, proc)
    allowed = {port, *expected}
    stray = [lst for lst in listeners if not lst.loopback and lst.port not in allowed]
    if not stray:
        open_ports = sorted({x.port for x in listeners if not x.loopback})
        where = (
            f"beyond loopback only on port{'s' if len(open_ports) > 1 else ''} {', '.join(map(str, open_ports))}"
            if open_ports
            else "on loopback only"
        )
        n = len(server_processes(owner, proc))
        who = "the server's one process listens" if n == 1 else f"the server's {n} processes listen"
        return listeners, [verdict("listeners", PASS, f"{who} {where}")]
    return listeners, [
        verdict(
            "stray_listener",
            WARN,
            f"pid {lst.pid} ({lst.command}) of the server listens on {lst.endpoint}, reachable from outside this host",
            "firewall the port (only the API port should be reachable; multi-node ports only "
            "between the nodes), or bind that component to 127.0.0.1",
        )
        for lst in stray
    ]
