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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", ".wt", ".gpu_carry", ".whl", "*.egg-info", "__pycache__", "build", "dist", "serve-logs", "runs"
)


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # file relative to the repository root
    original: str  # exact text of the fix (must occur exactly once)
    mutant: str  # the same place with the fix disabled
    tests: tuple[str, ...]  # pytest node ids or paths that must fail on the mutant


ROW_TIMEOUT_S = 900  # a mutant that makes its tests hang is a test defect, not a catch
_SUP = "tests/integration/test_serve_supervise.py::test_a_fatal_signal_stops_the_whole_stack_and_its_descendants"
_SERVE = "tests/unit/serving/test_bad_input_serve.py"
_PLAN = "tests/unit/cli/test_bad_input_plan.py"
_SERIES = "tests/unit/series/test_bad_input.py"
_RELEASES = "tests/unit/series/test_series_releases.py"
_RECORD_REPLAY = (
    "tests/unit/series/test_series_record.py::test_a_recorded_rebase_replays_on_a_fresh_clone_byte_for_byte"
)
_RECORD_OWN_CACHE = (
    "tests/unit/series/test_series_record.py::"
    "test_rerere_replays_only_the_records_resolutions_and_the_repositorys_cache_comes_back"
)
_CUT = "tests/integration/test_repro_harness.py::test_a_cut_stream_is_a_transport_failure_with_its_partial_output_kept"
_CAP = "tests/unit/hooks/test_index_k_capture.py"
_REC = "tests/unit/recall/test_recall.py"
_REUSE = "tests/unit/hooks/test_integrity_host_reuse.py::"
_COUNTS = "tests/unit/hooks/test_integrity_counts.py::"
_SUPERVISE = "tests/integration/test_serve_supervise.py"
_WEDGE = "tests/unit/serving/test_wedge.py"
_CONFIG = "tests/unit/cli/test_bad_input_config.py"
_SCOPE = "tests/integration/test_activation_scope.py"
_ACT = "tests/integration/test_serve_activation_check.py"
_ACT_CHECK = "sglang_dsv4_ext/tools/serving/activation_check.py"
_ROWS = "tests/unit/cli/test_settings_rows.py"
_R0522 = "tests/integration/test_release_0_5_22.py::"
_R0522_PATHS = f"{_R0522}test_release_hook_paths_pass_on_the_real_0_5_22_classes"
_HARNESS = "tests/integration/test_repro_harness.py"
_RUN = "tests/unit/repro/test_bad_input_run.py"
_REPORT = "tests/unit/report/test_bad_input_report.py"
_UNREADABLE = f"{_RUN}::test_unreadable_metrics_are_unavailable_evidence_and_the_summary_is_written"


