"""``sglang-dsv4 doctor``: what is installed, what is configured, what the extension did.

Runs on a CPU-only machine. It activates the extension in its own process (exactly as
SGLang's plugin loader would) and reports every table row's status, the index-K read
gate's verdict per accessor, the CUDA device and which kernel backends can run, and which SGLang
entry points load plugins (:mod:`sglang_dsv4_ext.tools.doctor.sglang_entry_points`).
"""

from __future__ import annotations

import argparse
import json
import sys

from sglang_dsv4_ext import __version__
from sglang_dsv4_ext.config import ConfigError, Fp4Budget, kill_switch_set, load_config
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.tools import exit_codes
from sglang_dsv4_ext.tools.doctor import sglang_entry_points


def _cuda_report() -> dict[str, object]:
    try:
        import torch
    except ImportError:
        return {"available": False, "reason": "torch is not installed"}
    if not torch.cuda.is_available():
        return {"available": False, "reason": "no CUDA device visible", "torch": torch.__version__}
    major, minor = torch.cuda.get_device_capability()
    return {
        "available": True,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "compute_capability": f"{major}.{minor}",
    }


def _kernel_backends(cuda: dict[str, object]) -> dict[str, str]:
    backends: dict[str, str] = {}
    try:
        import triton

        backends["triton"] = f"installed {triton.__version__}" + (
            "" if cuda.get("available") else " (compile-only here: no CUDA device)"
        )
    except ImportError:
        backends["triton"] = "missing"
    try:
        import kernels_sm120  # noqa: F401

        backends["kernels_sm120 (bf16 index-K)"] = "installed" + ("" if cuda.get("available") else " (no CUDA device)")
    except ImportError as exc:
        backends["kernels_sm120 (bf16 index-K)"] = f"missing: {exc}"
    for name in ("deep_gemm", "tilelang", "flashinfer"):
        try:
            __import__(name)
            backends[name] = "importable"
        except Exception as exc:  # these import CUDA libraries and may fail in many ways on CPU
            backends[name] = f"not importable ({type(exc).__name__})"
    return backends


def _versions_and_config(report: dict[str, object]):
    from sglang_dsv4_ext.runtime import activation

    try:
        report["sglang_version"] = activation.installed_sglang_version()
        import sglang

        report["sglang_path"] = str(getattr(sglang, "__path__", [""])[0])
    except activation.ActivationError as exc:
        report["sglang_version"] = None
        report["error"] = str(exc)
    try:
        config = load_config()
        report["config"] = config.as_dict()
    except ConfigError as exc:
        report["config"] = None
        report["error"] = str(exc)
        config = None
    return config


def _activate_for_report(report: dict[str, object], config) -> object:
    """Activate as the entry point would; the error (if any) goes into the report, never raised."""
    from sglang_dsv4_ext.runtime import activation

    error = report.get("error")
    blocked = activation.plugin_allowlist_block()
    report["plugin_allowlist"] = blocked or "allowed"
    if blocked:
        # Activating here would report what SGLang will never do: the servers skip our entry point.
        error = f"sglang-dsv4-ext is {blocked}"
        activation.STATE.statuses = {t.path: activation.BLOCKED for t in compat.TARGETS}
    elif config is not None and not kill_switch_set() and report.get("sglang_version"):
        try:
            activation.activate()
        except activation.ActivationError as exc:
            error = str(exc)
    elif kill_switch_set():
        activation.STATE.statuses = {t.path: activation.SKIPPED_BY_CONFIG for t in compat.TARGETS}
    return error


def _release_row(target: compat.Target, release: str, state) -> dict[str, object]:
    """A row as the running release has it; a row that release lacks says so (status not-in-release)."""
    from sglang_dsv4_ext.runtime import activation

    here = target.row_for(release)
    row: dict[str, object] = {"target": target.path, "area": target.area, "feature": target.feature}
    if here is None:
        row.update(
            status=activation.NOT_IN_RELEASE,
            signature=None,
            detail=f"SGLang {release} has no such target: {target.on(release).lacks}",
        )
    else:
        row.update(status=state.statuses.get(target.path, activation.REFUSED), signature=here.signature)
    # What each other supported release lacks for this row (one table serves them all).
    row["releases"] = _other_releases(target, release)
    return row


