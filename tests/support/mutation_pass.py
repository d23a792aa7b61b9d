"""Mutation pass: disable one fix at a time in a copy of the repository and run the tests that claim it.

Run from the repository root:  python -m tests.support.mutation_pass [--only NAME ...] [--list]

Each row names a fix, the exact source text that implements it, a replacement that disables it,
and the tests that must then fail. For every row the script copies the working tree (without
.git, .venv and build outputs) to a temporary directory, applies the one replacement, and runs
those tests there with pytest in a fresh process. A row whose tests still pass is a test gap;
a row whose source text is no longer found is stale (the code moved) and must be updated: both
make the script exit 1. Not part of the suite: each row costs one SGLang import (~10 s) plus its
tests. Add a row with every new fix (docs/adding-a-fix.md).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
_IGNORE = shutil.ignore_patterns(".git", ".venv", ".wt", ".gpu_carry", ".whl", "*.egg-info", "__pycache__",
                                 "build", "dist", "serve-logs", "runs")


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # file relative to the repository root
    original: str  # exact text of the fix (must occur exactly once)
    mutant: str  # the same place with the fix disabled
    tests: Tuple[str, ...]  # pytest node ids or paths that must fail on the mutant


ROW_TIMEOUT_S = 900  # a mutant that makes its tests hang is a test defect, not a catch
_SUP = "tests/integration/test_serve_supervise.py::test_a_fatal_signal_stops_the_whole_stack_and_its_descendants"
_SERVE = "tests/unit/serving/test_bad_input_serve.py"
_PLAN = "tests/unit/cli/test_bad_input_plan.py"


MUTATIONS: List[Mutation] = [
    Mutation("activation verifies every hook is installed", "sglang_dsv4_ext/activation.py",
             "    if missing:\n        raise ActivationError(\n            \"HookRegistry did not install",
             "    if False:\n        raise ActivationError(\n            \"HookRegistry did not install",
             ("tests/integration/test_activation_verify.py",)),
    Mutation("activation: the entry point defers to SGLang's imports", "sglang_dsv4_ext/activation.py",
             "        _follow_sglang_imports()\n", "        _complete()\n",
             ("tests/integration/test_activation_scope.py::test_entry_point_imports_no_dsv4_or_hicache_module",)),
    Mutation("activation: a drift is refused only where a DSV4 pool is built", "sglang_dsv4_ext/activation.py",
             "            _install_guards_only(guards)\n        else:",
             "            raise ActivationError('; '.join(reasons))\n        else:",
             ("tests/integration/test_activation_scope.py::"
              "test_drift_leaves_the_module_stock_with_a_warning_and_other_models_serve",)),
    Mutation("activation: a DSV4 pool build completes activation", "sglang_dsv4_ext/activation.py",
             "        guards.append(Hook(target, _before_dsv4_build, \"before\"))",
             "        pass",
             ("tests/integration/test_activation_scope.py::test_drift_refuses_the_dsv4_pool_naming_the_target",
              "tests/integration/test_activation_scope.py::"
              "test_building_a_dsv4_pool_completes_and_verifies_every_target")),
    Mutation("serve: supervision watches each server for a wedge", "sglang_dsv4_ext/serving/supervise.py",
             "        return self._watch(wedge.detectors_for(servers, self.wedge_seconds))",
             "        return self._watch([])",
             ("tests/integration/test_serve_supervise.py::test_a_wedged_decode_server_is_named_and_the_stack_stopped",)),
    Mutation("repro: the extension check refuses before any request", "sglang_dsv4_ext/repro/runner.py",
             "    extension_check.check(states, expect)\n", "    pass\n",
             ("tests/unit/repro/test_expect_extension.py",)),
    Mutation("capture: the size cap stops capture", "sglang_dsv4_ext/index_k_capture.py",
             "        if self.queued_bytes + nbytes > self.max_bytes:", "        if False:",
             ("tests/unit/hooks/test_index_k_capture.py::test_size_cap_stops_capture_with_one_log_line",)),
    Mutation("capture: key rows gathered through the request's page table", "sglang_dsv4_ext/index_k_capture.py",
             "    slots = table_rows.long()[:, t // page_size] * page_size + t % page_size",
             "    slots = table_rows.long()[:, 0:1] * page_size + t",
             ("tests/unit/hooks/test_index_k_capture.py::"
              "test_capture_holds_exactly_the_rows_the_indexer_read_and_recall_reads_it",)),
    Mutation("integrity: pages no reader verified are counted and said", "sglang_dsv4_ext/index_k_integrity.py",
             "        self._note_unverified(layer, self.pending.get(layer))\n", "",
             ("tests/unit/hooks/test_integrity.py::test_a_load_without_its_layer_0_still_counts_what_it_replaces",)),
    Mutation("serve: the integrity mode reaches every child", "sglang_dsv4_ext/serving/launch_plan.py",
             "                        integrity=spec.index_k_integrity).to_env()", "                        ).to_env()",
             ("tests/unit/serving/test_serve_dryrun.py::"
              "test_integrity_reaches_every_child_and_pd_servers_get_sglangs_kv_checksum",)),
    Mutation("integrity: a new load drops the last load's pending pages", "sglang_dsv4_ext/index_k_integrity.py",
             "        for layer in sorted(self.pending):\n"
             "            self._note_unverified(layer, self.pending.pop(layer))\n",
             "",
             ("tests/unit/hooks/test_integrity.py::"
              "test_a_new_load_drops_what_the_last_left_pending_instead_of_verifying_it_later",)),
    Mutation("activation: no guard on a build point SGLang does not have", "sglang_dsv4_ext/activation.py",
             "        try:\n            compat.resolve(target.path)\n        except (ImportError, AttributeError, "
             "ValueError):\n            continue\n        guards.append(",
             "        guards.append(",
             ("tests/integration/test_activation_scope.py::"
              "test_moved_pool_classes_stop_no_server_and_the_model_guard_refuses_dsv4",)),
    Mutation("recall: an unreadable capture file is named, not a traceback", "sglang_dsv4_ext/recall/cli.py",
             "    except (FileNotFoundError, CaptureFileError) as exc:", "    except FileNotFoundError as exc:",
             ("tests/unit/recall/test_recall.py::test_unreadable_capture_files_are_named_without_a_traceback",)),
    Mutation("capture: files appear whole (NAME.part, then linked)", "sglang_dsv4_ext/index_k_capture.py",
             "        finally:\n            _unlink_quietly(part)\n", "",
             ("tests/unit/hooks/test_index_k_capture.py::test_a_failed_write_leaves_no_file_and_a_good_one_no_part",)),
    Mutation("serve: each child's environment is checked before start", "sglang_dsv4_ext/serving/cli.py",
             "        _check_children_config(plan)\n", "",
             ("tests/unit/serving/test_serve_dryrun.py::"
              "test_capture_in_the_shell_is_checked_against_what_the_children_see",)),
    Mutation("sizing: bf16 index-K budgeted at 256 B", "sglang_dsv4_ext/hooks/sizing.py",
             "    if dtype == BF16:\n        return index_k_bytes_per_token(BF16, index_head_dim)",
             "    if False:\n        return index_k_bytes_per_token(BF16, index_head_dim)",
             ("tests/unit/hooks/test_sizing.py",)),
    Mutation("pool: startup self-check allocation == budget", "sglang_dsv4_ext/hooks/pool.py",
             "    if allocated != budgeted:", "    if False:",
             ("tests/unit/hooks/test_sizing.py",)),
    Mutation("pool: bf16 indexer pool built for bf16", "sglang_dsv4_ext/hooks/pool.py",
             "    if force_fp4 or effective_index_k_dtype(False) != BF16:", "    if True:",
             ("tests/unit/hooks/test_bf16_storage.py", "tests/unit/hooks/test_sizing.py")),
    Mutation("PD: layout string carries c4idx:bf16", "sglang_dsv4_ext/hooks/pd.py",
             '        return f"{result},{INDEX_K_LAYOUT_TAG}:bf16"', "        return None",
             ("tests/unit/hooks/test_bf16_storage.py",)),
    Mutation("HiCache: index-K region page-aligned only", "sglang_dsv4_ext/hooks/hicache.py",
             "    return [dataclasses.replace(region, page_aligned_only=True) for region in result]",
             "    return None",
             ("tests/unit/hooks/test_bf16_storage.py",)),
    Mutation("HiCache: L3 keys tagged for bf16", "sglang_dsv4_ext/hooks/hicache.py",
             "        self.storage_format_tag = ", "        _unused_tag = ",
             ("tests/unit/hooks/test_bf16_storage.py",)),
    Mutation("gate: sub-pool read waits for a pending load", "sglang_dsv4_ext/hooks/gate/subpool.py",
             "    if waited_upto(counter) >= local:", "    if True:",
             ("tests/unit/hooks/test_gate.py",)),
    Mutation("gate: replay waits for layer 0 first (R3)", "sglang_dsv4_ext/hooks/gate/replay.py",
             "        counter.wait_until(0)\n", "        pass\n",
             ("tests/integration/test_gate_prefill_replay.py",)),
    Mutation("gate: wait one layer ahead during replay (R3)", "sglang_dsv4_ext/hooks/gate/waits.py",
             "        ahead = local + 1", "        ahead = local",
             ("tests/integration/test_gate_prefill_replay.py",)),
    Mutation("indexer: non-paged fp8 branch off for bf16", "sglang_dsv4_ext/hooks/indexer.py",
             "        return False  # the non-paged path gathers fp8 rows for DeepGEMM",
             "        pass",
             ("tests/unit/hooks/test_indexer.py",)),
    Mutation("indexer: stored rows carry their RoPE position (seq_len - 4)", "sglang_dsv4_ext/hooks/indexer.py",
             "_extract_positions_from_plan(plan, ratio).clamp(min=0)\n",
             "_extract_positions_from_plan(plan, ratio).clamp(min=0) + 1\n",
             ("tests/unit/hooks/test_indexer.py::test_bf16_store_then_select_end_to_end_with_the_real_kernels",)),
    Mutation("sizing: fp4 on CUDA budgeted at the 68 B allocated (exact)", "sglang_dsv4_ext/hooks/sizing.py",
             "        if stock:\n            return original(index_head_dim, use_fp4_indexer)",
             "        if True:\n            return original(index_head_dim, use_fp4_indexer)",
             ("tests/unit/hooks/test_fp4_budget.py",)),
    # --- repro ---
    Mutation("repro: --extra-body may not set harness keys", "sglang_dsv4_ext/repro/settings.py",
             "    owned = sorted(k for k in body if k in HARNESS_BODY_KEYS)\n    if owned:",
             "    owned = sorted(k for k in body if k in HARNESS_BODY_KEYS)\n    if False:",
             ("tests/unit/repro/test_bad_input_run.py",)),
    Mutation("repro: NaN/inf refused for float settings", "sglang_dsv4_ext/repro/settings.py",
             "    if not math.isfinite(value):", "    if False:",
             ("tests/unit/repro/test_bad_input_run.py",)),
    Mutation("repro: a used --out is refused", "sglang_dsv4_ext/repro/rundir.py",
             "    if _holds_something(out):", "    if False:",
             ("tests/unit/repro/test_bad_input_run.py",)),
    Mutation("repro: --api-key-env checked before the directory is claimed", "sglang_dsv4_ext/repro/runner.py",
             "        headers = auth_headers(self.cfg.api_key_env)  # refused before any file is created\n",
             "        self.cfg.out = rundir.claim(self.cfg.out, self.out_given)\n"
             "        open(os.path.join(self.cfg.out, 'requests.jsonl'), 'w').close()\n"
             "        headers = auth_headers(self.cfg.api_key_env)\n",
             ("tests/unit/repro/test_bad_input_run.py",)),
    Mutation("repro: exactly one call of the requested tool", "sglang_dsv4_ext/repro/verdict.py",
             "    if names != [expected_tool]:", "    if expected_tool not in names:",
             ("tests/unit/repro/test_verdict_table.py",)),
    Mutation("repro: unrequested arguments fail in exact mode", "sglang_dsv4_ext/repro/verdict.py",
             "    if added:\n", "    if False:\n",
             ("tests/unit/repro/test_verdict_table.py",)),
    Mutation("repro: a reply of the wrong shape is a protocol_error", "sglang_dsv4_ext/repro/client.py",
             "    except ValidationError as exc:\n        return _protocol_error(\"reply is not a chat completion\"",
             "    except ZeroDivisionError as exc:\n        return _protocol_error(\"reply is not a chat completion\"",
             ("tests/unit/repro/test_verdict_table.py",
              "tests/integration/test_repro_harness.py::test_replies_of_the_wrong_shape_become_verdicts_and_the_run_completes")),
    Mutation("repro: SIGINT/SIGTERM stop the run cleanly", "sglang_dsv4_ext/repro/runner.py",
             "                loop.add_signal_handler(sig, self._on_signal, sig, task)",
             "                raise NotImplementedError",
             ("tests/integration/test_repro_harness.py::test_a_signal_flushes_the_records_and_writes_an_interrupted_summary",)),
    Mutation("repro: record errors name FILE:LINE", "sglang_dsv4_ext/repro/rundir.py",
             '        raise ReproInputError(f"{where}: not a JSON line{cut}: {exc}") from None',
             "        raise",
             ("tests/unit/repro/test_bad_input_compare.py", "tests/unit/repro/test_bad_input_reparse.py")),
    Mutation("repro: --tokenizer path checked", "sglang_dsv4_ext/repro/reparse.py",
             "    if not os.path.isdir(path):", "    if False:",
             ("tests/unit/repro/test_bad_input_reparse.py::test_reparse_tokenizer_that_does_not_exist",)),
    # --- serve, plan, configuration ---
    Mutation("serve: every fatal signal stops the stack", "sglang_dsv4_ext/serving/supervise.py",
             "        for sig in FATAL_SIGNALS:", "        for sig in (signal.SIGINT, signal.SIGTERM):",
             (f"{_SUP}[SIGHUP]",)),
    Mutation("serve: descendants outside the process group are stopped", "sglang_dsv4_ext/serving/supervise.py",
             "        for p in self.alive():\n            _send(p, sig)",
             "        for p in []:\n            _send(p, sig)",
             (f"{_SUP}[SIGTERM]",)),
    Mutation("serve: validation never imports a user's router module", "sglang_dsv4_ext/serving/validate.py",
             "    if package != TRUSTED_ROUTER_PACKAGE:\n"
             "        return None, f\"{module} is not SGLang's router ({TRUSTED_ROUTER_PACKAGE}), "
             "and user modules are not imported\"\n"
             "    try:\n"
             "        mod = importlib.import_module(TRUSTED_ROUTER_PACKAGE + \".router_args\")",
             "    try:\n        mod = importlib.import_module(package + \".router_args\")",
             (f"{_SERVE}::test_router_module_is_never_executed_by_validation",)),
    Mutation("serve: children never inherit SGLANG_DSV4_BF16_INDEX_K", "sglang_dsv4_ext/serving/launch_plan.py",
             "UNSET_IN_CHILDREN = (ENV_BF16_ALIAS,)", "UNSET_IN_CHILDREN = ()",
             (f"{_SERVE}::test_inherited_bf16_alias_does_not_reach_the_children_of_an_fp8_stack", f"{_SUP}[SIGHUP]")),
    Mutation("serve: a flag repeated inside one source is refused", "sglang_dsv4_ext/serving/validate.py",
             "        if dest in seen and dest not in accumulating:", "        if False:",
             (f"{_SERVE}::test_bad_flag_is_refused_naming_it[flag repeated in one source]",)),
    Mutation("serve: env names with '=' or NUL are refused", "sglang_dsv4_ext/serving/preset.py",
             '    if "=" in name or "\\0" in name:', "    if False:",
             (f"{_SERVE}::test_bad_preset_is_refused_naming_the_key[env name with '=']",)),
    Mutation("serve: --health-timeout must be finite", "sglang_dsv4_ext/arg_types.py",
             "        if not math.isfinite(value) or value < minimum",
             "        if value < minimum",
             (f"{_SERVE}::test_bad_flag_is_refused_naming_it[health timeout nan]",)),
    Mutation("serve: --python must exist", "sglang_dsv4_ext/serving/cli.py",
             "    check_python(args.python)\n", "    pass\n",
             (f"{_SERVE}::test_bad_flag_is_refused_naming_it[children's interpreter missing]",)),
    Mutation("serve: --log-dir must not be a file", "sglang_dsv4_ext/serving/cli.py",
             "    if os.path.exists(log_dir) and not os.path.isdir(log_dir):", "    if False:",
             (f"{_SERVE}::test_log_dir_that_is_a_file_is_refused_before_anything_starts",)),
    Mutation("plan: a model config must be a JSON object", "sglang_dsv4_ext/dsv4_model.py",
             "    if not isinstance(raw, dict):", "    if False:",
             (f"{_PLAN}::test_bad_model_config_is_refused_naming_the_field[valid JSON, not an object]",)),
    Mutation("plan: model dimensions must be positive", "sglang_dsv4_ext/dsv4_model.py",
             "    if not _is_int(value) or value <= 0:", "    if not _is_int(value):",
             (f"{_PLAN}::test_bad_model_config_is_refused_naming_the_field[index_head_dim 0]",)),
    Mutation("config: an empty SGLANG_DSV4_BF16_INDEX_K is unset", "sglang_dsv4_ext/config.py",
             '(env.get(ENV_BF16_ALIAS) or "").strip()', "env.get(ENV_BF16_ALIAS) is not None",
             ("tests/unit/cli/test_bad_input_config.py::test_empty_means_unset[empty alias next to bf16]",)),
    # --- series tooling ---
    Mutation("series: a stale index.lock is refused before apply", "sglang_dsv4_ext/series/rebase.py",
             "    if lock.exists():\n", "    if False:\n",
             ("tests/unit/series/test_bad_input.py::test_apply_with_a_stale_index_lock_is_refused_and_changes_nothing",)),
    Mutation("series: a failed apply restores the repository", "sglang_dsv4_ext/series/checkrepo.py",
             "        _restore(repo, head_ref, head)", "        pass",
             ("tests/unit/series/test_bad_input.py::test_apply_that_fails_midway_leaves_the_repository_as_it_was",)),
    Mutation("series: export into an untracked series dir keeps a backup", "sglang_dsv4_ext/series/rebase.py",
             "        shutil.copytree(series_dir, backup)\n", "        pass\n",
             ("tests/unit/series/test_bad_input.py::test_export_into_a_series_dir_git_does_not_track_keeps_a_backup",)),
    # --- kernels, decode reads (round 21) ---
    Mutation("logits: the item grid finds parts past the first 256 rows", "kernels_sm120/paged_mqa_logits.py",
             "        base += tl.sum(parts, axis=0)\n    return row, part", "        pass\n    return row, part",
             ("tests/unit/kernels_sm120/test_semantics.py::test_logits_batch_balanced_chunks_over_many_rows",)),
    Mutation("logits: key loops count from 0 so the item grid stays pipelined", "kernels_sm120/paged_mqa_logits.py",
             "            for pb_i in range(0, tl.cdiv(n_pages - p_first, PAGE_BLOCK)):\n"
             "                pb, ids, lo, blk_end = page_id_block(pt_row, p_first, pb_i, n_pages, start, "
             "compute_end,\n"
             "                                                     PAGE, PAGE_BLOCK)\n"
             "                for i in range(0, tl.cdiv(blk_end - lo, BLOCK_N)):\n"
             "                    t = lo + i * BLOCK_N + offs_n\n",
             "            for pb in range(p_first, n_pages, PAGE_BLOCK):\n"
             "                pb, ids, lo, blk_end = page_id_block(pt_row, pb, 0, n_pages, start, compute_end,\n"
             "                                                     PAGE, PAGE_BLOCK)\n"
             "                for n0 in range(lo, blk_end, BLOCK_N):\n"
             "                    t = n0 + offs_n\n",
             ("tests/unit/kernels_sm120/test_aot.py::test_decode_logits_keep_their_pipeline_stages",)),
    Mutation("gather: a program past the last item reads nothing", "benchmarks/page_gather.py",
             "        start = tl.maximum(part, 0) * chunk", "        start = part * chunk",
             ("tests/unit/kernels_sm120/test_page_gather.py::test_programs_past_the_last_item_read_nothing",)),
    Mutation("decode reads: the indexer reads every c4 row", "sglang_dsv4_ext/decode_reads.py",
             '"indexer": c4 * (context // 4) * index_k_bytes_per_token',
             '"indexer": c4 * min(model.index_topk, context // 4) * index_k_bytes_per_token',
             ("tests/unit/cli/test_plan_decode_reads.py::test_sums_equal_a_walk_over_the_layers",)),
    Mutation("plan: recall is weighted by each layer's rows", "sglang_dsv4_ext/plan.py",
             "sum(n * r for n, r in m) / sum(n for n, _ in m)", "sum(r for _, r in m) / len(m)",
             ("tests/unit/cli/test_plan_decode_reads.py::"
              "test_plan_shows_rows_weighted_recall_and_n_a_where_nothing_was_measured",)),
    Mutation("plan: a format with no measured rows has no recall", "sglang_dsv4_ext/plan.py",
             "/ sum(n for n, _ in m) if m else None)", "/ sum(n for n, _ in m) if m else 0.0)",
             ("tests/unit/cli/test_plan_decode_reads.py::"
              "test_plan_shows_rows_weighted_recall_and_n_a_where_nothing_was_measured",)),
    Mutation("plan: --context refuses lengths below one token", "sglang_dsv4_ext/plan.py",
             "        if not digits.isdigit() or int(digits) * scale < 1:", "        if not digits.isdigit():",
             ("tests/unit/cli/test_plan_decode_reads.py::test_bad_context_is_refused_naming_the_flag",)),
]


def _existing(tests: Sequence[str], root: Path) -> List[str]:
    return [t for t in tests if (root / t.split("::")[0]).exists()]


def run_one(mutation: Mutation, python: str) -> Tuple[str, float]:
    """'caught', 'MISSED', 'HUNG: why' or 'STALE: why', and the seconds it took."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dsv4-mutant-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=_IGNORE, symlinks=True)
        target = copy / mutation.path
        if not target.exists():
            return f"STALE: {mutation.path} does not exist", time.monotonic() - started
        text = target.read_text()
        if text.count(mutation.original) != 1:
            return (f"STALE: the fix's text occurs {text.count(mutation.original)} times in {mutation.path}",
                    time.monotonic() - started)
        target.write_text(text.replace(mutation.original, mutation.mutant))
        tests = _existing(mutation.tests, copy)
        if not tests:
            return f"STALE: none of {', '.join(mutation.tests)} exists", time.monotonic() - started
        try:
            proc = subprocess.run([python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests], cwd=copy,
                                  env={**_env(), "PYTHONPATH": str(copy)}, capture_output=True, text=True,
                                  timeout=ROW_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"HUNG: the tests ran past {ROW_TIMEOUT_S} s on the mutant", time.monotonic() - started
        verdict = "caught" if proc.returncode == 1 else ("MISSED" if proc.returncode == 0 else
                                                         f"STALE: pytest exit {proc.returncode}")
        return verdict, time.monotonic() - started


def _env():
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_DSV4")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.mutation_pass", description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only rows whose name contains one of these")
    parser.add_argument("--list", action="store_true", help="list the rows and exit")
    parser.add_argument("--python", default=sys.executable, help="interpreter with SGLang installed")
    args = parser.parse_args(argv)
    rows = [m for m in MUTATIONS if not args.only or any(o in m.name for o in args.only)]
    if args.list:
        for m in rows:
            print(f"{m.name}: {m.path} -> {', '.join(m.tests)}")
        return 0
    results = []
    for i, m in enumerate(rows, 1):
        print(f"[{i}/{len(rows)}] {m.name} ...", file=sys.stderr, flush=True)
        verdict, seconds = run_one(m, args.python)
        results.append((m, verdict, seconds))
    width = max(len(m.name) for m in rows)
    print(f"{'fix disabled':<{width}}  {'verdict':<8}  seconds  tests")
    for m, verdict, seconds in results:
        print(f"{m.name:<{width}}  {verdict:<8}  {seconds:7.1f}  {', '.join(m.tests)}")
    return 0 if all(v == "caught" for _, v, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
