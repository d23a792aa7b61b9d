"""A wheel built from the repository carries the patch series and runs the series tooling outside
the checkout; GitPython is needed only by the commands that drive a git repository. It also carries
the startup hook (sglang_dsv4_ext/runtime/bootstrap.py).

Builds the real wheel (``pip wheel . --no-build-isolation``), installs it with ``--target`` into a
temporary directory and runs ``sglang-dsv4`` from another working directory against the installed
SGLang, with nothing pointing at the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.tools.series.series import read_series_names
from sglang_dsv4_ext.tools.series.upstream_history import wheel_cache_dir
from tests.support.releases import skip_unless_this_python_builds_wheels

ROOT = Path(__file__).resolve().parents[2]
SERIES = read_series_names(ROOT / "patches")
OLDER = "sglang-0.5.22"  # the series of another release, in patches/sglang-0.5.22/
SERIES_OLDER = read_series_names(ROOT / "patches" / OLDER)


def _env(extra_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_DSV4")}
    env["PYTHONPATH"] = str(extra_path)  # the installed wheel first, nothing from the checkout
    return env


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory):
    skip_unless_this_python_builds_wheels()
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out / "dist"),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = (out / "dist").glob("sglang_dsv4_ext-*.whl")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(out / "site"), str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return wheel, out / "site"


def _sglang_dsv4(site: Path, cwd: Path, *argv: str, hide_gitpython: bool = False):
    prelude = "import sys; sys.modules['git'] = None; " if hide_gitpython else "import sys; "
    code = prelude + "from sglang_dsv4_ext.tools.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=cwd, env=_env(site), capture_output=True, text=True, timeout=300
    )


def test_the_wheel_contains_every_patch_of_the_series(installed_wheel):
    wheel, _ = installed_wheel
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = "sglang_dsv4_ext/tools/series/shipped/"
    assert {shipped + "series", shipped + "UPSTREAM_PIN"} <= names
    assert {shipped + name for name in SERIES} <= names
    older = f"{shipped}{OLDER}/"
    assert {older + "series", older + "UPSTREAM_PIN"} | {older + name for name in SERIES_OLDER} <= names
    assert not [n for n in names if "/resolutions/" in n]  # the rebase's record reproduces the series; not shipped


def test_patches_status_runs_outside_the_checkout_on_the_shipped_series(installed_wheel, tmp_path):
    _, site = installed_wheel
    shipped = site / "sglang_dsv4_ext" / "tools" / "series" / "shipped"
    # the installed release's series (.ci/run runs this under 0.5.22 too), then the other release's
    installed = compat.installed_sglang_version()
    series_of = {"0.5.23": (shipped, SERIES), "0.5.22": (shipped / OLDER, SERIES_OLDER)}
    proc = _sglang_dsv4(site, tmp_path, "patches", "status", hide_gitpython=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{series_of[installed][0]} (shipped with the package" in proc.stdout
    for name in series_of[installed][1]:
        assert name in proc.stdout
    assert f"chosen: pinned to sglang {installed}, the target's version" in proc.stdout  # the installed release
    assert "Traceback" not in proc.stderr
    # another release: its own series, shipped too
    other = next(v for v in series_of if v != installed)
    proc = _sglang_dsv4(
        site,
        tmp_path,
        "patches",
        "status",
        "--sglang-version",
        other,
        "--wheel-cache",
        str(wheel_cache_dir()),
        hide_gitpython=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{series_of[other][0]} (shipped with the package" in proc.stdout
    assert f"chosen: pinned to sglang {other}, the target's version" in proc.stdout


def test_a_git_command_without_gitpython_names_the_extra(installed_wheel, tmp_path):
    _, site = installed_wheel
    proc = _sglang_dsv4(site, tmp_path, "patches", "check", "--repo", str(tmp_path), hide_gitpython=True)
    assert proc.returncode == 2
    assert "pip install 'sglang-dsv4-ext[series]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_wheel_installs_the_startup_hook_into_site_packages(installed_wheel):
    """The .pth that makes entry points without load_plugins() load the extension (test_startup_hook.py)."""
    wheel, site = installed_wheel
    assert "sglang_dsv4_ext-bootstrap.pth" in zipfile.ZipFile(wheel).namelist()
    assert (site / "sglang_dsv4_ext-bootstrap.pth").read_text() == (
        "import sglang_dsv4_ext.runtime.bootstrap; sglang_dsv4_ext.runtime.bootstrap.install()\n"
    )
