"""``sglang-dsv4 serve``: command line for the PD / single-server stack."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import sys
import textwrap
import time

from sglang_dsv4_ext.config import (
    ENV_BF16_ALIAS,
    ENV_KILL_SWITCH,
    STACK_SETTINGS,
    UNSET_IN_CHILDREN,
    ConfigError,
    ExtConfig,
    Setting,
    is_blank,
    load_config,
)
from sglang_dsv4_ext.errors import CommandLineError
from sglang_dsv4_ext.tools import exit_codes
from sglang_dsv4_ext.tools.cli import _SUMMARIES
from sglang_dsv4_ext.tools.serving.preset import (
    HICACHE_SIZE_MESSAGE,
    MODES,
    NON_NEGATIVE,
    PORT,
    RATIO,
    ROLES,
    PresetError,
    StackSpec,
    default_spec,
    list_presets,
    load_preset,
    node_hosts_problem,
    settings_without_effect,
)
from sglang_dsv4_ext.tools.tool_support.arg_types import finite_float

EXIT_USAGE = exit_codes.USAGE
PLACEHOLDER_SUFFIX = ".invalid"  # reserved TLD used for node addresses in shipped presets

_EPILOG_TEMPLATE = """\
SGLang's own flags pass through untouched: after "--" for every server, or per role
with --prefill-args/--decode-args (a quoted string; repeatable), and --router-args for
the router. A single flag needs the "=" form: --decode-args=--enable-foo. Flags this tool
controls (role, ports, HiCache, index-K, transfer backend, node layout, model path) are
rejected there, naming the flag and what to use instead; so is a flag given twice in one
source. Every generated command line is checked by SGLang's own argument parser first;
--router-module and --server-module are looked up on disk, never imported.

{environment}

Any fatal signal (Ctrl-C, SIGTERM, SIGHUP from a dropped SSH session, SIGQUIT, ...) stops
the whole stack: every child and everything it started. Exit codes: 1 a child failed,
2 bad input (nothing started), 128+N stopped by signal N.

examples:
  sglang-dsv4 serve --list-presets
  sglang-dsv4 serve --preset dsv4-flash-8gpu-pd-4p4d-bf16-hicache --dry-run
  sglang-dsv4 serve --preset dsv4-flash-8gpu-pd-4p4d-bf16-hicache --model-path /models/DeepSeek-V4-Flash
  sglang-dsv4 serve --mode single --model-path /models/DeepSeek-V4-Flash --index-k-dtype bf16 \\
      --hicache --hicache-ratio 2 -- --tp 8 --trust-remote-code
  # two nodes: run on each node with its rank
  sglang-dsv4 serve --preset dsv4-flash-2node-pd-1p1d-tp8-bf16-hicache --node-hosts 10.0.0.1,10.0.0.2 --node-rank 0
