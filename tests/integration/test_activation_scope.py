"""Activation is deferred to SGLang's own imports and refuses only where a DSV4 pool is built.

Each scenario runs in a fresh interpreter (tests/support/activation_scope.py): SGLang's real
``load_plugins()``, its real module imports firing our post-import hooks, its real pools on CPU.
Nothing is stubbed; the drift is presented by changing one signature in our own table, which is
what a drifted SGLang looks like to activation.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from sglang_dsv4_ext.runtime import activation, compat
from sglang_dsv4_ext.runtime.index_k import fp8_logits
from tests.support.fresh_interpreter import ROOT, child_env, last_json_line, run_python, run_python_ok
from tests.support.releases import RUNNING

SCRIPT = str(ROOT / "tests" / "support" / "activation_scope.py")


def _run(name: str, **extra_env) -> subprocess.CompletedProcess:
    return run_python(SCRIPT, name, env=child_env(**extra_env), timeout=900)


def _scenario(name: str, **extra_env) -> dict:
    return last_json_line(run_python_ok(SCRIPT, name, env=child_env(**extra_env), timeout=900))


@pytest.fixture(scope="module")
def metrics_dir(tmp_path_factory):
    """SGLang's multiprocess metrics directory for the deferred scenario (the gauge's .db file lands here)."""
    return str(tmp_path_factory.mktemp("prometheus-multiproc"))


@pytest.fixture(scope="module")
def deferred(metrics_dir):
    # A launch identity inherited from some outer process: a launcher starts a launch of its own.
    return _scenario("deferred", PROMETHEUS_MULTIPROC_DIR=metrics_dir, SGLANG_DSV4_EXT_LAUNCH="1@1000000000.00")


@pytest.fixture(scope="module")
def drift():
    return _scenario("drift")


@pytest.fixture(scope="module")
def untested():
    return _scenario("untested")


@pytest.fixture(scope="module")
def moved():
    return _scenario("moved")


def test_entry_point_imports_no_dsv4_or_hicache_module(deferred):
    assert deferred["before"] == []
    assert deferred["loaded"] is True
    assert deferred["after_load_plugins"] == []  # a launcher / detokenizer pays nothing for our targets
    assert deferred["activated_after_load"] is False


def test_a_module_sglang_imports_later_is_patched_on_import(deferred):
    assert deferred["counter_hooked"] is True
    # ...and importing it did not drag in the others (SGLang's cache_controller imports pool_host.group itself).
    assert deferred["after_cache_controller"] == [
        "sglang.srt.managers.cache_controller",
        "sglang.srt.mem_cache.pool_host.group",
    ]


def test_a_non_dsv4_pool_does_not_complete_activation(deferred):
    assert deferred["activated_after_mha_pool"] is False
    assert deferred["gauge_before_dsv4"] == []


def test_building_a_dsv4_pool_completes_and_verifies_every_target(deferred):
    assert deferred["activated_after_dsv4_pool"] is True
    expected = set(compat.target_modules(compat.installed_table()))
    assert set(deferred["modules"]) == expected
    assert set(deferred["modules"].values()) == {"patched"}
    assert deferred["unhooked"] == []


def _evidence(identity: str) -> dict:
    """What the scenario's process must report: the default configuration, itself, its own launch."""
    from sglang_dsv4_ext import __version__

    return {
        "version": __version__,
        "sglang": compat.installed_sglang_version(),
        "index_k_dtype": "fp8",
        "gate": "auto",
        "fp4_budget": "exact",
        "integrity": "off",
        "index_k_dtype_requested": "fp8",
        "launch": identity,
        "process": identity,
    }


def test_the_pool_building_process_exports_the_activation_gauge(deferred, metrics_dir):
    assert deferred["gauge"] == [_evidence(deferred["identity"])]
    assert [f for f in os.listdir(metrics_dir) if f.startswith("gauge_mostrecent_")]  # SGLang's multiprocess files


def test_only_the_process_that_passed_the_build_check_says_active(deferred):
    """The launcher's entry point prints the configuration, never "active"; the DSV4 build prints it once."""
    [loaded] = deferred["lines_at_load"]
    assert loaded.startswith(activation.LAUNCHER_LINE_PREFIX) and activation.ACTIVATION_LINE_PREFIX not in loaded
    assert deferred["lines_at_mha_pool"] == []  # a non-DSV4 model: nothing claims anything
    assert deferred["record_before_dsv4"]["active"] is False
    [active, built] = deferred["lines_at_dsv4_pool"]  # the second pool of the same dtype adds no line
    expected = _evidence(deferred["identity"])
    before_pool = {**expected, "index_k_dtype": activation.NONE_BUILT}  # the line is printed before the pool exists
    assert active == activation.ACTIVATION_LINE_PREFIX + " " + " ".join(f"{k}={v}" for k, v in before_pool.items())
    assert built == activation.POOL_BUILT_LINE_PREFIX + " " + " ".join(f"{k}={v}" for k, v in expected.items())
    # the record also says which kernel computes the indexer's logits (no indexer call ran in that process)
    # (spelled from planned_kernel: this test process may have run indexer calls of its own)
    logits_kernel = "no indexer call yet: " + fp8_logits.planned_kernel("fp8", "triton", "triton")
    assert deferred["record"] == {"active": True, **expected, "logits_kernel": logits_kernel}
    assert logits_kernel.startswith("no indexer call yet: kernels_sm120.paged_mqa_logits_fp8")


