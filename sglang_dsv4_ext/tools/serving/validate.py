"""Check command lines with SGLang's (and the router's) own argument parsers.

SGLang 0.5.23 builds its CLI with ``ServerArgs.add_cli_args(parser)``
(``sglang/srt/server_args.py``; the fields live in ``srt/arg_groups/fields``) and
``prepare_server_args`` parses it; we do the same on parsers whose ``error()`` raises
instead of exiting, so the message (which names the flag) reaches the operator.

Three checks per server:
  1. pass-through flags alone (per source: common, per role, per instance) parse, and
     which destinations they set explicitly is found with sentinel defaults; this
     resolves abbreviations (``--tp``) and aliases (``--enable-hicache``) the way argparse
     does, instead of guessing from spelling;
  2. no explicit flag sets a destination this tool owns (role, ports, HiCache, index-K,
     transfer backend, node layout), and no destination is set by two sources;
  3. the complete generated command line parses.

A flag given twice inside one source is refused (argparse would silently keep the last).

Validation never imports or runs a user's module: ``--router-module`` / ``--server-module``
are located on disk only (:func:`locate_module`); the router's own argument parser is used
only for SGLang's router package (``sglang_router``), which is part of the installation.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import importlib.util
import shlex
from collections.abc import Sequence

from sglang_dsv4_ext.errors import CommandLineError
from sglang_dsv4_ext.tools.serving.preset import HICACHE_SIZE_MESSAGE

# destination -> how to set it with this tool instead
OWNED_DESTS: dict[str, str] = {
    "model_path": "use sglang-dsv4's --model-path (or model_path in the preset)",
    "disaggregation_mode": "the role comes from the stack layout (prefill/decode tables, --mode)",
    "disaggregation_transfer_backend": "use sglang-dsv4's --transfer-backend (or [pd].transfer_backend)",
    "disaggregation_bootstrap_port": "set bootstrap_port in the preset's [[prefill]] table",
    "enable_hierarchical_cache": "use sglang-dsv4's --hicache/--no-hicache (or [hicache].enabled)",
    "hicache_ratio": "use sglang-dsv4's --hicache-ratio (or [hicache].ratio)",
    "hicache_size": HICACHE_SIZE_MESSAGE,
    "enable_deepseek_v4_fp4_indexer": "use sglang-dsv4's --index-k-dtype fp4 (prefill and decode must agree)",
    "host": "set host in the preset's server table",
    "port": "set port in the preset's server table",
    "nnodes": "set nodes = [...] in the preset's server table (with --node-rank on each node)",
    "node_rank": "pass sglang-dsv4's --node-rank; the server's own rank is derived from its nodes list",
    "dist_init_addr": "set dist_init_addr in the preset's server table (or sglang-dsv4's --dist-init-addr)",
    "base_gpu_id": "set base_gpu_id in the preset's server table",
}

# destination -> why serve cannot run a server with it at all
REFUSED_DESTS: dict[str, str] = {
    "use_ray": "SGLang's Ray scheduler actors (srt/ray/scheduler_actor.py) never call load_plugins() and write "
    "their output to Ray's logs, so serve cannot show the extension active in them; start the servers "
    "without --use-ray (`sglang-dsv4 doctor` lists the entry points that load plugins)",
}

ROUTER_OWNED = {
    "pd_disaggregation": "added by sglang-dsv4 in pd mode",
    "prefill": "generated from the prefill servers",
    "decode": "generated from the decode servers",
    "worker_urls": "generated from the servers",
    "host": "set [router].host in the preset or --router-host",
    "port": "set [router].port in the preset or --router-port",
}


# The router whose argument parser may be imported for validation (SGLang's own router package).
TRUSTED_ROUTER_PACKAGE = "sglang_router"
_ROUTER_OWNED_FLAGS = ("--pd-disaggregation", "--prefill", "--decode", "--worker-urls", "--host", "--port")
# argparse actions for which giving the flag again adds to it rather than replacing it.
_ACCUMULATING_ACTIONS = (
    argparse._AppendAction,
    argparse._AppendConstAction,
    argparse._CountAction,
    argparse._ExtendAction,
)


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print usage and exit(2)
        raise CommandLineError(message)

    def exit(self, status=0, message=None):  # e.g. --help inside pass-through args
        raise CommandLineError(
            message or f"argument parser exited with status {status} (was -h/--help passed through?)"
        )


class _Unset:
    def __repr__(self):
        return "<unset>"


UNSET = _Unset()


class _RecordingNamespace(argparse.Namespace):
    """A namespace that starts with every destination UNSET and records each one argparse sets.

    Pre-setting every destination keeps argparse from writing defaults, so what is recorded
    is exactly one entry per flag occurrence on the command line.
    """

    def __init__(self, dests):
        for dest in dests:
            object.__setattr__(self, dest, UNSET)
        object.__setattr__(self, "_recorded", [])

    def __setattr__(self, name, value):
        self._recorded.append(name)
        object.__setattr__(self, name, value)

    def settings(self) -> dict[str, object]:
        return {k: v for k, v in vars(self).items() if k != "_recorded" and v is not UNSET}


def _probe_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make ``parser`` a probe: nothing required, every default the UNSET sentinel."""
    for action in parser._actions:
        action.required = False
        if action.dest != argparse.SUPPRESS:
            action.default = UNSET
    return parser


