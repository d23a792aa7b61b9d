"""Presets: readable TOML files that describe a stack, loaded into :class:`StackSpec`.

Schema (every key optional; unknown keys are errors, so typos surface; the pydantic models
below are the schema, and an error names the key in one line)::

    description = "one line"
    mode = "pd"                      # "pd" (prefill + decode + router) | "single"
    model_path = "deepseek-ai/DeepSeek-V4-Flash"

    [extension]                      # -> SGLANG_DSV4_* in every child
    <the [extension] keys>

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

The ``[extension]`` keys are the rows of :data:`sglang_dsv4_ext.config.SETTINGS` that have a preset key
(:class:`ExtensionTable` is made from them; docs/settings.md's Configuration table lists them).

One set of pydantic models: the file's tables (:class:`PresetFile`) and the stack serve runs
(:class:`StackSpec`, :class:`Instance`, and :class:`RouterSpec`, which is also the ``[router]`` table)
share the checked types (:data:`Port`, :data:`Ratio`, ...); a stack changed in code is checked again
(:func:`check_stack_fields`), and serve's flags take their argparse type from the same :class:`Bound`,
so each range is written once.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    InstanceOf,
    ValidationError,
    create_model,
    field_validator,
)

from sglang_dsv4_ext.config import SETTINGS, STACK_OWNED_ENV, STACK_SETTINGS, ExtConfig, Setting
from sglang_dsv4_ext.errors import InputFileError, PresetError
from sglang_dsv4_ext.tools import input_files
from sglang_dsv4_ext.tools.tool_support.arg_types import parse_float, parse_int

PRESET_DIR = str(resources.files("sglang_dsv4_ext.presets"))
PRESET_LIMIT = 4 * input_files.MIB  # a preset is a few kilobytes of TOML
Mode = Literal["pd", "single"]
Role = Literal["prefill", "decode"]  # the roles of a pd stack's servers
ServerRole = Literal[Role, "single"]
MODES = typing.get_args(Mode)
ROLES = typing.get_args(Role)
DEFAULT_ROUTER_MODULE = "sglang_router.launch_router"
DEFAULT_DIST_PORT = 5757
HICACHE_SIZE_MESSAGE = (
    "SGLang 0.5.23 rejects --hicache-size for DeepSeek-V4: the host pools are sized from the device "
    "pool (hybrid_pool_assembler._deepseek_v4_num_host_pages). Use --hicache-ratio instead "
    "(host pages = device pages x ratio; SGLang's default is 2)."
)


# ----------------------------------------------------------------------------- loading


def _toml():
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise PresetError(
                "reading TOML presets on Python 3.10 needs the 'tomli' package (pip install tomli)"
            ) from None
    return tomllib


def list_presets() -> list[str]:
    if not os.path.isdir(PRESET_DIR):
        return []
    return sorted(f[:-5] for f in os.listdir(PRESET_DIR) if f.endswith(".toml"))


def resolve_preset_path(name_or_path: str) -> str:
    if os.path.sep in name_or_path or name_or_path.endswith(".toml") or os.path.exists(name_or_path):
        what = input_files.describe(name_or_path)
        if what == "no such file":
            raise PresetError(f"--preset {name_or_path!r}: no such file")
        if what != "a regular file":
            raise PresetError(f"--preset {name_or_path!r}: is {what}, not a regular file (a preset is a TOML file)")
        return name_or_path
    path = os.path.join(PRESET_DIR, name_or_path + ".toml")
    if not os.path.isfile(path):
        shipped = ", ".join(list_presets()) or "(none)"
        raise PresetError(f"--preset {name_or_path!r} is not a shipped preset; shipped: {shipped}")
    return path


# ----------------------------------------------------------------------------- schema
# The preset file's schema as pydantic models: strict types (no "4" for 4, no true for 1) and
# extra="forbid" (a typo is an unknown key). Checks that need several keys at once live in
# spec_from_dict; every error is turned into one line naming the key (see _preset_error).

PORT_RANGE = (1, 65535)
# Variables a preset's env table may not set: the stack sets (or removes) them in every child.
EXTENSION_ENV = STACK_OWNED_ENV


@dataclass(frozen=True)
class Bound:
    """One range, written once: it checks a preset key and the stack's field (pydantic's ``AfterValidator``),
    and it is serve's flag type (argparse prints the message as ``argument --flag: <message>``)."""

    allowed: str  # what an error says is allowed
    ok: Callable[[Any], bool]
    read: Callable[[str], Any] = parse_int  # a flag's text as a number (the commands' one rule), None if none

    def check(self, value):
        if not self.ok(value):
            raise ValueError(self.allowed)
        return value

    def flag_type(self, text: str):
        try:
            value = self.read(text)
        except ValueError:
            value = None
        if value is None or not self.ok(value):
            raise argparse.ArgumentTypeError(f"{text!r}: {self.allowed}")
        return value


