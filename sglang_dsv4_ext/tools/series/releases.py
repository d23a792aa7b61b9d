"""One series per SGLang release, and which one answers for a given SGLang.

Why: operators upgrade SGLang, and some stay on the previous release. The series root
(:mod:`.paths`) holds the series for the release the extension targets and, in
``sglang-X.Y.Z/`` below it, the series rebased onto each other release the project carries
(``sglang-dsv4 patches rebase --onto vX.Y.Z --into patches/sglang-X.Y.Z``). ``status``,
``check``, ``apply`` and ``doctor`` must judge an SGLang with the series made for it: the
series of another release reads its patches as conflicts, which says nothing about the fixes.

How: a series answers for the release its ``UPSTREAM_PIN`` ``version`` names. The target's
version is read without importing SGLang: the package's ``_version.py`` (written into every
wheel) or its ``dist-info``; for a git ref, that file at the ref, else a ``vX.Y.Z`` ref name.
The choice, in order: ``--series-dir``; ``$SGLANG_DSV4_PATCHES_DIR``; the series pinned to the
target's version; the series root, said as such, when no series is pinned to that version or
the version cannot be read (its patches are then classified against a release they were not
made for, and the status line says so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .paths import ENV_SERIES_DIR, RELEASE_DIR_PREFIX, SERIES_FILE, env_series_dir, series_root
from .series import read_pin

_VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)
_TAG_RE = re.compile(r"^v?(\d+(?:\.\d+)+)$")


@dataclass(frozen=True)
class ChosenSeries:
    directory: Path
    why: str


def release_series_dirs(root: Path) -> list[Path]:
    """The series root and every ``sglang-*`` series below it."""
    below = sorted(p for p in Path(root).glob(RELEASE_DIR_PREFIX + "*") if (p / SERIES_FILE).is_file())
    return [Path(root), *below]


def version_in_source(text: str) -> str | None:
    """The ``__version__`` that an sglang ``_version.py`` sets."""
    match = _VERSION_RE.search(text)
    return match.group(1) if match else None


def package_version(sglang_dir: Path) -> str | None:
    """The version of the sglang package in ``sglang_dir``, or None when it cannot be read."""
    sglang_dir = Path(sglang_dir)
    version_file = sglang_dir / "_version.py"
    if version_file.is_file():
        found = version_in_source(version_file.read_text(errors="replace"))
        if found:
            return found
    for metadata in sorted(sglang_dir.parent.glob("sglang-*.dist-info/METADATA")):
        for line in metadata.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


def ref_version(repo, ref: str) -> str | None:
    """The sglang version at ``ref`` of a git repository (``python/sglang/_version.py``, else the ref's name)."""
    status, text, _ = repo.run("show", f"{ref}:python/sglang/_version.py", check=False)
    found = version_in_source(text) if status == 0 else None
    if found:
        return found
    match = _TAG_RE.match(ref)
    return match.group(1) if match else None


def choose_series_dir(target_version: str | None, explicit: Path | None = None) -> ChosenSeries:
    """The series that answers for an SGLang of ``target_version`` (see the module docstring)."""
    if explicit is not None:
        return ChosenSeries(Path(explicit), "--series-dir")
    env = env_series_dir()
    if env is not None:
        return ChosenSeries(env, f"${ENV_SERIES_DIR}")
    root = series_root()
    pinned = {d: read_pin(d).get("version") for d in release_series_dirs(root)}
    for directory, version in pinned.items():
        if target_version is not None and version == target_version:
            return ChosenSeries(directory, f"pinned to sglang {version}, the target's version")
    have = ", ".join(v or "(unpinned)" for v in pinned.values())
    primary = pinned[root] or "(unpinned)"
    if target_version is None:
        why = f"the target's sglang version cannot be read: the series for {primary} is used"
    else:
        why = (
            f"no series is pinned to sglang {target_version} (series for: {have}): the series for "
            f"{primary} is used, so its verdicts are for patches made for {primary}"
        )
    return ChosenSeries(root, why)
