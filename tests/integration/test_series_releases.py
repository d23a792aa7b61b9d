"""One series per SGLang release: patches/ (0.5.23) and patches/sglang-0.5.22/ (rebased from it).

- Each series applies with plain ``git apply`` to the pristine tree of the wheel its
  ``UPSTREAM_PIN`` names (sha256 checked), and not to the other release's tree.
- ``patches status`` answers for each release with that release's series: every fix needed on
  the stock tree, none once the series is applied.
- The recorded rebase (patches/sglang-0.5.22/resolutions, docs/rebase-0.5.23-to-0.5.22.md)
  replays on a fresh history to the exported 0.5.22 series byte for byte, and to the range-diff
  the document keeps.
- Under SGLang 0.5.22 itself, the patched sources pass the checks of both releases' patched
  sources and the extension's behaviour tests (skipped, saying why, where no Python with SGLang
  0.5.22 is given: ``pip install sglang==0.5.22`` needs an index this CI does not reach).

Needs the wheels: cached under $SGLANG_DSV4_WHEEL_CACHE, downloaded once from PyPI otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sglang_dsv4_ext.tools.series.package_dir import overlay_copy
from sglang_dsv4_ext.tools.series.releases import package_version, release_series_dirs
from sglang_dsv4_ext.tools.series.series import load_series, read_pin
from sglang_dsv4_ext.tools.series.upstream_history import extract_package, fetch_wheel, sha256_of, tag_wheel_info
from tests.integration.test_series_patches import PLUGIN_TESTS_ON_PATCHED_SOURCES
from tests.support.cli_calls import run_patches as run_cli
from tests.support.series_history import clone_history, shared_history

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "patches"
SERIES_DIRS = release_series_dirs(PATCHES)
SERIES_0_5_22 = PATCHES / "sglang-0.5.22"
REBASE_DOC = ROOT / "docs" / "rebase-0.5.23-to-0.5.22.md"
RANGE_DIFF_HEADING = "## range-diff (old series on the old base vs new series on the new base)\n"
ENV_PYTHON_0_5_22 = "DSV4_TEST_SGLANG_0_5_22_PYTHON"
# Behaviour tests on the patched sources that name what only SGLang 0.5.23 has (pd_kv_layout, the
# host pool's backup_tokens_from_device_all_layer); their 0.5.22 forms are in
# tests/support/patched_source_checks_0_5_22.py.
ONLY_ON_0_5_23 = {
    "tests/unit/hooks/test_bf16_storage.py::test_pd_layout_carries_index_k_dtype_and_sglang_refuses_the_pair",
    "tests/unit/hooks/test_bf16_storage.py::test_token_granular_index_k_transfers_refused_for_bf16",
}
CHECKS_ON_0_5_22 = [t for t in PLUGIN_TESTS_ON_PATCHED_SOURCES if t not in ONLY_ON_0_5_23] + [
    "tests/support/patched_source_checks_0_5_22.py"
]


def series_id(series_dir: Path) -> str:
    return read_pin(series_dir)["tag"]


def pristine_tree(series_dir: Path, dest: Path, version: str = None) -> Path:
    """python/sglang/... of the wheel the series is pinned to (or of ``version``), the files the series
    touches plus _version.py; the wheel's sha256 is checked against the pin first."""
    pin = read_pin(series_dir)
    wheel = fetch_wheel(version or pin["version"])
    if version is None:
        assert wheel.path.name == pin["wheel"]
        assert sha256_of(wheel.path) == pin["wheel_sha256"]
    touched = sorted({f for p in load_series(series_dir).patches for f in p.files})
    only = [f[len("python/sglang/") :] for f in touched] + ["_version.py"]
    extract_package(wheel, dest / "python", only)
    return dest


