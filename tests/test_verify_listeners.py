"""Stray listeners, read from /proc (verify/listeners.py): against real processes that listen on real sockets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from kimi_serve.core.findings import PASS, SKIP, WARN
from kimi_serve.verify.listeners import check_listeners, parse_proc_net, process_tree

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


def test_listeners_of_this_very_process() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        time.sleep(0.05)
        listeners, findings = check_listeners(s.getsockname()[1])
    assert [x.pid for x in listeners] == [os.getpid()] and findings[0].status == PASS
