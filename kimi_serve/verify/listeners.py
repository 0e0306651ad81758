"""Which TCP sockets does the server's process tree listen on? Read from /proc, no psutil.

The tree is the process holding the API port's listening socket and all its descendants (SGLang: the launcher with
uvicorn, its scheduler and detokenizer processes). Its listening sockets come from ``/proc/PID/net/tcp{,6}`` (state
``0A``) matched by inode to the ``socket:[INODE]`` links in ``/proc/PID/fd``. Anything bound beyond loopback other
than the API port (and ports the caller expects, e.g. a separate metrics port) is a stray listener: ZMQ, torch's
distributed-init store (TCPStore binds every interface), NCCL bootstrap, a debugger. Reading another user's
``/proc/PID/fd`` needs that user or root; otherwise the check is skipped with the reason.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.core.findings import PASS, SKIP, WARN, Finding

LISTEN = "0A"
PROC = Path("/proc")


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    pid: int
    command: str

    @property
    def endpoint(self) -> str:
        return f"[{self.address}]:{self.port}" if ":" in self.address else f"{self.address}:{self.port}"

    @property
    def loopback(self) -> bool:
        ip = ipaddress.ip_address(self.address)
        mapped = getattr(ip, "ipv4_mapped", None)
        return bool((mapped or ip).is_loopback)

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "port": self.port,
            "pid": self.pid,
            "command": self.command,
            "loopback": self.loopback,
        }


def _address(hex_addr: str) -> str:
    """/proc/net/tcp{,6} hex (each 32-bit word in host = little-endian order) to text."""
    raw = bytes.fromhex(hex_addr)
    swapped = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(swapped))


def parse_proc_net(text: str) -> list[tuple[str, int, int]]:
    """``(address, port, inode)`` of each listening socket in a /proc/net/tcp or tcp6 table."""
    found = []
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10 or cols[3] != LISTEN:
            continue
        addr, _, port = cols[1].partition(":")
        found.append((_address(addr), int(port, 16), int(cols[9])))
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""


def listening_table(pid: int | str = "self", proc: Path = PROC) -> dict[int, tuple[str, int]]:
    """inode -> (address, port) for every listening TCP socket in ``pid``'s network namespace."""
    table: dict[int, tuple[str, int]] = {}
    for name in ("tcp", "tcp6"):
        for addr, port, inode in parse_proc_net(_read(proc / str(pid) / "net" / name)):
            table[inode] = (addr, port)
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


def _ppid(pid: int, proc: Path) -> int | None:
    stat = _read(proc / str(pid) / "stat")
    try:
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def process_tree(root: int, proc: Path = PROC) -> list[int]:
    """``root`` and every descendant."""
    children: dict[int, list[int]] = {}
    for pid in _pids(proc):
        parent = _ppid(pid, proc)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return sorted(tree)


def owner_of_port(port: int, proc: Path = PROC) -> int | None:
    """The topmost process holding a socket listening on ``port`` (a forked child may share it), or None;
    raises PermissionError when a candidate's fds are unreadable and no owner was found."""
    wanted = {inode for inode, (_, p) in listening_table("self", proc).items() if p == port}
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
    return next((pid for pid in sorted(owners) if _ppid(pid, proc) not in owners), min(owners))


def tree_listeners(root: int, proc: Path = PROC) -> list[Listener]:
    """Every listening TCP socket held by ``root``'s process tree."""
    table = listening_table(root, proc)
    found = set()
    for pid in process_tree(root, proc):
        try:
            inodes = socket_inodes(pid, proc)
        except PermissionError:
            continue
        command = _read(proc / str(pid) / "comm").strip()
        found |= {Listener(*table[i], pid, command) for i in inodes if i in table}
    return sorted(found, key=lambda lst: (lst.port, lst.address, lst.pid))


def check_listeners(port: int, expected: Iterable[int] = (), proc: Path = PROC) -> tuple[list[Listener], list[Finding]]:
    """The listeners of the tree serving ``port``, and a finding per stray one (non-loopback, not ``port``, not in
    ``expected``); a single PASS or SKIP finding when there is none or the tree cannot be read."""
    try:
        owner = owner_of_port(port, proc)
    except PermissionError as exc:
        return [], [
            Finding(
                "verify", "listeners", SKIP, f"{exc}; listeners not checked", "run verify as the service user or root"
            )
        ]
    if owner is None:
        return [], [
            Finding(
                "verify",
                "listeners",
                SKIP,
                f"no local process listens on port {port} (a remote "
                "server, or another network namespace); listeners not checked",
            )
        ]
    listeners = tree_listeners(owner, proc)
    allowed = {port, *expected}
    stray = [lst for lst in listeners if not lst.loopback and lst.port not in allowed]
    if not stray:
        open_ports = sorted({x.port for x in listeners if not x.loopback})
        return listeners, [
            Finding(
                "verify",
                "listeners",
                PASS,
                f"the server's {len(process_tree(owner, proc))} "
                f"processes listen beyond loopback only on {open_ports or 'nothing'}",
            )
        ]
    return listeners, [
        Finding(
            "verify",
            "stray_listener",
            WARN,
            f"pid {lst.pid} ({lst.command}) of the server listens on {lst.endpoint}, reachable from outside this host",
            "firewall the port (only the API port should be reachable; multi-node ports only "
            "between the nodes), or bind that component to 127.0.0.1",
        )
        for lst in stray
    ]
