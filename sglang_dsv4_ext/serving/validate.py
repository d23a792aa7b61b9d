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
"""

from __future__ import annotations

import argparse
import importlib
import shlex
from typing import Dict, List, Optional, Sequence, Tuple

from sglang_dsv4_ext.errors import CommandLineError
from sglang_dsv4_ext.serving.preset import HICACHE_SIZE_MESSAGE

# destination -> how to set it with this tool instead
OWNED_DESTS: Dict[str, str] = {
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

ROUTER_OWNED = {
    "pd_disaggregation": "added by sglang-dsv4 in pd mode",
    "prefill": "generated from the prefill servers",
    "decode": "generated from the decode servers",
    "worker_urls": "generated from the servers",
    "host": "set [router].host in the preset or --router-host",
    "port": "set [router].port in the preset or --router-port",
}



class _RaisingParser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print usage and exit(2)
        raise CommandLineError(message)

    def exit(self, status=0, message=None):  # e.g. --help inside pass-through args
        raise CommandLineError(message or f"argument parser exited with status {status} (was -h/--help passed through?)")


class _Unset:
    def __repr__(self):
        return "<unset>"


UNSET = _Unset()


class SGLangArgs:
    """SGLang's server argument parser, built once (importing SGLang takes seconds)."""

    def __init__(self):
        try:
            from sglang.srt.server_args import ServerArgs
        except ImportError as exc:
            raise CommandLineError(f"cannot import SGLang's argument parser (sglang.srt.server_args): {exc}")
        self.server_args_cls = ServerArgs
        self.full = _RaisingParser(prog="sglang.launch_server", add_help=False)
        ServerArgs.add_cli_args(self.full)
        # Same flags, every default replaced by a sentinel and nothing required, so a
        # fragment parses alone and reveals exactly what it sets.
        self.probe = _RaisingParser(prog="sglang.launch_server", add_help=False)
        ServerArgs.add_cli_args(self.probe)
        for action in self.probe._actions:
            action.required = False
            if action.dest != argparse.SUPPRESS:
                action.default = UNSET
        self._flag_of = {}
        for action in self.full._actions:
            if action.option_strings:
                self._flag_of.setdefault(action.dest, action.option_strings[0])

    def flag(self, dest: str) -> str:
        return self._flag_of.get(dest, "--" + dest.replace("_", "-"))

    def explicit(self, args: Sequence[str], source: str) -> Dict[str, object]:
        """Destinations set by ``args`` (parsed alone); error names the source."""
        try:
            ns = self.probe.parse_args(list(args))
        except CommandLineError as exc:
            raise CommandLineError(f"{source}: {exc}") from None
        return {k: v for k, v in vars(ns).items() if v is not UNSET}

    def parse_full(self, argv: Sequence[str], name: str) -> argparse.Namespace:
        try:
            ns = self.full.parse_args(list(argv))
            self.server_args_cls.from_cli_args(ns)  # the same construction prepare_server_args does
            return ns
        except CommandLineError as exc:
            raise CommandLineError(f"{name}: SGLang rejects the generated command line: {exc}\n  {shlex.join(argv)}") from None
        except Exception as exc:  # ServerArgs construction
            raise CommandLineError(f"{name}: SGLang's ServerArgs rejects the arguments: {exc}") from None

    def check_sources(self, sources: List[Tuple[str, Sequence[str]]], name: str) -> Dict[str, object]:
        """Checks 1 and 2 for one server; returns the merged explicit settings."""
        seen: Dict[str, Tuple[str, object]] = {}
        for source, args in sources:
            if "--config" in args or any(a.startswith("--config=") for a in args):
                raise CommandLineError(
                    f"{name}: {source}: --config (a YAML of SGLang flags) is not accepted here because its "
                    "contents would bypass validation; put the flags in the preset's args instead"
                )
            for dest, value in self.explicit(args, f"{name}: {source}").items():
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
    """(parser, RouterArgs class) from the router package, or (None, reason) if not importable."""
    package = module.rsplit(".", 1)[0] if "." in module else module
    try:
        mod = importlib.import_module(package + ".router_args")
        router_args_cls = mod.RouterArgs
    except Exception as exc:
        return None, f"{package}.router_args is not importable here ({type(exc).__name__}: {exc})"
    parser = _RaisingParser(prog=module, add_help=False)
    router_args_cls.add_cli_args(parser, use_router_prefix=False)
    return (parser, router_args_cls), None


def check_router(module: str, generated: List[str], user_args: List[str]) -> Optional[str]:
    """Validate the router command line; return a note when the parser is unavailable."""
    found, reason = router_parser(module)
    if found is None:
        # Without the parser only our own flags can be protected: spelling-based check.
        owned_flags = ("--pd-disaggregation", "--prefill", "--decode", "--worker-urls", "--host", "--port")
        for tok in user_args:
            flag = tok.split("=", 1)[0]
            if flag.startswith("--") and any(f == flag or f.startswith(flag) and len(flag) > 3 for f in owned_flags):
                raise CommandLineError(f"router: router args set {flag}, which sglang-dsv4 generates")
        return f"router command line not validated: {reason}; install the router (pip install sglang-router) to validate it"
    parser, cls = found
    probe = _RaisingParser(prog=module, add_help=False)
    cls.add_cli_args(probe, use_router_prefix=False)
    for action in probe._actions:
        action.required = False
        if action.dest != argparse.SUPPRESS:
            action.default = UNSET
    try:
        ns = probe.parse_args(user_args)
    except CommandLineError as exc:
        raise CommandLineError(f"router: router args: {exc}") from None
    for dest, value in vars(ns).items():
        if value is not UNSET and dest in ROUTER_OWNED:
            raise CommandLineError(f"router: router args set {dest.replace('_', '-')!r}: {ROUTER_OWNED[dest]}")
    try:
        full = parser.parse_args(generated)
        cls.from_cli_args(full, use_router_prefix=False)
    except CommandLineError as exc:
        raise CommandLineError(f"router: the router rejects the generated command line: {exc}\n  {shlex.join(generated)}") from None
    except Exception as exc:
        raise CommandLineError(f"router: RouterArgs rejects the arguments: {exc}") from None
    return None