PORT = Bound(f"allowed range {PORT_RANGE[0]}-{PORT_RANGE[1]}", lambda v: PORT_RANGE[0] <= v <= PORT_RANGE[1])
NON_NEGATIVE = Bound("allowed: an integer >= 0", lambda v: v >= 0)
RATIO = Bound("allowed: a finite number > 0", lambda v: math.isfinite(v) and v > 0, read=parse_float)


def _module_name(value: str) -> str:
    if not value or not all(part.isidentifier() for part in value.split(".")):
        raise ValueError("not a module name (dotted Python identifiers, e.g. pkg.module)")
    return value


def env_entry_problem(name: str, value: str) -> str | None:
    """Why ``name=value`` cannot be passed to a child process, or None (execve's rules)."""
    if not name:
        return "an environment variable name cannot be empty"
    if "=" in name or "\0" in name:
        what = "'='" if "=" in name else "a NUL byte"
        return f"environment variable name {name!r} contains {what}"
    if "\0" in value:
        return f"the value of {name} contains a NUL byte"
    if name in EXTENSION_ENV:
        return f"{name} is set by the [extension] table in every child; set [extension] instead"
    return None


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")
NODE_HOST_ALLOWED = "a host name (letters, digits, '-', '.'), an IPv4 address or an IPv6 address without brackets"


def node_host_problem(host: str) -> str | None:
    """Why ``host`` cannot be a node address, or None."""
    if not host:
        return "an empty address"
    if host.startswith("[") and host.endswith("]"):
        return f"{host!r}: give the IPv6 address without brackets ({host[1:-1]}); serve adds them in URLs"
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels) or labels[-1].isdigit():
        return f"{host!r} is not a host name or an IP address"
    return None


def node_hosts_problem(hosts: list[str]) -> str | None:
    """Why this list of node addresses (index = node rank) cannot describe a cluster, or None."""
    for rank, host in enumerate(hosts):
        problem = node_host_problem(host)
        if problem:
            return f"node {rank}: {problem}; allowed: {NODE_HOST_ALLOWED}"
    for rank, host in enumerate(hosts):
        first = hosts.index(host)
        if first != rank:
            return (
                f"nodes {first} and {rank} are both {host!r}: their servers would share that host's GPUs "
                "(each node's layout starts at GPU 0); give each node its own address"
            )
    return None


def _node_hosts(value: list[str]) -> list[str]:
    problem = node_hosts_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _env_table(value: dict[str, str]) -> dict[str, str]:
    for name, text in value.items():
        problem = env_entry_problem(name, text)
        if problem:
            raise ValueError(problem)
    return value


Port = Annotated[int, AfterValidator(PORT.check)]
NodeRank = Annotated[int, AfterValidator(NON_NEGATIVE.check)]
GpuId = Annotated[int, AfterValidator(NON_NEGATIVE.check)]
Ratio = Annotated[float, AfterValidator(RATIO.check)]
ModuleName = Annotated[str, AfterValidator(_module_name)]
EnvTable = Annotated[dict[str, str], AfterValidator(_env_table)]
NodeHosts = Annotated[list[str], AfterValidator(_node_hosts)]


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _preset_type(setting: Setting):
    """A key's type: true/false for a switch, one of the choices, else the field's type."""
    if setting.kind.type is bool or not setting.choices:
        return setting.kind.type
    return Literal[setting.choices]


PRESET_KEYS: dict[str, Setting] = {s.preset_key: s for s in SETTINGS if s.preset_key}
PRESET_SETTINGS = tuple(PRESET_KEYS.values())
if TYPE_CHECKING:

    class ExtensionTable(_Schema):
        """Its keys are made from the rows at run time; the checker sees none (they are read with getattr)."""
else:
    ExtensionTable = create_model(
        "ExtensionTable",
        __base__=_Schema,
        __module__=__name__,
        **{key: (_preset_type(s), s.default) for key, s in PRESET_KEYS.items()},
    )
    ExtensionTable.__doc__ = "[extension]: one key per row of config.SETTINGS with a preset key."