"""
# The variables from the settings table (config.SETTINGS), so a new setting cannot be left out.
_EPILOG = _EPILOG_TEMPLATE.format(
    environment=textwrap.fill(
        f"The children inherit this shell's environment except {', '.join(UNSET_IN_CHILDREN)} (the stack sets "
        f"{', '.join(s.env for s in STACK_SETTINGS)} itself, and adds sglang_dsv4_ext to an SGLANG_PLUGINS list "
        "without it); --dry-run prints each child's exact environment changes.",
        width=90,
    )
)


# ----------------------------------------------------------------------------- flag types
# argparse reports a type error as "argument --flag: <message>", so each message says what is allowed.

positive_seconds = finite_float(minimum=0, inclusive=False, unit="seconds")
non_negative_seconds = finite_float(minimum=0, inclusive=True, unit="seconds")
# The ranges of the stack's fields, written once (tools/serving/preset.py, Bound).
positive_ratio = RATIO.flag_type
port = PORT.flag_type
node_rank = NON_NEGATIVE.flag_type


def _split(values: list[str], flag: str) -> list[str]:
    out = []
    for v in values or []:
        try:
            out += shlex.split(v)
        except ValueError as exc:
            raise PresetError(f"{flag} {v!r}: {exc}") from exc
    return out


def add_subparser(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help=_SUMMARIES["serve"],
        description="Start a DeepSeek-V4 stack: prefill server(s), decode server(s) and SGLang's router "
        "(PD mode), or one server (single mode), with the extension's configuration in every child; "
        "health-check each child, tee its log, stop everything on Ctrl-C or when a child dies.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("stack")
    g.add_argument("--preset", help="a shipped preset name (see --list-presets) or a path to a TOML preset")
    g.add_argument("--list-presets", action="store_true", help="list the shipped presets and exit")
    g.add_argument(
        "--mode",
        choices=MODES,
        help="pd: prefill + decode + router; single: one server (default: the preset's, else pd)",
    )
    g.add_argument("--model-path", help="model directory or hub id (overrides the preset)")

    e = p.add_argument_group("extension (reaches every child as SGLANG_DSV4_* variables)")
    for setting in _FLAG_SETTINGS:
        _add_setting_flag(e, setting)

    h = p.add_argument_group("HiCache")
    hs = h.add_mutually_exclusive_group()
    hs.add_argument(
        "--hicache",
        dest="hicache",
        action="store_true",
        default=None,
        help="--enable-hierarchical-cache on the HiCache roles",
    )
    hs.add_argument("--no-hicache", dest="hicache", action="store_false", help="HiCache off")
    h.add_argument(
        "--hicache-ratio",
        type=positive_ratio,
        help="host pool = device pool x ratio, a finite number > 0 (SGLang's default 2.0)",
    )
    h.add_argument("--hicache-size", help="rejected: " + HICACHE_SIZE_MESSAGE)
    h.add_argument(
        "--hicache-roles", help="pd mode: comma list of roles with HiCache (default: the preset's, else prefill)"
    )

    d = p.add_argument_group("PD and nodes")
    d.add_argument("--transfer-backend", help="--disaggregation-transfer-backend for prefill and decode (default nixl)")
    d.add_argument("--node-rank", type=node_rank, default=0, help="this node's index in the cluster (default 0)")
    d.add_argument("--node-hosts", help="comma list of node addresses, index = node rank (overrides [cluster].nodes)")
    d.add_argument("--dist-init-addr", help="HOST:PORT for the one server that spans several nodes")
    d.add_argument("--router-host", help="router bind address (overrides [router].host)")
    d.add_argument("--router-port", type=port, help="router port, 1-65535 (overrides [router].port)")
    d.add_argument("--no-router", action="store_true", help="pd mode without the router")
    d.add_argument(
        "--router-module",
        help="router entry module, run as python -m (default sglang_router.launch_router); never imported "
        "by the validation",
    )
    d.add_argument(
        "--keep-overlap-schedule",
        action="store_true",
        help="drop the PD presets' --disable-overlap-schedule from decode servers (it avoids a decode "
        "wedge under load: a TP collective desync in the overlap event loop); refused next to a "
        "pass-through --disable-overlap-schedule, a note when it changes nothing",
    )

    a = p.add_argument_group("pass-through (SGLang's own flags)")
    a.add_argument(
        "--prefill-args",
        action="append",
        default=[],
        metavar="ARGS",
        help='flags for every prefill server, e.g. "--tp 4"',
    )
    a.add_argument("--decode-args", action="append", default=[], metavar="ARGS", help="flags for every decode server")
    a.add_argument(
        "--router-args",
        action="append",
        default=[],
        metavar="ARGS",
        help='flags for the router, e.g. "--policy cache_aware"',
    )
    a.add_argument("sglang_args", nargs="*", metavar="-- SGLANG_ARGS", help="flags for every server (after --)")

    r = p.add_argument_group("run")
    r.add_argument("--dry-run", action="store_true", help="print the exact commands and environment, then exit 0")
    r.add_argument("--all-nodes", action="store_true", help="with --dry-run: print every node's commands")
    r.add_argument("--log-dir", help="per-child logs, a directory (default serve-logs/<time>)")
    r.add_argument(
        "--health-timeout",
        type=positive_seconds,
        default=1800.0,
        help="seconds each phase may wait for /health, > 0 (default 1800)",
    )
    r.add_argument(
        "--grace-period",
        type=non_negative_seconds,
        default=30.0,
        help="seconds between SIGTERM and SIGKILL on shutdown, >= 0 (default 30)",
    )
    r.add_argument(
        "--wedge-timeout",
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help="stop the stack, naming the server, when one has requests running and produces no token "
        "for SECONDS (read from SGLang's /metrics: --enable-metrics is added to servers without it, and "
        "the dry run says so); default off",
    )
    r.add_argument(
        "--quiet-logs", action="store_true", help="do not stream child output (it is still written to the log dir)"
    )
    r.add_argument("--python", default=sys.executable, help="interpreter for the children (default: this one)")
    r.add_argument(
        "--server-module",
        default="sglang.launch_server",
        help="server entry module, run as python -m (default sglang.launch_server)",
    )
    p.set_defaults(func=run)
    _refuse_repeated_flags(p)


_GIVEN = "_serve_flags_given"  # the namespace attribute recording which of serve's own flags were given


def _refuse_repeated_flags(parser: argparse.ArgumentParser) -> None:
    """Each of serve's own single-value flags may be given once: argparse would keep the last value silently
    (``--index-k-dtype bf16 --index-k-dtype fp8`` ran fp8), while serve refuses SGLang's flags given twice in
    the pass-through arguments. The repeatable pass-through flags (``--prefill-args`` ...) are left as they are."""
    for action in parser._actions:
        if action.option_strings and not isinstance(action, (argparse._AppendAction, argparse._HelpAction)):
            action.__class__ = _given_once(type(action))


_GIVEN_ONCE: dict[type, type] = {}  # argparse action class -> its given-once subclass (made once per class)


def _given_once(action_class: type[argparse.Action]) -> type[argparse.Action]:
    if action_class in _GIVEN_ONCE:
        return _GIVEN_ONCE[action_class]

    class GivenOnce(action_class):  # type: ignore[valid-type, misc]
        def __call__(self, parser, namespace, values, option_string=None):
            given = getattr(namespace, _GIVEN, None) or set()
            if self.dest in given:
                raise argparse.ArgumentError(
                    self, "given more than once (argparse would keep only the last); give it once"
                )
            setattr(namespace, _GIVEN, given | {self.dest})
            super().__call__(parser, namespace, values, option_string)

    _GIVEN_ONCE[action_class] = GivenOnce
    return GivenOnce


# The settings serve has a flag for, in the help's order (the kill switch last, as before the table).
_FLAG_SETTINGS = sorted((s for s in STACK_SETTINGS if s.serve_flag), key=lambda s: s.kind.type is bool)


def _dest(setting: Setting) -> str:
    assert setting.serve_flag, "only rows with a serve flag have a dest"
    return setting.serve_flag.lstrip("-").replace("-", "_")


def _add_setting_flag(group, setting: Setting) -> None:
    """A switch flag sets the opposite of the default (--no-extension); a choice flag takes one of the choices."""
    if setting.kind.type is bool:
        group.add_argument(
            setting.serve_flag,
            dest=_dest(setting),
            action="store_const",
            const=not setting.default,
            default=None,
            help=setting.serve_help,
        )
    else:
        group.add_argument(setting.serve_flag, dest=_dest(setting), choices=setting.choices, help=setting.serve_help)


def _base_spec(args) -> StackSpec:
    if args.hicache_size is not None:
        raise PresetError(f"--hicache-size {args.hicache_size}: {HICACHE_SIZE_MESSAGE}")
    if args.preset:
        spec = load_preset(args.preset)
        if args.mode and args.mode != spec.mode:
            raise PresetError(f"--mode {args.mode} contradicts the preset's mode = {spec.mode!r} ({spec.source})")
        return spec
    spec = default_spec(args.mode or "pd")
    shell = load_config()  # no preset: the shell's SGLANG_DSV4_* are the defaults
    spec.ext = ExtConfig(**{s.attribute: getattr(shell, s.attribute) for s in STACK_SETTINGS})
    return spec


def _apply_extension_flags(spec: StackSpec, args) -> None:
    if args.model_path:
        spec.model_path = args.model_path
    given = {s.attribute: getattr(args, _dest(s)) for s in _FLAG_SETTINGS if getattr(args, _dest(s)) is not None}
    spec.ext = dataclasses.replace(spec.ext, **given)


def _void_settings_with_extension_off(spec: StackSpec, args) -> None:
    """With the extension off every server runs stock SGLang: a setting given beside it on the command line is
    refused; one the preset (or, without a preset, the shell) gave is voided and said, so neither the children's
    environment nor the dry run's header calls the stack bf16 (or anything but stock)."""
    void = settings_without_effect(spec.ext)
    if not void:
        return
    flagged = [s for s in void if getattr(args, _dest(s)) is not None]
    off_by = "--no-extension" if args.no_extension is not None else f"{ENV_KILL_SWITCH}=0 in this shell"
    if flagged:
        given = ", ".join(f"{s.serve_flag} {s.text(getattr(spec.ext, s.attribute))}" for s in flagged)
        raise PresetError(
            f"{off_by} turns the extension off, so {given} would do nothing (every server runs stock SGLang); "
            "give one of them"
        )
    origin = "the preset's [extension]" if args.preset else "this shell's"
    spec.void_with_extension_off = [
        f"{origin} {s.preset_key if args.preset else s.env} = {s.text(getattr(spec.ext, s.attribute))!r}" for s in void
    ]
    spec.ext = ExtConfig(enabled=False)


