"""Turn a :class:`StackSpec` into the exact child processes for one node.

Every server gets the same extension environment (``ExtConfig.to_env()``: the settings of
``config.SETTINGS`` that serve passes to children) and the same index-K flags: prefill and
decode must agree on the index-K dtype, because a mismatch is not caught by SGLang's PD layout
check (docs/patch-point-map.md, "PD") and would corrupt transfers silently. Nothing here starts a process.

The plan is the only truth about a child: its environment here (``SGLANG_PLUGINS`` allowlisting
included) is what it is started with, what ``--dry-run`` prints and what ``commands.sh`` records.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from sglang_dsv4_ext.config import (
    ENV_SGLANG_PLUGINS,
    PLUGIN_NAME,
    SETTINGS_BY_FIELD,
    UNSET_IN_CHILDREN,
    IndexKDtype,
    plugins_with_ours,
)
from sglang_dsv4_ext.tools.serving.preset import (
    DEFAULT_DIST_PORT,
    HICACHE_SIZE_MESSAGE,
    Instance,
    PresetError,
    StackSpec,
    check_stack_fields,
    env_entry_problem,
    node_hosts_problem,
)
from sglang_dsv4_ext.tools.serving.validate import (
    CommandLineError,
    SGLangArgs,
    check_module_name,
    check_router,
    gpus_per_node,
    locate_module,
)

SERVER_MODULE = "sglang.launch_server"
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")
# Inherited variables removed from every child's environment (config.UNSET_IN_CHILDREN): the stack sets
# the settings config.STACK_SETTINGS names itself; the seed fork's alias SGLANG_DSV4_BF16_INDEX_K would
# otherwise contradict them (an inherited =1 with an fp8 stack makes every child refuse to start).
# SGLang's per-request PD KV digest (prefill -> decode); serve turns it on with the integrity mode.
KV_CHECKSUM_FLAG = "--disaggregation-enable-kv-checksum"
# The PD presets' decode servers carry it (the incident's decode wedge); --keep-overlap-schedule drops it.
DISABLE_OVERLAP_FLAG = "--disable-overlap-schedule"
# /metrics, which --wedge-timeout reads; added to every server that does not pass it already.
METRICS_FLAG = "--enable-metrics"


@dataclass
class ChildSpec:
    name: str
    role: str  # prefill | decode | single | router
    python: str  # the interpreter
    module: str  # run as python -m
    args: list[str]  # the module's arguments (a server's: SGLang's server arguments)
    env: dict[str, str]  # set on top of the inherited environment
    health_url: str | None  # None: no HTTP server on this node (a non-first node of a server)
    node: int = 0
    unset: list[str] = field(default_factory=list)  # removed from the inherited environment

    @property
    def argv(self) -> list[str]:
        return [self.python, "-m", self.module, *self.args]

    def environment(self, inherited: Mapping[str, str]) -> dict[str, str]:
        """The child's complete environment when started from ``inherited``."""
        env = {k: v for k, v in inherited.items() if k not in self.unset}
        env.update(self.env)
        return env

    def shell(self) -> str:
        words = [f"-u {shlex.quote(k)}" for k in self.unset]
        words += [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        return (f"env {' '.join(words)} " if words else "") + shlex.join(self.argv)


@dataclass
class Plan:
    spec: StackSpec
    node_rank: int
    children: list[ChildSpec]
    ext_env: dict[str, str]
    # Servers on other nodes whose /health the router waits for: (name, url).
    remote_health: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    metrics_added: list[str] = field(default_factory=list)  # servers given --enable-metrics for --wedge-timeout


def _addr(spec: StackSpec, inst: Instance) -> str:
    """Address others use to reach a server's HTTP port."""
    if inst.host not in _WILDCARD_HOSTS:
        return inst.host
    return spec.nodes[inst.nodes[0]]


def _local_health_host(host: str) -> str:
    return "127.0.0.1" if host in _WILDCARD_HOSTS else host


def _host_port(host: str, port: int) -> str:
    """``host:port``, an IPv6 address bracketed (what URLs and SGLang's --dist-init-addr parser expect)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _url(host: str, port: int) -> str:
    return f"http://{_host_port(host, port)}"


def _check_stack(spec: StackSpec, node_rank: int) -> None:
    src = spec.source
    if not spec.model_path:
        raise PresetError(f"{src}: no model path: pass --model-path or set model_path in the preset")
    if spec.mode == "pd" and (not spec.prefill or not spec.decode):
        raise PresetError(f"{src}: pd mode needs at least one [[prefill]] and one [[decode]] server")
    if spec.mode == "single" and spec.single is None:
        raise PresetError(f"{src}: single mode needs its [single] server")
    if not 0 <= node_rank < len(spec.nodes):
        raise PresetError(
            f"--node-rank {node_rank}: the cluster has {len(spec.nodes)} node(s) ({spec.nodes}); "
            f"allowed 0..{len(spec.nodes) - 1}"
        )
    if spec.hicache_ratio is not None and not spec.hicache:
        raise PresetError(f"{src}: --hicache-ratio {spec.hicache_ratio} needs HiCache on (--hicache)")


def _check_nodes(spec: StackSpec) -> None:
    src, count = spec.source, len(spec.nodes)
    problem = node_hosts_problem(spec.nodes)
    if problem:
        raise PresetError(f"{src}: cluster.nodes: {problem}")
    for inst in spec.servers():
        for n in inst.nodes:
            if not 0 <= n < count:
                raise PresetError(f"{src}: {inst.name} runs on node {n}, but [cluster].nodes has {count} entries")
    if spec.mode == "pd" and spec.router.enabled and not 0 <= spec.router.node < count:
        raise PresetError(f"{src}: router.node {spec.router.node} is not a node of the cluster ({count} nodes)")


def _check_ports(spec: StackSpec) -> None:
    src = spec.source
    used: dict[tuple[int, int], str] = {}

    def claim(node: int, port: int, what: str):
        if (node, port) in used:
            raise PresetError(f"{src}: port {port} on node {node} is used by both {used[(node, port)]} and {what}")
        used[(node, port)] = what

    for inst in spec.servers():
        claim(inst.nodes[0], inst.port, f"{inst.name} (HTTP)")
        if inst.bootstrap_port is not None:
            claim(inst.nodes[0], inst.bootstrap_port, f"{inst.name} (bootstrap)")
    if spec.mode == "pd" and spec.router.enabled:
        claim(spec.router.node, spec.router.port, "router")


def _check_env(spec: StackSpec) -> None:
    tables = [("common.env", spec.common_env)] + [(f"{i.name} env", i.env) for i in spec.servers()]
    for where, env in tables:
        for name, value in env.items():
            problem = env_entry_problem(name, value)
            if problem:
                raise PresetError(f"{spec.source}: {where}: {problem}")


def check_spec(spec: StackSpec, node_rank: int) -> None:
    """Structural checks that need no SGLang; raise PresetError naming the problem.

    The preset schema already refuses most of these; a spec built or changed in code
    (command-line overrides) is checked again here: each field by its type (the same types as the
    preset's keys, so each range is written once), then what needs several fields.
    """
    check_stack_fields(spec)
    _check_stack(spec, node_rank)
    _check_nodes(spec)
    _check_ports(spec)
    _check_env(spec)
    passthrough = spec.common_args + spec.cli_common_args + [a for inst in spec.servers() for a in inst.args]
    if any("--hicache-size" == a.split("=", 1)[0] for a in passthrough):
        raise CommandLineError(f"--hicache-size: {HICACHE_SIZE_MESSAGE}")


def _instance_args(spec: StackSpec, inst: Instance) -> list[str]:
    """The preset's args for this server; a decode server's --disable-overlap-schedule dropped on request."""
    if spec.keep_overlap_schedule and inst.role == "decode":
        return [a for a in inst.args if a != DISABLE_OVERLAP_FLAG]
    return list(inst.args)


def _server_args(
    spec: StackSpec, inst: Instance, node_rank: int, base_gpu_id: int, added: tuple[str, ...] = ()
) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(SGLang's server arguments, pass-through sources) for one server on this node; ``added``: flags serve adds."""
    assert spec.model_path, "_check_stack refuses a stack without a model path"
    ours = [
        "--model-path",
        spec.model_path,
        "--host",
        inst.host,
        "--port",
        str(inst.port),
        "--base-gpu-id",
        str(base_gpu_id),
        *added,
    ]
    if inst.role in ("prefill", "decode"):
        ours += ["--disaggregation-mode", inst.role, "--disaggregation-transfer-backend", spec.transfer_backend]
        if inst.bootstrap_port is not None:
            ours += ["--disaggregation-bootstrap-port", str(inst.bootstrap_port)]
    hicache_here = spec.hicache and (inst.role == "single" or inst.role in spec.hicache_roles)
    if hicache_here:
        ours.append("--enable-hierarchical-cache")
        if spec.hicache_ratio is not None:
            ours += ["--hicache-ratio", repr(spec.hicache_ratio)]
    if spec.ext.enabled and spec.ext.index_k_dtype == IndexKDtype.FP4:
        # fp4 index-K is SGLang's own indexer; the extension only records the choice.
        ours.append("--enable-deepseek-v4-fp4-indexer")
    if spec.ext.integrity_enabled and inst.role in ("prefill", "decode"):
        # PD transfers are checked by SGLang's own per-request KV digest (index-K rows included); the
        # integrity hook counts its mismatches under where="pd".
        ours.append(KV_CHECKSUM_FLAG)
    if len(inst.nodes) > 1:
        dist = inst.dist_init_addr or _host_port(spec.nodes[inst.nodes[0]], DEFAULT_DIST_PORT)
        ours += [
            "--nnodes",
            str(len(inst.nodes)),
            "--node-rank",
            str(inst.nodes.index(node_rank)),
            "--dist-init-addr",
            dist,
        ]
    role_args = spec.role_args.get(inst.role, [])
    sources = [
        ("[common].args", list(spec.common_args)),
        ("the args after --", list(spec.cli_common_args)),
        (f"{inst.name} args (preset)", _instance_args(spec, inst)),
    ]
    if role_args:
        sources.append((f"--{inst.role}-args", list(role_args)))
    passthrough = [a for _, args in sources for a in args]
    return ours + passthrough, sources


class _GpuLayout:
    """Every server of every node, so a node's layout does not depend on which node is asking.

    Servers without base_gpu_id take the next free GPUs of their node; overlaps are errors.
    """

    def __init__(self, source: str):
        self.source = source
        self.next_free: dict[int, int] = {}
        self.taken: dict[int, list[tuple[int, int, str]]] = {}

    def claim(self, inst: Instance, node: int, width: int) -> int:
        base = inst.base_gpu_id if inst.base_gpu_id is not None else self.next_free.get(node, 0)
        for lo, hi, other in self.taken.get(node, []):
            if base < hi and lo < base + width:
                raise PresetError(
                    f"{self.source}: {inst.name} would use GPUs {base}-{base + width - 1} on node {node}, "
                    f"overlapping {other} (GPUs {lo}-{hi - 1}); set base_gpu_id"
                )
        self.taken.setdefault(node, []).append((base, base + width, inst.name))
        self.next_free[node] = max(self.next_free.get(node, 0), base + width)
        return base


def _router_runs_on(spec: StackSpec, node_rank: int) -> bool:
    return spec.mode == "pd" and spec.router.enabled and spec.router.node == node_rank


def _check_overlap_request(spec: StackSpec, inst: Instance, sglang: SGLangArgs, sources) -> None:
    """--keep-overlap-schedule and a pass-through --disable-overlap-schedule for the same decode server."""
    if not (spec.keep_overlap_schedule and inst.role == "decode"):
        return
    for source, args in sources:
        if "disable_overlap_schedule" in sglang.explicit(args, f"{inst.name}: {source}"):
            raise CommandLineError(
                f"--keep-overlap-schedule contradicts {DISABLE_OVERLAP_FLAG} in {source} of {inst.name}; "
                "give one of them"
            )


def _added_flags(spec: StackSpec, inst: Instance, explicit, plan: Plan) -> tuple[str, ...]:
    """Flags serve adds to this server: --enable-metrics for the wedge watch, unless it is passed already."""
    if not spec.metrics_for_wedge_watch or explicit.get("enable_metrics"):
        return ()
    plan.metrics_added.append(inst.name)
    return (METRICS_FLAG,)


def _add_servers(plan: Plan, sglang: SGLangArgs, python: str, server_module: str) -> None:
    spec, node_rank = plan.spec, plan.node_rank
    layout = _GpuLayout(spec.source)
    for inst in spec.servers():
        first_node_args, sources = _server_args(spec, inst, inst.nodes[0], 0)
        explicit = sglang.check_sources(sources, inst.name)
        _check_overlap_request(spec, inst, sglang, sources)
        added = _added_flags(spec, inst, explicit, plan)
        width = gpus_per_node(sglang.parse_full(first_node_args, inst.name), len(inst.nodes))
        for n in inst.nodes:
            base = layout.claim(inst, n, width)
            if n != node_rank:
                continue
            args, _ = _server_args(spec, inst, node_rank, base, added)
            sglang.parse_full(args, inst.name)
            health = _url(_local_health_host(inst.host), inst.port) + "/health" if n == inst.nodes[0] else None
            env = dict(spec.common_env)
            env.update(inst.env)
            env.update(plan.ext_env)  # ours last (the schema already refuses a preset env that sets them)
            child = ChildSpec(
                inst.name, inst.role, python, server_module, args, env, health, node=n, unset=list(UNSET_IN_CHILDREN)
            )
            plan.children.append(child)
        if _router_runs_on(spec, node_rank) and inst.nodes[0] != node_rank:
            # Its HTTP server runs on its first node, elsewhere; the router waits for it.
            plan.remote_health.append((inst.name, _url(_addr(spec, inst), inst.port) + "/health"))


def _router_child(plan: Plan, python: str, validate_router: bool) -> ChildSpec:
    spec, r = plan.spec, plan.spec.router
    generated = ["--pd-disaggregation"]
    for inst in spec.prefill:
        bootstrap = str(inst.bootstrap_port) if inst.bootstrap_port is not None else "none"
        generated += ["--prefill", _url(_addr(spec, inst), inst.port), bootstrap]
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
    env.update(plan.ext_env)
    health = _url(_local_health_host(r.host), r.port) + "/health"
    return ChildSpec(
        "router", "router", python, r.module, full, env, health, node=r.node, unset=list(UNSET_IN_CHILDREN)
    )


def _check_modules(plan: Plan, python: str) -> None:
    """Each child's ``-m`` module exists for the children's interpreter; nothing is imported.

    Looked up on the child's PYTHONPATH, then this interpreter's sys.path. For another
    interpreter (--python) the lookup would answer for the wrong one: a note says so.
    """
    for child in plan.children:
        module, flag = child.module, "--router-module" if child.role == "router" else "--server-module"
        check_module_name(module, flag)
        if python != sys.executable:
            continue
        paths = [p for p in child.env.get("PYTHONPATH", os.environ.get("PYTHONPATH", "")).split(os.pathsep) if p]
        if not locate_module(module, paths):
            raise CommandLineError(
                f"{flag} {module!r}: no such module for {python} (searched the child's PYTHONPATH and sys.path); "
                f"{child.name} could not start"
            )
    if python != sys.executable and plan.children:
        plan.notes.append(f"--python {python}: the child modules were not looked up (another interpreter)")


def build_plan(
    spec: StackSpec,
    node_rank: int = 0,
    sglang: SGLangArgs | None = None,
    python: str = sys.executable,
    server_module: str = SERVER_MODULE,
    validate_router: bool = True,
    inherited: Mapping[str, str] | None = None,
) -> Plan:
    """Build and validate every child command line for ``node_rank``; the children start from ``inherited``
    (default: this process's environment), which decides their ``SGLANG_PLUGINS``."""
    check_spec(spec, node_rank)
    sglang = sglang or SGLangArgs()
    plan = Plan(spec=spec, node_rank=node_rank, children=[], ext_env=spec.ext.to_env())
    _add_servers(plan, sglang, python, server_module)
    if _router_runs_on(spec, node_rank):
        plan.children.append(_router_child(plan, python, validate_router))
    _check_modules(plan, python)
    _allowlist_plugin(plan, os.environ if inherited is None else inherited)
    plan.notes += _run_flag_notes(spec, plan)
    plan.notes += _extension_off_notes(spec) + _setting_notes(spec)
    if not plan.children:
        plan.notes.append(f"node {node_rank} runs nothing in this stack")
    return plan


def _allowlist_plugin(plan: Plan, inherited: Mapping[str, str]) -> None:
    """Name us in the ``SGLANG_PLUGINS`` of every server whose environment has a list without us, saying so.

    SGLang's loader skips an entry point a non-empty list does not name, in every process
    (sglang/srt/plugins/__init__.py): the server would run stock SGLang. The router loads no SGLang plugins.
    """
    given: dict[tuple[str, str], list[str]] = {}
    servers = [c for c in plan.children if c.role != "router"]
    for child in servers:
        env = child.environment(inherited)
        value = plugins_with_ours(env)
        if value is not None:
            child.env[ENV_SGLANG_PLUGINS] = value
            given.setdefault((env[ENV_SGLANG_PLUGINS], value), []).append(child.name)
    for (raw, value), names in given.items():
        who = "every server gets" if len(names) == len(servers) else f"{', '.join(names)} get{'s' * (len(names) == 1)}"
        plan.notes.append(
            f"{ENV_SGLANG_PLUGINS}={raw!r} does not name {PLUGIN_NAME}: {who} {ENV_SGLANG_PLUGINS}={value!r}"
        )


def _run_flag_notes(spec: StackSpec, plan: Plan) -> list[str]:
    """What serve's run flags did to the command lines, or that they did nothing."""
    notes = []
    if plan.metrics_added:
        notes.append(
            f"--wedge-timeout reads SGLang's /metrics: {METRICS_FLAG} added to {', '.join(plan.metrics_added)}"
        )
    if spec.keep_overlap_schedule:
        if spec.mode != "pd":
            notes.append(
                f"--keep-overlap-schedule has no effect in {spec.mode} mode (only PD decode servers get "
                f"{DISABLE_OVERLAP_FLAG} from the presets)"
            )
        elif not any(DISABLE_OVERLAP_FLAG in inst.args for inst in spec.decode):
            notes.append(
                f"--keep-overlap-schedule has no effect: no decode server of this stack has "
                f"{DISABLE_OVERLAP_FLAG} in its preset args"
            )
    return notes


def _stack_title(spec: StackSpec) -> str:
    """The preset's description, except where the extension is off and the description names settings that
    then do nothing (a bf16 preset run with --no-extension is no bf16 stack)."""
    if spec.void_with_extension_off:
        return f"{spec.source} with the extension off: stock SGLang"
    return spec.description or spec.source


def _extension_off_notes(spec: StackSpec) -> list[str]:
    if not spec.void_with_extension_off:
        return []
    void = spec.void_with_extension_off
    return [
        f"the extension is off: {', '.join(void)} {'has' if len(void) == 1 else 'have'} no effect and "
        f"{'is' if len(void) == 1 else 'are'} not passed on (every server runs stock SGLang)"
    ]


def _setting_notes(spec: StackSpec) -> list[str]:
    """A setting that does nothing on this stack, said (it is accepted: a preset may keep it for another dtype)."""
    ext = spec.ext
    if (
        ext.enabled
        and ext.fp4_budget != SETTINGS_BY_FIELD["fp4_budget"].default
        and ext.index_k_dtype != IndexKDtype.FP4
    ):
        return [
            f"--fp4-budget {ext.fp4_budget} (or [extension] fp4_budget) has no effect: it budgets SGLang's fp4 "
            f"indexer, and this stack's index-K is {ext.index_k_dtype}"
        ]
    return []


def format_plan(plan: Plan) -> str:
    spec = plan.spec
    lines = [
        f"# stack: {_stack_title(spec)} (mode {spec.mode}, node {plan.node_rank} of {len(spec.nodes)})",
        "# extension environment in every child: " + " ".join(f"{k}={v}" for k, v in sorted(plan.ext_env.items())),
        "# each child inherits the rest of this shell's environment"
        + (f", except {', '.join(UNSET_IN_CHILDREN)} (env -u)" if plan.children else ""),
    ]
    for note in plan.notes:
        lines.append(f"# note: {note}")
    for c in plan.children:
        where = f", health: {c.health_url}" if c.health_url else ", no HTTP endpoint on this node"
        lines.append(f"\n# {c.name} (node {c.node}){where}")
        lines.append(c.shell())
    for name, url in plan.remote_health:
        lines.append(f"\n# waits for {name} on another node: {url}")
    return "\n".join(lines)