def plain_git_apply(tree: Path, series_dir: Path) -> list:
    """``git apply`` each patch in order (the git program alone, no tool of ours); the ones that failed."""
    failed = []
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    for patch in load_series(series_dir).patches:
        proc = subprocess.run(["git", "apply", str(patch.path)], cwd=tree, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            failed.append(patch.name)
    return failed


@pytest.mark.parametrize("series_dir", SERIES_DIRS, ids=series_id)
def test_each_series_applies_with_plain_git_apply_to_its_pristine_wheel_tree(series_dir, tmp_path):
    pin = read_pin(series_dir)
    assert pin["tag"] == f"v{pin['version']}" and len(SERIES_DIRS) == 2
    # the history tag of the pinned release is that wheel's tree
    repo = shared_history()
    assert tag_wheel_info(repo, pin["tag"]) == {"wheel": pin["wheel"], "wheel_sha256": pin["wheel_sha256"]}
    assert repo.tree_of(pin["tag"], "python/sglang") == pin["source_tree"]
    tree = pristine_tree(series_dir, tmp_path / "own")
    assert plain_git_apply(tree, series_dir) == []
    # the other release's tree is not one this series applies to
    other = next(read_pin(d)["version"] for d in SERIES_DIRS if d != series_dir)
    assert plain_git_apply(pristine_tree(series_dir, tmp_path / "other", other), series_dir)


@pytest.mark.parametrize("series_dir", SERIES_DIRS, ids=series_id)
def test_status_answers_for_each_release_with_its_series(series_dir, tmp_path, capsys):
    version = read_pin(series_dir)["version"]
    names = load_series(series_dir).names
    assert run_cli("status", "--sglang-version", version, "--json") == 0
    stock = json.loads(capsys.readouterr().out)
    assert Path(stock["series_dir"]) == series_dir
    assert stock["series_choice"] == f"pinned to sglang {version}, the target's version"
    assert [(r["name"], r["result"], r["upstream"]) for r in stock["patches"]] == [(n, "applies", False) for n in names]

    # the same release with the series applied: no fix is reported needed (a patch whose files later
    # patches change again no longer reverse-applies on its own: it reads as a conflict, not as needed)
    package = pristine_tree(series_dir, tmp_path) / "python" / "sglang"
    (package / "srt").mkdir(exist_ok=True)
    assert package_version(package) == version
    assert run_cli("apply", "--sglang-dir", str(package)) == 0
    assert f"series {series_dir} (pinned to sglang {version}" in capsys.readouterr().err
    assert run_cli("status", "--sglang-dir", str(package), "--json") == 0
    patched = json.loads(capsys.readouterr().out)
    assert Path(patched["series_dir"]) == series_dir
    assert [r["name"] for r in patched["patches"]] == names
    assert [r["name"] for r in patched["patches"] if r["result"] == "applies"] == []
    assert patched["patches"][-1]["upstream"] is True


def test_the_recorded_rebase_replays_to_the_exported_0_5_22_series_byte_for_byte(tmp_path, capsys):
    old, new = load_series(PATCHES), load_series(SERIES_0_5_22)
    touched = sorted({f for s in (old, new) for p in s.patches for f in p.files})
    repo = clone_history(tmp_path / "sglang", "v0.5.23", sparse=touched)
    # The inputs as a fresh clone of this repository has them: the 0.5.23 series and the record.
    old_series = tmp_path / "patches"
    old_series.mkdir()
    for name in ["series", "UPSTREAM_PIN", *old.names]:
        shutil.copyfile(PATCHES / name, old_series / name)
    record = tmp_path / "resolutions"
    shutil.copytree(SERIES_0_5_22 / "resolutions", record)
    into, report = tmp_path / "sglang-0.5.22", tmp_path / "report.md"
    assert (
        run_cli(
            "rebase",
            "--repo",
            str(repo.path),
            "--onto",
            "v0.5.22",
            "--series-dir",
            str(old_series),
            "--into",
            str(into),
            "--resolutions",
            str(record),
            "--report",
            str(report),
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "stopped at" not in out
    assert out.count("from the resolution record") == len(old.names)
    exported = {p.name: p.read_bytes() for p in SERIES_0_5_22.iterdir() if p.is_file()}
    assert {p.name: p.read_bytes() for p in into.iterdir()} == exported
    recorded = {
        str(p.relative_to(SERIES_0_5_22)): p.read_bytes()
        for p in (SERIES_0_5_22 / "resolutions").rglob("*")
        if p.is_file()
    }
    assert {
        "resolutions/" + str(p.relative_to(record)): p.read_bytes() for p in record.rglob("*") if p.is_file()
    } == recorded  # the replay needed nothing new
    # the document's range-diff is this replay's, verbatim
    range_diff = report.read_text().split(RANGE_DIFF_HEADING, 1)[1]
    kept = re.search(r"<!-- range-diff -->\n```text\n(.*?)```\n<!-- /range-diff -->", REBASE_DOC.read_text(), re.S)
    assert kept and kept.group(1) == range_diff.lstrip("\n")


def _python_with_sglang_0_5_22() -> str:
    python = os.environ.get(ENV_PYTHON_0_5_22, "").strip()
    if not python:
        pytest.skip(
            f"no SGLang 0.5.22 environment: set {ENV_PYTHON_0_5_22} to a Python whose sglang is 0.5.22 "
            "(.ci/run builds one: .venv-0522)"
        )
    return python


def test_the_0_5_22_series_passes_its_checks_under_sglang_0_5_22(tmp_path, capsys):
    python = _python_with_sglang_0_5_22()
    where = subprocess.run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('sglang').submodule_search_locations[0])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    assert package_version(Path(where)) == "0.5.22", f"{ENV_PYTHON_0_5_22}={python} has sglang at {where}"
    package = overlay_copy(Path(where), tmp_path / "site", load_series(SERIES_0_5_22).patches)
    assert run_cli("apply", "--sglang-dir", str(package)) == 0  # the series is chosen by the version
    assert f"series {SERIES_0_5_22} (pinned to sglang 0.5.22" in capsys.readouterr().err
    report = tmp_path / "killswitch.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(package.parent), str(ROOT)]),
        "PATCHTOOL_KILLSWITCH_REPORT": str(report),
        "SGLANG_DSV4_EXT": "0",
    }
    proc = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.support.series_killswitch",
            "-p",
            "no:cacheprovider",
            *CHECKS_ON_0_5_22,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
    )
    tail = proc.stdout[-4000:]
    assert proc.returncode == 0, tail
    assert re.search(r"\b\d+ passed\b", tail) and "failed" not in tail and "error" not in tail.lower(), tail
    record = json.loads(report.read_text())
    assert record["sglang_file"] == str(package / "__init__.py")  # the patched 0.5.22 copy ran
    assert record["kill_switch"] == "0" and record["activated"] is False and record["wrapped"] == []