def test_drift_leaves_the_module_stock_with_a_warning_and_other_models_serve(drift):
    assert drift["mha_pool_built"] is True
    assert drift["pool_module"] == "refused"
    assert drift["sizing_hooked"] is False  # the whole drifted module stays stock, not half-patched
    assert len(drift["warnings"]) == 1
    assert drift["victim"] in drift["warnings"][0] and "Other models are unaffected" in drift["warnings"][0]


def test_drift_refuses_the_dsv4_pool_naming_the_target(drift):
    assert drift["dsv4_error"] is not None
    assert drift["victim"] in drift["dsv4_error"] and "force_fp4=True" in drift["dsv4_error"]
    assert "SGLANG_DSV4_EXT=0" in drift["dsv4_error"]
    assert drift["activated"] is False


def test_an_untested_sglang_warns_once_patches_nothing_and_refuses_only_dsv4_pools(untested):
    assert untested["loaded"] is True and untested["mha_pool_built"] is True
    assert untested["counter_hooked"] is False
    assert untested["modules"] == ["refused"]
    assert "SGLang 0.5.99 is not a tested version" in untested["warnings"][0]
    # An untested SGLang is judged by the newest release's rows: on the 0.5.22 tree its four drifted modules
    # warn too, one line each (tests/integration/test_release_0_5_22.py); on 0.5.23 nothing drifts.
    drifts = untested["warnings"][1:]
    assert len(drifts) == (4 if RUNNING == "0.5.22" else 0)
    assert all(w.startswith("sglang-dsv4-ext left ") for w in drifts)
    assert "SGLang 0.5.99 is not a tested version" in untested["dsv4_error"]
    assert "SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG=1" in untested["dsv4_error"]


def test_moved_pool_classes_stop_no_server_and_the_model_guard_refuses_dsv4(moved):
    assert moved["import_errors"] == []  # found in review: an AttributeError here stopped every model's server
    assert moved["mha_pool_built"] is True
    assert any("DSV4PoolConfigurator" in w for w in moved["warnings"])
    assert moved["model_error"] is not None and not moved["model_error"].startswith("not refused")
    assert "DSV4PoolConfigurator.__init__: missing" in moved["model_error"]
    assert "could not be installed" not in moved["model_error"]  # no guard is attempted on a missing class
    assert "sglang.srt.no_such_module.gone: missing" in moved["model_error"]  # a module gone entirely
    assert "C4IndexerBackendMixin._gone: missing" in moved["model_error"]  # a name a hook calls (compat.CALLED)


def test_a_missing_wrapt_stops_the_process_instead_of_serving_stock():
    """Found by review: SGLang's loader swallowed the ImportError and a "bf16" server ran stock fp8."""
    proc = _run("no_wrapt", SGLANG_DSV4_INDEX_K_DTYPE="bf16")
    assert proc.returncode != 0 and "survived" not in proc.stdout, proc.stdout
    assert "sglang-dsv4-ext failed to activate: ModuleNotFoundError" in proc.stderr and "wrapt" in proc.stderr
    assert "a dependency is missing" in proc.stderr
    assert "Failed to execute general plugin" not in proc.stderr  # it never reached SGLang's swallowing handler


def test_a_bug_in_a_post_import_hook_stops_the_process_under_sglangs_except_exception():
    proc = _run("hook_bug")
    assert proc.returncode != 0 and "survived" not in proc.stdout, proc.stdout
    assert "sglang-dsv4-ext failed to activate: KeyError" in proc.stderr
    # The first target module importing cache_controller patches is the one whose hook failed: cache_controller
    # itself, or a target module its own imports pull in first (pool_host.group since the integrity rows).
    failed = re.search(r"a bug while patching ([\w.]+)", proc.stderr)
    assert failed and failed.group(1) in compat.target_modules(compat.installed_table()), proc.stderr


def test_a_gauge_left_in_a_shared_metrics_dir_never_passes_a_later_stock_server(deferred, metrics_dir, capsys):
    """Found by review: SGLang keeps an operator-set PROMETHEUS_MULTIPROC_DIR on the shared parent directory and
    aggregates every .db file there, so the finished scenario's gauge showed 1 for a later stock server.

    The stand-in server renders that directory with prometheus_client's MultiProcessCollector (SGLang's exporter)
    and answers /server_info as a stock SGLang (no record): repro must refuse, naming the stale launch."""
    from tests.support.repro_cli import TINY, assert_refused, run_cli
    from tests.support.repro_server import InjectingServer

    with InjectingServer({}, extension=[], records=[None], metrics_dir=metrics_dir) as stock:
        rc, _, err = run_cli(
            ["repro", "run", "--endpoint", stock.url, "--out", os.path.join(metrics_dir, "run"), *TINY], capsys
        )
        assert_refused(
            rc, err, "no sglang-dsv4-ext record", f"ignored sglang:dsv4_ext_active of launch {deferred['identity']}"
        )
        assert stock.requests == 0
