"""One wheel for SGLang 0.5.22 and 0.5.23, and real upstream drift refused.

- The supported releases are spelled once (``compat.SUPPORTED_SGLANG_VERSIONS``); pyproject's
  dependency range admits exactly those, and the README names them.
- On the REAL SGLang 0.5.22 tree (a fresh interpreter of the environment
  ``DSV4_TEST_SGLANG_0_5_22_PYTHON`` names; ``.ci/run`` builds it), with the table restricted to
  0.5.23's rows and ``SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG=1``: activation reports exactly the seven
  targets that changed between the releases, each with its difference, a DeepSeek-V4 pool build is
  refused listing them, and a non-DeepSeek-V4 pool builds with nothing of ours in the drifted modules.
- Each 0.5.22 hook path on 0.5.22's real classes: the tests that exercise them
  (:data:`RELEASE_PATH_TESTS`) run under that interpreter too. In the 0.5.22 run of the whole suite
  they run in-process as well.
"""

from __future__ import annotations

import os
import re

import pytest

from sglang_dsv4_ext.runtime import compat
from tests.support.fresh_interpreter import ROOT, child_env, last_json_line, run_python, run_python_ok

SCRIPT = ROOT / "tests" / "support" / "release_0_5_22.py"
ENV_PYTHON_0_5_22 = "DSV4_TEST_SGLANG_0_5_22_PYTHON"
_MP = "sglang.srt.mem_cache.deepseek_v4_memory_pool.DeepSeekV4TokenToKVPool"
_IDX = "sglang.srt.layers.attention.dsv4.indexer"
# The seven targets of 0.5.23's table that SGLang 0.5.22 has differently, and how each differs there.
DRIFT_0_5_23_ON_0_5_22 = {
    f"{_MP}._make_indexer_pool": "found lacks index_k_page8=False",
    f"{_MP}.pd_kv_layout": "missing (AttributeError",
    "sglang.srt.mem_cache.unified_cache.linker_factory.create_unified_cache_linker": "missing (AttributeError",
    f"{_IDX}.C4Indexer.compute_q": "found lacks q_lora_quant=None",
    f"{_IDX}.C4IndexerBackendMixin.forward_c4_indexer": "found lacks q_lora_quant=None",
    f"{_IDX}.C4Indexer.forward": "found lacks q_lora_quant=None",
    (
        "sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner._wait_for_layer_loads"
    ): "missing (AttributeError",
}
# The tests that drive each 0.5.22 hook path (pool sizing bf16, gate replay waits, indexer query, PD refusal,
# external linker refusal) on the real classes of the release they run under.
RELEASE_PATH_TESTS = [
    "tests/unit/hooks/test_release_paths.py",
    "tests/integration/test_gate_prefill_replay.py",
    "tests/unit/hooks/test_sizing.py",
    # the lazy path (SGLang's entry point) checks the called rows of the running release before a DSV4 build
    "tests/integration/test_activation_scope.py::test_building_a_dsv4_pool_completes_and_verifies_every_target",
    # doctor judges the called names by the running release's rows (it exits 1 on a drift)
    "tests/unit/cli/test_doctor_plan_cli.py::test_doctor_shows_each_called_name_and_its_drift",
]


def python_0_5_22() -> str:
    python = os.environ.get(ENV_PYTHON_0_5_22)
    if not python:
        pytest.skip(
            f"{ENV_PYTHON_0_5_22} is not set: no Python with SGLang 0.5.22 to run the real 0.5.22 tree "
            f"(`pip install sglang==0.5.22` needs NVIDIA's index or an override: .ci/run builds one and sets it)"
        )
    return python


def test_supported_releases_are_spelled_once_and_pyproject_admits_exactly_them():
    text = (ROOT / "pyproject.toml").read_text()
    spec = re.search(r'"sglang([<>=!~][^"]*)"', text).group(1)
    from packaging.specifiers import SpecifierSet

    admitted = SpecifierSet(spec)
    assert all(v in admitted for v in compat.SUPPORTED_SGLANG_VERSIONS), spec
    for outside in ("0.5.21", "0.5.24", "0.6.0"):
        assert outside not in admitted, (outside, spec)
    readme = (ROOT / "README.md").read_text()
    assert all(
        f"**{v}**" in readme.split("## Supported SGLang releases", 1)[1][:600] for v in compat.SUPPORTED_SGLANG_VERSIONS
    )


def test_each_release_has_its_own_rows_and_an_untested_one_is_judged_by_the_newest():
    newest = compat.SUPPORTED_SGLANG_VERSIONS[-1]
    rows_0_5_22 = {t.path: t.signature for t in compat.table_for("0.5.22")}
    rows_newest = {t.path: t.signature for t in compat.table_for(newest)}
    assert {t.path: t.signature for t in compat.table_for("0.5.99")} == rows_newest
    assert set(rows_newest) - set(rows_0_5_22) == {p for p, d in DRIFT_0_5_23_ON_0_5_22.items() if "missing" in d}
    only_0_5_22 = (compat.PD_PREFILL_KV_MANAGER, compat.PD_DECODE_KV_MANAGER, compat.EXTERNAL_LINKER_DSV4_POOL_GROUP)
    assert set(rows_0_5_22) - set(rows_newest) == {t.path for t in only_0_5_22}
    changed = {p for p in set(rows_0_5_22) & set(rows_newest) if rows_0_5_22[p] != rows_newest[p]}
    assert changed == {p for p, d in DRIFT_0_5_23_ON_0_5_22.items() if "found lacks" in d}
    # Every row that differs says what the other release lacks (doctor prints it).
    assert all(r.lacks for t in compat.TARGETS for r in t.releases)


