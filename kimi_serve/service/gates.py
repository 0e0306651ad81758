"""What a deployment member's start is gated on when it is not the contract itself (docs/scale-out.md, "As
services").

- The router: its ``/health`` answers 200 with no worker registered at all, so the router unit first waits for a
  healthy worker (:func:`wait_router`, reading the router's workers through :mod:`kimi_serve.router.client`), then
  checks the contract through the router.
- A node of rank >= 1 serves no API: its ``/health`` is a dummy that always answers 200. SGLang 0.5.23
  (``srt/entrypoints/engine.py``) opens that dummy only after ``wait_for_ready()``: after this node's schedulers have
  finished their init, which includes torch.distributed's rendezvous with rank 0 and the NCCL groups. The rendezvous
  goes through rank 0's TCP store at ``--dist-init-addr`` (nodes.leader_host:leader_port), and every scheduler keeps
  that connection for its whole life. So "joined" is both: an ESTABLISHED TCP connection from the unit's process tree
  to the leader's address, AND the node's port answering (the schedulers are ready). Either alone is not enough: the
  connection exists from the first second of the rendezvous, and a port answering says nothing about whom it joined.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from kimi_serve.router.client import healthy_count, router_workers
from kimi_serve.verify.listeners import PROC, process_tree, socket_inodes

POLL_S = 1.0


def wait_router(
    endpoint: str,
    api_key: str | None,
    *,
    minimum: int,
    wait: float,
    exclude: str | None = None,
    healthy: str | None = None,
) -> tuple[bool, str]:
    """Poll the router until it reports ``minimum`` healthy workers (not counting ``exclude``) and, with ``healthy``,
    that worker among them; (reached, one-line state) once reached or after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        workers = router_workers(endpoint, api_key)  # deep JSON included: the client's bounded parser says why
        if isinstance(workers, list):
            n = healthy_count(workers, exclude)
            named = healthy is None or any(w.url == healthy and w.healthy for w in workers)
            state = f"{healthy_count(workers)}/{len(workers)} workers healthy"
            if n >= minimum and named:
                return True, state
        else:
            state = workers
        if time.monotonic() >= deadline:
            return False, state
        time.sleep(POLL_S)


# ---------------------------------------------------------------------------------------------- rank >= 1


def leader_addresses(host: str, port: int) -> set[tuple[str, int]]:
    """Every address ``host`` resolves to (IPv4 and IPv6, IPv4-mapped forms too), with ``port``."""
    out: set[tuple[str, int]] = set()
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return out
    for info in infos:
        addr = str(info[4][0])
        out.add((addr, port))
        if "." in addr and ":" not in addr:
            out.add((f"::ffff:{addr}", port))
    return out


def _decode(hex_addr: str) -> tuple[str, int]:
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1]), int(port, 16)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words), int(port, 16)


def established(pid: int, proc: Path = PROC) -> dict[int, tuple[str, int]]:
    """inode -> remote (address, port) of every ESTABLISHED TCP socket in ``pid``'s network namespace."""
    table: dict[int, tuple[str, int]] = {}
    for name in ("tcp", "tcp6"):
        try:
            rows = (proc / str(pid) / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "01":
                table[int(f[9])] = _decode(f[2])
    return table


def connected_to(pid: int, leader: set[tuple[str, int]], proc: Path = PROC) -> bool:
    """Whether ``pid`` or a descendant holds an ESTABLISHED TCP connection to one of the ``leader`` addresses."""
    remotes = established(pid, proc)
    for member in process_tree(pid, proc):
        try:
            inodes = socket_inodes(member, proc)
        except PermissionError:
            continue
        if any(remotes.get(i) in leader for i in inodes):
            return True
    return False


def port_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except OSError:
        return False


def wait_joined(
    pid: int, leader_host: str, leader_port: int, host: str, port: int, wait: float, proc: Path = PROC
) -> tuple[bool, str]:
    """Poll until node ``pid`` is connected to rank 0's store AND its own port answers (its schedulers are ready);
    (joined, one line) once joined, when the process is gone, or after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    leader = leader_addresses(leader_host, leader_port)
    if not leader:
        return False, f"cannot resolve the leader host {leader_host!r} (nodes.leader_host)"
    linked = False
    while True:
        if not (proc / str(pid)).exists() and pid != os.getpid():
            return False, f"the server process {pid} exited before it joined rank 0"
        linked = linked or connected_to(pid, leader, proc)
        if linked and port_answers(host, port):
            return True, f"joined rank 0 at {leader_host}:{leader_port}; schedulers ready (port {port} answers)"
        if time.monotonic() >= deadline:
            if not linked:
                return False, (
                    f"no TCP connection to rank 0's store at {leader_host}:{leader_port} after {wait:g}s "
                    "(rank 0 not started, unreachable, or nodes.leader_host/leader_port wrong)"
                )
            return False, (
                f"connected to rank 0 at {leader_host}:{leader_port}, but its schedulers are not ready "
                f"after {wait:g}s (port {port} does not answer yet)"
            )
        time.sleep(POLL_S)