def _apply_hicache_flags(spec: StackSpec, args) -> None:
    if args.hicache is not None:
        spec.hicache = args.hicache
    if args.hicache_ratio is not None:
        spec.hicache_ratio = args.hicache_ratio
    if args.hicache_roles:
        roles = [r.strip() for r in args.hicache_roles.split(",") if r.strip()]
        bad = [r for r in roles if r not in ROLES]
        if bad:
            raise PresetError(f"--hicache-roles: {bad[0]!r} is not a role; allowed: {', '.join(ROLES)}")
        spec.hicache_roles = roles


def _apply_node_flags(spec: StackSpec, args) -> None:
    if args.transfer_backend:
        spec.transfer_backend = args.transfer_backend
    if args.node_hosts:
        hosts = [h.strip() for h in args.node_hosts.split(",")]
        if not any(hosts):
            raise PresetError(f"--node-hosts {args.node_hosts!r}: give a comma list of node addresses")
        problem = node_hosts_problem(hosts)
        if problem:
            raise PresetError(f"--node-hosts {args.node_hosts!r}: {problem}")
        if args.preset and len(spec.nodes) > 1 and len(hosts) != len(spec.nodes):
            raise PresetError(
                f"--node-hosts gives {len(hosts)} addresses; the preset's cluster has {len(spec.nodes)} nodes"
            )
        spec.nodes = hosts
    if args.dist_init_addr:
        spanning = [i for i in spec.servers() if len(i.nodes) > 1]
        if len(spanning) != 1:
            raise PresetError(
                f"--dist-init-addr applies to the one server that spans nodes; this stack has {len(spanning)} "
                "such servers: set dist_init_addr per server in the preset"
            )
        spanning[0].dist_init_addr = args.dist_init_addr


