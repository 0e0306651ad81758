"""Stray listeners, read from /proc (verify/listeners.py): against real processes that listen on real sockets."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kimi_serve.core.findings import PASS, SKIP, WARN
from kimi_serve.verify.listeners import check_listeners, parse_proc_net, process_tree

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")

# A server (API on loopback) whose forked child opens an extra socket on every interface, as torch's distributed
# store does in SGLang's scheduler; a second loopback-only socket is fine.
SERVER = """
import os, socket, sys, time
def listen(host):
    s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET); s.bind((host, 0)); s.listen(); return s
api, side = listen('127.0.0.1'), listen('127.0.0.1')
if os.fork() == 0:
    extra = listen(sys.argv[1])
    print(api.getsockname()[1], side.getsockname()[1], extra.getsockname()[1], os.getpid(), flush=True)
    time.sleep(120)
else:
    time.sleep(120)
"""


@pytest.fixture(params=["0.0.0.0", "::"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[int, int, int, int, int]]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER, request.param], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    api, side, extra, child = map(int, proc.stdout.readline().split())
    try:
        yield proc.pid, api, side, extra, child
    finally:
        proc.kill()
        os.kill(child, 9)
        proc.wait(10)


def test_a_child_listening_on_every_interface_is_flagged(server: tuple[int, int, int, int, int]) -> None:
    parent, api, side, extra, child = server
    assert {parent, child} <= set(process_tree(parent))
    listeners, findings = check_listeners(api)
    assert {(x.port, x.pid) for x in listeners} >= {(api, parent), (side, parent), (extra, child)}
    assert [(f.status, f.code) for f in findings] == [(WARN, "stray_listener")]
    assert str(extra) in findings[0].message and f"pid {child}" in findings[0].message
    # a port the deployment expects (a separate metrics or multi-node port) is not stray
    _, findings = check_listeners(api, expected=(extra,))
    assert [(f.status, f.code) for f in findings] == [(PASS, "listeners")]
    assert findings[0].message.endswith(f"listen beyond loopback only on port {extra}"), findings[0].message


def test_nobody_on_the_port_is_a_skip() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, findings = check_listeners(port)
    assert findings[0].status == SKIP


def test_proc_net_hex_is_decoded() -> None:
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1\n"
        "   1: 00000000:5DD5 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4243 1\n"
        "   2: 0100007F:7530 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000     0        0 4244 1\n"
    )
    assert parse_proc_net(table) == [("127.0.0.1", 30000, 4242), ("0.0.0.0", 24021, 4243)]
    v6 = (
        "  sl  local_address                         remote_address                        st\n"
        "   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 0:0 0:0 0 0 0 77 1\n"
    )
    assert parse_proc_net(v6) == [("::1", 8080, 77)]


SELF_CHECK = """
import json, os, socket
from kimi_serve.verify.listeners import check_listeners
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
listeners, findings = check_listeners(s.getsockname()[1])
print(json.dumps([[x.pid for x in listeners], os.getpid(), findings[0].status, findings[0].message]))
"""


def test_listeners_of_this_very_process() -> None:
    # a process in a session of its own, as a server is started: a pytest worker's session also holds its other
    # children (kill-point runs, servers), which the session rule rightly counts as the worker's
    done = subprocess.run(
        [sys.executable, "-c", SELF_CHECK], capture_output=True, text=True, timeout=60, start_new_session=True
    )
    assert done.returncode == 0, done.stderr
    pids, me, status, message = json.loads(done.stdout)
    assert pids == [me] and status == PASS
    assert message == "the server's one process listens on loopback only", message  # not "... only on nothing"


# A server started as systemd starts one (its own session) that plants strays where only a wider look finds them:
# a UDP socket on every interface (the main process), a double-forked grandchild (its parent exits, so it leaves the
# tree but keeps the session) listening on 0.0.0.0 and on UDP ::, a plain child on TCP ::. Loopback UDP is fine.
STRAYS = """
import os, socket, sys, time
def bound(host, kind=socket.SOCK_STREAM, port=0):
    s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET, kind); s.bind((host, port))
    if kind == socket.SOCK_STREAM: s.listen()
    return s
api = bound('127.0.0.1', port=int(sys.argv[1]))
udp_all, udp_lo = bound('0.0.0.0', socket.SOCK_DGRAM), bound('127.0.0.1', socket.SOCK_DGRAM)
r, w = os.pipe()
if os.fork() == 0:
    mid = os.getpid()
    if os.fork() == 0:
        while os.getppid() == mid:  # detached for real before it says so (a busy machine runs the parent late)
            time.sleep(0.01)
        t, u = bound('0.0.0.0'), bound('::', socket.SOCK_DGRAM)
        os.write(w, f"g:{os.getpid()}:{t.getsockname()[1]}:{u.getsockname()[1]}\\n".encode()); time.sleep(60)
    os._exit(0)