def _target_rows(state) -> list[dict[str, object]]:
    release = compat.rows_release(state.sglang_version or compat.installed_sglang_version())
    targets: list[dict[str, object]] = []
    for target in compat.TARGETS:
        row = _release_row(target, release, state)
        if target.path in state.accessor_verdicts:
            row["gate"] = state.accessor_verdicts[target.path]
        if target.path in state.details and "detail" not in row:
            row["detail"] = state.details[target.path]
        if target is compat.INDEXER_BYTES_PER_TOKEN and state.config is not None:
            # This row also changes stock behaviour for operators who never asked for bf16.
            row["fp4_budget"] = f"{state.config.fp4_budget}: SGLang's CUDA fp4 indexer is budgeted at " + (
                "its stock 132-B estimate"
                if state.config.fp4_budget == Fp4Budget.STOCK
                else "the 68 B it allocates (stock: 132 B; SGLANG_DSV4_FP4_BUDGET=stock)"
            )
        targets.append(row)
    return targets


MATCHES = "matches"  # a called name as the table expects it


def _other_releases(target: compat.Target, release: str) -> dict[str, str]:
    """What each supported release other than ``release`` has differently for this row (one table serves all)."""
    return {r.version: r.lacks for r in target.releases if r.version != release}


def _called_rows() -> list[dict[str, object]]:
    """Each SGLang name the hooks call (compat.CALLED), as the installed release has it, checked as activation
    checks it; ``releases``: what each other supported release has differently."""
    from sglang_dsv4_ext.runtime import activation

    release = compat.rows_release(compat.installed_sglang_version())
    called = compat.table_for(release, compat.CALLED)
    drifts = {d.target: d for d in compat.check_targets(called)}
    rows = []
    for target in called:
        row = {
            "called": target.path,
            "status": activation.DRIFTED if target.path in drifts else MATCHES,
            "area": target.area,
            "signature": target.signature,
        }
        if target.path in drifts:
            row["detail"] = drifts[target.path].describe()
        row["releases"] = _other_releases(target, release)
        rows.append(row)
    return rows


def _mark_fixed_in_source(report: dict[str, object], targets: list[dict[str, str]]) -> None:
    """Fixes the installed SGLang already carries in its source (patches/): the same verdict
    `sglang-dsv4 patches status` gives, so both commands agree on what is upstream."""
    from sglang_dsv4_ext.runtime import activation

    try:
        from sglang_dsv4_ext.tools.series.upstream import fix_verdicts, upstream_targets

        in_source = upstream_targets(fix_verdicts(report.get("sglang_path")))
    except Exception as exc:  # no series found, git missing: said in the report, never silent
        in_source, report["source_fix_error"] = {}, str(exc)
    for row in targets:
        if row["target"] in in_source:
            row["status"] = activation.NOT_NEEDED
            row["detail"] = f"fixed in SGLang's source (patch {in_source[row['target']]} is upstream)"


def _prefill_graph_report() -> str:
    """Whether this process's published server args run the breakable prefill graph (R3 wait-ahead fix)."""
    from sglang_dsv4_ext.tools.sglang_cpu import prefill_graph

    try:
        answer = prefill_graph.in_this_process()
    except Exception as exc:  # SGLang's runtime context unavailable (import failure): say so, do not fail
        return f"unknown ({type(exc).__name__}: {exc})"
    return answer.sentence() if answer else "no server args in this process"


def _capture_report(config, model, model_name: str) -> dict[str, object]:
    """The capture this configuration would run, checked as the pool build will check it (layer ids
    against ``model``, the directory on this machine's filesystem)."""
    from sglang_dsv4_ext.tools.recall import capture_check

    if config is None:
        return {"enabled": None}  # the configuration itself is refused (the report's error says why)
    if not (config.enabled and config.capture.enabled):
        return {"enabled": False}
    row: dict[str, object] = {"enabled": True, "directory": config.capture.directory, "model_config": model_name}
    try:
        captured = capture_check.check_capture(config.capture, model, model_name)
    except ConfigError as exc:
        row["problem"] = str(exc)
        return row
    row["layers"] = captured.layers
    row["c4_layers"] = captured.c4_layers
    return row