def _prefill_only() -> list[Role]:
    return ["prefill"]


class HiCacheTable(_Schema):
    enabled: bool = False
    ratio: Ratio | None = None
    roles: list[Role] = Field(default_factory=_prefill_only)
    size: object | None = None  # refused with the reason (HICACHE_SIZE_MESSAGE)

    @field_validator("size")
    @classmethod
    def _no_size(cls, value):
        raise ValueError(HICACHE_SIZE_MESSAGE)


class PdTable(_Schema):
    transfer_backend: str = "nixl"


class ClusterTable(_Schema):
    nodes: NodeHosts = Field(default_factory=lambda: ["127.0.0.1"])


class CommonTable(_Schema):
    args: list[str] = Field(default_factory=list)
    env: EnvTable = Field(default_factory=dict)


class ServerTable(_Schema):
    node: NodeRank | None = None
    nodes: list[NodeRank] | None = None
    dist_init_addr: str | None = None
    host: str | None = None
    port: Port | None = None
    bootstrap_port: Port | None = None
    base_gpu_id: GpuId | None = None
    args: list[str] = Field(default_factory=list)
    env: EnvTable = Field(default_factory=dict)


class RouterSpec(_Schema):
    """The ``[router]`` table, and the router of the stack serve runs."""

    model_config = ConfigDict(extra="forbid", strict=True, revalidate_instances="always")
    enabled: bool = True
    node: NodeRank = 0
    host: str = "127.0.0.1"
    port: Port = 8000
    module: ModuleName = DEFAULT_ROUTER_MODULE
    args: list[str] = Field(default_factory=list)


class PresetFile(_Schema):
    description: str = ""
    mode: Mode = "pd"
    model_path: str | None = None
    extension: ExtensionTable = Field(default_factory=ExtensionTable)
    hicache: HiCacheTable = Field(default_factory=HiCacheTable)
    pd: PdTable = Field(default_factory=PdTable)
    cluster: ClusterTable = Field(default_factory=ClusterTable)
    common: CommonTable = Field(default_factory=CommonTable)
    prefill: list[ServerTable] = Field(default_factory=list)
    decode: list[ServerTable] = Field(default_factory=list)
    single: ServerTable | None = None
    router: RouterSpec = Field(default_factory=RouterSpec)


_EXPECTED = {
    "string_type": 'a string (quote numbers: "4")',
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list (an array of tables is written [[name]])",
    "dict_type": "a table",
    "model_type": "a table",
}


