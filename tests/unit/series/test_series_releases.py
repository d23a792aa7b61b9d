"""One series per SGLang release: status, check, apply and doctor take the series pinned to the
target's version (sglang_dsv4_ext/tools/series/releases.py).

The series root is a temporary ``patches/`` (the checkout's is swapped out): its own series is
pinned to 9.0.1 and ``sglang-9.0.0/`` holds the synthetic series of
tests/support/series_synthetic.py pinned to 9.0.0. The targets are package directories made from
the synthetic upstream's v1 tree with a ``_version.py`` as every sglang wheel has.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sglang_dsv4_ext.tools.series import paths
from sglang_dsv4_ext.tools.series.releases import choose_series_dir, package_version, ref_version
from sglang_dsv4_ext.tools.series.upstream import fix_verdicts
from tests.support import series_synthetic as S
from tests.support.cli_calls import run_patches as run_cli

VERSION_PY = "__version__ = version = '{}'\n__version_tuple__ = version_tuple = (9, 0, 0)\n"


@pytest.fixture
def releases(tmp_path, monkeypatch):
    """(series root, the 9.0.0 series directory, the synthetic upstream, a package maker)."""
    repo, synthetic = S.build_scenario(tmp_path, ["applies", "conflict"])
    root = tmp_path / "checkout" / "patches"
    root.mkdir(parents=True)
    (root / "series").write_text("# the targeted release's series (no patches here)\n")
    (root / "UPSTREAM_PIN").write_text('tag = "v9.0.1"\nversion = "9.0.1"\n')
    older = root / "sglang-9.0.0"
    shutil.copytree(synthetic, older)
    (older / "UPSTREAM_PIN").write_text('tag = "v1"\nversion = "9.0.0"\n')
    monkeypatch.setattr(paths, "CHECKOUT_SERIES_DIR", root)
    monkeypatch.delenv(paths.ENV_SERIES_DIR, raising=False)

    def package(version: str) -> Path:
        dest = tmp_path / f"site-{version}" / "sglang"
        if dest.is_dir():
            return dest
        repo.run("checkout", "-q", "v1")
        shutil.copytree(repo.work_tree / "python" / "sglang", dest)
        (dest / "_version.py").write_text(VERSION_PY.format(version))
        return dest

    return root, older, repo, package


def status_of(*argv: str, capsys) -> dict:
    assert run_cli("status", *argv, "--json") == 0
    return json.loads(capsys.readouterr().out)


def test_status_takes_the_series_pinned_to_the_targets_version(releases, capsys):
    root, older, _, package = releases
    got = status_of("--sglang-dir", str(package("9.0.0")), capsys=capsys)
    assert Path(got["series_dir"]) == older.resolve()
    assert got["series_choice"] == "pinned to sglang 9.0.0, the target's version"
    assert [r["result"] for r in got["patches"]] == ["applies", "applies"]  # its own release: both needed

    got = status_of("--sglang-dir", str(package("9.0.1")), capsys=capsys)
    assert Path(got["series_dir"]) == root.resolve() and got["patches"] == []

    # no series for the target's release: the root's, and the choice says so (not a silent pick)
    got = status_of("--sglang-dir", str(package("8.9.0")), capsys=capsys)
    assert Path(got["series_dir"]) == root.resolve()
    assert got["series_choice"].startswith("no series is pinned to sglang 8.9.0 (series for: 9.0.1, 9.0.0)")

    # --series-dir still overrides; so does $SGLANG_DSV4_PATCHES_DIR
    got = status_of("--sglang-dir", str(package("9.0.1")), "--series-dir", str(older), capsys=capsys)
    assert Path(got["series_dir"]) == older.resolve() and got["series_choice"] == "--series-dir"


def test_the_text_status_says_which_series_and_why(releases, capsys, monkeypatch):
    _, older, _, package = releases
    assert run_cli("status", "--sglang-dir", str(package("9.0.0"))) == 0
    out = capsys.readouterr().out
    assert f"series: {older.resolve()} (source checkout, 2 patches), pinned to v1" in out
    assert "chosen: pinned to sglang 9.0.0, the target's version" in out
    monkeypatch.setenv(paths.ENV_SERIES_DIR, str(older))
    assert choose_series_dir("9.0.1").why == f"${paths.ENV_SERIES_DIR}"


def test_doctors_verdicts_use_the_series_of_the_sglang_they_judge(releases):
    _, older, _, package = releases
    verdicts = fix_verdicts(package("9.0.0"))
    assert [v.patch for v in verdicts] == [p.name for p in sorted(older.glob("*.patch"))]
    assert not any(v.upstream for v in verdicts)
    assert fix_verdicts(package("9.0.1")) == []  # the root's series (no patches) for its own release


def test_the_targets_version_is_read_without_importing_it(releases, tmp_path):
    _, _, repo, package = releases
    assert package_version(package("9.0.0")) == "9.0.0"
    bare = tmp_path / "bare" / "sglang"
    bare.mkdir(parents=True)
    assert package_version(bare) is None  # cannot tell: the series root is used and said so
    dist = tmp_path / "bare" / "sglang-7.1.2.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 7.1.2\n")
    assert package_version(bare) == "7.1.2"
    assert choose_series_dir(None).why.startswith("the target's sglang version cannot be read")
    assert ref_version(repo, "v1") is None  # no _version.py in the tree and no version-like tag name
    assert ref_version(repo, "v0.5.22") == "0.5.22"
