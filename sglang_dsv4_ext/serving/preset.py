"""Presets: readable TOML files that describe a stack, loaded into :class:`StackSpec`.

Schema (every key optional unless noted; unknown keys are errors, so typos surface)::

    description = "one line"
    mode = "pd"                      # "pd" (prefill + decode + router) | "single"
    model_path = "deepseek-ai/DeepSeek-V4-Flash"

    [extension]                      # -> SGLANG_DSV4_* in every child
    enabled = true
    index_k_dtype = "bf16"           # fp8 | bf16 | fp4 (fp4 adds --enable-deepseek-v4-fp4-indexer)
    index_k_gate = "auto"            # auto | strict | off

    [hicache]
    enabled = true                   # --enable-hierarchical-cache on the roles below
    ratio = 2.0                      # --hicache-ratio (DSV4 rejects --hicache-size)
    roles = ["prefill"]              # pd mode: which roles get HiCache

    [pd]
    transfer_backend = "nixl"        # --disaggregation-transfer-backend

    [cluster]
    nodes = ["10.0.0.1", "10.0.0.2"] # address of each node; index = node rank

    [common]                         # SGLang flags for every server
    args = ["--trust-remote-code"]
    env = { NCCL_DEBUG = "WARN" }

    [[prefill]]                      # pd mode; one table per prefill server
    nodes = [0]                      # node ranks it spans (> 1: --nnodes/--node-rank/--dist-init-addr)
    dist_init_addr = "10.0.0.1:5757" # when it spans nodes (default: first node's address:5757)
    host = "127.0.0.1"
    port = 30000
    bootstrap_port = 8998
    base_gpu_id = 0                  # default: the next free GPU on its node
    args = ["--tp", "4"]
    env = {}

    [[decode]]                       # pd mode; like [[prefill]] without bootstrap_port
    [single]                         # single mode; like [[decode]]

    [router]                         # pd mode
    enabled = true
    node = 0
    host = "127.0.0.1"
    port = 8000
    module = "sglang_router.launch_router"
    args = ["--policy", "cache_aware"]
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from sglang_dsv4_ext.config import GATE_MODES, INDEX_K_DTYPES
from sglang_dsv4_ext.errors import PresetError

PRESET_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "presets")
MODES = ("pd", "single")
ROLES = ("prefill", "decode")
DEFAULT_ROUTER_MODULE = "sglang_router.launch_router"
DEFAULT_DIST_PORT = 5757



@dataclass
class Instance:
    role: str  # "prefill" | "decode" | "single"
    index: int
    nodes: List[int] = field(default_factory=lambda: [0])
    dist_init_addr: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 30000
    bootstrap_port: Optional[int] = None
    base_gpu_id: Optional[int] = None
    args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return "server" if self.role == "single" else f"{self.role}-{self.index}"


@dataclass
class RouterSpec:
    enabled: bool = True
    node: int = 0
    host: str = "127.0.0.1"
    port: int = 8000
    module: str = DEFAULT_ROUTER_MODULE
    args: List[str] = field(default_factory=list)


@dataclass
class StackSpec:
    source: str = "<command line>"
    description: str = ""
    mode: str = "pd"
    model_path: Optional[str] = None
    ext_enabled: bool = True
    index_k_dtype: str = "fp8"
    index_k_gate: str = "auto"
    hicache: bool = False
    hicache_ratio: Optional[float] = None
    hicache_roles: List[str] = field(default_factory=lambda: ["prefill"])
    transfer_backend: str = "nixl"
    nodes: List[str] = field(default_factory=lambda: ["127.0.0.1"])
    common_args: List[str] = field(default_factory=list)
    common_env: Dict[str, str] = field(default_factory=dict)
    prefill: List[Instance] = field(default_factory=list)
    decode: List[Instance] = field(default_factory=list)
    single: Optional[Instance] = None
    router: RouterSpec = field(default_factory=RouterSpec)
    # Command-line pass-through (--prefill-args / --decode-args / --router-args).
    role_args: Dict[str, List[str]] = field(default_factory=dict)
    router_extra_args: List[str] = field(default_factory=list)

    def servers(self) -> List[Instance]:
        return [self.single] if self.mode == "single" else self.prefill + self.decode


# ----------------------------------------------------------------------------- loading

def _toml():
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise PresetError("reading TOML presets on Python 3.10 needs the 'tomli' package (pip install tomli)")
    return tomllib


def list_presets() -> List[str]:
    if not os.path.isdir(PRESET_DIR):
        return []
    return sorted(f[:-5] for f in os.listdir(PRESET_DIR) if f.endswith(".toml"))


def resolve_preset_path(name_or_path: str) -> str:
    if os.path.sep in name_or_path or name_or_path.endswith(".toml") or os.path.exists(name_or_path):
        if not os.path.isfile(name_or_path):
            raise PresetError(f"--preset {name_or_path!r}: no such file")
        return name_or_path
    path = os.path.join(PRESET_DIR, name_or_path + ".toml")
    if not os.path.isfile(path):
        raise PresetError(f"--preset {name_or_path!r} is not a shipped preset; shipped: {', '.join(list_presets()) or '(none)'}")
    return path


class _Table:
    """Typed access to one TOML table that reports the exact key on error."""

    def __init__(self, data: dict, where: str, source: str):
        if not isinstance(data, dict):
            raise PresetError(f"{source}: [{where}] must be a table")
        self.data, self.where, self.source = data, where, source
        self.used = set()

    def _name(self, key):
        return f"{self.source}: {self.where + '.' if self.where else ''}{key}"

    def get(self, key, types, default=None, choices=None):
        self.used.add(key)
        if key not in self.data:
            return default
        value = self.data[key]
        if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            raise PresetError(f"{self._name(key)} = {value!r}: expected {types}")
        if not isinstance(value, types):
            raise PresetError(f"{self._name(key)} = {value!r}: expected {getattr(types, '__name__', types)}")
        if choices is not None and value not in choices:
            raise PresetError(f"{self._name(key)} = {value!r}: allowed values: {', '.join(map(repr, choices))}")
        return value

    def str_list(self, key, default=None):
        value = self.get(key, list, default)
        if value is not None and not all(isinstance(v, str) for v in value):
            raise PresetError(f"{self._name(key)}: every element must be a string (write numbers as \"4\")")
        return list(value) if value is not None else None

    def int_list(self, key, default=None):
        value = self.get(key, list, default)
        if value is not None and (not value or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            raise PresetError(f"{self._name(key)}: must be a non-empty list of node ranks (integers)")
        return list(value) if value is not None else None

    def str_dict(self, key):
        value = self.get(key, dict, {})
        bad = [k for k, v in value.items() if not isinstance(v, str)]
        if bad:
            raise PresetError(f"{self._name(key)}.{bad[0]}: environment values must be strings")
        return dict(value)

    def finish(self):
        unknown = set(self.data) - self.used
        if unknown:
            raise PresetError(f"{self._name(sorted(unknown)[0])}: unknown key; known keys here: {', '.join(sorted(self.used))}")


def _instance(table: dict, role: str, index: int, where: str, source: str, defaults: Instance) -> Instance:
    t = _Table(table, where, source)
    nodes = t.int_list("nodes", None)
    node = t.get("node", int, None)
    if nodes is not None and node is not None:
        raise PresetError(f"{source}: {where}: give 'node' or 'nodes', not both")
    inst = Instance(
        role=role,
        index=index,
        nodes=nodes if nodes is not None else [node if node is not None else 0],
        dist_init_addr=t.get("dist_init_addr", str, None),
        host=t.get("host", str, defaults.host),
        port=t.get("port", int, defaults.port),
        bootstrap_port=t.get("bootstrap_port", int, defaults.bootstrap_port) if role == "prefill" else None,
        base_gpu_id=t.get("base_gpu_id", int, None),
        args=t.str_list("args", []),
        env=t.str_dict("env"),
    )
    if role != "prefill" and "bootstrap_port" in table:
        raise PresetError(f"{source}: {where}.bootstrap_port: only prefill servers have a bootstrap port")
    if len(set(inst.nodes)) != len(inst.nodes):
        raise PresetError(f"{source}: {where}.nodes lists a node twice: {inst.nodes}")
    t.finish()
    return inst


def load_preset(name_or_path: str) -> StackSpec:
    path = resolve_preset_path(name_or_path)
    with open(path, "rb") as f:
        try:
            data = _toml().load(f)
        except Exception as exc:  # tomllib.TOMLDecodeError
            raise PresetError(f"{path}: not valid TOML: {exc}")
    return spec_from_dict(data, path)


def spec_from_dict(data: dict, source: str) -> StackSpec:
    top = _Table(data, "", source)
    spec = StackSpec(source=source)
    spec.description = top.get("description", str, "")
    spec.mode = top.get("mode", str, "pd", MODES)
    spec.model_path = top.get("model_path", str, None)

    ext = _Table(top.get("extension", dict, {}), "extension", source)
    spec.ext_enabled = ext.get("enabled", bool, True)
    spec.index_k_dtype = ext.get("index_k_dtype", str, "fp8", INDEX_K_DTYPES)
    spec.index_k_gate = ext.get("index_k_gate", str, "auto", GATE_MODES)
    ext.finish()

    hic = _Table(top.get("hicache", dict, {}), "hicache", source)
    spec.hicache = hic.get("enabled", bool, False)
    ratio = hic.get("ratio", (int, float), None)
    spec.hicache_ratio = float(ratio) if ratio is not None else None
    if "size" in hic.data:
        raise PresetError(f"{source}: hicache.size: {HICACHE_SIZE_MESSAGE}")
    roles = hic.str_list("roles", ["prefill"])
    for r in roles:
        if r not in ROLES:
            raise PresetError(f"{source}: hicache.roles: {r!r} is not a role; allowed: {', '.join(ROLES)}")
    spec.hicache_roles = roles
    hic.finish()

    pd = _Table(top.get("pd", dict, {}), "pd", source)
    spec.transfer_backend = pd.get("transfer_backend", str, "nixl")
    pd.finish()

    cluster = _Table(top.get("cluster", dict, {}), "cluster", source)
    spec.nodes = cluster.str_list("nodes", ["127.0.0.1"])
    if not spec.nodes:
        raise PresetError(f"{source}: cluster.nodes must list at least one node address")
    cluster.finish()

    common = _Table(top.get("common", dict, {}), "common", source)
    spec.common_args = common.str_list("args", [])
    spec.common_env = common.str_dict("env")
    common.finish()

    for role in ROLES:
        tables = top.get(role, list, [])
        if spec.mode == "single" and tables:
            raise PresetError(f"{source}: [[{role}]] tables need mode = \"pd\"")
        for i, table in enumerate(tables):
            default = default_instance(role, i)
            getattr(spec, role).append(_instance(table, role, i, f"{role}[{i}]", source, default))
    single = top.get("single", dict, None)
    if spec.mode == "single":
        spec.single = _instance(single or {}, "single", 0, "single", source, default_instance("single", 0))
    elif single is not None:
        raise PresetError(f"{source}: [single] needs mode = \"single\"")

    router = _Table(top.get("router", dict, {}), "router", source)
    spec.router = RouterSpec(
        enabled=router.get("enabled", bool, True),
        node=router.get("node", int, 0),
        host=router.get("host", str, "127.0.0.1"),
        port=router.get("port", int, 8000),
        module=router.get("module", str, DEFAULT_ROUTER_MODULE),
        args=router.str_list("args", []),
    )
    router.finish()
    top.finish()
    return spec


def default_instance(role: str, index: int) -> Instance:
    """Ports used when neither the preset nor the command line gives one."""
    if role == "prefill":
        return Instance(role, index, port=30000 + index, bootstrap_port=8998 + index)
    if role == "decode":
        return Instance(role, index, port=30100 + index)
    return Instance(role, index, port=30000)


def default_spec(mode: str) -> StackSpec:
    """A stack without a preset: one prefill + one decode (pd) or one server (single)."""
    spec = StackSpec(mode=mode)
    if mode == "pd":
        spec.prefill = [default_instance("prefill", 0)]
        spec.decode = [default_instance("decode", 0)]
    else:
        spec.single = default_instance("single", 0)
    return spec


HICACHE_SIZE_MESSAGE = (
    "SGLang 0.5.23 rejects --hicache-size for DeepSeek-V4: the host pools are sized from the device "
    "pool (hybrid_pool_assembler._deepseek_v4_num_host_pages). Use --hicache-ratio instead "
    "(host pages = device pages x ratio; SGLang's default is 2)."
)

__all__ = [
    "Instance",
    "RouterSpec",
    "StackSpec",
    "PresetError",
    "load_preset",
    "spec_from_dict",
    "default_spec",
    "list_presets",
    "resolve_preset_path",
    "HICACHE_SIZE_MESSAGE",
]