def _where(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (("." if out else "") + str(part))
    return out


def _model_at(loc, root: type[BaseModel]) -> type[BaseModel] | None:
    """The schema model that holds the last key of ``loc`` (None inside a plain dict)."""
    model: type[BaseModel] | None = root
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if model else None
        if field is None:
            return None
        inner = [t for t in _flat_types(field.annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
        model = inner[0] if inner else None
    return model


def _flat_types(annotation) -> list[object]:
    args = typing.get_args(annotation)
    return [annotation] if not args else [t for a in args for t in _flat_types(a)] + [annotation]


def _allowed_values(loc, root: type[BaseModel]) -> list[object]:
    while loc and isinstance(loc[-1], int):  # an element of a list: the list's field
        loc = loc[:-1]
    model = _model_at(loc, root)
    field = model.model_fields.get(loc[-1]) if model else None
    if field is None:
        return []
    literals = [t for t in _flat_types(field.annotation) if typing.get_origin(t) is Literal]
    return list(typing.get_args(literals[0])) if literals else []


def _preset_error(exc: ValidationError, source: str, root: type[BaseModel] | None = None) -> PresetError:
    """One line naming the key (the first problem pydantic found), never pydantic's dump."""
    root = root or PresetFile
    err = exc.errors(include_url=False)[0]
    loc, kind, value = err["loc"], err["type"], err.get("input")
    where = f"{source}: {_where(loc)}"
    if kind == "extra_forbidden":
        model = _model_at(loc, root)
        known = ", ".join(model.model_fields) if model else ""
        return PresetError(f"{where}: unknown key; known keys here: {known}")
    if kind == "literal_error":
        allowed = ", ".join(map(repr, _allowed_values(loc, root)))
        return PresetError(f"{where} = {value!r}: allowed values: {allowed}")
    if kind in _EXPECTED:
        return PresetError(f"{where} = {value!r}: expected {_EXPECTED[kind]}")
    reason = err.get("ctx", {}).get("error", err["msg"])
    shown = f" = {value!r}" if isinstance(value, (int, float, str)) else ""
    return PresetError(f"{where}{shown}: {reason}")


# ----------------------------------------------------------------------------- the stack serve runs
# The same checked types as the file's tables; a stack built or changed in code (serve's command-line
# overrides) is checked again by check_stack_fields, before the launch plan reads it.


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", revalidate_instances="always")


class Instance(_Spec):
    role: ServerRole
    index: int
    nodes: list[NodeRank] = Field(default_factory=lambda: [0])
    dist_init_addr: str | None = None
    host: str = "127.0.0.1"
    port: Port = 30000
    bootstrap_port: Port | None = None
    base_gpu_id: GpuId | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return "server" if self.role == "single" else f"{self.role}-{self.index}"


class StackSpec(_Spec):
    source: str = "<command line>"
    description: str = ""
    mode: Mode = "pd"
    model_path: str | None = None
    ext: InstanceOf[ExtConfig] = Field(default_factory=ExtConfig)  # the extension's settings for every child
    hicache: bool = False
    hicache_ratio: Ratio | None = None
    hicache_roles: list[Role] = Field(default_factory=_prefill_only)
    transfer_backend: str = "nixl"
    nodes: list[str] = Field(default_factory=lambda: ["127.0.0.1"])
    common_args: list[str] = Field(default_factory=list)
    cli_common_args: list[str] = Field(default_factory=list)  # SGLang flags after "--" (every server)
    common_env: dict[str, str] = Field(default_factory=dict)
    prefill: list[Instance] = Field(default_factory=list)
    decode: list[Instance] = Field(default_factory=list)
    single: Instance | None = None
    router: RouterSpec = Field(default_factory=RouterSpec)
    # Command-line pass-through (--prefill-args / --decode-args / --router-args).
    role_args: dict[str, list[str]] = Field(default_factory=dict)
    router_extra_args: list[str] = Field(default_factory=list)
    # serve's run flags that shape the command lines: --keep-overlap-schedule, --wedge-timeout (needs /metrics).
    keep_overlap_schedule: bool = False
    metrics_for_wedge_watch: bool = False
    # The extension settings the preset (or the shell) gave that --no-extension made void, as "key = 'value'".
    void_with_extension_off: list[str] = Field(default_factory=list)

    def servers(self) -> list[Instance]:
        if self.mode == "single":
            return [] if self.single is None else [self.single]  # none: refused by check_spec
        return self.prefill + self.decode


def check_stack_fields(spec: StackSpec) -> None:
    """Every field of a stack built or changed in code checked again by its type; PresetError naming it."""
    try:
        StackSpec.model_validate(spec)
    except ValidationError as exc:
        raise _preset_error(exc, spec.source, StackSpec) from None


# ----------------------------------------------------------------------------- loading


def _instance(table: ServerTable, role: ServerRole, index: int, where: str, source: str) -> Instance:
    defaults = default_instance(role, index)
    if table.nodes is not None and table.node is not None:
        raise PresetError(f"{source}: {where}: give 'node' or 'nodes', not both")
    if table.nodes is not None and not table.nodes:
        raise PresetError(f"{source}: {where}.nodes: must be a non-empty list of node ranks (integers)")
    if role != "prefill" and table.bootstrap_port is not None:
        raise PresetError(f"{source}: {where}.bootstrap_port: only prefill servers have a bootstrap port")
    nodes = table.nodes if table.nodes is not None else [table.node or 0]
    if len(set(nodes)) != len(nodes):
        raise PresetError(f"{source}: {where}.nodes lists a node twice: {nodes}")
    return Instance(
        role=role,
        index=index,
        nodes=list(nodes),
        dist_init_addr=table.dist_init_addr,
        host=table.host if table.host is not None else defaults.host,
        port=table.port if table.port is not None else defaults.port,
        bootstrap_port=(table.bootstrap_port if table.bootstrap_port is not None else defaults.bootstrap_port)
        if role == "prefill"
        else None,
        base_gpu_id=table.base_gpu_id,
        args=list(table.args),
        env=dict(table.env),
    )


def load_preset(name_or_path: str) -> StackSpec:
    path = resolve_preset_path(name_or_path)
    try:
        text = input_files.read_bytes(path, limit=PRESET_LIMIT)
    except InputFileError as exc:
        raise PresetError(f"--preset {name_or_path!r}: {path} {exc}") from None
    try:
        data = _toml().loads(text.decode("utf-8"))
    except (UnicodeDecodeError, _toml().TOMLDecodeError) as exc:
        raise PresetError(f"{path}: not valid TOML: {exc}") from None
    return spec_from_dict(data, path)


def _servers_from(preset: PresetFile, spec: StackSpec, source: str) -> None:
    for role in ROLES:
        tables = getattr(preset, role)
        if spec.mode == "single" and tables:
            raise PresetError(f'{source}: [[{role}]] tables need mode = "pd"')
        for i, table in enumerate(tables):
            getattr(spec, role).append(_instance(table, role, i, f"{role}[{i}]", source))
    if spec.mode == "single":
        spec.single = _instance(preset.single or ServerTable(), "single", 0, "single", source)
    elif preset.single is not None:
        raise PresetError(f'{source}: [single] needs mode = "single"')


def spec_from_dict(data: dict, source: str) -> StackSpec:
    """Validate a preset's contents against the schema and build the stack it describes."""
    try:
        preset = PresetFile.model_validate(data)
    except ValidationError as exc:
        raise _preset_error(exc, source) from None
    if not preset.cluster.nodes:
        raise PresetError(f"{source}: cluster.nodes must list at least one node address")
    ext, hic, router = preset.extension, preset.hicache, preset.router
    _refuse_settings_beside_extension_off(ext, source)
    spec = StackSpec(
        source=source,
        description=preset.description,
        mode=preset.mode,
        model_path=preset.model_path,
        ext=ExtConfig(**{s.attribute: getattr(ext, key) for key, s in PRESET_KEYS.items()}),
        hicache=hic.enabled,
        hicache_ratio=hic.ratio,
        hicache_roles=list(hic.roles),
        transfer_backend=preset.pd.transfer_backend,
        nodes=list(preset.cluster.nodes),
        common_args=list(preset.common.args),
        common_env=dict(preset.common.env),
        router=router.model_copy(deep=True),
    )
    _servers_from(preset, spec, source)
    return spec


def settings_without_effect(ext: ExtConfig) -> list[Setting]:
    """The stack settings other than the kill switch that differ from their default: with the extension off
    they do nothing (every server runs stock SGLang, which has none of them)."""
    return [
        s
        for s in STACK_SETTINGS
        if s.attribute != "enabled" and getattr(ext, s.attribute) != s.default and not ext.enabled
    ]


def _refuse_settings_beside_extension_off(table, source: str) -> None:
    """A preset whose [extension] table turns the extension off and sets its settings contradicts itself
    (a bf16 preset with enabled = false ran stock fp8, its header still saying bf16)."""
    ext = ExtConfig(**{s.attribute: getattr(table, key) for key, s in PRESET_KEYS.items()})
    ignored = settings_without_effect(ext)
    if ignored:
        keys = ", ".join(f"{s.preset_key} = {s.text(getattr(ext, s.attribute))!r}" for s in ignored)
        raise PresetError(
            f"{source}: [extension] enabled = false beside {keys}: the extension's settings do nothing with the "
            "extension off (every server runs stock SGLang); remove them, or set enabled = true"
        )


def default_instance(role: ServerRole, index: int) -> Instance:
    """Ports used when neither the preset nor the command line gives one."""
    if role == "prefill":
        return Instance(role=role, index=index, port=30000 + index, bootstrap_port=8998 + index)
    if role == "decode":
        return Instance(role=role, index=index, port=30100 + index)
    return Instance(role=role, index=index, port=30000)


def default_spec(mode: Mode) -> StackSpec:
    """A stack without a preset: one prefill + one decode (pd) or one server (single)."""
    spec = StackSpec(mode=mode)
    if mode == "pd":
        spec.prefill = [default_instance("prefill", 0)]
        spec.decode = [default_instance("decode", 0)]
    else:
        spec.single = default_instance("single", 0)
    return spec


def _extension_keys_doc() -> str:
    """The [extension] lines of the schema above, from the table."""

    def value(s):
        return str(s.default).lower() if isinstance(s.default, bool) else f'"{s.default}"'

    lines = [f"{s.preset_key} = {value(s)}" for s in PRESET_SETTINGS]
    width = max(33, max(map(len, lines)) + 1)  # the comment column of the schema above
    return "\n    ".join(
        f"{line:<{width}}# {' | '.join(s.choices) if s.kind.type is not bool else 'true | false'}; {s.env}"
        for line, s in zip(lines, PRESET_SETTINGS)
    )


__doc__ = __doc__.replace("<the [extension] keys>", _extension_keys_doc())

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
    "check_stack_fields",
]
