"""Build step that ships the patch series inside the wheel (everything else is in pyproject.toml).

The repository's top-level ``patches/`` stays the source of truth. ``build_py`` copies it into
the built package as ``sglang_dsv4_ext/series/shipped/`` (with the series for other releases in
``patches/sglang-X.Y.Z/``), so an installed wheel can run
``sglang-dsv4 patches status`` and ``doctor`` can give its upstream verdict without a checkout
(see sglang_dsv4_ext/series/paths.py for how the series directory is found). An editable
install reads the checkout's ``patches/`` directly and gets no copy.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SERIES_SOURCE = Path(__file__).resolve().parent / "patches"
SHIPPED = Path("sglang_dsv4_ext", "series", "shipped")
# What a series directory holds: patch files, the series file, the pin and the tombstones of
# dropped patches; for patches/ (the targeted release) and each patches/sglang-X.Y.Z/ (the series
# for another release), plus the README. Nothing else ships: not editor backups or .orig/.rej
# leftovers, and not a rebase's resolution record (it reproduces the series; status and doctor
# do not read it).
_ONE_SERIES = ("*.patch", "series", "UPSTREAM_PIN", "dropped/*.tombstone")
SERIES_PATTERNS = ("README.md", *_ONE_SERIES, *(f"sglang-*/{pattern}" for pattern in _ONE_SERIES))


class BuildPyWithSeries(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if not (SERIES_SOURCE / "series").is_file():
            raise SystemExit(f"cannot build: {SERIES_SOURCE / 'series'} is missing (the patch series to ship)")
        target = Path(self.build_lib) / SHIPPED
        shutil.rmtree(target, ignore_errors=True)
        for pattern in SERIES_PATTERNS:
            for source in sorted(SERIES_SOURCE.glob(pattern)):
                dest = target / source.relative_to(SERIES_SOURCE)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, dest)


setup(cmdclass={"build_py": BuildPyWithSeries})