def _apply_router_flags(spec: StackSpec, args) -> None:
    if args.router_host:
        spec.router.host = args.router_host
    if args.router_port is not None:
        spec.router.port = args.router_port
    if args.no_router:
        spec.router.enabled = False
    if args.router_module:
        from sglang_dsv4_ext.tools.serving.validate import check_module_name

        check_module_name(args.router_module, "--router-module")  # named here, before the stack's own check
        spec.router.module = args.router_module


def _apply_passthrough(spec: StackSpec, args) -> None:
    if spec.mode == "single" and (args.prefill_args or args.decode_args or args.router_args):
        raise PresetError(
            "--prefill-args/--decode-args/--router-args need pd mode; in single mode pass SGLang flags after --"
        )
    spec.role_args = {
        "prefill": _split(args.prefill_args, "--prefill-args"),
        "decode": _split(args.decode_args, "--decode-args"),
    }
    spec.router_extra_args = _split(args.router_args, "--router-args")
    spec.cli_common_args = list(args.sglang_args or [])
    spec.keep_overlap_schedule = args.keep_overlap_schedule
    spec.metrics_for_wedge_watch = args.wedge_timeout is not None


def spec_from_args(args) -> StackSpec:
    """The stack: preset (or defaults) with command-line overrides applied."""
    spec = _base_spec(args)
    _apply_extension_flags(spec, args)
    _void_settings_with_extension_off(spec, args)
    _apply_hicache_flags(spec, args)
    _apply_node_flags(spec, args)
    _apply_router_flags(spec, args)
    _apply_passthrough(spec, args)
    return spec