def coverage_notes(config, model) -> list[str]:
    """What the index-K dtype, the gate and integrity cover for ``model``, said plainly (doctor's coverage lines)."""
    if config is None or not config.enabled:
        return []
    layers = model.compress_ratios[: model.num_hidden_layers]
    c4_layers, low_ratio = layers.count(4), any(r in (1, 2) for r in layers)
    notes = []
    if c4_layers == 0:
        asked = " (SGLANG_DSV4_INDEX_K_DTYPE=bf16 is set: it has no effect here)" if config.bf16_index_k else ""
        notes.append(
            f"index-K dtype: {model.name} has no c4 layers, so bf16 index-K changes nothing{asked}; SGLang builds "
            f"its ratio-1/2 index-K as fp4 whatever the dtype"
        )
    if low_ratio:
        notes.append(
            "gate: ratio-1/2 index-K (DeepSeek-V4.1) is read through SGLang's own getters, which wait for the "
            "reader's layer (its kv_source layer loads no later), and through the sub-pool getters, which the gate "
            "makes wait for the kv_source layer"
        )
    if config.integrity_enabled:
        notes.append(
            "integrity: checks the c4 indexer's HiCache loads only, whole page rows (fp4's payload and scales "
            'included; fp4 in AITER\'s ROCm layout: the payload region only, labelled regions="payload only")'
            + ("; DeepSeek-V4.1's ratio-1/2 index-K is not checksummed" if low_ratio else "")
        )
    return notes


def collect_report(model=None, model_name: str = "") -> dict[str, object]:
    """Everything doctor says; capture layer ids are checked against ``model`` (default: the bundled config)."""
    from sglang_dsv4_ext.runtime import activation
    from sglang_dsv4_ext.tools.recall import capture_check
    from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model

    if model is None:
        model, model_name = dsv4_model.load_model(), capture_check.BUNDLED
    report: dict[str, object] = {"ext_version": __version__, "supported_sglang": list(compat.SUPPORTED_SGLANG_VERSIONS)}
    config = _versions_and_config(report)
    report["capture"] = _capture_report(config, model, model_name)
    report["coverage"] = coverage_notes(config, model)
    error = _activate_for_report(report, config)
    state = activation.STATE
    targets = _target_rows(state)
    _mark_fixed_in_source(report, targets)
    report["prefill_graph"] = _prefill_graph_report()
    report["entry_points"] = sglang_entry_points.report()
    report["activated"] = state.activated
    report["activation_seconds"] = round(state.seconds, 3)
    report["targets"] = targets
    report["called"] = _called_rows()
    drifted_calls = [row["detail"] for row in report["called"] if "detail" in row]
    report["error"] = (
        error
        or report["capture"].get("problem")
        or ("SGLang names the hooks call drifted: " + "; ".join(drifted_calls) if drifted_calls else None)
    )
    cuda = _cuda_report()
    report["cuda"] = cuda
    report["kernel_backends"] = _kernel_backends(cuda)
    report["logits_kernel"] = logits_kernel_choice(config)
    return report


def logits_kernel_choice(config) -> str:
    """Which kernel computes the c4 indexer's logits under this configuration (SGLANG_DSV4_FP8_LOGITS,
    SGLANG_DSV4_FP4_LOGITS)."""
    from sglang_dsv4_ext.runtime.index_k import fp8_logits

    if config is None:
        return "cannot tell (the configuration is not valid)"
    if not config.enabled:
        return "SGLang's own (the extension is off)"
    return fp8_logits.planned_kernel(config.index_k_dtype, config.fp8_logits, config.fp4_logits)


