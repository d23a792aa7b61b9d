"""The startup hook: SGLang entry points that never call ``load_plugins()`` get the extension anyway.

Found by review: ``python -m sglang.benchmark.one_batch`` and ``--use-ray``'s scheduler actors build a
DeepSeek-V4 model without ``load_plugins()``, so a "bf16" run measured stock fp8. The hook is the
``sglang_dsv4_ext-bootstrap.pth`` the package installs (sglang_dsv4_ext/runtime/bootstrap.py).

The editable wheel is built by setuptools' real PEP 660 hook (what ``pip install -e`` installs; the
regular wheel is checked in test_wheel_ships_series.py). The scenarios run in a fresh virtual environment
whose site-packages holds that wheel's .pth, so Python's own ``site`` runs it at interpreter start; SGLang
comes from the test environment's site-packages through a path entry (tests/support/startup_hook_scenarios.py
says what each scenario stands in for).
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from sglang_dsv4_ext import __version__
from tests.support.fresh_interpreter import child_env, last_json_line, run_python_ok
from tests.support.releases import skip_unless_this_python_builds_wheels

HOOK = "sglang_dsv4_ext-bootstrap.pth"
HOOK_LINE = "import sglang_dsv4_ext.runtime.bootstrap; sglang_dsv4_ext.runtime.bootstrap.install()\n"


@pytest.fixture(scope="module")
def editable_wheel(tmp_path_factory) -> Path:
    skip_unless_this_python_builds_wheels()
    out = tmp_path_factory.mktemp("editable")
    code = f"from setuptools import build_meta; print(build_meta.build_editable({str(out)!r}))"
    return out / run_python_ok("-c", code, timeout=300).stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory, editable_wheel) -> Path:
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # SGLang, torch, ...: this interpreter's site-packages, and any other on its path; plain path lines, so no
    # .pth file of theirs runs in the fresh environment
    sites = [sysconfig.get_paths()["purelib"]] + [p for p in sys.path if p.endswith("site-packages")]
    (site / "00-test-environment.pth").write_text("".join(p + "\n" for p in dict.fromkeys(sites)))
    (site / HOOK).write_bytes(zipfile.ZipFile(editable_wheel).read(HOOK))
    return venv


def _scenario(venv: Path, name: str, **env_extra) -> dict:
    proc = run_python_ok(
        "-m",
        "tests.support.startup_hook_scenarios",
        name,
        python=str(venv / "bin" / "python"),
        env=child_env(SGLANG_DSV4_INDEX_K_DTYPE="bf16", **env_extra),
        timeout=900,
    )
    out = last_json_line(proc)
    out["stderr"] = proc.stderr
    return out


def test_the_editable_install_carries_the_startup_hook(editable_wheel):
    names = zipfile.ZipFile(editable_wheel).namelist()
    assert HOOK in names  # at the wheel's top: installed into site-packages
    assert zipfile.ZipFile(editable_wheel).read(HOOK).decode() == HOOK_LINE
    # setuptools' own .pth (which makes the package importable) sorts first and so runs first.
    assert sorted(n for n in names if n.endswith(".pth"))[-1] == HOOK


def test_at_startup_the_hook_imports_nothing_of_sglang(fresh_venv):
    out = _scenario(fresh_venv, "startup")
    assert out["installed"] is True
    assert out["sglang_modules"] == []
    # the two packages (docstrings only) and the hook itself: nothing else of ours, nothing of SGLang
    assert out["ours"] == ["sglang_dsv4_ext", "sglang_dsv4_ext.runtime", "sglang_dsv4_ext.runtime.bootstrap"]


@pytest.mark.parametrize("scenario", ["one_batch", "ray_actor"])
def test_an_entry_point_without_load_plugins_builds_dsv4_with_the_extension(fresh_venv, scenario):
    out = _scenario(fresh_venv, scenario)
    assert out["plugins_loaded_before_build"] is False  # SGLang's entry module never loaded plugins
    assert "sglang_dsv4_ext.runtime.activation" in out["ours_before_build"]  # the hook guarded the model module
    # Our guard ran first (build_checked below); SGLang's own __init__ then stops on CPU (no published config).
    assert out["model_init"].startswith("ValueError: config namespace"), out["model_init"]
    assert out["plugins_loaded_after_build"] is True and out["build_checked"] is True
    assert out["c4_index_k_dtype"] == "bf16"  # what SGLANG_DSV4_INDEX_K_DTYPE asked for, not stock fp8
    assert "never called SGLang's load_plugins(); calling it now" in out["stderr"]
    active = [line for line in out["stderr"].splitlines() if line.startswith("sglang-dsv4-ext active:")]
    assert len(active) == 1 and "index_k_dtype_requested=bf16" in active[0] and f"version={__version__}" in active[0]


def test_the_kill_switch_leaves_such_an_entry_point_stock(fresh_venv):
    out = _scenario(fresh_venv, "kill_switch", SGLANG_DSV4_EXT="0")
    assert "sglang_dsv4_ext.runtime.activation" not in out["ours"]  # nothing of activation ran
    assert out["model_init_wrapped"] is False
    assert "sglang-dsv4-ext" not in out["stderr"]