def _env_notes(spec: StackSpec) -> list[str]:
    """Say when the shell's SGLANG_DSV4_* differ from what the children will get."""
    notes = []
    alias = os.environ.get(ENV_BF16_ALIAS)
    if alias is not None:
        notes.append(
            f"this shell has {ENV_BF16_ALIAS}={alias}; the children do not inherit it (env -u): they run "
            f"index-K {spec.ext.index_k_dtype if spec.ext.enabled else '(extension off)'} as this stack says"
        )
    # each variable the stack sets: the shell's value read alone, with the parser every process uses
    # (what the children see in all was checked: _check_children_config), against the stack's
    for setting in STACK_SETTINGS:
        name, stack = setting.env, setting.text(getattr(spec.ext, setting.attribute))
        how = f" ({setting.serve_flag} or [extension] {setting.preset_key} sets it)"
        raw = os.environ.get(name) or ""
        if is_blank(raw):  # unset, by the one rule every process reads it with
            continue
        try:
            shell = setting.text(getattr(load_config({name: raw}), setting.attribute))
        except ConfigError as exc:
            notes.append(f"this shell's {exc}; the children get {name}={stack} from the stack{how}")
            continue
        if shell != stack:
            notes.append(f"shell has {name}={shell}; children get {stack}{how}")
    return notes + _bf16_without_c4_layers_note(spec)


def _bf16_without_c4_layers_note(spec: StackSpec) -> list[str]:
    """bf16 index-K for a model without c4 layers (DeepSeek-V4.1) changes nothing: say so where serve can tell.

    Only a model path that holds a config on this machine can be read; elsewhere the server's log says it.
    """
    path = spec.model_path
    if not (spec.ext.enabled and spec.ext.bf16_index_k and path and os.path.exists(path)):
        return []
    from sglang_dsv4_ext.errors import PlanInputError
    from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model

    try:
        model = dsv4_model.load_model(path)
    except PlanInputError:
        return []  # not a DeepSeek-V4 config serve can read: SGLang will judge it
    if 4 in model.compress_ratios[: model.num_hidden_layers]:
        return []
    return [
        f"index-K bf16 changes nothing for {path}: the model has no c4 layers (model_type {model.model_type}); "
        f"SGLang builds its ratio-1/2 index-K as fp4 whatever the dtype, and each server logs the same"
    ]


def check_python(python: str) -> str:
    """The children's interpreter: an executable file (a bare name is looked up on PATH)."""
    path = python if os.sep in python else shutil.which(python)
    if not path or not os.path.exists(path):
        raise PresetError(f"--python {python!r}: no such file; give the path of a Python interpreter")
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise PresetError(f"--python {python!r}: not an executable file")
    return python


def prepare_log_dir(log_dir: str | None) -> str:
    """Create (or reuse) the log directory; error names --log-dir. Nothing in it is overwritten."""
    log_dir = log_dir or os.path.join("serve-logs", time.strftime("%Y%m%d-%H%M%S"))
    if os.path.exists(log_dir) and not os.path.isdir(log_dir):
        raise PresetError(f"--log-dir {log_dir!r}: exists and is not a directory")
    try:
        os.makedirs(log_dir, exist_ok=True)
    except OSError as exc:
        raise PresetError(f"--log-dir {log_dir!r}: cannot create it ({exc.strerror or exc})") from None
    if not os.access(log_dir, os.W_OK | os.X_OK):
        raise PresetError(f"--log-dir {log_dir!r}: not writable")
    return log_dir


def _list_presets() -> int:
    for name in list_presets():
        print(f"{name:<48} {load_preset(name).description}")
    return exit_codes.OK


def _error(message: str) -> int:
    print(f"sglang-dsv4 serve: error: {message}", file=sys.stderr)
    return exit_codes.USAGE


def _plans(args):
    from sglang_dsv4_ext.tools.serving.launch_plan import build_plan
    from sglang_dsv4_ext.tools.serving.validate import SGLangArgs

    if args.all_nodes and not args.dry_run:
        raise PresetError("--all-nodes prints every node's commands and needs --dry-run; to start, run each node")
    check_python(args.python)
    spec = spec_from_args(args)
    sglang = SGLangArgs()
    ranks = range(len(spec.nodes)) if (args.dry_run and args.all_nodes) else [args.node_rank]
    plans = [build_plan(spec, rank, sglang, python=args.python, server_module=args.server_module) for rank in ranks]
    models = {}  # the model config capture layer ids are checked against, read once
    for plan in plans:
        _check_children_config(plan, models, local=plan.node_rank == args.node_rank)
        plan.notes = _env_notes(spec) + plan.notes
    return spec, plans