MUTATIONS: list[Mutation] = [
    Mutation(
        "activation verifies every hook is installed",
        "sglang_dsv4_ext/runtime/activation.py",
        '    if missing:\n        raise ActivationError(\n            "HookRegistry did not install',
        '    if False:\n        raise ActivationError(\n            "HookRegistry did not install',
        ("tests/integration/test_activation_verify.py",),
    ),
    Mutation(
        "activation: the entry point defers to SGLang's imports",
        "sglang_dsv4_ext/runtime/activation.py",
        "        _follow_sglang_imports()\n",
        "        _complete()\n",
        ("tests/integration/test_activation_scope.py::test_entry_point_imports_no_dsv4_or_hicache_module",),
    ),
    Mutation(
        "activation: a drift is refused only where a DSV4 pool is built",
        "sglang_dsv4_ext/runtime/activation.py",
        "            _install_guards_only(guards)\n        else:",
        "            raise ActivationError('; '.join(reasons))\n        else:",
        (
            "tests/integration/test_activation_scope.py::"
            "test_drift_leaves_the_module_stock_with_a_warning_and_other_models_serve",
        ),
    ),
    Mutation(
        "activation: a DSV4 pool build completes activation",
        "sglang_dsv4_ext/runtime/activation.py",
        '        guards.append(Hook(target, _before_dsv4_build, "before"))',
        "        pass",
        (
            "tests/integration/test_activation_scope.py::test_drift_refuses_the_dsv4_pool_naming_the_target",
            "tests/integration/test_activation_scope.py::test_building_a_dsv4_pool_completes_and_verifies_every_target",
        ),
    ),
    Mutation(
        "serve: supervision watches each server for a wedge",
        "sglang_dsv4_ext/tools/serving/supervise.py",
        "        return self._watch(wedge.detectors_for(servers, self.wedge_seconds))",
        "        return self._watch([])",
        ("tests/integration/test_serve_supervise.py::test_a_wedged_decode_server_is_named_and_the_stack_stopped",),
    ),
    Mutation(
        "repro: the extension check refuses before any request",
        "sglang_dsv4_ext/tools/repro/runner.py",
        "    extension_check.check(states, expect, expect_dtype)\n",
        "    pass\n",
        ("tests/unit/repro/test_expect_extension.py",),
    ),
    Mutation(
        "capture: the size cap stops capture",
        "sglang_dsv4_ext/runtime/index_k/capture.py",
        "        if self.queued_bytes + nbytes > self.max_bytes:",
        "        if False:",
        ("tests/unit/hooks/test_index_k_capture.py::test_size_cap_stops_capture_with_one_log_line",),
    ),
    Mutation(
        "capture: key rows gathered through the request's page table",
        "sglang_dsv4_ext/runtime/index_k/capture.py",
        "    slots = table_row.long()[t // page_size] * page_size + t % page_size",
        "    slots = table_row.long()[0] * page_size + t",
        (
            "tests/unit/hooks/test_index_k_capture.py::"
            "test_capture_holds_exactly_the_rows_the_indexer_read_and_recall_reads_it",
        ),
    ),
    Mutation(
        "integrity: pages no reader verified are counted and said",
        "sglang_dsv4_ext/runtime/index_k/integrity.py",
        "        self._note_unverified(layer, self.pending.get(layer))\n",
        "",
        ("tests/unit/hooks/test_integrity.py::test_a_load_without_its_layer_0_still_counts_what_it_replaces",),
    ),
    Mutation(
        "serve: the integrity mode reaches every child",
        "sglang_dsv4_ext/config.py",
        ('        preset_key="index_k_integrity",\n        children=SET_BY_STACK,\n'),
        '        preset_key="index_k_integrity",\n',
        (
            "tests/unit/serving/test_serve_dryrun.py::"
            "test_integrity_reaches_every_child_and_pd_servers_get_sglangs_kv_checksum",
        ),
    ),
    Mutation(
        "integrity: a new load drops the last load's pending pages",
        "sglang_dsv4_ext/runtime/index_k/integrity.py",
        "        for layer in sorted(self.pending):\n"
        "            self._note_unverified(layer, self.pending.pop(layer))\n",
        "",
        (
            "tests/unit/hooks/test_integrity.py::"
            "test_a_new_load_drops_what_the_last_left_pending_instead_of_verifying_it_later",
        ),
    ),
    Mutation(
        "activation: no guard on a build point SGLang does not have",
        "sglang_dsv4_ext/runtime/activation.py",
        "        try:\n            current = compat.resolve(target.path)[2]\n        except (ImportError, "
        "AttributeError, ValueError):\n            continue\n",
        "        current = compat.resolve(target.path)[2]\n",
        (
            "tests/integration/test_activation_scope.py::"
            "test_moved_pool_classes_stop_no_server_and_the_model_guard_refuses_dsv4",
        ),
    ),
    Mutation(
        "recall: an unreadable capture file is named, not a traceback",
        "sglang_dsv4_ext/tools/recall/cli.py",
        "    except (FileNotFoundError, CaptureFileError) as exc:",
        "    except FileNotFoundError as exc:",
        ("tests/unit/recall/test_recall.py::test_unreadable_capture_files_are_named_without_a_traceback",),
    ),
    # --- capture and recall: evidence that cannot lie ---
    Mutation(
        "capture: the store hands recall its keys before bf16 rounding",
        "sglang_dsv4_ext/runtime/hooks/indexer.py",
        "    if capture is not None:\n        capture.note_stored(",
        "    if False:\n        capture.note_stored(",
        (f"{_CAP}::test_capture_carries_the_keys_before_bf16_rounding_and_recall_scores_bf16_against_them",),
    ),
    Mutation(
        "capture: fp32 keys of another forward pass are not used",
        "sglang_dsv4_ext/runtime/index_k/capture.py",
        "        if stored is not None and stored.forward_batch is not forward_batch:",
        "        if False:",
        (f"{_CAP}::test_keys_stored_before_the_capture_saw_them_leave_bf16_as_the_reference",),
    ),
    Mutation(
        "capture: no device value read on the forward thread",
        "sglang_dsv4_ext/runtime/index_k/capture.py",
        "        lens = call.lens.index_select(0, index).long()\n",
        "        lens = call.lens.index_select(0, index).long().cpu()\n",
        (f"{_CAP}::test_a_capturing_call_reads_no_device_value_and_copies_non_blocking",),
    ),
    Mutation(
        "capture: device->host copies are non-blocking",
        "sglang_dsv4_ext/runtime/index_k/capture.py",
        "    out.copy_(t, non_blocking=True)",
        "    out.copy_(t)",
        (f"{_CAP}::test_a_capturing_call_reads_no_device_value_and_copies_non_blocking",),
    ),
    Mutation(
        "capture: the writer checks every row read the shared slots",
        "sglang_dsv4_ext/runtime/index_k/capture.py",
        '        if not torch.equal(table_slots(host["tables"][r], length, page_size), slots[:length]):',
        "        if False:",
        (f"{_CAP}::test_an_inconsistent_capture_is_not_written",),
    ),
    Mutation(
        "capture: the writer refuses keys past the host-side bound",
        "sglang_dsv4_ext/runtime/index_k/capture.py",
        "    if n > slots.numel():",
        "    if False:",
        (
            f"{_CAP}::test_an_inconsistent_capture_is_not_written[host bound too small-a row reads 700 keys, more "
            "than the 500 gathered]",
        ),
    ),
    Mutation(
        "recall: bf16 scored against the keys before bf16 rounding",
        "sglang_dsv4_ext/tools/recall/cli.py",
        "    reference_keys = keys(capture.k if capture.k_fp32 is None else capture.k_fp32)",
        "    reference_keys = keys(capture.k)",
        (
            f"{_REC}::test_bf16_is_scored_against_the_fp32_keys_it_was_rounded_from",
            f"{_CAP}::test_capture_carries_the_keys_before_bf16_rounding_and_recall_scores_bf16_against_them",
        ),
    ),
    Mutation(
        "recall: without fp32 keys bf16 is labelled the reference",
        "sglang_dsv4_ext/tools/recall/cli.py",
        "            if fmt == IndexKDtype.BF16 and reference == REFERENCE_BF16:",
        "            if False:",
        (f"{_REC}::test_without_fp32_keys_bf16_is_labelled_the_reference_not_scored",),
    ),
    Mutation(
        "recall: degenerate rows are never scored",
        "sglang_dsv4_ext/tools/recall/cli.py",
        "    rows = [r for r, reason in enumerate(reasons) if reason is None]",
        "    rows = list(range(len(reasons)))",
        (f"{_REC}::test_degenerate_rows_are_counted_and_never_scored",),
    ),
    Mutation(
        "recall: a tie at the k-th reference logit is not scored",
        "sglang_dsv4_ext/tools/recall/cli.py",
        "    if top.values[k - 1] == top.values[k]:",
        "    if False:",
        (f"{_REC}::test_a_tie_at_the_kth_reference_logit_is_not_scored",),
    ),
    Mutation(
        "recall: the content checksum is checked",
        "sglang_dsv4_ext/tools/recall/capture_files.py",
        "    if rec[fmt.CHECKSUM] != fmt.content_checksum(rec):",
        "    if False:",
        (f"{_REC}::test_a_file_changed_after_capture_is_refused_by_its_checksum",),
    ),
    Mutation(
        "recall: a file's dtype is checked",
        "sglang_dsv4_ext/tools/recall/capture_files.py",
        '    if rec["dtype"] != fmt.STORED_DTYPE:',
        "    if False:",
        (f"{_REC}::test_inconsistent_fields_are_refused_naming_file_and_field",),
    ),
    Mutation(
        "recall: weights must be [R, H] (no broadcast)",
        "sglang_dsv4_ext/tools/recall/capture_files.py",
        '    expected = {"weights": (rows, heads), ',
        "    expected = {",
        (f"{_REC}::test_inconsistent_fields_are_refused_naming_file_and_field",),
    ),
    Mutation(
        "recall: lengths within 0..keys",
        "sglang_dsv4_ext/tools/recall/capture_files.py",
        "        if n < 0 or n > keys:",
        "        if False:",
        (f"{_REC}::test_inconsistent_fields_are_refused_naming_file_and_field",),
    ),
    Mutation(
        "recall: fp32 keys must round to k",
        "sglang_dsv4_ext/tools/recall/capture_files.py",
        "    if not bool((same | near).all()):",
        "    if False:",
        (f"{_REC}::test_fp32_keys_that_are_not_what_k_was_rounded_from_are_refused",),
    ),
    Mutation(
        "recall: each real file read once",
        "sglang_dsv4_ext/tools/recall/capture_files.py",
        "found.setdefault(_file_identity(str(path)), path)",
        "found.setdefault(str(path), path)",
        (f"{_REC}::test_a_file_reached_twice_counts_once_and_a_copy_is_refused",),
    ),
    Mutation(
        "recall: a copy of a file is refused",
        "sglang_dsv4_ext/tools/recall/cli.py",
        "        if capture.checksum in first_of:",
        "        if False:",
        (f"{_REC}::test_a_file_reached_twice_counts_once_and_a_copy_is_refused",),
    ),
    Mutation(
        "recall: a non-regular file is never opened",
        "sglang_dsv4_ext/tools/recall/capture_files.py",
        "    _check_regular(path)\n",
        "",
        (f"{_REC}::test_a_fifo_named_pt_is_refused_without_being_opened",),
    ),
    Mutation(
        "recall: an unlistable directory is an error",
        "sglang_dsv4_ext/tools/recall/capture_files.py",
        "os.walk(directory, onerror=refuse, followlinks=True)",
        "os.walk(directory, followlinks=True)",
        (f"{_REC}::test_an_unreadable_subdirectory_is_an_error_not_skipped",),
    ),
    Mutation(
        "recall: output into a closed pipe ends quietly",
        "sglang_dsv4_ext/tools/recall/cli.py",
        "    except BrokenPipeError:",
        "    except ZeroDivisionError:",
        (f"{_REC}::test_json_into_a_closed_pipe_ends_without_a_traceback",),
    ),
    Mutation(
        "recall: fp8 scale is max(1e-4, amax) / 448 (CPU guard, Triton interpreter)",
        "sglang_dsv4_ext/tools/recall/formats.py",
        "clamp(min=AMAX_FLOOR) / FP8_E4M3_MAX\n",
        "clamp(min=AMAX_FLOOR) / FP8_E4M3_MAX * 1.1\n",
        ("tests/unit/recall/test_formats.py::test_fp8_equals_sglangs_triton_index_k_store_bit_for_bit",),
    ),
    Mutation(
        "recall: fp4 e2m1 ties round down (CPU guard, Triton interpreter)",
        "sglang_dsv4_ext/tools/recall/formats.py",
        "        code += (magnitude > threshold).to(torch.uint8)",
        "        code += (magnitude >= threshold).to(torch.uint8)",
        (
            "tests/unit/recall/test_formats.py::"
            "test_fp4_equals_sglangs_torch_reference_and_triton_quantizer_bit_for_bit",
        ),
    ),
    Mutation(
        "capture: files appear whole (NAME.part, then linked)",
        "sglang_dsv4_ext/runtime/index_k/capture.py",
        "        finally:\n            _unlink_quietly(part)\n",
        "",
        ("tests/unit/hooks/test_index_k_capture.py::test_a_failed_write_leaves_no_file_and_a_good_one_no_part",),
    ),
    Mutation(
        "serve: each child's environment is checked before start",
        "sglang_dsv4_ext/tools/serving/cli.py",
        "        _check_children_config(plan, models, local=plan.node_rank == args.node_rank)\n",
        "",
        (
            "tests/unit/serving/test_serve_dryrun.py::"
            "test_capture_in_the_shell_is_checked_against_what_the_children_see",
        ),
    ),
    Mutation(
        "sizing: bf16 index-K budgeted at 256 B",
        "sglang_dsv4_ext/runtime/hooks/sizing.py",
        "    if dtype == IndexKDtype.BF16:\n        return index_k_bytes_per_token(IndexKDtype.BF16, index_head_dim)",
        "    if False:\n        return index_k_bytes_per_token(IndexKDtype.BF16, index_head_dim)",
        ("tests/unit/hooks/test_sizing.py",),
    ),
    Mutation(
        "pool: startup self-check allocation == budget",
        "sglang_dsv4_ext/runtime/hooks/pool.py",
        "    if allocated != budgeted:",
        "    if False:",
        ("tests/unit/hooks/test_sizing.py",),
    ),
    Mutation(
        "pool: bf16 indexer pool built for bf16",
        "sglang_dsv4_ext/runtime/hooks/pool.py",
        "    if force_fp4 or effective_index_k_dtype(False) != IndexKDtype.BF16:",
        "    if True:",
        ("tests/unit/hooks/test_bf16_storage.py", "tests/unit/hooks/test_sizing.py"),
    ),
    Mutation(
        "PD: layout string carries c4idx:bf16",
        "sglang_dsv4_ext/runtime/hooks/pd.py",
        '        return f"{result},{INDEX_K_LAYOUT_TAG}:bf16"',
        "        return None",
        ("tests/unit/hooks/test_bf16_storage.py",),
    ),
    Mutation(
        "HiCache: index-K region page-aligned only",
        "sglang_dsv4_ext/runtime/hooks/hicache.py",
        "    return [dataclasses.replace(region, page_aligned_only=True) for region in result]",
        "    return None",
        ("tests/unit/hooks/test_bf16_storage.py",),
    ),
    Mutation(
        "HiCache: L3 keys tagged for bf16",
        "sglang_dsv4_ext/runtime/hooks/hicache.py",
        "        self.storage_format_tag = ",
        "        _unused_tag = ",
        ("tests/unit/hooks/test_bf16_storage.py",),
    ),
    Mutation(
        "gate: sub-pool read waits for a pending load",
        "sglang_dsv4_ext/runtime/hooks/gate/subpool.py",
        "    if waited_upto(counter) >= local:",
        "    if True:",
        ("tests/unit/hooks/test_gate.py",),
    ),
    Mutation(
        "gate: replay waits for layer 0 first (R3)",
        "sglang_dsv4_ext/runtime/hooks/gate/replay.py",
        "        counter.wait_until(0)\n",
        "        pass\n",
        ("tests/integration/test_gate_prefill_replay.py",),
    ),
    Mutation(
        "gate: wait one layer ahead during replay (R3)",
        "sglang_dsv4_ext/runtime/hooks/gate/waits.py",
        "        ahead = local + 1",
        "        ahead = local",
        ("tests/integration/test_gate_prefill_replay.py",),
    ),
    Mutation(
        "indexer: non-paged fp8 branch off for bf16",
        "sglang_dsv4_ext/runtime/hooks/indexer.py",
        "        return False  # the non-paged path gathers fp8 rows for DeepGEMM",
        "        pass",
        ("tests/unit/hooks/test_indexer.py",),
    ),
    Mutation(
        "indexer: stored rows carry their RoPE position (seq_len - 4)",
        "sglang_dsv4_ext/runtime/hooks/indexer.py",
        "_extract_positions_from_plan(plan, ratio).clamp(min=0)\n",
        "_extract_positions_from_plan(plan, ratio).clamp(min=0) + 1\n",
        ("tests/unit/hooks/test_indexer.py::test_bf16_store_then_select_end_to_end_with_the_real_kernels",),
    ),
    Mutation(
        "indexer: the fp4 indexer's logits routed to ours where SGLang would raise",
        "sglang_dsv4_ext/runtime/hooks/indexer.py",
        "    if not fp4_pool or load_config().fp4_logits != Fp4LogitsKernel.TRITON or not _raises_on_fp4():",
        "    if True:",
        ("tests/unit/hooks/test_fp4_logits_route.py::test_where_sglang_raises_ours_computes_the_fp4_logits",),
    ),
    Mutation(
        "fp8 logits: TileLang takes the few short rows where it measured within 2% of ours or faster",
        "sglang_dsv4_ext/runtime/index_k/fp8_logits.py",
        " or tilelang_faster(name, q_fp8, page_table)",
        "",
        ("tests/unit/hooks/test_fp8_logits_route.py::test_the_router_hands_a_short_row_to_sglangs_tilelang_function",),
    ),
    Mutation(
        "sizing: fp4 on CUDA budgeted at the 68 B allocated (exact)",
        "sglang_dsv4_ext/runtime/hooks/sizing.py",
        "        if stock:\n            return original(index_head_dim, use_fp4_indexer)",
        "        if True:\n            return original(index_head_dim, use_fp4_indexer)",
        ("tests/unit/hooks/test_fp4_budget.py",),
    ),
    # --- repro ---
    Mutation(
        "repro: --extra-body may not set harness keys",
        "sglang_dsv4_ext/tools/repro/settings.py",
        "    owned = sorted(k for k in body if k in HARNESS_BODY_KEYS)\n    if owned:",
        "    owned = sorted(k for k in body if k in HARNESS_BODY_KEYS)\n    if False:",
        ("tests/unit/repro/test_bad_input_run.py",),
    ),
    Mutation(
        "repro: NaN/inf refused for float settings",
        "sglang_dsv4_ext/tools/repro/settings.py",
        "    if not math.isfinite(value):",
        "    if False:",
        ("tests/unit/repro/test_bad_input_run.py",),
    ),
    Mutation(
        "repro: a used --out is refused",
        "sglang_dsv4_ext/tools/repro/rundir.py",
        "    if _holds_something(out):",
        "    if False:",
        ("tests/unit/repro/test_bad_input_run.py",),
    ),
    Mutation(
        "repro: --api-key-env checked before the directory is claimed",
        "sglang_dsv4_ext/tools/repro/runner.py",
        "        headers = auth_headers(self.cfg.api_key_env)  # refused before any file is created\n",
        "        self.cfg.out = rundir.claim(self.cfg.out, self.out_given)\n"
        "        open(os.path.join(self.cfg.out, 'requests.jsonl'), 'w').close()\n"
        "        headers = auth_headers(self.cfg.api_key_env)\n",
        ("tests/unit/repro/test_bad_input_run.py",),
    ),
    Mutation(
        "repro: exactly one call of the requested tool",
        "sglang_dsv4_ext/tools/repro/verdict.py",
        "    if names != [expected_tool]:",
        "    if expected_tool not in names:",
        ("tests/unit/repro/test_verdict_table.py",),
    ),
    Mutation(
        "repro: unrequested arguments fail in exact mode",
        "sglang_dsv4_ext/tools/repro/verdict.py",
        "    if added:\n",
        "    if False:\n",
        ("tests/unit/repro/test_verdict_table.py",),
    ),
    Mutation(
        "repro: a reply of the wrong shape is a protocol_error",
        "sglang_dsv4_ext/tools/repro/client.py",
        '    except ValidationError as exc:\n        return _protocol_error("reply is not a chat completion"',
        '    except ZeroDivisionError as exc:\n        return _protocol_error("reply is not a chat completion"',
        (
            "tests/unit/repro/test_verdict_table.py",
            "tests/integration/test_repro_harness.py::test_replies_of_the_wrong_shape_become_verdicts_and_the_run_completes",
        ),
    ),
    Mutation(
        "repro: a signal stops the requests cleanly",
        "sglang_dsv4_ext/tools/repro/runner.py",
        "            self._loop.call_soon_threadsafe(self._task.cancel)",
        "            pass",
        (f"{_HARNESS}::test_a_signal_flushes_the_records_and_writes_an_interrupted_summary",),
    ),
    Mutation(
        "repro: record errors name FILE:LINE",
        "sglang_dsv4_ext/tools/repro/rundir.py",
        '        raise ReproInputError(f"{where}: not a JSON line{cut}: {exc}") from None',
        "        raise",
        ("tests/unit/repro/test_bad_input_compare.py", "tests/unit/repro/test_bad_input_reparse.py"),
    ),
    Mutation(
        "repro: --tokenizer path checked",
        "sglang_dsv4_ext/tools/repro/reparse.py",
        "    if not os.path.isdir(path):",
        "    if False:",
        ("tests/unit/repro/test_bad_input_reparse.py::test_reparse_tokenizer_that_does_not_exist",),
    ),
    Mutation(
        "repro: a stream without a finish_reason is stream_cut, not judged",
        "sglang_dsv4_ext/tools/repro/client.py",
        "    if obs.finish_reason is None:\n        ended =",
        "    if False:\n        ended =",
        (_CUT,),
    ),
    Mutation(
        "repro: a chunked stream cut short keeps its partial output",
        "sglang_dsv4_ext/tools/repro/client.py",
        "    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError) as exc:",
        "    except ZeroDivisionError as exc:",
        (_CUT,),
    ),
    Mutation(
        "repro: stream_cut is a transport class",
        "sglang_dsv4_ext/tools/repro/verdict.py",
        'TRANSPORT_CLASSES = ("http_error", "protocol_error", "stream_cut", "aborted", "timeout")',
        'TRANSPORT_CLASSES = ("http_error", "protocol_error", "aborted", "timeout")',
        (
            "tests/unit/repro/test_verdict_table.py",
            "tests/unit/repro/test_repro_units.py::test_a_cut_stream_on_either_side_excludes_the_pair",
        ),
    ),
    Mutation(
        "repro: a run compared with itself is refused",
        "sglang_dsv4_ext/tools/repro/compare.py",
        "    pairing.refuse_same_run(a, b)\n",
        "    pass\n",
        (
            "tests/unit/repro/test_bad_input_compare.py::test_compare_refuses_a_run_compared_with_itself",
            "tests/unit/report/test_report_page.py::test_report_refuses_a_run_compared_with_itself",
        ),
    ),
    Mutation(
        "repro: runs of different settings are refused",
        "sglang_dsv4_ext/tools/repro/compare.py",
        "    if not allow_different_settings:\n",
        "    if False:\n",
        (
            "tests/unit/repro/test_bad_input_compare.py::"
            "test_compare_refuses_runs_of_different_settings_unless_told_and_then_says_so_first",
            "tests/unit/report/test_report_page.py::test_page_says_first_that_settings_differ_and_a_run_did_not_finish",
        ),
    ),
    Mutation(
        "repro: each pair's concurrency is checked",
        "sglang_dsv4_ext/tools/repro/pairing.py",
        "        per_record = _concurrency_difference(a, b)",
        '        per_record = ""',
        (
            "tests/unit/repro/test_bad_input_compare.py::"
            "test_compare_checks_each_pairs_concurrency_when_a_summary_is_missing",
        ),
    ),
    Mutation(
        "repro: a run that did not finish is said first",
        "sglang_dsv4_ext/tools/repro/pairing.py",
        '        if info.get("incomplete"):',
        "        if False:",
        (
            "tests/unit/repro/test_bad_input_compare.py::test_compare_says_first_that_a_run_did_not_finish",
            "tests/unit/report/test_report_page.py::test_page_says_first_that_settings_differ_and_a_run_did_not_finish",
        ),
    ),
    Mutation(
        "repro: too few pairs cannot tell",
        "sglang_dsv4_ext/tools/repro/compare.py",
        "    if n < need:",
        "    if False:",
        ("tests/unit/repro/test_repro_units.py::test_too_few_pairs_cannot_tell_even_when_every_pair_differs",),
    ),
    # --- evidence is never lost, nothing waits forever, outputs never replace inputs ---
    Mutation(
        "repro: each server read ends by one deadline",
        "sglang_dsv4_ext/tools/repro/server_http.py",
        "        reply = http_probe.get(endpoint, READ_DEADLINE_S)",
        "        reply = http_probe.get(endpoint, 3600.0)",
        (f"{_UNREADABLE}[drip-after]", f"{_UNREADABLE}[drip-before]"),
    ),
    Mutation(
        "repro: a failed server read is unavailable evidence, not a traceback",
        "sglang_dsv4_ext/tools/repro/server_http.py",
        "    except http_probe.ProbeError as exc:",
        "    except ZeroDivisionError as exc:",
        (_UNREADABLE, f"{_RUN}::test_unreadable_server_info_refuses_the_run_naming_why"),
    ),
    Mutation(
        "http_probe: a body short of its Content-Length is an error",
        "sglang_dsv4_ext/tools/tool_support/http_probe.py",
        "    if missing:\n        raise ProbeError(",
        "    if False:\n        raise ProbeError(",
        (f"{_UNREADABLE}[truncated-after]", f"{_RUN}::test_unreadable_server_info_refuses_the_run_naming_why"),
    ),
    Mutation(
        "http_probe: the TLS handshake is bounded too",
        "sglang_dsv4_ext/tools/tool_support/http_probe.py",
        "            self.raw.settimeout(self._deadline.left())",
        "            self.raw.settimeout(None)",
        ("tests/unit/repro/test_server_http.py::test_a_dripping_tls_handshake_ends_by_the_deadline",),
    ),
    Mutation(
        "repro: a signal during the read after the run gives it up",
        "sglang_dsv4_ext/tools/repro/runner.py",
        "                with stop_signals.raising():\n                    entries.append(",
        "                if True:\n                    entries.append(",
        (f"{_HARNESS}::test_a_signal_during_the_read_after_the_run_still_writes_the_summary",),
    ),
    Mutation(
        "repro: a signal before the first request ends it without a traceback",
        "sglang_dsv4_ext/tools/repro/cli.py",
        '    except stop_signals.Stopped as stop:\n        return _stopped_before_start("run", stop)\n',
        "",
        (f"{_HARNESS}::test_a_signal_during_the_read_before_the_run_writes_nothing",),
    ),
    Mutation(
        "repro ab: a signal before B's first request says what A kept",
        "sglang_dsv4_ext/tools/repro/cli.py",
        '        except stop_signals.Stopped as stop:\n            return _stopped_before_start("ab"',
        '        except ZeroDivisionError as stop:\n            return _stopped_before_start("ab"',
        (f"{_HARNESS}::test_ab_stopped_before_b_says_what_it_kept",),
    ),
    Mutation(
        "repro: a counter that is not a number is null with the reason",
        "sglang_dsv4_ext/tools/repro/server_evidence.py",
        '    if not_finite:\n        return None, f"the server reported',
        '    if False:\n        return None, f"the server reported',
        (f"{_RUN}::test_a_counter_that_is_not_a_number_is_null_with_the_reason",),
    ),
    Mutation(
        "repro: no NaN reaches summary.json",
        "sglang_dsv4_ext/tools/repro/runner.py",
        "        cleaned, not_finite = strict_json.finite(summary)",
        "        cleaned, not_finite = summary, []",
        (f"{_RUN}::test_a_server_info_value_that_is_not_a_number_is_written_as_null_and_said",),
    ),
    Mutation(
        "repro: summary.json is read strictly",
        "sglang_dsv4_ext/tools/repro/rundir.py",
        "            summary = strict_json.loads(f.read())",
        "            summary = json.loads(f.read())",
        ("tests/unit/repro/test_bad_input_compare.py::test_compare_refuses_a_summary_holding_nan",),
    ),
    Mutation(
        "repro: --extra-body NaN refused",
        "sglang_dsv4_ext/tools/repro/settings.py",
        "        json.dumps(body, allow_nan=False)",
        "        json.dumps(body)",
        ("tests/unit/repro/test_settings_table.py::test_run_config_built_in_code_refuses_bad_values_naming_the_flag",),
    ),
    Mutation(
        "repro: a URL's port must be 1..65535",
        "sglang_dsv4_ext/tools/tool_support/urls.py",
        "    if port is not None and not PORTS[0] <= port <= PORTS[1]:",
        "    if False:",
        (
            f"{_RUN}::test_run_refuses_bad_flag_values[server-metrics port 99999]",
            f"{_RUN}::test_ab_refuses_an_endpoint_port_out_of_range",
        ),
    ),
    Mutation(
        "repro: a server named twice in --server-metrics is refused",
        "sglang_dsv4_ext/tools/repro/settings.py",
        "        if _same_server(url) in seen:",
        "        if False:",
        (f"{_RUN}::test_run_refuses_bad_flag_values[server-metrics twice]",),
    ),
    Mutation(
        "repro: a URL's scheme is case-insensitive",
        "sglang_dsv4_ext/tools/tool_support/urls.py",
        "not url.lower().startswith(_PREFIXES)",
        "not url.startswith(_PREFIXES)",
        ("tests/unit/repro/test_bad_input_urls.py::test_run_and_reparse_take_every_url_with_its_scheme_in_capitals",),
    ),
    Mutation(
        "repro: credentials redacted in summary.json and ab.json",
        "sglang_dsv4_ext/tools/repro/rundir.py",
        "        f.write(urls.redact(text.getvalue()))",
        "        f.write(text.getvalue())",
        ("tests/unit/repro/test_bad_input_urls.py::test_credentials_in_the_endpoint_are_written_and_shown_nowhere",),
    ),
    Mutation(
        "repro: the detokenizer's state (in the records, reparsed.jsonl) names its URL without credentials",
        "sglang_dsv4_ext/tools/repro/client.py",
        "            self.state = urls.redact(\n",
        "            self.state = (\n",
        ("tests/unit/repro/test_bad_input_urls.py::test_credentials_in_the_endpoint_are_written_and_shown_nowhere",),
    ),
    Mutation(
        "repro: credentials redacted in the terminal summary and the refusals",
        "sglang_dsv4_ext/tools/repro/cli.py",
        '    print(urls.redact(f"sglang-dsv4 repro {action}: {exc}"), file=sys.stderr)',
        '    print(f"sglang-dsv4 repro {action}: {exc}", file=sys.stderr)',
        ("tests/unit/repro/test_bad_input_urls.py::test_a_refused_server_is_named_without_its_credentials",),
    ),
    Mutation(
        "report: credentials redacted on the page, also of runs written before",
        "sglang_dsv4_ext/tools/report/cli.py",
        "    return urls.redact(page)",
        "    return page",
        ("tests/unit/repro/test_bad_input_urls.py::test_a_summary_written_with_credentials_is_shown_without_them",),
    ),
    Mutation(
        "repro: a URL's credentials and --api-key-env together are refused",
        "sglang_dsv4_ext/tools/repro/settings.py",
        "    _check_one_authorization(cfg)\n",
        "",
        (
            "tests/unit/repro/test_bad_input_urls.py::test_credentials_in_the_endpoint_and_an_api_key_are_refused_before_anything",
        ),
    ),
    Mutation(
        "repro: a redirected chat request is not followed",
        "sglang_dsv4_ext/tools/repro/client.py",
        "    async with session.post(url, json=body, headers=headers, allow_redirects=False) as resp:",
        "    async with session.post(url, json=body, headers=headers) as resp:",
        (
            "tests/unit/repro/test_bad_input_urls.py::test_a_redirected_chat_request_is_not_followed_and_the_record_names_the_target",
        ),
    ),
    Mutation(
        "repro: a record of another run (run id) is refused",
        "sglang_dsv4_ext/tools/repro/rundir.py",
        "        _check_run_id(summary, rec)\n",
        "",
        ("tests/unit/repro/test_bad_input_run_files.py::test_another_runs_records_beside_the_summary_are_refused",),
    ),
    Mutation(
        "repro: a record outside the run's time is refused",
        "sglang_dsv4_ext/tools/repro/rundir.py",
        "        _check_time(summary, rec)\n",
        "",
        ("tests/unit/repro/test_bad_input_run_files.py::test_records_without_a_run_id_from_another_time_are_refused",),
    ),
    Mutation(
        "repro: a record at none of the run's levels is refused",
        "sglang_dsv4_ext/tools/repro/rundir.py",
        "        _check_level(summary, rec)\n",
        "",
        (
            "tests/unit/repro/test_bad_input_run_files.py::test_a_record_at_a_concurrency_that_is_none_of_the_runs_levels_is_refused",
        ),
    ),
    Mutation(
        "repro: a record past the run's sessions or rounds is refused",
        "sglang_dsv4_ext/tools/repro/rundir.py",
        "        _check_shape(summary, rec)\n",
        "",
        ("tests/unit/repro/test_bad_input_run_files.py::test_a_record_past_the_runs_sessions_or_rounds_is_refused",),
    ),
    Mutation(
        "repro: a run file linked into another directory is refused",
        "sglang_dsv4_ext/tools/repro/rundir.py",
        "    for name in (REQUESTS, SUMMARY):\n        check_own_file(run_dir, name)\n",
        "",
        ("tests/unit/repro/test_bad_input_run_files.py::test_a_records_file_that_links_to_another_run_is_refused",),
    ),
    Mutation(
        "repro: a record count the summary does not say is refused",
        "sglang_dsv4_ext/tools/repro/rundir.py",
        "    _check_count(run_dir, summary, len(records))\n",
        "",
        ("tests/unit/repro/test_bad_input_run_files.py::test_records_fewer_than_the_summary_says_are_refused",),
    ),
    Mutation(
        "repro: schedulers of several launches are not one active server",
        "sglang_dsv4_ext/tools/repro/extension_check.py",
        "    if len(launches) > 1:\n",
        "    if False:\n",
        ("tests/unit/repro/test_evidence_rules.py::test_schedulers_of_several_launches_are_not_one_active_server",),
    ),
    Mutation(
        "repro compare/report: a setting one summary does not record is said",
        "sglang_dsv4_ext/tools/repro/pairing.py",
        "    notes = [f\"{', '.join(unrecorded)} not recorded in both summaries\"] if unrecorded else []",
        "    notes: list[str] = []",
        (
            "tests/unit/repro/test_evidence_rules.py::test_compare_says_when_one_summary_lacks_a_setting",
            "tests/unit/repro/test_evidence_rules.py::test_report_says_when_one_summary_lacks_a_setting",
        ),
    ),
    Mutation(
        "repro ab: a refusal of B says what A kept",
        "sglang_dsv4_ext/tools/repro/cli.py",
        '            return _error("ab", f"side {side} ({cfg.endpoint}): {exc}. Kept: {_ab_kept(out, done)}")',
        '            return _error("ab", exc)',
        (f"{_RUN}::test_ab_says_what_it_kept_when_b_is_refused_after_a_ran",),
    ),
    Mutation(
        "repro: a record line that is not UTF-8 is named",
        "sglang_dsv4_ext/tools/repro/rundir.py",
        "        except UnicodeDecodeError as exc:",
        "        except ZeroDivisionError as exc:",
        ("tests/unit/repro/test_bad_input_compare.py::test_compare_names_the_line_of_a_record_that_is_not_utf8",),
    ),
    Mutation(
        "repro: record fields that are not strings are unknown",
        "sglang_dsv4_ext/tools/repro/extension_check.py",
        (
            "    return (\n"
            "        isinstance(record, dict)\n"
            '        and record.get("active") is True\n'
            "        and all(isinstance(record.get(f), str) for f in RECORD_FIELDS)\n"
            "    )\n"
        ),
        (
            '    return isinstance(record, dict) and record.get("active") is True and set(EVIDENCE_FIEL'
            "DS) <= set(record)\n"
        ),
        (
            "tests/unit/repro/test_expect_extension.py::"
            "test_a_record_whose_fields_are_not_strings_is_unknown_not_a_traceback",
        ),
    ),
    Mutation(
        "report: a run's files are never written over",
        "sglang_dsv4_ext/tools/report/cli.py",
        "    if home is not None:",
        "    if False:",
        (
            f"{_REPORT}::test_a_file_of_the_run_directory_is_never_written_over",
            f"{_REPORT}::test_a_link_to_a_run_file_is_never_written_over",
        ),
    ),
    Mutation(
        "report: -o a directory is refused",
        "sglang_dsv4_ext/tools/report/cli.py",
        "    if os.path.isdir(path):",
        "    if False:",
        (f"{_REPORT}::test_an_output_that_is_a_directory_is_refused",),
    ),
    Mutation(
        "report: -o in a missing directory is refused",
        "sglang_dsv4_ext/tools/report/cli.py",
        "    if not os.path.isdir(parent):",
        "    if False:",
        (f"{_REPORT}::test_an_output_in_a_missing_directory_is_refused",),
    ),
    Mutation(
        "report: -o that is not a regular file is refused",
        "sglang_dsv4_ext/tools/report/cli.py",
        "    if not os.path.isfile(path):",
        "    if False:",
        (f"{_REPORT}::test_an_output_that_is_not_a_regular_file_is_refused_without_waiting",),
    ),
    Mutation(
        "report: record fields named FILE:LINE",
        "sglang_dsv4_ext/tools/report/cli.py",
        "    run = pairing.load(run_dir, check_record)",
        "    run = pairing.load(run_dir)",
        (f"{_REPORT}::test_a_record_field_the_page_needs_is_refused_naming_file_and_line",),
    ),
    Mutation(
        "report: server_evidence must be a list of servers",
        "sglang_dsv4_ext/tools/report/cli.py",
        "    check_summary(run_dir, run.summary)\n",
        "",
        (f"{_REPORT}::test_server_evidence_that_is_not_a_list_of_servers_is_refused",),
    ),
    Mutation(
        "report: a run that did not finish is marked in its section",
        "sglang_dsv4_ext/tools/report/cli.py",
        'if unfinished else ""',
        'if False else ""',
        ("tests/unit/report/test_report_page.py::test_page_says_first_that_settings_differ_and_a_run_did_not_finish",),
    ),
    # --- serve, plan, configuration ---
    Mutation(
        "serve, repro: every fatal signal stops the command",
        "sglang_dsv4_ext/tools/tool_support/stop_signals.py",
        "    for sig in FATAL_SIGNALS:",
        "    for sig in (signal.SIGINT, signal.SIGTERM):",
        (f"{_SUP}[SIGHUP]", f"{_HARNESS}::test_a_signal_flushes_the_records_and_writes_an_interrupted_summary"),
    ),
    Mutation(
        "serve: descendants outside the process group are stopped",
        "sglang_dsv4_ext/tools/serving/supervise.py",
        "        for p in self.alive():\n            send(p, sig)",
        "        for p in []:\n            send(p, sig)",
        (f"{_SUP}[SIGTERM]",),
    ),
    Mutation(
        "serve: validation never imports a user's router module",
        "sglang_dsv4_ext/tools/serving/validate.py",
        "    if package != TRUSTED_ROUTER_PACKAGE:\n"
        "        return None, f\"{module} is not SGLang's router ({TRUSTED_ROUTER_PACKAGE}), "
        'and user modules are not imported"\n'
        "    try:\n"
        '        mod = importlib.import_module(TRUSTED_ROUTER_PACKAGE + ".router_args")',
        '    try:\n        mod = importlib.import_module(package + ".router_args")',
        (f"{_SERVE}::test_router_module_is_never_executed_by_validation",),
    ),
    # --- one settings table, the launch plan the only truth about a child ---
    Mutation(
        "serve: the epilog names every variable the stack sets",
        "sglang_dsv4_ext/tools/serving/cli.py",
        "    f\"{', '.join(s.env for s in STACK_SETTINGS)} itself,",
        '    f"SGLANG_DSV4_EXT, SGLANG_DSV4_INDEX_K_DTYPE and SGLANG_DSV4_INDEX_K_GATE itself,',
        (f"{_ROWS}::test_the_epilog_names_every_variable_the_stack_sets_in_its_children",),
    ),
    Mutation(
        "serve: fp4_budget is set by a flag and a preset key",
        "sglang_dsv4_ext/config.py",
        ('        preset_key="fp4_budget",\n        children=SET_BY_STACK,\n'),
        "",
        (
            f"{_ROWS}::test_fp4_budget_is_set_by_serve_and_by_a_preset",
            f"{_ROWS}::test_a_shell_fp4_budget_is_the_stacks_without_a_preset_and_said_when_a_preset_replaces_it",
        ),
    ),
    Mutation(
        "serve: the plan adds us to each server's SGLANG_PLUGINS",
        "sglang_dsv4_ext/tools/serving/launch_plan.py",
        "    _allowlist_plugin(plan, os.environ if inherited is None else inherited)\n",
        "",
        (
            f"{_ROWS}::test_the_dry_run_shows_the_plugin_allowlist_each_server_gets",
            f"{_ROWS}::test_a_preset_env_allowlist_is_completed_for_that_server_alone",
            f"{_ACT}::test_stack_without_activation_line_fails_naming_the_server",
        ),
    ),
    Mutation(
        "serve: a stack changed in code is checked by the preset keys' types",
        "sglang_dsv4_ext/tools/serving/launch_plan.py",
        "    check_stack_fields(spec)\n",
        "",
        (f"{_ROWS}::test_a_stack_changed_in_code_is_checked_by_the_types_of_the_preset_keys",),
    ),
    Mutation(
        "config: the environment is parsed once per set of values",
        "sglang_dsv4_ext/config.py",
        "@functools.lru_cache(maxsize=64)\n",
        "",
        (f"{_ROWS}::test_the_environment_is_parsed_once_per_set_of_values",),
    ),
    Mutation(
        "serve: children never inherit SGLANG_DSV4_BF16_INDEX_K",
        "sglang_dsv4_ext/config.py",
        "        children=UNSET_IN_CHILD,\n",
        "",
        (f"{_SERVE}::test_inherited_bf16_alias_does_not_reach_the_children_of_an_fp8_stack", f"{_SUP}[SIGHUP]"),
    ),
    Mutation(
        "serve: a flag repeated inside one source is refused",
        "sglang_dsv4_ext/tools/serving/validate.py",
        "        if dest in seen and dest not in accumulating:",
        "        if False:",
        (f"{_SERVE}::test_bad_flag_is_refused_naming_it[flag repeated in one source]",),
    ),
    Mutation(
        "serve: env names with '=' or NUL are refused",
        "sglang_dsv4_ext/tools/serving/preset.py",
        '    if "=" in name or "\\0" in name:',
        "    if False:",
        (f"{_SERVE}::test_bad_preset_is_refused_naming_the_key[env name with '=']",),
    ),
    Mutation(
        "serve: --health-timeout must be finite",
        "sglang_dsv4_ext/tools/tool_support/arg_types.py",
        "        if not math.isfinite(value) or value < minimum",
        "        if value < minimum",
        (f"{_SERVE}::test_bad_flag_is_refused_naming_it[health timeout nan]",),
    ),
    Mutation(
        "serve: --python must exist",
        "sglang_dsv4_ext/tools/serving/cli.py",
        "    check_python(args.python)\n",
        "    pass\n",
        (f"{_SERVE}::test_bad_flag_is_refused_naming_it[children's interpreter missing]",),
    ),
    Mutation(
        "serve: --log-dir must not be a file",
        "sglang_dsv4_ext/tools/serving/cli.py",
        "    if os.path.exists(log_dir) and not os.path.isdir(log_dir):",
        "    if False:",
        (f"{_SERVE}::test_log_dir_that_is_a_file_is_refused_before_anything_starts",),
    ),
    Mutation(
        "plan: a model config must be a JSON object",
        "sglang_dsv4_ext/tools/sglang_cpu/dsv4_model.py",
        "    if not isinstance(raw, dict):",
        "    if False:",
        (f"{_PLAN}::test_bad_model_config_is_refused_naming_the_field[valid JSON, not an object]",),
    ),
    Mutation(
        "plan: model dimensions must be positive",
        "sglang_dsv4_ext/tools/sglang_cpu/dsv4_model.py",
        "    if not _is_int(value) or value <= 0:",
        "    if not _is_int(value):",
        (f"{_PLAN}::test_bad_model_config_is_refused_naming_the_field[index_head_dim 0]",),
    ),
    Mutation(
        "config: an empty SGLANG_DSV4_BF16_INDEX_K is unset",
        "sglang_dsv4_ext/config.py",
        "        return not is_blank(env.get(self.env))",
        "        return self.env in env",
        ("tests/unit/cli/test_bad_input_config.py::test_empty_means_unset[empty alias next to bf16]",),
    ),
    # --- DeepSeek-V4.1 (ratio-1/2 layers sharing their kv_source layer's sub-pools) ---
    Mutation(
        "V4.1 plan: --mtp is refused as SGLang refuses it",
        "sglang_dsv4_ext/tools/plan/low_ratio.py",
        "    if mtp:\n        raise PlanInputError(",
        "    if False:\n        raise PlanInputError(",
        (f"{_PLAN}::test_what_sglang_refuses_for_v41_is_refused[V4.1 with MTP]",),
    ),
    Mutation(
        "V4.1 plan: a pipeline stage is refused as SGLang refuses it",
        "sglang_dsv4_ext/tools/plan/low_ratio.py",
        "    if tuple(stage) != (0, model.num_hidden_layers):",
        "    if False:",
        (f"{_PLAN}::test_what_sglang_refuses_for_v41_is_refused[V4.1 pipeline stage]",),
    ),
    Mutation(
        "V4.1 config: every ratio-1/2 layer needs a kv_source of its ratio",
        "sglang_dsv4_ext/tools/sglang_cpu/dsv4_model.py",
        "    if orphans:",
        "    if False:",
        (f"{_PLAN}::test_bad_model_config_is_refused_naming_the_field[ratio-1/2 layer without a kv_source]",),
    ),
    Mutation(
        "V4.1 config: kv_source layers are ratio-1/2 layers",
        "sglang_dsv4_ext/tools/sglang_cpu/dsv4_model.py",
        "    if not_low:",
        "    if False:",
        (f"{_PLAN}::test_bad_model_config_is_refused_naming_the_field[kv_source on a c4 layer]",),
    ),
    Mutation(
        "V4.1 config: ratios 1/2 only for model_type deepseek_v41",
        "sglang_dsv4_ext/tools/sglang_cpu/dsv4_model.py",
        "    if model_type != V41_MODEL_TYPE and any(",
        "    if False and any(",
        (f"{_PLAN}::test_bad_model_config_is_refused_naming_the_field[ratio-1/2 layers outside V4.1]",),
    ),
    Mutation(
        "V4.1 config: a released nested text_config is flattened",
        "sglang_dsv4_ext/tools/sglang_cpu/dsv4_model.py",
        '    if not isinstance(raw.get("text_config"), dict):\n        return raw',
        "    if True:\n        return raw",
        ("tests/unit/cli/test_plan_v41.py::test_a_released_nested_v41_config_loads_as_the_flat_one",),
    ),
    Mutation(
        "V4.1 plan: index-K pool of (full + one page) // ratio slots",
        "sglang_dsv4_ext/tools/plan/low_ratio.py",
        "_num_dsv4_physical_kv_pages((full + page) // ratio,",
        "_num_dsv4_physical_kv_pages(full // ratio,",
        ("tests/unit/cli/test_plan_v41.py::test_plan_low_ratio_numbers_are_what_sglangs_pools_allocate",),
    ),
    Mutation(
        "V4.1 plan: 'same pools' only without c4 layers",
        "sglang_dsv4_ext/tools/plan/low_ratio.py",
        '    same = ": every column sizes the same pools" if c4_layers == 0 else ""',
        '    same = ": every column sizes the same pools"',
        ("tests/unit/cli/test_plan_v41.py::test_v41_text_says_the_dtype_changes_no_pool_here",),
    ),
    Mutation(
        "V4.1 pool: bf16 never reaches the force_fp4 low-ratio index-K pools",
        "sglang_dsv4_ext/runtime/hooks/pool.py",
        "    if force_fp4 or effective_index_k_dtype(False) != IndexKDtype.BF16:",
        "    if effective_index_k_dtype(False) != IndexKDtype.BF16:",
        ("tests/unit/hooks/test_sizing_v41.py",),
    ),
    Mutation(
        "V4.1 pool: the self-check compares low-ratio index-K with the budget",
        "sglang_dsv4_ext/runtime/hooks/pool.py",
        "    if found != expected:",
        "    if False:",
        ("tests/unit/hooks/test_sizing_v41.py::test_self_check_refuses_low_ratio_pools_wider_than_budgeted",),
    ),
    Mutation(
        "V4.1 gate: a shared sub-pool layer waits for its kv_source",
        "sglang_dsv4_ext/runtime/hooks/gate/subpool.py",
        "ratio: {local_id: global_layer for local_id, global_layer in enumerate(layers)}",
        "ratio: {local_id: layers[-1] for local_id, _ in enumerate(layers)}",
        ("tests/unit/hooks/test_gate_v41.py",),
    ),
    Mutation(
        "serve: the wedge watch scrapes on a thread of its own",
        "sglang_dsv4_ext/tools/serving/wedge.py",
        "        if self.detectors:\n            self._thread.start()",
        "        if self.detectors:\n            self._run()",
        (f"{_SUPERVISE}::test_a_dripping_metrics_endpoint_does_not_hold_off_a_signal",),
    ),
    Mutation(
        "serve: one deadline bounds a whole HTTP read",
        "sglang_dsv4_ext/tools/tool_support/http_probe.py",
        "    def readinto(self, buffer) -> int:\n        self._sock.settimeout(self._deadline.left())",
        "    def readinto(self, buffer) -> int:\n        self._sock.settimeout(2.0)",
        (f"{_WEDGE}::test_an_unreadable_metrics_endpoint_is_no_verdict_and_says_why",),
    ),
    Mutation(
        "serve: /metrics that is not Prometheus text is no verdict",
        "sglang_dsv4_ext/tools/serving/wedge.py",
        "    except (ValueError, IndexError) as exc:",
        "    except IndexError as exc:",
        (f"{_SUPERVISE}::test_metrics_that_are_not_prometheus_text_are_said_once_and_the_watch_goes_on",),
    ),
    Mutation(
        "serve: children get SIGTERM when serve dies",
        "sglang_dsv4_ext/tools/serving/supervise.py",
        "            preexec_fn=parent_death_signal(signal.SIGTERM),",
        "            preexec_fn=None,",
        (f"{_SUPERVISE}::test_sigkill_of_serve_and_its_reaper_still_stops_the_children",),
    ),
    Mutation(
        "serve: the reaper stops what a killed serve left",
        "sglang_dsv4_ext/tools/serving/reaper.py",
        "        return exit_codes.ATTENTION if reap(known.everything_left(), grace, log) else exit_codes.OK",
        "        return exit_codes.OK",
        (f"{_SUPERVISE}::test_sigkill_of_serve_leaves_nothing_behind",),
    ),
    Mutation(
        "serve: a node address given twice is refused",
        "sglang_dsv4_ext/tools/serving/preset.py",
        "        if first != rank:",
        "        if False:",
        (
            f"{_SERVE}::test_bad_flag_is_refused_naming_it[node address given twice]",
            f"{_SERVE}::test_bad_preset_is_refused_naming_the_key[node address given twice]",
        ),
    ),
    Mutation(
        "serve: a node address must be a host name or an IP",
        "sglang_dsv4_ext/tools/serving/preset.py",
        '        return f"{host!r} is not a host name or an IP address"',
        "        return None",
        (f"{_SERVE}::test_bad_flag_is_refused_naming_it[node address with a space]",),
    ),
    Mutation(
        "serve: an IPv6 --dist-init-addr is bracketed",
        "sglang_dsv4_ext/tools/serving/launch_plan.py",
        "        dist = inst.dist_init_addr or _host_port(spec.nodes[inst.nodes[0]], DEFAULT_DIST_PORT)",
        '        dist = inst.dist_init_addr or f"{spec.nodes[inst.nodes[0]]}:{DEFAULT_DIST_PORT}"',
        (f"{_SERVE}::test_ipv6_node_addresses_are_bracketed_where_an_address_has_a_port",),
    ),
    Mutation(
        "serve: --keep-overlap-schedule next to --disable-overlap-schedule is refused",
        "sglang_dsv4_ext/tools/serving/launch_plan.py",
        '        if "disable_overlap_schedule" in sglang.explicit(',
        "        if False and sglang.explicit(",
        (f"{_SERVE}::test_bad_flag_is_refused_naming_it[keep-overlap next to a pass-through disable-overlap]",),
    ),
    Mutation(
        "serve: --keep-overlap-schedule says when it does nothing",
        "sglang_dsv4_ext/tools/serving/launch_plan.py",
        '    if spec.keep_overlap_schedule:\n        if spec.mode != "pd":',
        '    if False:\n        if spec.mode != "pd":',
        (f"{_SERVE}::test_keep_overlap_in_single_mode_says_it_has_no_effect",),
    ),
    Mutation(
        "serve: --wedge-timeout adds --enable-metrics",
        "sglang_dsv4_ext/tools/serving/launch_plan.py",
        '    if not spec.metrics_for_wedge_watch or explicit.get("enable_metrics"):',
        "    if True:",
        (f"{_SERVE}::test_wedge_timeout_adds_enable_metrics_where_missing_and_says_so",),
    ),
    Mutation(
        "serve: an invalid shell value the stack replaces is noted",
        "sglang_dsv4_ext/tools/serving/cli.py",
        '            notes.append(f"this shell\'s {exc}; the children get {name}={stack} from the stack{how}")',
        "            pass",
        (f"{_SERVE}::test_an_invalid_shell_value_the_stack_replaces_is_said",),
    ),
    Mutation(
        "serve: capture settings checked before start",
        "sglang_dsv4_ext/tools/serving/cli.py",
        '        if child.role != "router" and config.enabled and config.capture.enabled:',
        "        if False:",
        (f"{_CONFIG}::test_serve_dry_run_refuses_capture_layers_the_pool_build_would_refuse",),
    ),
    Mutation(
        "doctor: capture settings checked",
        "sglang_dsv4_ext/tools/doctor/cli.py",
        '    report["capture"] = _capture_report(config, model, model_name)',
        '    report["capture"] = {"enabled": False}',
        (f"{_CONFIG}::test_doctor_refuses_capture_layers_the_pool_build_would_refuse",),
    ),
    Mutation(
        "capture: a directory that is a file is refused early",
        "sglang_dsv4_ext/tools/recall/capture_check.py",
        '        if not path.is_dir():\n            return "exists and is not a directory"',
        '        if False:\n            return "exists and is not a directory"',
        (
            f"{_CONFIG}::test_serve_dry_run_refuses_a_capture_directory_that_is_a_file",
            f"{_CONFIG}::test_doctor_refuses_a_capture_directory_that_is_a_file",
        ),
    ),
    Mutation(
        "config: ASCII digits only",
        "sglang_dsv4_ext/config.py",
        "    return text.isascii() and text.isdigit()",
        "    return text.isdigit()",
        (f"{_CONFIG}::test_bad_value_names_the_variable[superscript digit in SGLANG_DSV4_INDEX_K_CAPTURE_ROWS]",),
    ),
    Mutation(
        "config: a capture layer id given twice is refused",
        "sglang_dsv4_ext/config.py",
        "        if repeated:",
        "        if False:",
        (f"{_CONFIG}::test_bad_value_names_the_variable[layer id given more than once]",),
    ),
    # --- series tooling ---
    Mutation(
        "series: a stale index.lock is refused before apply",
        "sglang_dsv4_ext/tools/series/guards.py",
        "    if lock.exists():\n",
        "    if False:\n",
        ("tests/unit/series/test_bad_input.py::test_apply_with_a_stale_index_lock_is_refused_and_changes_nothing",),
    ),
    Mutation(
        "series: a failed apply restores the repository",
        "sglang_dsv4_ext/tools/series/checkrepo.py",
        "        _restore(repo, head_ref, head)",
        "        pass",
        ("tests/unit/series/test_bad_input.py::test_apply_that_fails_midway_leaves_the_repository_as_it_was",),
    ),
    Mutation(
        "series: export into an untracked series dir keeps a backup",
        "sglang_dsv4_ext/tools/series/guards.py",
        "        shutil.copytree(series_dir, backup)\n",
        "        pass\n",
        ("tests/unit/series/test_bad_input.py::test_export_into_a_series_dir_git_does_not_track_keeps_a_backup",),
    ),
    Mutation(
        "series: a tree without SGLang's package is refused",
        "sglang_dsv4_ext/tools/series/layout.py",
        "    if missing:\n        raise PackageDirError(",
        "    if False:\n        raise PackageDirError(",
        (f"{_SERIES}::test_a_repository_of_another_project_is_refused_naming_what_is_missing",),
    ),
    Mutation(
        "series: apply refuses a detached HEAD",
        "sglang_dsv4_ext/tools/series/checkrepo.py",
        "    if head_ref is None:\n",
        "    if False:\n",
        (f"{_SERIES}::test_apply_on_a_detached_head_is_refused_with_the_way_to_a_branch",),
    ),
    Mutation(
        "series: our own commits are already-applied, not upstream",
        "sglang_dsv4_ext/tools/series/classify.py",
        "    if ours and not forward:\n",
        "    if False:\n",
        (f"{_SERIES}::test_a_second_apply_names_our_own_commits_not_upstream",),
    ),
    Mutation(
        "series: export keeps the pin fields it cannot recompute",
        "sglang_dsv4_ext/tools/series/pin.py",
        "        pin.update({k: old[k] for k in unknown})",
        "        pass",
        (f"{_SERIES}::test_export_keeps_the_wheel_it_cannot_recompute_and_says_what_changed",),
    ),
    Mutation(
        "series: export prints every pin field change",
        "sglang_dsv4_ext/tools/series/cli.py",
        "    for line in pin_report(exported.pin_changes):",
        "    for line in []:",
        (
            f"{_SERIES}::test_export_keeps_the_wheel_it_cannot_recompute_and_says_what_changed",
            f"{_SERIES}::test_export_onto_another_release_leaves_the_old_wheel_out_and_says_so",
        ),
    ),
    Mutation(
        "series: export checks --wheel-sha256",
        "sglang_dsv4_ext/tools/series/pin.py",
        "    if not _SHA256_RE.match(sha256.lower()):",
        "    if False:",
        (f"{_SERIES}::test_export_refuses_a_bad_wheel_and_writes_nothing[bad sha256]",),
    ),
    Mutation(
        "series: a refused rebase start leaves no backup",
        "sglang_dsv4_ext/tools/series/rebase.py",
        "before anything changes\n    into =",
        "before anything changes\n    protect_series_dir(series_dir, progress)\n    into =",
        (f"{_SERIES}::test_a_refused_export_or_rebase_does_not_leave_a_backup_behind[rebase]",),
    ),
    Mutation(
        "integrity: the c4 mirror is linked to the KV anchor whose pages it borrows",
        "sglang_dsv4_ext/runtime/hooks/integrity.py",
        "    setattr(self.anchor_entry.host_pool, _BORROWERS, borrowers)\n",
        "    pass\n",
        (
            _REUSE + "test_a_page_refilled_from_l3_is_not_checked_against_its_previous_occupant",
            _REUSE + "test_host_receive_pages_are_not_checked_against_their_previous_occupant",
        ),
    ),
    Mutation(
        "integrity: pages freed through the KV anchor forget their checksum",
        "sglang_dsv4_ext/runtime/hooks/integrity.py",
        "    _forget_in_borrowers(self, indices)\n",
        "    pass\n",
        (_REUSE + "test_evicted_pages_forget_and_a_reset_forgets_everything",),
    ),
    Mutation(
        "integrity: pages the KV anchor hands out again forget their checksum",
        "sglang_dsv4_ext/runtime/hooks/integrity.py",
        "    _forget_in_borrowers(self, result)  #",
        "    pass  #",
        (_REUSE + "test_pages_the_anchor_hands_out_again_are_forgotten_however_they_came_back",),
    ),
    Mutation(
        "integrity: a cleared host mirror forgets every checksum",
        "sglang_dsv4_ext/runtime/hooks/integrity.py",
        "        tracker.forget_all()\n",
        "        pass\n",
        (_REUSE + "test_evicted_pages_forget_and_a_reset_forgets_everything",),
    ),
    Mutation(
        "integrity: host indices reach the device pinned and non-blocking",
        "sglang_dsv4_ext/runtime/index_k/integrity.py",
        "        return staged.to(device, non_blocking=True)",
        "        return indices.to(device)",
        (_COUNTS + "test_host_indices_reach_a_cuda_device_through_fresh_pinned_memory_without_blocking",),
    ),
    Mutation(
        "integrity: record moves no index with a blocking copy",
        "sglang_dsv4_ext/runtime/index_k/integrity.py",
        "        sums = ck.page_checksums(self.buffers[layer], indices_on(self.device, src_rows))",
        "        sums = ck.page_checksums(self.buffers[layer], src_rows.to(self.device, torch.int64))",
        (
            _COUNTS + "test_record_expect_verify_forget_poll_copy_no_index_blocking_and_read_back_only_the_pinned_"
            "record",
        ),
    ),
    Mutation(
        "integrity: device page keys are not de-duplicated on the host",
        "sglang_dsv4_ext/runtime/hooks/integrity.py",
        '    return torch.unique(keys) if keys.device.type == "cpu" else keys',
        "    return torch.unique(keys)",
        (_COUNTS + "test_page_keys_of_device_indices_are_not_deduplicated_on_the_host",),
    ),
    Mutation(
        "integrity: pages compared are counted on the device (torch path)",
        "kernels_sm120/index_k_checksum.py",
        "    state[2] += compared.sum()\n",
        "",
        (_COUNTS + "test_checksums_compared_are_counted_on_the_device",),
    ),
    Mutation(
        "integrity: pages compared are counted on the device (Triton kernel)",
        "kernels_sm120/index_k_checksum.py",
        "        tl.atomic_add(state_ptr + 2, 1)\n",
        "        pass\n",
        ("tests/unit/hooks/test_integrity.py::test_checksum_kernel_in_triton_interpreter_matches_torch",),
    ),
    Mutation(
        "integrity: the three series exist at zero from pool creation",
        "sglang_dsv4_ext/runtime/hooks/integrity.py",
        "    series = index_k_integrity.Series(index_k_integrity.WHERE_LOAD)",
        "    series = None",
        (_COUNTS + "test_the_three_series_exist_at_zero_from_pool_creation",),
    ),
    Mutation(
        "integrity: pages sample mode leaves out are counted",
        "sglang_dsv4_ext/runtime/index_k/integrity.py",
        "            self._count_unchecked(SAMPLING, n)\n",
        "",
        (_COUNTS + "test_every_loaded_page_is_counted_once_checked_or_why_not",),
    ),
    Mutation(
        "integrity: pages without a checksum are counted",
        "sglang_dsv4_ext/runtime/index_k/integrity.py",
        "        self._count_unchecked(NO_CHECKSUM, snapshot.rows - compared - self.unchecked[NO_CHECKSUM])\n",
        "",
        (
            _COUNTS + "test_every_loaded_page_is_counted_once_checked_or_why_not",
            _REUSE + "test_a_page_refilled_from_l3_is_not_checked_against_its_previous_occupant",
        ),
    ),
    Mutation(
        "integrity: a poll reads the newest finished snapshot, not only the last one",
        "sglang_dsv4_ext/runtime/index_k/integrity.py",
        "        while self._read < self._taken and self._snapshots[self._read % _SNAPSHOTS].done():",
        "        while self._read < self._taken and self._snapshots[(self._taken - 1) % _SNAPSHOTS].done():",
        (_COUNTS + "test_a_poll_reads_the_newest_finished_snapshot_while_later_ones_are_still_in_flight",),
    ),
    Mutation(
        "repro: never 0 mismatches beside 0 checked pages",
        "sglang_dsv4_ext/tools/repro/server_evidence.py",
        '    return {**row, "integrity_mismatches": NOT_CHECKED} if checked == 0 else row',
        "    return row",
        (
            "tests/unit/repro/test_server_evidence.py::test_zero_mismatches_are_shown_only_beside_checked_pages",
            "tests/unit/repro/test_server_evidence.py::test_the_report_page_says_not_checked_for_zero_checked_pages",
        ),
    ),
    # --- one series per release ---
    Mutation(
        "series: rerere stays off without a resolution record",
        "sglang_dsv4_ext/tools/series/gitcmd.py",
        '"rerere.enabled": "false",',
        '"rerere.enabled": "true",',
        (_RECORD_OWN_CACHE,),
    ),
    Mutation(
        "series: a record's rebase sets the repository's rerere cache aside",
        "sglang_dsv4_ext/tools/series/resolutions.py",
        "        shutil.move(str(live), str(saved))\n",
        "        shutil.copytree(str(live), str(saved))\n",
        (_RECORD_OWN_CACHE,),
    ),
    Mutation(
        "series: a stop the record resolves goes on without stopping",
        "sglang_dsv4_ext/tools/series/rebase.py",
        "    if not stops.fully_resolved_by_rerere(repo):\n",
        "    if True:\n",
        (_RECORD_REPLAY,),
    ),
    Mutation(
        "series: a resolution's edits beyond the conflicted files are recorded",
        "sglang_dsv4_ext/tools/series/rebase.py",
        "resolutions.keep_pending(_state_dir(repo), patch.name, edits, message)\n        detail",
        'resolutions.keep_pending(_state_dir(repo), patch.name, "", message)\n        detail',
        (_RECORD_REPLAY,),
    ),
    Mutation(
        "series: a patch edited after it applied replays its recorded edits",
        "sglang_dsv4_ext/tools/series/rebase.py",
        "and resolutions.has_entry(Path(state.record), patch.name):",
        "and False:",
        (_RECORD_REPLAY,),
    ),
    Mutation(
        "series: the message edited at a stop is the resolved commit's",
        "sglang_dsv4_ext/tools/series/rebase.py",
        "    if message is not None:\n        commit = stops.amend(repo, patch, message)\n    detail",
        "    if False:\n        commit = stops.amend(repo, patch, message)\n    detail",
        (_RECORD_REPLAY,),
    ),
    Mutation(
        "series: a patch stopped for --edit can be dropped",
        "sglang_dsv4_ext/tools/series/rebase.py",
        'f"{state.stop_head}^" if edit_stop else _stop_head(state)',
        "_stop_head(state)",
        ("tests/unit/series/test_series_record.py::test_a_patch_stopped_for_edit_can_still_be_dropped",),
    ),
    Mutation(
        "series: rebase --into leaves the old series alone",
        "sglang_dsv4_ext/tools/series/rebase.py",
        "    into = Path(into).resolve() if into is not None else series_dir\n",
        "    into = series_dir\n",
        (_RECORD_REPLAY,),
    ),
    Mutation(
        "series: status takes the series pinned to the target's version",
        "sglang_dsv4_ext/tools/series/releases.py",
        "        if target_version is not None and version == target_version:\n",
        "        if False:\n",
        (f"{_RELEASES}::test_status_takes_the_series_pinned_to_the_targets_version",),
    ),
    Mutation(
        "series: doctor judges an SGLang with its release's series",
        "sglang_dsv4_ext/tools/series/upstream.py",
        "choose_series_dir(package_version(sglang_dir))",
        "choose_series_dir(None)",
        (f"{_RELEASES}::test_doctors_verdicts_use_the_series_of_the_sglang_they_judge",),
    ),
    # --- activation evidence ---
    Mutation(
        "activation: every failure of the entry point stops the process",
        "sglang_dsv4_ext/runtime/activation.py",
        "    except Exception as exc:\n        if isinstance(exc, ActivationError):",
        "    except ActivationError as exc:\n        if isinstance(exc, ActivationError):",
        (
            f"{_SCOPE}::test_a_missing_wrapt_stops_the_process_instead_of_serving_stock",
            f"{_SCOPE}::test_a_bug_in_a_post_import_hook_stops_the_process_under_sglangs_except_exception",
        ),
    ),
    Mutation(
        "activation: the launcher says 'configuration loaded', never 'active'",
        "sglang_dsv4_ext/runtime/activation.py",
        "        print(launcher_line(STATE.config), file=sys.stderr, flush=True)",
        "        print(activation_line(STATE.config), file=sys.stderr, flush=True)",
        (
            f"{_SCOPE}::test_only_the_process_that_passed_the_build_check_says_active",
            "tests/integration/test_plugin_allowlist.py",
        ),
    ),
    Mutation(
        "activation: a launcher starts a launch of its own",
        "sglang_dsv4_ext/runtime/activation.py",
        "    if multiprocessing.parent_process() is None or not inherited:",
        "    if not inherited:",
        (f"{_SCOPE}::test_the_pool_building_process_exports_the_activation_gauge",),
    ),
    Mutation(
        "activation: /server_info says active only after the build check",
        "sglang_dsv4_ext/runtime/activation.py",
        "    if STATE.config is not None and STATE.build_checked:",
        "    if STATE.config is not None:",
        (
            "tests/unit/hooks/test_evidence.py::test_a_scheduler_that_built_no_dsv4_model_never_reports_active",
            f"{_SCOPE}::test_only_the_process_that_passed_the_build_check_says_active",
        ),
    ),
    Mutation(
        "evidence: the schedulers' /server_info carries their record",
        "sglang_dsv4_ext/runtime/hooks/evidence.py",
        "        state[RECORD_KEY] = process.evidence_record()",
        "        pass",
        ("tests/unit/hooks/test_evidence.py",),
    ),
    Mutation(
        "layout: a tool never imports a hook module",
        "sglang_dsv4_ext/tools/repro/server_info.py",
        "from sglang_dsv4_ext.runtime.record_names import EVIDENCE_RECORD_KEY as RECORD_KEY\n",
        "from sglang_dsv4_ext.runtime.hooks.evidence import RECORD_KEY\n",
        ("tests/unit/test_import_boundaries.py::test_the_tree_keeps_the_import_rules",),
    ),
    Mutation(
        "exit codes: plan returns a name from exit_codes, not a number",
        "sglang_dsv4_ext/tools/plan/cli.py",
        "        _print_table(plan)\n    return exit_codes.OK\n",
        "        _print_table(plan)\n    return 0\n",
        ("tests/unit/test_exit_codes_named.py::test_no_command_returns_a_bare_exit_code",),
    ),
    Mutation(
        "startup hook: a DSV4 build without load_plugins() runs it",
        "sglang_dsv4_ext/runtime/activation.py",
        "    if STATE.config is not None or kill_switch_set() or plugin_allowlist_block() is not None:\n"
        "        return\n    from sglang.srt.plugins import load_plugins",
        "    if True:\n        return\n    from sglang.srt.plugins import load_plugins",
        (
            "tests/integration/test_startup_hook.py::"
            "test_an_entry_point_without_load_plugins_builds_dsv4_with_the_extension",
        ),
    ),
    Mutation(
        "startup hook: SGLANG_DSV4_EXT=0 leaves it idle",
        "sglang_dsv4_ext/runtime/bootstrap.py",
        "    if kill_switch_set():  # SGLANG_DSV4_EXT=0",
        "    if False:  # SGLANG_DSV4_EXT=0",
        ("tests/integration/test_startup_hook.py::test_the_kill_switch_leaves_such_an_entry_point_stock",),
    ),
    Mutation(
        "startup hook: the editable install carries the .pth",
        "setup.py",
        '            self._write_startup_hook(Path(self.get_finalized_command("install").install_lib))\n',
        "",
        ("tests/integration/test_startup_hook.py::test_the_editable_install_carries_the_startup_hook",),
    ),
    Mutation(
        "startup hook: the wheel carries the .pth",
        "setup.py",
        "        self._write_startup_hook(Path(self.build_lib))\n",
        "",
        ("tests/integration/test_wheel_ships_series.py::test_the_wheel_installs_the_startup_hook_into_site_packages",),
    ),
    Mutation(
        "serve: only the current start of a log counts",
        _ACT_CHECK,
        "    date, lines = current_start(_read(name, log_path))",
        "    date, lines = None, _read(name, log_path).splitlines()",
        (f"{_ACT}::test_only_the_current_start_of_this_launch_is_evidence",),
    ),
    Mutation(
        "serve: an activation line of another launch does not count",
        _ACT_CHECK,
        "    if launch is not None and not launch_identity.same(launches[0], launch):",
        "    if False:",
        (
            f"{_ACT}::test_servers_that_print_the_line_of_this_launch_count_and_another_launch_fails",
            f"{_ACT}::test_only_the_current_start_of_this_launch_is_evidence",
        ),
    ),
    Mutation(
        "serve: a child's log ends each start with an end line",
        "sglang_dsv4_ext/tools/serving/supervise.py",
        "        log.write(\n",
        "        (\n",
        (f"{_ACT}::test_serve_ends_each_start_of_a_child_log_with_an_end_line",),
    ),
    Mutation(
        "serve: --use-ray is refused",
        "sglang_dsv4_ext/tools/serving/validate.py",
        "                if dest in REFUSED_DESTS and value:",
        "                if False:",
        (f"{_SERVE}::test_bad_flag_is_refused_naming_it",),
    ),
    Mutation(
        "repro: the schedulers' records decide, not a gauge",
        "sglang_dsv4_ext/tools/repro/extension_check.py",
        (
            '        decided = _from_records(url, cast(list[dict | None], live["records"]))  # server_i'
            "nfo.parse's list\n"
        ),
        (
            "        decided = (\n"
            '            _from_records(url, cast(list[dict | None], live["records"]))\n'
            '            if not entry.get("extension")\n'
            '            else _state(url, ACTIVE, "gauge", entry["extension"])\n'
            "        )  # server_info.parse's list\n"
        ),
        (
            "tests/unit/repro/test_expect_extension.py::"
            "test_a_stock_server_never_passes_whatever_its_metrics_and_logs_show",
            f"{_SCOPE}::test_a_gauge_left_in_a_shared_metrics_dir_never_passes_a_later_stock_server",
        ),
    ),
    # --- kernels, decode reads ---
    Mutation(
        "logits: the item grid finds parts past the first 256 rows",
        "kernels_sm120/paged_mqa_logits.py",
        "        base += tl.sum(parts, axis=0)\n    return row, part",
        "        pass\n    return row, part",
        ("tests/unit/kernels_sm120/test_semantics.py::test_logits_batch_balanced_chunks_over_many_rows",),
    ),
    Mutation(
        "logits: key loops count from 0 so the item grid stays pipelined",
        "kernels_sm120/paged_mqa_logits.py",
        (
            "            for pb_i in range(0, tl.cdiv(n_pages - p_first, PAGE_BLOCK)):\n"
            "                pb, ids, lo, blk_end = page_id_block(\n"
            "                    pt_row, p_first, pb_i, n_pages, start, compute_end, PAGE, PAGE_BLOCK\n"
            "                )\n"
            "                if not (KEY_FP8 and SCALES_AHEAD):\n"
            "                    for i in range(0, tl.cdiv(blk_end - lo, BLOCK_N)):\n"
            "                        t = lo + i * BLOCK_N + offs_n\n"
        ),
        (
            "            for pb in range(p_first, n_pages, PAGE_BLOCK):\n"
            "                pb, ids, lo, blk_end = page_id_block(pt_row, pb, 0, n_pages, start, comput"
            "e_end, PAGE, PAGE_BLOCK)\n"
            "                if not (KEY_FP8 and SCALES_AHEAD):\n"
            "                    for n0 in range(lo, blk_end, BLOCK_N):\n"
            "                        t = n0 + offs_n\n"
        ),
        ("tests/unit/kernels_sm120/test_aot.py::test_decode_logits_keep_their_pipeline_stages",),
    ),
    Mutation(
        "gather: a program past the last item reads nothing",
        "benchmarks/page_gather.py",
        "        start = tl.maximum(part, 0) * chunk",
        "        start = part * chunk",
        ("tests/unit/kernels_sm120/test_page_gather.py::test_programs_past_the_last_item_read_nothing",),
    ),
    Mutation(
        "decode reads: the indexer reads every c4 row",
        "sglang_dsv4_ext/tools/plan/decode_reads.py",
        '"indexer": c4 * (context // 4) * index_k_bytes_per_token',
        '"indexer": c4 * min(model.index_topk, context // 4) * index_k_bytes_per_token',
        ("tests/unit/cli/test_plan_decode_reads.py::test_sums_equal_a_walk_over_the_layers",),
    ),
    Mutation(
        "plan: recall is weighted by each layer's rows",
        "sglang_dsv4_ext/tools/plan/cli.py",
        "sum(n * r for n, r in m) / sum(n for n, _ in m)",
        "sum(r for _, r in m) / len(m)",
        (
            "tests/unit/cli/test_plan_decode_reads.py::"
            "test_plan_shows_rows_weighted_recall_and_n_a_where_nothing_was_measured",
        ),
    ),
    Mutation(
        "plan: a format with no measured rows has no recall",
        "sglang_dsv4_ext/tools/plan/cli.py",
        "/ sum(n for n, _ in m) if m else None)",
        "/ sum(n for n, _ in m) if m else 0.0)",
        (
            "tests/unit/cli/test_plan_decode_reads.py::"
            "test_plan_shows_rows_weighted_recall_and_n_a_where_nothing_was_measured",
        ),
    ),
    Mutation(
        "plan: --context refuses lengths below one token",
        "sglang_dsv4_ext/tools/plan/cli.py",
        "        if count is None or count * scale < 1:",
        "        if count is None:",
        ("tests/unit/cli/test_plan_decode_reads.py::test_bad_context_is_refused_naming_the_flag",),
    ),
    Mutation(
        "plan: decode reads of layers the formula does not describe are not modelled, and said so",
        "sglang_dsv4_ext/tools/plan/decode_reads.py",
        "    unmodelled = unmodelled_ratios(model, **stage)\n    if unmodelled:\n",
        "    unmodelled = unmodelled_ratios(model, **stage)\n    if False:\n",
        ("tests/unit/cli/test_plan_v41.py::test_v41_decode_reads_are_not_modelled_and_say_so",),
    ),
    Mutation(
        "activation: a drifted name the hooks call refuses before patching",
        "sglang_dsv4_ext/runtime/activation.py",
        "            drifts = compat.check_targets([*_TABLE, *_CALLED])\n",
        "            drifts = compat.check_targets(_TABLE)\n",
        (
            "tests/integration/test_activation.py::"
            "test_a_drifted_name_the_hooks_call_refuses_naming_it_and_patches_nothing",
        ),
    ),
    Mutation(
        "activation: a DSV4 build refuses a drifted name the hooks call",
        "sglang_dsv4_ext/runtime/activation.py",
        "        patch_module(module_name)\n    _check_called()\n",
        "        patch_module(module_name)\n",
        (f"{_SCOPE}::test_moved_pool_classes_stop_no_server_and_the_model_guard_refuses_dsv4",),
    ),
    Mutation(
        "doctor: a drifted name the hooks call is shown drifted",
        "sglang_dsv4_ext/tools/doctor/cli.py",
        '"status": activation.DRIFTED if target.path in drifts else MATCHES',
        '"status": MATCHES',
        ("tests/unit/cli/test_doctor_plan_cli.py::test_doctor_shows_each_called_name_and_its_drift",),
    ),
    Mutation(
        "serve: a single-mode stack without its server is refused",
        "sglang_dsv4_ext/tools/serving/launch_plan.py",
        '    if spec.mode == "single" and spec.single is None:\n',
        "    if False:\n",
        ("tests/unit/serving/test_serve_dryrun.py::test_a_single_mode_stack_without_its_server_is_refused_by_name",),
    ),
    # One table for SGLang 0.5.22 and 0.5.23. The rows naming _R0522_PATHS drive a 0.5.22 interpreter
    # (DSV4_TEST_SGLANG_0_5_22_PYTHON, which .ci/run sets; without it they skip, which reads as a gap here).
    Mutation(
        "releases: each release is checked against its own rows",
        "sglang_dsv4_ext/runtime/compat.py",
        "    return version if version in SUPPORTED_SGLANG_VERSIONS else SUPPORTED_SGLANG_VERSIONS[-1]",
        "    return SUPPORTED_SGLANG_VERSIONS[-1]",
        (f"{_R0522}test_each_release_has_its_own_rows_and_an_untested_one_is_judged_by_the_newest",),
    ),
    Mutation(
        "releases: an untested SGLang is judged by the newest release's rows",
        "sglang_dsv4_ext/runtime/compat.py",
        "    return version if version in SUPPORTED_SGLANG_VERSIONS else SUPPORTED_SGLANG_VERSIONS[-1]",
        "    return version",
        (f"{_R0522}test_each_release_has_its_own_rows_and_an_untested_one_is_judged_by_the_newest",),
    ),
    Mutation(
        "releases: a drift names what the found signature lacks",
        "sglang_dsv4_ext/runtime/compat.py",
        "    lacking = [p for p in wanted if p not in found]",
        "    lacking = []",
        (f"{_R0522}test_parameter_difference_names_what_the_found_signature_lacks_or_adds",),
    ),
    Mutation(
        "releases: doctor says per row what the other release lacks",
        "sglang_dsv4_ext/tools/doctor/cli.py",
        "    return {r.version: r.lacks for r in target.releases if r.version != release}",
        "    return {}",
        (f"{_R0522}test_doctor_says_per_row_what_the_other_release_lacks",),
    ),
    Mutation(
        "0.5.22 PD: bf16 index-K refused where each role builds its KV manager",
        "sglang_dsv4_ext/runtime/hooks/pd.py",
        "    if index_pool is not None and stores_bf16_index_k(index_pool):\n        raise",
        "    if False:\n        raise",
        (_R0522_PATHS,),
    ),
    Mutation(
        "0.5.22 external linker: bf16 refused at the DSV4 pool group",
        "sglang_dsv4_ext/runtime/hooks/hicache.py",
        '    _refuse_external_linker(kvcache, "--unified-cache-external-linker-backend")',
        "    pass",
        (_R0522_PATHS,),
    ),
    Mutation(
        "0.5.22 gate: a full-graph replay waits for every layer first",
        "sglang_dsv4_ext/runtime/hooks/gate/replay.py",
        "        layer = counter.num_layers - 1 if full else 0",
        "        layer = 0",
        (_R0522_PATHS,),
    ),
    Mutation(
        "0.5.22 gate: the execute hook waits first where SGLang has no _wait_for_layer_loads",
        "sglang_dsv4_ext/runtime/hooks/gate/__init__.py",
        "            else replay.around_prefill_execute_waiting_first,\n",
        "            else replay.around_prefill_execute,\n",
        (_R0522_PATHS,),
    ),
    Mutation(
        "0.5.22 pool: the indexer pool hook passes on only what SGLang gives",
        "sglang_dsv4_ext/runtime/hooks/pool.py",
        "            **release_kwargs,\n",
        "            index_k_page8=False,\n",
        (_R0522_PATHS,),
    ),
    Mutation(
        "activation: the called rows are those of the running release",
        "sglang_dsv4_ext/runtime/activation.py",
        "    _CALLED = compat.table_for(version, compat.CALLED)\n",
        "    _CALLED = compat.CALLED\n",
        (_R0522_PATHS,),
    ),
    Mutation(
        "doctor: the called names are judged by the running release's rows",
        "sglang_dsv4_ext/tools/doctor/cli.py",
        "    called = compat.table_for(release, compat.CALLED)\n",
        "    called = compat.CALLED\n",
        (_R0522_PATHS,),
    ),
    # --- the third hardening pass of the offline tools ---
    Mutation(
        "recall: a layer outside the capturing model's c4 layers is refused",
        "sglang_dsv4_ext/tools/recall/capture_files.py",
        '    if c4_layers is not None and rec["layer"] not in c4_layers:',
        "    if False:",
        (f"{_REC}::test_a_layer_that_is_no_c4_layer_of_the_capturing_model_is_refused",),
    ),
    Mutation(
        "recall: repeated query rows are refused",
        "sglang_dsv4_ext/tools/recall/capture_files.py",
        "    if repeated:\n        _fail(\n",
        "    if False:\n        _fail(\n",
        (f"{_REC}::test_repeated_query_rows_are_refused",),
    ),
    Mutation(
        "recall: a hard link is the file itself",
        "sglang_dsv4_ext/tools/recall/capture_files.py",
        "    return info.st_dev, info.st_ino\n",
        "    return os.path.realpath(path)\n",
        (f"{_REC}::test_a_hard_link_to_a_capture_file_is_that_file_read_once",),
    ),
    Mutation(
        "capture: each file records the model's c4 layers",
        "sglang_dsv4_ext/runtime/index_k/capture.py",
        '            meta["c4_layers"] = list(self.c4_layers)\n',
        "            pass\n",
        ("tests/unit/hooks/test_index_k_capture.py::test_each_file_records_the_c4_layers_of_the_pools_model",),
    ),
    Mutation(
        "config: a non-empty SGLANG_PLUGINS is an allow-set, blank included",
        "sglang_dsv4_ext/config.py",
        "    if not raw:\n        return None\n",
        "    if not raw.strip():\n        return None\n",
        (f"{_ROWS}::test_plugin_allowed_is_what_sglangs_plugin_loader_does",),
    ),
    Mutation(
        "doctor: the capture directory check tries the creation",
        "sglang_dsv4_ext/tools/recall/capture_check.py",
        '        made = tempfile.mkdtemp(prefix=".sglang-dsv4-capture-check-", dir=directory)\n',
        '        made = tempfile.mkdtemp(prefix=".sglang-dsv4-capture-check-")\n',
        (f"{_CONFIG}::test_doctor_and_serve_refuse_a_capture_directory_under_procfs",),
    ),
    Mutation(
        "input files: a non-regular file is refused on the opened descriptor",
        "sglang_dsv4_ext/tools/input_files.py",
        "        if not stat.S_ISREG(mode):",
        "        if False:",
        (
            "tests/unit/cli/test_plan_decode_reads.py::test_a_fifo_or_a_device_as_recall_json_is_refused_without_blocking",
        ),
    ),
    Mutation(
        "plan: recall values are bounded by [0, 1]",
        "sglang_dsv4_ext/tools/plan/cli.py",
        "    if type(value) not in (int, float) or not 0.0 <= value <= 1.0:",
        "    if type(value) not in (int, float):",
        ("tests/unit/cli/test_plan_decode_reads.py::test_recall_values_outside_0_1_are_refused",),
    ),
    Mutation(
        "plan: a context past the model's limit is refused",
        "sglang_dsv4_ext/tools/plan/cli.py",
        "    past = [n for n in contexts if n > model.context_len]\n",
        "    past = []\n",
        ("tests/unit/cli/test_plan_decode_reads.py::test_a_context_past_the_models_limit_is_refused",),
    ),
    Mutation(
        "tool flags: numbers in ASCII digits only",
        "sglang_dsv4_ext/tools/tool_support/arg_types.py",
        "    return int(text) if text.isascii() and _INTEGER.fullmatch(text) else None\n",
        "    return int(text) if text.strip().isdigit() else None\n",
        (f"{_SERVE}::test_bad_flag_is_refused_naming_it[router port in full-width digits]",),
    ),
    Mutation(
        "config: a value is taken as written (one rule with presets and flags)",
        "sglang_dsv4_ext/config.py",
        "        if raw not in choices:\n",
        "        if raw.strip().lower() not in choices:\n",
        (f"{_CONFIG}::test_bad_value_names_the_variable[upper-case dtype]",),
    ),
    Mutation(
        "serve: its own flags given twice are refused",
        "sglang_dsv4_ext/tools/serving/cli.py",
        "            if self.dest in given:\n",
        "            if False:\n",
        (f"{_SERVE}::test_bad_flag_is_refused_naming_it[a setting flag given twice]",),
    ),
    Mutation(
        "serve: the extension off voids the preset's settings",
        "sglang_dsv4_ext/tools/serving/cli.py",
        "    spec.ext = ExtConfig(enabled=False)\n",
        "    pass\n",
        (f"{_SERVE}::test_a_bf16_preset_with_no_extension_is_never_called_bf16",),
    ),
    Mutation(
        "patches rebase: --continue rolls an unsaved step back",
        "sglang_dsv4_ext/tools/series/rebase.py",
        "    if head != state.step_head:\n",
        "    if False:\n",
        (
            "tests/unit/series/test_rebase_interrupted.py::test_continue_after_a_kill_mid_step_rolls_the_unsaved_commit_back",
        ),
    ),
    Mutation(
        "integrity sample: the rows shift per sampled load of the layer, not per load",
        "sglang_dsv4_ext/runtime/index_k/integrity.py",
        "        offset = turn % step\n",
        "        offset = self.loads % step\n",
        ("tests/unit/hooks/test_integrity_sampling.py",),
    ),
    Mutation(
        "integrity: a report resets the first-bad-page record",
        "sglang_dsv4_ext/runtime/index_k/integrity.py",
        "        self.state[1].fill_(ck.NO_MISMATCH)",
        "        pass  # no reset",
        ("tests/unit/hooks/test_integrity_sampling.py",),
    ),
    Mutation(
        "evidence: index_k_dtype is the dtype of the pool built, not the configuration's",
        "sglang_dsv4_ext/runtime/activation.py",
        '        "index_k_dtype": built_index_k_dtype(),\n',
        '        "index_k_dtype": cfg.index_k_dtype,\n',
        ("tests/unit/hooks/test_evidence_built.py",),
    ),
    Mutation(
        "evidence: each active rank takes part in the rank count where its pool is built",
        "sglang_dsv4_ext/runtime/hooks/pool.py",
        "        rank_census.take_part(_sglang_tp_group(), process.built_index_k_dtype())\n",
        "        pass\n",
        ("tests/unit/hooks/test_evidence_built.py",),
    ),
    Mutation(
        "repro: integrity counters of the live launch only",
        "sglang_dsv4_ext/tools/repro/server_evidence.py",
        "        if launch is not None and launch_identity.same(label, launch):\n",
        "        if True:\n",
        ("tests/unit/hooks/test_integrity_launch.py",),
    ),
    Mutation(
        "integrity: the pool hook polls its tracker in the background",
        "sglang_dsv4_ext/runtime/hooks/integrity.py",
        "    index_k_integrity.poll_in_background(tracker)\n",
        "    pass\n",
        ("tests/unit/hooks/test_integrity_launch.py",),
    ),
]


