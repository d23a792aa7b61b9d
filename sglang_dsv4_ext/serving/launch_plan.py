"""Turn a :class:`StackSpec` into the exact child processes for one node.

Every server gets the same extension environment (``ExtConfig.to_env()``) and the same
index-K flags: prefill and decode must agree on the index-K dtype, because a mismatch
is not caught by SGLang's PD layout check (docs/patch-point-map.md, "PD") and would corrupt
transfers silently. Nothing here starts a process.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from sglang_dsv4_ext.config import ExtConfig
from sglang_dsv4_ext.serving.preset import DEFAULT_DIST_PORT, HICACHE_SIZE_MESSAGE, Instance, PresetError, StackSpec
from sglang_dsv4_ext.serving.validate import CommandLineError, SGLangArgs, check_router, gpus_per_node

SERVER_MODULE = "sglang.launch_server"
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")


@dataclass
class ChildSpec:
    name: str
    role: str  # prefill | decode | single | router
    argv: List[str]
    env: Dict[str, str]  # set on top of the inherited environment
    health_url: Optional[str]  # None: no HTTP server on this node (a non-first node of a server)
    node: int = 0

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (f"env {env} " if env else "") + shlex.join(self.argv)


@dataclass
class Plan:
    spec: StackSpec
    node_rank: int
    children: List[ChildSpec]
    ext_env: Dict[str, str]
    # Servers on other nodes whose /health the router waits for: (name, url).
    remote_health: List[Tuple[str, str]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)


def _addr(spec: StackSpec, inst: Instance) -> str:
    """Address others use to reach a server's HTTP port."""
    if inst.host not in _WILDCARD_HOSTS:
        return inst.host
    return spec.nodes[inst.nodes[0]]


def _local_health_host(host: str) -> str:
    return "127.0.0.1" if host in _WILDCARD_HOSTS else host


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def check_spec(spec: StackSpec, node_rank: int) -> None:
    """Structural checks that need no SGLang; raise PresetError naming the problem."""
    src = spec.source
    if not spec.model_path:
        raise PresetError(f"{src}: no model path: pass --model-path or set model_path in the preset")
    if spec.mode == "pd" and (not spec.prefill or not spec.decode):
        raise PresetError(f"{src}: pd mode needs at least one [[prefill]] and one [[decode]] server")
    if not 0 <= node_rank < len(spec.nodes):
        raise PresetError(f"--node-rank {node_rank}: the cluster has {len(spec.nodes)} node(s) ({spec.nodes}); allowed 0..{len(spec.nodes) - 1}")
    if spec.hicache_ratio is not None and not spec.hicache:
        raise PresetError(f"{src}: --hicache-ratio {spec.hicache_ratio} needs HiCache on (--hicache)")
    if spec.hicache_ratio is not None and spec.hicache_ratio <= 0:
        raise PresetError(f"{src}: --hicache-ratio must be > 0, got {spec.hicache_ratio}")
    used: Dict[Tuple[int, int], str] = {}

    def claim(node: int, port: int, what: str):
        if (node, port) in used:
            raise PresetError(f"{src}: port {port} on node {node} is used by both {used[(node, port)]} and {what}")
        used[(node, port)] = what

    for inst in spec.servers():
        for n in inst.nodes:
            if not 0 <= n < len(spec.nodes):
                raise PresetError(f"{src}: {inst.name} runs on node {n}, but [cluster].nodes has {len(spec.nodes)} entries")
        claim(inst.nodes[0], inst.port, f"{inst.name} (HTTP)")
        if inst.bootstrap_port is not None:
            claim(inst.nodes[0], inst.bootstrap_port, f"{inst.name} (bootstrap)")
    if spec.mode == "pd" and spec.router.enabled:
        if not 0 <= spec.router.node < len(spec.nodes):
            raise PresetError(f"{src}: router.node {spec.router.node} is not a node of the cluster ({len(spec.nodes)} nodes)")
        claim(spec.router.node, spec.router.port, "router")


def _server_argv(spec: StackSpec, inst: Instance, node_rank: int, base_gpu_id: int, python: str, server_module: str) -> Tuple[List[str], List[Tuple[str, List[str]]]]:
    """(full argv, pass-through sources) for one server on this node."""
    ours = ["--model-path", spec.model_path, "--host", inst.host, "--port", str(inst.port), "--base-gpu-id", str(base_gpu_id)]
    if inst.role in ("prefill", "decode"):
        ours += ["--disaggregation-mode", inst.role, "--disaggregation-transfer-backend", spec.transfer_backend]
        if inst.bootstrap_port is not None:
            ours += ["--disaggregation-bootstrap-port", str(inst.bootstrap_port)]
    hicache_here = spec.hicache and (inst.role == "single" or inst.role in spec.hicache_roles)
    if hicache_here:
        ours.append("--enable-hierarchical-cache")
        if spec.hicache_ratio is not None:
            ours += ["--hicache-ratio", repr(spec.hicache_ratio)]
    if spec.ext_enabled and spec.index_k_dtype == "fp4":
        # fp4 index-K is SGLang's own indexer; the extension only records the choice.
        ours.append("--enable-deepseek-v4-fp4-indexer")
    if len(inst.nodes) > 1:
        dist = inst.dist_init_addr or f"{spec.nodes[inst.nodes[0]]}:{DEFAULT_DIST_PORT}"
        ours += ["--nnodes", str(len(inst.nodes)), "--node-rank", str(inst.nodes.index(node_rank)), "--dist-init-addr", dist]
    role_args = spec.role_args.get(inst.role, [])
    sources = [
        ("common args ([common].args / after --)", list(spec.common_args)),
        (f"{inst.name} args (preset)", list(inst.args)),
    ]
    if role_args:
        sources.append((f"--{inst.role}-args", list(role_args)))
    passthrough = [a for _, args in sources for a in args]
    return [python, "-m", server_module] + ours + passthrough, sources