def parse_once_each(parser: argparse.ArgumentParser, args: Sequence[str], flag_of) -> dict[str, object]:
    """Parse ``args`` on a probe parser; refuse a flag given twice; return what was set.

    ``flag_of(dest)`` names a destination's flag in the error.
    """
    dests = {a.dest for a in parser._actions if a.dest != argparse.SUPPRESS}
    accumulating = {a.dest for a in parser._actions if isinstance(a, _ACCUMULATING_ACTIONS)}
    ns = parser.parse_args(list(args), namespace=_RecordingNamespace(dests))
    seen = set()
    for dest in ns._recorded:
        if dest in seen and dest not in accumulating:
            raise CommandLineError(
                f"{flag_of(dest)} is given more than once (argparse would keep only the last); give it once"
            )
        seen.add(dest)
    return ns.settings()


def locate_module(module: str, extra_paths: Sequence[str] = ()) -> bool:
    """True when ``module`` can be found on ``extra_paths`` + sys.path, without running any of it.

    ``importlib.util.find_spec("a.b")`` would import (run) package ``a``; here each dotted part
    is looked up on disk under its parent's search locations instead.
    """
    parts = module.split(".")
    spec = importlib.machinery.PathFinder.find_spec(parts[0], list(extra_paths) or None)
    if spec is None and not extra_paths:
        spec = importlib.util.find_spec(parts[0])  # also meta-path finders (editable installs)
    elif spec is None:
        return locate_module(module)
    for part in parts[1:]:
        if spec is None or not spec.submodule_search_locations:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    return spec is not None


def check_module_name(module: str, flag: str) -> None:
    """A dotted module name (what ``python -m`` accepts); error names the flag."""
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise CommandLineError(f"{flag} {module!r}: not a module name (dotted Python identifiers, e.g. pkg.module)")


class SGLangArgs:
    """SGLang's server argument parser, built once (importing SGLang takes seconds)."""

    def __init__(self):
        try:
            from sglang.srt.server_args import ServerArgs
        except ImportError as exc:
            raise CommandLineError(f"cannot import SGLang's argument parser (sglang.srt.server_args): {exc}") from exc
        self.server_args_cls = ServerArgs
        self.full = _RaisingParser(prog="sglang.launch_server", add_help=False)
        ServerArgs.add_cli_args(self.full)
        # Same flags, every default replaced by a sentinel and nothing required, so a
        # fragment parses alone and reveals exactly what it sets.
        self.probe = _RaisingParser(prog="sglang.launch_server", add_help=False)
        ServerArgs.add_cli_args(self.probe)
        _probe_parser(self.probe)
        self._flag_of = {}
        for action in self.full._actions:
            if action.option_strings:
                self._flag_of.setdefault(action.dest, action.option_strings[0])

    def flag(self, dest: str) -> str:
        return self._flag_of.get(dest, "--" + dest.replace("_", "-"))

    def explicit(self, args: Sequence[str], source: str) -> dict[str, object]:
        """Destinations set by ``args`` (parsed alone); error names the source."""
        try:
            return parse_once_each(self.probe, args, self.flag)
        except CommandLineError as exc:
            raise CommandLineError(f"{source}: {exc}") from None

    def parse_full(self, argv: Sequence[str], name: str) -> argparse.Namespace:
        try:
            ns = self.full.parse_args(list(argv))
            self.server_args_cls.from_cli_args(ns)  # the same construction prepare_server_args does
            return ns
        except CommandLineError as exc:
            raise CommandLineError(
                f"{name}: SGLang rejects the generated command line: {exc}\n  {shlex.join(argv)}"
            ) from None
        except Exception as exc:  # ServerArgs construction
            raise CommandLineError(f"{name}: SGLang's ServerArgs rejects the arguments: {exc}") from None

    def check_sources(self, sources: Sequence[tuple[str, Sequence[str]]], name: str) -> dict[str, object]:
        """Checks 1 and 2 for one server; returns the merged explicit settings."""
        seen: dict[str, tuple[str, object]] = {}
        for source, args in sources:
            if "--config" in args or any(a.startswith("--config=") for a in args):
                raise CommandLineError(
                    f"{name}: {source}: --config (a YAML of SGLang flags) is not accepted here because its "
                    "contents would bypass validation; put the flags in the preset's args instead"
                )
            for dest, value in self.explicit(args, f"{name}: {source}").items():
                if dest in REFUSED_DESTS and value:
                    raise CommandLineError(
                        f"{name}: {source} sets {self.flag(dest)}, which sglang-dsv4 serve refuses: "
                        f"{REFUSED_DESTS[dest]}"
                    )
                if dest in OWNED_DESTS:
                    raise CommandLineError(
                        f"{name}: {source} sets {self.flag(dest)} ({dest}={value!r}), which sglang-dsv4 controls: "
                        f"{OWNED_DESTS[dest]}"
                    )
                if dest in seen and seen[dest][1] != value:
                    raise CommandLineError(
                        f"{name}: {self.flag(dest)} is given twice with different values: "
                        f"{seen[dest][1]!r} in {seen[dest][0]} and {value!r} in {source}"
                    )
                seen[dest] = (source, value)
        return {k: v for k, (_, v) in seen.items()}