def _check_children_config(plan, models: dict, local: bool) -> None:
    """What each child will see (this shell's environment plus the stack's) must pass activation's check, and
    its capture settings what its pool build checks (the directory only for this node's children: ``local``)."""
    for child in plan.children:
        try:
            config = load_config(child.environment(os.environ))
        except ConfigError as exc:
            raise CommandLineError(
                f"{child.name} would refuse to start: its SGLANG_DSV4_* environment (this shell's, with the stack's "
                f"SGLANG_DSV4_INDEX_K_DTYPE={plan.spec.ext.index_k_dtype} on top) is invalid: {exc}"
            ) from exc
        if child.role != "router" and config.enabled and config.capture.enabled:
            plan.notes.append(f"{child.name}: {_capture_sentence(plan, config.capture, models, local, child.name)}")


def _capture_sentence(plan, capture, models: dict, local: bool, name: str) -> str:
    from sglang_dsv4_ext.tools.recall import capture_check

    if "model" not in models:
        models["model"] = capture_check.model_for_path(plan.spec.model_path)
    model, which = models["model"]
    try:
        captured = capture_check.check_capture(capture, model, which, check_directory=local)
    except ConfigError as exc:
        raise CommandLineError(f"{name} would stop when its pool is built: {exc}") from exc
    if captured is None:
        return f"index-K capture into {capture.directory}: layer ids not checked ({which})"
    return captured.sentence() + ("" if local else "; directory not checked (another node's filesystem)")


def _startable(spec: StackSpec, plan) -> str | None:
    """Why this node cannot start, or None."""
    placeholders = [h for h in spec.nodes if h.endswith(PLACEHOLDER_SUFFIX)]
    if placeholders:
        return (
            f"node address {placeholders[0]!r} is a placeholder; pass the real addresses with --node-hosts "
            "(or edit [cluster].nodes in a copy of the preset)"
        )
    if not plan.children:
        return f"node {plan.node_rank} runs nothing in this stack"
    return None


def _prefill_graph_lines(plan) -> str:
    """Per generated server: will the breakable prefill graph be on (SGLang's own resolution of its flags)?"""
    from sglang_dsv4_ext.errors import PrefillGraphArgsError
    from sglang_dsv4_ext.tools.sglang_cpu import prefill_graph

    lines = []
    for child in plan.children:
        if child.role == "router":
            continue
        try:
            answer = prefill_graph.resolve(child.args)
            sentence = answer.sentence()
            if answer.breakable and plan.spec.ext.integrity_enabled:
                sentence += (
                    "; index-K integrity does not check readers replayed from the graph (such loads are "
                    "counted and logged as never verified)"
                )
        except PrefillGraphArgsError as exc:
            sentence = f"breakable prefill graph unknown ({exc})"
        lines.append(f"# {child.name}: {sentence}")
    return ("\n\n# prefill graph, from SGLang's own argument resolution:\n" + "\n".join(lines)) if lines else ""


def run(args) -> int:
    from sglang_dsv4_ext.tools.serving.launch_plan import format_plan

    if args.list_presets:
        return _list_presets()
    try:
        spec, plans = _plans(args)
        if args.dry_run:
            print("\n\n".join(format_plan(p) + _prefill_graph_lines(p) for p in plans))
            return exit_codes.OK
        plan = plans[0]
        problem = _startable(spec, plan)
        if problem:
            return _error(problem)
        log_dir = prepare_log_dir(args.log_dir)
    except (PresetError, CommandLineError, ConfigError) as exc:
        return _error(str(exc))
    from sglang_dsv4_ext.tools.serving.supervise import Supervisor

    with open(os.path.join(log_dir, "commands.sh"), "a") as f:  # appended: a reused --log-dir keeps earlier runs
        f.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')}\n" + format_plan(plan) + "\n")
    print(format_plan(plan))
    return Supervisor(
        plan.children,
        log_dir,
        remote_health=plan.remote_health,
        health_timeout=args.health_timeout,
        grace_period=args.grace_period,
        stream_logs=not args.quiet_logs,
        # Only SGLang's own launcher starts the processes that load plugins and print the activation line.
        require_activation_line=args.server_module == "sglang.launch_server",
        wedge_seconds=args.wedge_timeout,
    ).run()


__all__ = ["add_subparser", "run", "spec_from_args"]
