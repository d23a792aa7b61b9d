"""Where the patch series lives: the one answer for ``sglang-dsv4 patches`` and ``doctor``.

The repository's top-level ``patches/`` directory is the source of truth. A wheel carries a
copy of it inside the package (``sglang_dsv4_ext/series/shipped/``, written by the build step in
``setup.py``), so the tooling works where there is no checkout. The series directory is, in
this order:

1. ``$SGLANG_DSV4_PATCHES_DIR`` when set (an empty value counts as unset);
2. the checkout's ``patches/`` when the package runs from a source tree (editable install or
   ``PYTHONPATH``);
3. the copy shipped in the installed package.
"""

from __future__ import annotations

import os
from pathlib import Path

from sglang_dsv4_ext.errors import SeriesError

ENV_SERIES_DIR = "SGLANG_DSV4_PATCHES_DIR"
SERIES_FILE = "series"
PIN_FILE = "UPSTREAM_PIN"

# sglang_dsv4_ext/series/paths.py -> the repository root of a source checkout
CHECKOUT_SERIES_DIR = Path(__file__).resolve().parents[2] / "patches"
SHIPPED_SERIES_DIR = Path(__file__).resolve().parent / "shipped"


def default_series_dir() -> Path:
    """The series directory in force (see the module docstring); raises naming every place tried."""
    env = os.environ.get(ENV_SERIES_DIR, "").strip()
    if env:
        return Path(env)
    for candidate in (CHECKOUT_SERIES_DIR, SHIPPED_SERIES_DIR):
        if (candidate / SERIES_FILE).is_file():
            return candidate
    raise SeriesError(
        f"no patch series found: ${ENV_SERIES_DIR} is not set, there is no source checkout "
        f"({CHECKOUT_SERIES_DIR / SERIES_FILE} does not exist) and this installation ships no series "
        f"({SHIPPED_SERIES_DIR / SERIES_FILE} does not exist); pass --series-dir DIR"
    )


def series_origin(series_dir: Path) -> str:
    """Where ``series_dir`` comes from, for status lines ("shipped with the package", ...)."""
    resolved = Path(series_dir).resolve()
    if os.environ.get(ENV_SERIES_DIR, "").strip() and resolved == Path(os.environ[ENV_SERIES_DIR].strip()).resolve():
        return f"${ENV_SERIES_DIR}"
    if resolved == CHECKOUT_SERIES_DIR:
        return "source checkout"
    if resolved == SHIPPED_SERIES_DIR:
        return "shipped with the package"
    return "--series-dir"