def _print_human(report: dict[str, object]) -> None:
    print(f"sglang-dsv4-ext {report['ext_version']}")
    print(
        f"SGLang          {report.get('sglang_version')}  ({report.get('sglang_path', '?')}; supported: "
        f"{', '.join(report['supported_sglang'])})"
    )
    print(f"config          {report.get('config')}")
    print(f"activated       {report['activated']} ({report['activation_seconds']} s)")
    print(f"prefill graph   {report['prefill_graph']}")
    print(f"SGLANG_PLUGINS  {report.get('plugin_allowlist')}")
    print(f"capture         {_capture_line(report['capture'])}")
    for note in report["coverage"]:
        print(f"coverage        {note}")
    for line in sglang_entry_points.lines(report["entry_points"]):
        print(line)
    if report.get("error"):
        print(f"error           {report['error']}")
    print()
    width = max(len(row["target"]) for row in report["targets"]) - len("sglang.srt.")
    print(f"{'target':<{width}}  {'status':<17}  gate")
    for row in report["targets"]:
        _print_target_row(row, width)
    print()
    print(f"{'called (not wrapped)':<{width}}  status")
    for row in report["called"]:
        print(f"{row['called'].removeprefix('sglang.srt.'):<{width}}  {row['status']}")
        if "detail" in row:
            print(f"{'':<{width}}  {row['detail']}")
        for version, lacks in row["releases"].items():
            print(f"{'':<{width}}  on SGLang {version}: {lacks}")
    print()
    cuda = report["cuda"]
    if cuda.get("available"):
        print(f"CUDA            {cuda['device']} (compute capability {cuda['compute_capability']})")
    else:
        print(f"CUDA            none ({cuda.get('reason')})")
    for name, status in report["kernel_backends"].items():
        print(f"  {name:<30} {status}")
    print(f"indexer logits  {report['logits_kernel']}")


def _print_target_row(row: dict[str, object], width: int) -> None:
    from sglang_dsv4_ext.runtime import activation

    name = row["target"].removeprefix("sglang.srt.")
    print(f"{name:<{width}}  {row['status']:<17}  {row.get('gate', '')}")
    if "fp4_budget" in row:
        print(f"{'':<{width}}  fp4 budget: {row['fp4_budget']}")
    if row["status"] == activation.NOT_IN_RELEASE:
        print(f"{'':<{width}}  {row['detail']}")
    for version, lacks in row.get("releases", {}).items():
        print(f"{'':<{width}}  on SGLang {version}: {lacks}")


def _capture_line(row: dict[str, object]) -> str:
    if row["enabled"] is None:
        return "not checked: the configuration is invalid (see error)"
    if not row["enabled"]:
        return "off"
    if "problem" in row:
        return f"REFUSED at pool build: {row['problem']}"
    layers = ",".join(map(str, row["layers"]))
    return (
        f"{row['directory']}: c4 layers {layers} ({len(row['layers'])} of {row['c4_layers']}; ids checked "
        f"against {row['model_config']})"
    )


def run(args: argparse.Namespace) -> int:
    import logging

    from sglang_dsv4_ext.errors import PlanInputError
    from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model

    model = None
    if args.model_config:
        try:
            model = dsv4_model.load_model(args.model_config)
        except PlanInputError as exc:
            print(f"sglang-dsv4 doctor: error: {exc}", file=sys.stderr)
            return exit_codes.USAGE
    # Activation logs every applied hook at INFO; doctor's output is the report.
    logging.getLogger("sglang").setLevel(logging.WARNING)
    report = collect_report(model, model.name if model else "")
    if args.json:
        json.dump(report, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        _print_human(report)
    return exit_codes.ATTENTION if report.get("error") else exit_codes.OK


def add_subparser(subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="report SGLang, the configuration in force and the status of every patched target",
        description="Activate the extension in this process as SGLang would and report: SGLang version "
        "and path, extension version, configuration (SGLANG_DSV4_* variables), each patched target's status "
        "(applied, not-needed, skipped-by-config, drifted, refused), whether each SGLang name the hooks call without "
        "wrapping matches the signature expected, the index-K gate verdict per accessor, "
        "CUDA device and kernel backends; index-K capture settings checked as the pool build will check them. "
        "Exit code 1 if activation or the pool build would refuse.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--model-config",
        metavar="PATH",
        help="the model's config.json (or its directory) to check capture layer ids against "
        "(default: the bundled DeepSeek-V4-Flash config)",
    )
    parser.set_defaults(func=run)