if os.fork() == 0:
    t6 = bound('::')
    os.write(w, f"c:{os.getpid()}:{t6.getsockname()[1]}\\n".encode()); time.sleep(60)
lines = b""
while lines.count(b"\\n") < 2:
    lines += os.read(r, 200)
print(udp_all.getsockname()[1], udp_lo.getsockname()[1], lines.decode().replace("\\n", " "), flush=True)
time.sleep(60)
"""


def test_udp_and_detached_strays_are_all_flagged(loopback_port: Callable[[], int]) -> None:
    api = loopback_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", STRAYS, str(api)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None
    fields = proc.stdout.readline().split()
    try:
        udp_all, udp_lo = int(fields[0]), int(fields[1])
        tagged = {f[0]: list(map(int, f.split(":")[1:])) for f in fields[2:]}  # the writers' lines, in either order
        (grandchild, tcp_any, udp_any6), child = tagged["g"], tagged["c"]
        assert grandchild not in process_tree(proc.pid)  # detached: its parent exited
        listeners, findings = check_listeners(api)
        stray = {(x.protocol, x.port, x.pid) for x in listeners if not x.loopback and x.port != api}
        # (forked children inherit the main process's UDP socket, so it is held more than once)
        assert {(proto, port) for proto, port, _ in stray} == {
            ("udp", udp_all),
            ("tcp", tcp_any),
            ("udp", udp_any6),
            ("tcp", child[1]),
        }
        assert {("udp", udp_all, proc.pid), ("tcp", tcp_any, grandchild), ("udp", udp_any6, grandchild)} <= stray
        assert ("udp", udp_lo, proc.pid) in {(x.protocol, x.port, x.pid) for x in listeners}  # seen, and fine
        assert {f.code for f in findings} == {"stray_listener"} and len(findings) == len(stray)
        assert any(f":{udp_all} (UDP)" in f.message for f in findings)
        assert any(f"pid {grandchild} " in f.message and f":{tcp_any}," in f.message for f in findings)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(10)


def _fake_process(
    proc: Path, pid: int, *, ppid: int, sid: int, cgroup: str, sockets: dict[int, int], pidns: str = "pid:[1]"
) -> None:
    d = proc / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "ns").mkdir()
    os.symlink(pidns, d / "ns" / "pid")
    (d / "stat").write_text(f"{pid} (proc{pid}) S {ppid} {pid} {sid} 0 -1\n")
    (d / "comm").write_text(f"proc{pid}\n")
    (d / "cgroup").write_text(f"0::{cgroup}\n")
    for fd, inode in sockets.items():
        os.symlink(f"socket:[{inode}]", d / "fd" / str(fd))


def test_a_setsid_process_of_the_servers_cgroup_is_the_servers(tmp_path: Path) -> None:
    """setsid + double fork leaves both the tree and the session; the cgroup (a systemd unit's) still holds it. A
    /proc tree written out (this host's own processes sit in the root cgroup, which says nothing): the server (100),
    its setsid'd detached helper (200), a process of another unit (300), one in the root cgroup (400) and one of another
    container whose cgroup path reads the same (500: nspawn without a host systemd gives every container /payload)."""
    proc = tmp_path / "proc"
    unit = "/system.slice/kimi-serve.service"
    _fake_process(proc, 100, ppid=1, sid=100, cgroup=unit, sockets={3: 11})
    _fake_process(proc, 200, ppid=1, sid=200, cgroup=unit, sockets={4: 22})
    _fake_process(proc, 300, ppid=1, sid=300, cgroup="/system.slice/other.service", sockets={5: 33})
    _fake_process(proc, 400, ppid=1, sid=400, cgroup="/", sockets={6: 44})
    _fake_process(proc, 500, ppid=1, sid=500, cgroup=unit, sockets={7: 55}, pidns="pid:[2]")
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    row = "   {n}: {addr}:{port:04X} 00000000:0000 {st} 00000000:00000000 00:00000000 00000000     0        0 {ino} 1\n"
    tcp = (
        row.format(n=0, addr="0100007F", port=30000, st="0A", ino=11)
        + row.format(n=1, addr="00000000", port=29500, st="0A", ino=33)
        + row.format(n=2, addr="0100007F", port=40765, st="0A", ino=55)
    )
    udp = row.format(n=0, addr="00000000", port=5353, st="07", ino=22) + row.format(
        n=1, addr="00000000", port=6000, st="07", ino=44
    )
    for pid in ("self", "100"):
        net = proc / pid / "net"
        net.mkdir(parents=True, exist_ok=True)
        (net / "tcp").write_text(head + tcp)
        (net / "udp").write_text(head + udp)
    listeners, findings = check_listeners(30000, proc=proc)
    assert {(x.pid, x.protocol, x.port) for x in listeners} == {(100, "tcp", 30000), (200, "udp", 5353)}
    assert [f.code for f in findings] == ["stray_listener"] and "pid 200" in findings[0].message