def build_plan(
    spec: StackSpec,
    node_rank: int = 0,
    sglang: Optional[SGLangArgs] = None,
    python: str = sys.executable,
    server_module: str = SERVER_MODULE,
    validate_router: bool = True,
) -> Plan:
    """Build and validate every child command line for ``node_rank``."""
    check_spec(spec, node_rank)
    if any("--hicache-size" == a.split("=", 1)[0] for a in spec.common_args + [x for i in spec.servers() for x in i.args]):
        raise CommandLineError(f"--hicache-size: {HICACHE_SIZE_MESSAGE}")
    sglang = sglang or SGLangArgs()
    ext = ExtConfig(enabled=spec.ext_enabled, index_k_dtype=spec.index_k_dtype, gate=spec.index_k_gate)
    ext_env = ext.to_env()
    plan = Plan(spec=spec, node_rank=node_rank, children=[], ext_env=ext_env)

    # GPU layout: every server of every node, so a node's layout does not depend on which
    # node is asking. Servers without base_gpu_id take the next free GPUs of their node.
    next_free: Dict[int, int] = {}
    taken: Dict[int, List[Tuple[int, int, str]]] = {}
    for inst in spec.servers():
        argv0, sources = _server_argv(spec, inst, inst.nodes[0], 0, python, server_module)
        sglang.check_sources(sources, inst.name)
        ns = sglang.parse_full(argv0[3:], inst.name)
        width = gpus_per_node(ns, len(inst.nodes))
        for n in inst.nodes:
            base = inst.base_gpu_id if inst.base_gpu_id is not None else next_free.get(n, 0)
            for lo, hi, other in taken.get(n, []):
                if base < hi and lo < base + width:
                    raise PresetError(
                        f"{spec.source}: {inst.name} would use GPUs {base}-{base + width - 1} on node {n}, "
                        f"overlapping {other} (GPUs {lo}-{hi - 1}); set base_gpu_id"
                    )
            taken.setdefault(n, []).append((base, base + width, inst.name))
            next_free[n] = max(next_free.get(n, 0), base + width)
            if n != node_rank:
                continue
            argv, _ = _server_argv(spec, inst, node_rank, base, python, server_module)
            sglang.parse_full(argv[3:], inst.name)
            first = n == inst.nodes[0]
            health = _url(_local_health_host(inst.host), inst.port) + "/health" if first else None
            env = dict(spec.common_env)
            env.update(inst.env)
            env.update(ext_env)  # ours last: a preset env cannot contradict the flags
            plan.children.append(ChildSpec(inst.name, inst.role, argv, env, health, node=n))
        router_here = spec.mode == "pd" and spec.router.enabled and spec.router.node == node_rank
        if router_here and inst.nodes[0] != node_rank:
            # Its HTTP server runs on its first node, elsewhere; the router waits for it.
            plan.remote_health.append((inst.name, _url(_addr(spec, inst), inst.port) + "/health"))

    if spec.mode == "pd" and spec.router.enabled and spec.router.node == node_rank:
        r = spec.router
        generated = ["--pd-disaggregation"]
        for inst in spec.prefill:
            generated += ["--prefill", _url(_addr(spec, inst), inst.port), str(inst.bootstrap_port) if inst.bootstrap_port is not None else "none"]
        for inst in spec.decode:
            generated += ["--decode", _url(_addr(spec, inst), inst.port)]
        generated += ["--host", r.host, "--port", str(r.port)]
        router_user = list(r.args) + list(spec.router_extra_args)
        full = generated + router_user
        if validate_router:
            note = check_router(r.module, full, router_user)
            if note:
                plan.notes.append(note)
        env = dict(spec.common_env)
        env.update(ext_env)
        plan.children.append(
            ChildSpec("router", "router", [python, "-m", r.module] + full, env, _url(_local_health_host(r.host), r.port) + "/health", node=r.node)
        )
    if not plan.children:
        plan.notes.append(f"node {node_rank} runs nothing in this stack")
    return plan


def format_plan(plan: Plan) -> str:
    spec = plan.spec
    lines = [
        f"# stack: {spec.description or spec.source} (mode {spec.mode}, node {plan.node_rank} of {len(spec.nodes)})",
        "# extension environment in every child: " + " ".join(f"{k}={v}" for k, v in sorted(plan.ext_env.items())),
        "# each child inherits the rest of this shell's environment",
    ]
    for note in plan.notes:
        lines.append(f"# note: {note}")
    for c in plan.children:
        lines.append(f"\n# {c.name} (node {c.node})" + (f", health: {c.health_url}" if c.health_url else ", no HTTP endpoint on this node"))
        lines.append(c.shell())
    for name, url in plan.remote_health:
        lines.append(f"\n# waits for {name} on another node: {url}")
    return "\n".join(lines)
