"""Where the patch series live: the one answer for ``sglang-dsv4 patches`` and ``doctor``.

The repository's top-level ``patches/`` directory is the source of truth: the series for the
SGLang release the extension targets (its ``UPSTREAM_PIN``), and in ``patches/sglang-X.Y.Z/``
the series for each other release the project carries (see :mod:`.releases`, which picks one
by the target SGLang's version). A wheel carries a copy of all of them inside the package
(``sglang_dsv4_ext/tools/series/shipped/``, written by the build step in ``setup.py``), so the
tooling works where there is no checkout. The series root is, in this order:

1. the checkout's ``patches/`` when the package runs from a source tree (editable install or
   ``PYTHONPATH``);
2. the copy shipped in the installed package.

``$SGLANG_DSV4_PATCHES_DIR`` (an empty value counts as unset) names one series directory that
every command uses instead, as ``--series-dir`` does for one call.
"""

from __future__ import annotations

import os
from pathlib import Path

from sglang_dsv4_ext.errors import SeriesError

ENV_SERIES_DIR = "SGLANG_DSV4_PATCHES_DIR"
SERIES_FILE = "series"
PIN_FILE = "UPSTREAM_PIN"
RELEASE_DIR_PREFIX = "sglang-"  # patches/sglang-X.Y.Z/: the series for SGLang X.Y.Z

# sglang_dsv4_ext/tools/series/paths.py -> the repository root of a source checkout
CHECKOUT_SERIES_DIR = Path(__file__).resolve().parents[3] / "patches"
SHIPPED_SERIES_DIR = Path(__file__).resolve().parent / "shipped"


def env_series_dir():
    """``$SGLANG_DSV4_PATCHES_DIR`` as a path, or None when it is unset or empty."""
    env = os.environ.get(ENV_SERIES_DIR, "").strip()
    return Path(env) if env else None


def series_root() -> Path:
    """The checkout's ``patches/``, else the shipped copy; raises naming every place tried."""
    for candidate in (CHECKOUT_SERIES_DIR, SHIPPED_SERIES_DIR):
        if (candidate / SERIES_FILE).is_file():
            return candidate
    raise SeriesError(
        f"no patch series found: ${ENV_SERIES_DIR} is not set, there is no source checkout "
        f"({CHECKOUT_SERIES_DIR / SERIES_FILE} does not exist) and this installation ships no series "
        f"({SHIPPED_SERIES_DIR / SERIES_FILE} does not exist); pass --series-dir DIR"
    )


def default_series_dir() -> Path:
    """``$SGLANG_DSV4_PATCHES_DIR``, else the series of the targeted release (the series root)."""
    return env_series_dir() or series_root()


def series_origin(series_dir: Path) -> str:
    """Where ``series_dir`` comes from, for status lines ("shipped with the package", ...)."""
    resolved = Path(series_dir).resolve()
    env = env_series_dir()
    if env is not None and resolved == env.resolve():
        return f"${ENV_SERIES_DIR}"
    for root, origin in ((CHECKOUT_SERIES_DIR, "source checkout"), (SHIPPED_SERIES_DIR, "shipped with the package")):
        if resolved == root or (resolved.parent == root and resolved.name.startswith(RELEASE_DIR_PREFIX)):
            return origin
    return "--series-dir"