@pytest.fixture(scope="module")
def real_drift():
    proc = run_python_ok(
        str(SCRIPT),
        "real_drift",
        python=python_0_5_22(),
        env=child_env(SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG="1"),
        timeout=900,
    )
    return last_json_line(proc)


def test_real_0_5_22_tree_against_0_5_23_rows_reports_exactly_the_seven_drifts(real_drift):
    assert real_drift["sglang"] == "0.5.22"
    assert set(real_drift["drifts"]) == set(DRIFT_0_5_23_ON_0_5_22)
    for target, difference in DRIFT_0_5_23_ON_0_5_22.items():
        assert difference in real_drift["drifts"][target], real_drift["drifts"][target]
        # what activation recorded for the module SGLang imported is the same finding
        assert real_drift["details"][target] == real_drift["drifts"][target]


def test_real_0_5_22_dsv4_pool_refused_listing_every_drift(real_drift):
    error = real_drift["dsv4_error"]
    assert error and error.startswith("refusing to build a DeepSeek-V4 model or pool")
    for target, description in real_drift["drifts"].items():
        assert description in error, target
    # each drifted module said so when SGLang imported it (the process of another model keeps serving)
    assert all(any(description in w for w in real_drift["warnings"]) for description in real_drift["drifts"].values())


# The names the hooks call that SGLang 0.5.22 has differently (the table's "called" section).
CALLED_DRIFT_0_5_23_ON_0_5_22 = {
    f"{_IDX}.C4IndexerBackendMixin._forward_prepare_normal": "found lacks q_lora_quant=None",
    f"{_IDX}.plan_topk_v2": "found lacks *, out=None",
}


def test_real_0_5_22_called_names_drift_by_0_5_23_rows_and_the_dsv4_refusal_names_them(real_drift):
    assert set(real_drift["called_drifts"]) == set(CALLED_DRIFT_0_5_23_ON_0_5_22)
    for target, difference in CALLED_DRIFT_0_5_23_ON_0_5_22.items():
        assert difference in real_drift["called_drifts"][target]
        assert target in real_drift["dsv4_error"], target


def test_real_0_5_22_non_dsv4_process_untouched(real_drift):
    assert real_drift["mha_pool_built"] and not real_drift["activated_before_dsv4"]
    assert not any("active:" in line for line in real_drift["lines"])
    drifted_modules = {t.module for t in compat.TARGETS if t.path in DRIFT_0_5_23_ON_0_5_22}
    # pd_kv_layout and _make_indexer_pool share the pool module; every drifted module is left stock
    assert set(real_drift["refused_modules"]) == drifted_modules
    assert real_drift["hooked_in_refused_modules"] == real_drift["hooked_in_refused_modules_after"] == []


def test_release_hook_paths_pass_on_the_real_0_5_22_classes():
    """The release-path tests under SGLang 0.5.22 (in the 0.5.22 suite run they also run in-process)."""
    python = python_0_5_22()
    if compat.installed_sglang_version() == "0.5.22":
        pytest.skip("this run is the 0.5.22 one: the release-path tests run in this process")
    proc = run_python("-m", "pytest", "-q", "-p", "no:cacheprovider", *RELEASE_PATH_TESTS, python=python, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout.splitlines()[-1], proc.stdout[-500:]


def test_parameter_difference_names_what_the_found_signature_lacks_or_adds():
    assert compat.parameter_difference("(self, a, b=None)", "(self, a)") == "found lacks b=None"
    assert compat.parameter_difference("(self, a)", "(self, a, c=1)") == "found adds c=1"
    drift = compat.Drift("x.f", "(self, q=None)", "(self, q=1)", "signature differs")
    assert drift.describe().endswith("(found lacks q=None; found adds q=1)")


def test_doctor_says_per_row_what_the_other_release_lacks(ext_active, capsys):
    from sglang_dsv4_ext.runtime import activation
    from sglang_dsv4_ext.tools.doctor import cli as doctor

    running = compat.rows_release(compat.installed_sglang_version())
    other = next(v for v in compat.SUPPORTED_SGLANG_VERSIONS if v != running)
    rows = {row["target"]: row for row in doctor._target_rows(activation.STATE)}
    assert set(rows) == {t.path for t in compat.TARGETS}  # every release's rows, one table
    absent_here = {t.path for t in compat.TARGETS if t.row_for(running) is None}
    assert {p for p, row in rows.items() if row["status"] == activation.NOT_IN_RELEASE} == absent_here
    waits = rows[compat.PREFILL_GRAPH_WAIT_FOR_LAYER_LOADS.path]
    pd_layout = rows[compat.PD_KV_LAYOUT.path]
    if running == "0.5.23":
        assert waits["releases"]["0.5.22"].startswith("no _wait_for_layer_loads")
        assert pd_layout["releases"]["0.5.22"].startswith("no pd_kv_layout")
        assert rows[compat.PD_PREFILL_KV_MANAGER.path]["detail"].startswith("SGLang 0.5.23 has no such target")
    else:
        assert waits["status"] == pd_layout["status"] == activation.NOT_IN_RELEASE
        assert waits["detail"].startswith("SGLang 0.5.22 has no such target: no _wait_for_layer_loads")
        assert rows[compat.PD_PREFILL_KV_MANAGER.path]["releases"][other].startswith("0.5.23's pd_kv_layout")
    doctor._print_target_row(pd_layout, 80)
    printed = capsys.readouterr().out
    assert (
        "on SGLang 0.5.22: no pd_kv_layout"
        if running == "0.5.23"
        else "SGLang 0.5.22 has no such target: no pd_kv_layout"
    ) in printed
