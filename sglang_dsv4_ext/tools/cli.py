"""``sglang-dsv4``: the extension's command line.

Each subcommand lives in its own module and exposes ``add_subparser(subparsers)``,
which adds its parser and sets ``func`` (called with the parsed namespace, returning
an exit code). Modules are imported only when their subcommand is used, so
``sglang-dsv4 repro`` does not pay for importing SGLang.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from sglang_dsv4_ext import __version__
from sglang_dsv4_ext.tools import exit_codes

# subcommand -> module providing add_subparser(); order is the order in --help.
SUBCOMMANDS = {
    "doctor": "sglang_dsv4_ext.tools.doctor.cli",
    "plan": "sglang_dsv4_ext.tools.plan.cli",
    "serve": "sglang_dsv4_ext.tools.serving.cli",
    "repro": "sglang_dsv4_ext.tools.repro.cli",
    "patches": "sglang_dsv4_ext.tools.series.cli",
    "recall": "sglang_dsv4_ext.tools.recall.cli",
    "report": "sglang_dsv4_ext.tools.report.cli",
}

_SUMMARIES = {
    "doctor": "report SGLang, the configuration in force and the status of every patched target",
    "plan": "run SGLang's real DSV4 pool configurator for fp8, bf16 and fp4 index-K side by side",
    "serve": "start a DeepSeek-V4 PD (or single-server) stack with the extension's flags",
    "repro": "multi-turn agentic tool-call corruption harness against an OpenAI-compatible endpoint",
    "patches": "apply, check, rebase and export the source patch series against SGLang",
    "recall": "top-k set recall of fp8, fp4 and bf16 index-K against float64 on a capture",
    "report": "one self-contained HTML page of repro runs (rates, intervals, A/B, latency, server metrics)",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sglang-dsv4",
        description="DeepSeek-V4 extension layer over stock SGLang (bf16 index-K, HiCache "
        "index-K read gate, SM120 kernels, PD serve tooling).",
    )
    parser.add_argument("--version", action="version", version=f"sglang-dsv4-ext {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = None
    if argv:
        wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, module in SUBCOMMANDS.items():
        if wanted in SUBCOMMANDS and name != wanted:
            # Only the chosen subcommand's module is imported; the others get a stub parser.
            subparsers.add_parser(name, help=_SUMMARIES[name])
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("sglang_dsv4_ext"):
                subparsers.add_parser(name, help=_SUMMARIES[name] + " (not available in this build)")
                continue
            raise
        mod.add_subparser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return exit_codes.USAGE if args.command is None else exit_codes.ATTENTION
    return int(func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
