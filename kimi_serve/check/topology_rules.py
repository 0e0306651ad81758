"""Deployment rules for the topology: multi-node TP (``nodes:``), pipeline stages, replicas behind SGLang's router.
The facts behind them are SGLang 0.5.23's own (docs/scale-out.md).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from kimi_serve.check.auth_rules import unkeyed
from kimi_serve.check.rule_kit import Rule, bad, ok
from kimi_serve.core.findings import WARN, Finding
from kimi_serve.core.net import ip_of, is_loopback
from kimi_serve.profile.flags import load_flag_table
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile
from kimi_serve.profile.topology import parse_worker, replicas, routed

# SGLang destinations that the nodes:/parallel: sections render (extra_args must not repeat them).
TOPOLOGY_DESTS = {
    "pp_size": "parallel.pp_size",
    "nnodes": "nodes.count",
    "node_rank": "nodes.rank",
    "dist_init_addr": "nodes.leader_host and nodes.leader_port",
}
# World sizes SGLang 0.5.23 builds these all-reduce paths for (pcie_ipc_ar.py, all_reduce_utils.py + patch 0004).
PCIE_IPC_WORLD_SIZES = (2, 4, 8)
TORCH_SYMM_MEM_WORLD_SIZES = (2, 4, 6, 8)
IB_DISABLE_ENV = "NCCL_IB_DISABLE"
# RFC 5737 / RFC 3849 documentation ranges: the placeholders the shipped multi-host profiles carry.
DOC_NETS = tuple(
    ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
)


def is_placeholder(host: str) -> bool:
    """A documentation address (RFC 5737, RFC 3849): a placeholder that no real host has."""
    addr = ip_of(host)
    return addr is not None and any(addr.version == net.version and addr in net for net in DOC_NETS)


def rule_nodes(p: Profile, _: Launch) -> Iterator[Finding]:
    """Multi-node TP: a rank inside the group and a rank-0 address the other hosts can reach (tp x pp against the
    hosts' GPUs, SGLang's divisibility assertion included, is :func:`kimi_serve.check.rules.rule_parallel`)."""
    n = p.nodes
    if n.rank >= n.count:
        yield bad(
            p,
            "nodes.rank",
            f"nodes.rank {n.rank} is outside a group of nodes.count {n.count} (ranks 0..{n.count - 1})",
            "set nodes.rank below nodes.count (render --node-rank R renders one host)"
            if n.count > 1
            else "set nodes.rank: 0 (a single host is rank 0)",
        )
        return
    if n.count == 1:
        yield ok("nodes", "single host (no --nnodes)")
        return
    if not n.leader_host:
        yield bad(
            p,
            "nodes.leader_host",
            f"nodes.count {n.count} without nodes.leader_host: no --dist-init-addr, "
            "so each rank would wait for a rank 0 on its own host (SGLang's validation lets this pass)",
            "set nodes.leader_host to the address of the rank-0 host that every rank can reach",
        )
        return
    if is_loopback(n.leader_host):
        yield bad(
            p,
            "nodes.leader_host",
            f"nodes.leader_host {n.leader_host} is a loopback address: the ranks on the other hosts cannot reach it",
            "set the rank-0 host's address on the inter-node network",
        )
        return
    if is_placeholder(n.leader_host):
        yield bad(
            p,
            "nodes.leader_host",
            f"nodes.leader_host {n.leader_host} is a documentation address (a placeholder)",
            "set the rank-0 host's address on the inter-node network",
            status=WARN,
        )
    role = (
        "serves the API" if n.rank == 0 else "serves no API (only a dummy /health): the contract is checked on rank 0"
    )
    yield ok("nodes", f"rank {n.rank} of {n.count}, rendezvous at {n.leader_host}:{n.leader_port}; this rank {role}")


def rule_topology_flags(p: Profile, _: Launch) -> Iterator[Finding]:
    """extra_args must not carry flags that nodes:/parallel: render (argparse keeps whichever comes last)."""
    table = load_flag_table()
    for arg in p.extra_args:
        opt = table.options.get(arg.split("=", 1)[0])
        if opt is not None and opt.dest in TOPOLOGY_DESTS:
            yield bad(
                p,
                "extra_args",
                f"{arg.split('=', 1)[0]} in extra_args: the topology sections render it",
                f"remove it and set {TOPOLOGY_DESTS[opt.dest]}",
            )
            return


def rule_pipeline(p: Profile, _: Launch) -> Iterator[Finding]:
    pp, s = p.parallel.pp_size, p.speculative
    if pp == 1:
        return
    if s.enabled and s.algorithm != "EAGLE":
        yield bad(
            p,
            "parallel.pp_size",
            f"pp_size {pp} with {s.algorithm}: SGLang 0.5.23's pipeline parallelism "
            "only supports EAGLE (non-multi-layer) speculative decoding",
            "set speculative.enabled: false, or parallel.pp_size: 1 (TP only)",
        )
    else:
        yield ok("parallel.pp_size", f"PP={pp} (SGLang turns overlap scheduling off under pipeline parallelism)")


def rule_multinode_allreduce(p: Profile, _: Launch) -> Iterator[Finding]:
    """The fast all-reduce paths of this box are single-node: what they do when the TP group spans hosts."""
    ar, tp = p.allreduce, p.parallel.tp_size
    if p.nodes.count > 1 and ar.flashinfer_fusion_backend:
        yield bad(
            p,
            "allreduce.flashinfer_fusion_backend",
            f"FlashInfer all-reduce fusion "
            f"({ar.flashinfer_fusion_backend}) is single-node only: SGLang raises at model-runner init on "
            f"nodes.count {p.nodes.count} (its validation does not catch it)",
            "set allreduce.flashinfer_fusion_backend: null on a multi-node profile",
        )
    for key, on, sizes, what, effect in (
        ("pcie_ipc", ar.pcie_ipc, PCIE_IPC_WORLD_SIZES, "the PCIe-IPC all-reduce", "every reduction stays on NCCL"),
        (
            "torch_symm_mem",
            ar.torch_symm_mem,
            TORCH_SYMM_MEM_WORLD_SIZES,
            "torch symmetric memory",
            "SGLang disables it with a warning",
        ),
    ):
        if on and tp not in sizes:
            said = f"{what} builds for TP groups of {'/'.join(map(str, sizes))} GPUs only: with tp_size {tp} {effect}"
            fix = f"set allreduce.{key}: false" + (
                " (or keep each TP group inside one host)" if key == "pcie_ipc" else ""
            )
            yield bad(p, f"allreduce.{key}", said, fix, status=WARN)


def rule_interconnect(p: Profile, _: Launch) -> Iterator[Finding]:
    """This hardware has PCIe inside the box and no InfiniBand between boxes: what spanning hosts costs."""
    if p.nodes.count == 1:
        return
    if p.parallel.pp_size == 1:
        cost = (
            f"TP{p.parallel.tp_size} over {p.nodes.count} hosts puts every layer's all-reduces on the network "
            "between them (NCCL over TCP sockets without InfiniBand/RoCE), far slower than PCIe P2P inside one "
            "box: decode latency is bound by it"
        )
    else:
        cost = (
            f"PP{p.parallel.pp_size} sends activations between hosts once per stage boundary (cheaper than TP's "
            "all-reduces every layer), but EAGLE-3 is unavailable and overlap scheduling is off"
        )
    yield bad(
        p,
        "nodes.count",
        f"{cost}; prefer replicas (one box each, behind the router) unless the model does not fit one box",
        "use replicas: N with router.workers, or accept the cost (docs/scale-out.md)",
        status=WARN,
    )
    if str(p.env.get(IB_DISABLE_ENV, "")) == "1":
        yield bad(
            p,
            f"env.{IB_DISABLE_ENV}" if f"env.{IB_DISABLE_ENV}" in p.lines else "env",
            f"{IB_DISABLE_ENV}=1 on a multi-node profile: NCCL between the hosts uses TCP sockets (right "
            "without InfiniBand/RoCE, a waste with it)",
            f"remove {IB_DISABLE_ENV} if the hosts have "
            "InfiniBand or RoCE; else set NCCL_SOCKET_IFNAME to the inter-node interface",
            status=WARN,
        )


def rule_replicas(p: Profile, _: Launch) -> Iterator[Finding]:
    """Where the replicas are: router.workers (one HOST:PORT per replica) or this host at server.port + i."""
    r, n = p.router, p.replicas
    workers = list(r.workers)
    if workers and len(workers) != n:
        yield bad(
            p,
            "router.workers",
            f"router.workers lists {len(workers)} replica address(es), replicas is {n}",
            f"set replicas: {len(workers)}, or list one HOST:PORT per replica",
        )
        return
    malformed = [w for w in workers if parse_worker(w) is None]
    if malformed:
        yield bad(
            p,
            "router.workers",
            f"router.workers entry {malformed[0]!r} is not HOST:PORT",
            "write each replica as HOST:PORT (IPv6 as [ADDR]:PORT)",
        )
        return
    parsed = [parse_worker(w) for w in workers]
    if len(set(parsed)) != len(parsed):
        dup = next(w for i, w in enumerate(workers) if parsed[i] in parsed[:i])
        yield bad(p, "router.workers", f"router.workers names {dup!r} twice", "list each replica once")
        return
    placeholders = [w for w, hp in zip(workers, parsed, strict=True) if hp and is_placeholder(hp[0])]
    if placeholders:
        yield bad(
            p,
            "router.workers",
            f"router.workers {', '.join(placeholders)}: documentation addresses (placeholders)",
            "set each replica's real HOST:PORT",
            status=WARN,
        )
    if n == 1:
        yield ok("replicas", "one replica: no router")
        return
    if p.nodes.count > 1:
        yield from _multinode_replicas(p, [w[0] for w in parsed if w])
        return
    if workers:
        yield ok("replicas", f"{n} replicas on their own hosts behind the router ({', '.join(workers)})")
        return
    yield from _local_replicas(p)


def _multinode_replicas(p: Profile, worker_hosts: list[str]) -> Iterator[Finding]:
    leader = p.nodes.leader_host
    if not worker_hosts:
        yield bad(
            p,
            "router.workers",
            f"{p.replicas} replicas of {p.nodes.count} nodes each cannot run on this "
            "host: list each replica's rank-0 address (ranks >= 1 serve no API)",
            "set router.workers to the rank-0 HOST:PORT of every replica",
        )
    elif leader and leader not in worker_hosts:
        yield bad(
            p,
            "nodes.leader_host",
            f"rank 0 ({leader}) is not one of router.workers: the router must send "
            "to each replica's rank 0 (ranks >= 1 answer only a dummy /health)",
            "list this replica's rank 0 in router.workers (other replicas: --set nodes.leader_host=THEIR_RANK0)",
        )
    else:
        yield ok("replicas", f"{p.replicas} replicas of {p.nodes.count} nodes each; the router sends to each rank 0")


def _local_replicas(p: Profile) -> Iterator[Finding]:
    r, n, port = p.router, p.replicas, p.server.port
    if p.engine == "sglang":
        yield bad(
            p,
            "replicas",
            f"{n} local replicas of {p.gpus} GPUs each need {n * p.gpus} GPUs on this host, and "
            f"each would start on GPUs 0..{p.gpus - 1}: Kimi-K2.5 needs all 8 GPUs of a box per replica "
            "(replicas on one host are for the simulator)",
            "list one box per replica in router.workers (HOST:PORT), or use engine: simulator",
        )
        return
    ports = [rep.port for rep in replicas(p)]  # where the deployment puts them (profile/topology.py)
    if ports[-1] > 65535:
        yield bad(
            p,
            "server.port",
            f"replica {n - 1} would listen at {ports[-1]} (server.port {port} + {n - 1})",
            f"set server.port at most {65536 - n}",
        )
    elif r.port in ports:
        yield bad(
            p,
            "router.port",
            f"router.port {r.port} is replica {r.port - port}'s port (replicas listen at "
            f"server.port {port} .. {ports[-1]})",
            f"set router.port outside {port}..{ports[-1]}",
        )
    elif r.metrics_port in ports or r.metrics_port == r.port:
        yield _metrics_port_taken(
            p, "router.port" if r.metrics_port == r.port else f"replica {r.metrics_port - port}'s port"
        )
    else:
        yield ok(
            "replicas",
            f"{n} local replicas at {port}..{ports[-1]}, router at {r.port}, router metrics at {r.metrics_port}",
        )


def _metrics_port_taken(p: Profile, what: str) -> Finding:
    said = f"router.metrics_port {p.router.metrics_port} is {what}"
    return bad(p, "router.metrics_port", said, "give the router's Prometheus endpoint a port of its own")


def rule_router_auth(p: Profile, _: Launch) -> Iterator[Finding]:
    """The router is the deployment's front door: the same key rule as server.host, and how the key reaches it."""
    if not routed(p):
        return
    r = p.router
    if p.server.api_key_file:
        yield ok(
            "router.host",
            "the router gets the API key through kimi-serve's shim (never on its command "
            "line): it requires the key from clients and sends it to the replicas",
        )
    elif is_loopback(r.host):
        yield ok(
            "router.host",
            "router reachable only locally; no key: it forwards the clients' Authorization "
            "header, and every replica must run without a key (its health checks would get 401)",
        )
    else:
        yield unkeyed(p, "router.host", "router binding", "every replica")


def rule_ports(p: Profile, _: Launch) -> Iterator[Finding]:
    """Ports one process group opens side by side: the router's API and Prometheus ports (wherever its replicas
    are: local ones are :func:`_local_replicas`'), and rank 0's API beside its torch.distributed rendezvous."""
    r, n = p.router, p.nodes
    if routed(p) and r.workers and r.metrics_port == r.port:
        yield _metrics_port_taken(p, "router.port")
    if n.count > 1 and n.leader_port == p.server.port:
        yield bad(
            p,
            "nodes.leader_port",
            f"nodes.leader_port {n.leader_port} is server.port: rank 0 listens on both",
            "give the rendezvous (--dist-init-addr) a port of its own (20000 is SGLang's examples')",
        )


TOPOLOGY_RULES: tuple[Rule, ...] = (
    rule_nodes,
    rule_topology_flags,
    rule_pipeline,
    rule_multinode_allreduce,
    rule_interconnect,
    rule_replicas,
    rule_router_auth,
    rule_ports,
)
