"""Build steps that ship the patch series and the startup hook (everything else is in pyproject.toml).

The repository's top-level ``patches/`` stays the source of truth. ``build_py`` copies it into
the built package as ``sglang_dsv4_ext/tools/series/shipped/`` (with the series for other releases in
``patches/sglang-X.Y.Z/``), so an installed wheel can run
``sglang-dsv4 patches status`` and ``doctor`` can give its upstream verdict without a checkout
(see sglang_dsv4_ext/tools/series/paths.py for how the series directory is found). An editable
install reads the checkout's ``patches/`` directly and gets no copy.

``build_py`` also writes :data:`STARTUP_HOOK` at the top of the wheel, so that installing it puts the
file into site-packages, where Python's ``site`` runs its line at interpreter start
(sglang_dsv4_ext/runtime/bootstrap.py says why). An editable install (``pip install -e``) gets it too: setuptools
then builds into a throw-away directory and puts what ``install_lib`` names into the editable wheel.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SERIES_SOURCE = Path(__file__).resolve().parent / "patches"
SHIPPED = Path("sglang_dsv4_ext", "tools", "series", "shipped")
# What a series directory holds: patch files, the series file, the pin and the tombstones of
# dropped patches; for patches/ (the targeted release) and each patches/sglang-X.Y.Z/ (the series
# for another release), plus the README. Nothing else ships: not editor backups or .orig/.rej
# leftovers, and not a rebase's resolution record (it reproduces the series; status and doctor
# do not read it).
_ONE_SERIES = ("*.patch", "series", "UPSTREAM_PIN", "dropped/*.tombstone")
SERIES_PATTERNS = ("README.md", *_ONE_SERIES, *(f"sglang-*/{pattern}" for pattern in _ONE_SERIES))
# (file name, its one line). The name sorts after setuptools' "__editable__.*.pth", which must run first.
STARTUP_HOOK = (
    "sglang_dsv4_ext-bootstrap.pth",
    "import sglang_dsv4_ext.runtime.bootstrap; sglang_dsv4_ext.runtime.bootstrap.install()\n",
)


class BuildPyWithSeries(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            # setuptools' editable_wheel pointed install_lib at the editable wheel's contents.
            self._write_startup_hook(Path(self.get_finalized_command("install").install_lib))
            return
        self._write_startup_hook(Path(self.build_lib))
        if not (SERIES_SOURCE / "series").is_file():
            raise SystemExit(f"cannot build: {SERIES_SOURCE / 'series'} is missing (the patch series to ship)")
        target = Path(self.build_lib) / SHIPPED
        shutil.rmtree(target, ignore_errors=True)
        for pattern in SERIES_PATTERNS:
            for source in sorted(SERIES_SOURCE.glob(pattern)):
                dest = target / source.relative_to(SERIES_SOURCE)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, dest)

    @staticmethod
    def _write_startup_hook(directory: Path) -> None:
        name, line = STARTUP_HOOK
        directory.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(line)


setup(cmdclass={"build_py": BuildPyWithSeries})