def gpus_per_node(ns: argparse.Namespace, nnodes: int) -> int:
    """GPUs one server uses on each of its nodes (SGLang's DP controller layout)."""
    tp = int(getattr(ns, "tp_size", 1) or 1)
    pp = int(getattr(ns, "pp_size", 1) or 1)
    dp = int(getattr(ns, "dp_size", 1) or 1)
    attn_dp = int(getattr(ns, "attn_dp_size", 1) or 1)
    total = tp * pp * (dp if attn_dp <= 1 else 1)
    return max(1, total // max(1, nnodes))


# ----------------------------------------------------------------------------- router


def router_parser(module: str):
    """(parser, RouterArgs class) from SGLang's router package, or (None, reason).

    Only ``sglang_router`` (installed with SGLang's PD extra) is imported; any other
    ``--router-module`` is a user module and is never imported or run here.
    """
    package = module.split(".", 1)[0]
    if package != TRUSTED_ROUTER_PACKAGE:
        return None, f"{module} is not SGLang's router ({TRUSTED_ROUTER_PACKAGE}), and user modules are not imported"
    try:
        mod = importlib.import_module(TRUSTED_ROUTER_PACKAGE + ".router_args")
        router_args_cls = mod.RouterArgs
    except Exception as exc:  # a missing or broken optional dependency: say so, validate by spelling
        return None, (
            f"{TRUSTED_ROUTER_PACKAGE}.router_args is not importable here ({type(exc).__name__}: {exc}); "
            "install the router (pip install sglang-router) to validate it"
        )
    parser = _RaisingParser(prog=module, add_help=False)
    router_args_cls.add_cli_args(parser, use_router_prefix=False)
    return (parser, router_args_cls), None


def _check_router_by_spelling(user_args: list[str]) -> None:
    """Without the router's parser only our own flags can be protected (prefix match, as argparse)."""
    for tok in user_args:
        flag = tok.split("=", 1)[0]
        owned = any(f == flag or f.startswith(flag) and len(flag) > 3 for f in _ROUTER_OWNED_FLAGS)
        if flag.startswith("--") and owned:
            raise CommandLineError(f"router: router args set {flag}, which sglang-dsv4 generates")


def _check_router_user_args(cls, module: str, user_args: list[str]) -> None:
    """The user's router args parse alone, set nothing we generate, and give no flag twice."""
    probe = _RaisingParser(prog=module, add_help=False)
    cls.add_cli_args(probe, use_router_prefix=False)
    _probe_parser(probe)
    try:
        settings = parse_once_each(probe, user_args, lambda dest: "--" + dest.replace("_", "-"))
    except CommandLineError as exc:
        raise CommandLineError(f"router: router args: {exc}") from None
    for dest in settings:
        if dest in ROUTER_OWNED:
            raise CommandLineError(f"router: router args set {dest.replace('_', '-')!r}: {ROUTER_OWNED[dest]}")


def _check_router_full(parser, cls, generated: list[str]) -> None:
    try:
        full = parser.parse_args(generated)
        cls.from_cli_args(full, use_router_prefix=False)
    except CommandLineError as exc:
        raise CommandLineError(
            f"router: the router rejects the generated command line: {exc}\n  {shlex.join(generated)}"
        ) from None
    except Exception as exc:  # RouterArgs construction: its own validation errors
        raise CommandLineError(f"router: RouterArgs rejects the arguments: {exc}") from None


def check_router(module: str, generated: list[str], user_args: list[str]) -> str | None:
    """Validate the router command line; return a note when the router's parser is not used."""
    found, reason = router_parser(module)
    if found is None:
        _check_router_by_spelling(user_args)
        return f"router command line not validated by a parser: {reason}"
    parser, cls = found
    _check_router_user_args(cls, module, user_args)
    _check_router_full(parser, cls, generated)
    return None