def _existing(tests: Sequence[str], root: Path) -> list[str]:
    return [t for t in tests if (root / t.split("::")[0]).exists()]


def run_one(mutation: Mutation, python: str) -> tuple[str, float]:
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
            return (
                f"STALE: the fix's text occurs {text.count(mutation.original)} times in {mutation.path}",
                time.monotonic() - started,
            )
        target.write_text(text.replace(mutation.original, mutation.mutant))
        tests = _existing(mutation.tests, copy)
        if not tests:
            return f"STALE: none of {', '.join(mutation.tests)} exists", time.monotonic() - started
        try:
            proc = subprocess.run(
                [python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                cwd=copy,
                env={**_env(), "PYTHONPATH": str(copy)},
                capture_output=True,
                text=True,
                timeout=ROW_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return f"HUNG: the tests ran past {ROW_TIMEOUT_S} s on the mutant", time.monotonic() - started
        verdict = (
            "caught"
            if proc.returncode == 1
            else ("MISSED" if proc.returncode == 0 else f"STALE: pytest exit {proc.returncode}")
        )
        return verdict, time.monotonic() - started


def _env():
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_DSV4")}


def _positive_int(text: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _run_rows(rows: Sequence[Mutation], python: str, jobs: int):
    """Each row in its own copy, `jobs` at a time; results in the rows' order, progress as they end."""
    from concurrent.futures import ThreadPoolExecutor

    done = 0

    def one(m: Mutation):
        nonlocal done
        verdict, seconds = run_one(m, python)
        done += 1
        print(f"[{done}/{len(rows)}] {m.name}: {verdict} ({seconds:.0f} s)", file=sys.stderr, flush=True)
        return m, verdict, seconds

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, rows))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.mutation_pass", description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only rows whose name contains one of these")
    parser.add_argument("--list", action="store_true", help="list the rows and exit")
    parser.add_argument("--python", default=sys.executable, help="interpreter with SGLang installed")
    parser.add_argument(
        "--jobs",
        type=_positive_int,
        default=1,
        metavar="N",
        help="rows run at once, each in its own copy (default 1; each costs ~1.2 GB)",
    )
    args = parser.parse_args(argv)
    rows = [m for m in MUTATIONS if not args.only or any(o in m.name for o in args.only)]
    if args.list:
        for m in rows:
            print(f"{m.name}: {m.path} -> {', '.join(m.tests)}")
        return 0
    results = _run_rows(rows, args.python, args.jobs)
    width = max(len(m.name) for m in rows)
    print(f"{'fix disabled':<{width}}  {'verdict':<8}  seconds  tests")
    for m, verdict, seconds in results:
        print(f"{m.name:<{width}}  {verdict:<8}  {seconds:7.1f}  {', '.join(m.tests)}")
    return 0 if all(v == "caught" for _, v, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
