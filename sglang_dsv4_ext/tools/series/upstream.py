"""Which of the series' fixes an SGLang already has: one answer for ``status`` and ``doctor``.

A fix is *upstream* in an SGLang when its patch reverse-applies to that SGLang's source
(the change is already there) or, with git history, when an upstream commit made the same
change (see :mod:`.classify`). Each patch names, in its DEP-3 header, the runtime module it
mirrors (``Mirrors:``) and the hook targets of :data:`sglang_dsv4_ext.runtime.compat.TARGETS` it
replaces (``Mirrors-Targets:``). That is the shared vocabulary: for the installed SGLang,
``sglang-dsv4 patches status`` reports a patch as already upstream exactly when
:func:`upstream_targets` lists its targets, and ``sglang-dsv4 doctor`` reports those
targets as not needed. Targets no patch names are fixed upstream already on the pinned
version (for example the top-level ``get_index_k_*`` getters, gated since SGLang 0.5.12) and
are judged by doctor's own probes.

Cost: one ``git apply --check`` per patch against copies of the touched files (no SGLang
import), about 0.1 s for the whole series; results are cached per package directory.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .classify import UPSTREAM_KINDS, Result
from .series import Series, load_series

MIRRORS_TARGETS_FIELD = "Mirrors-Targets"


@dataclass(frozen=True)
class FixVerdict:
    patch: str
    subject: str
    mirrors: tuple[str, ...]  # runtime modules, e.g. sglang_dsv4_ext.runtime.hooks.gate
    targets: tuple[str, ...]  # compat.TARGETS paths the runtime hooks this patch replaces
    upstream: bool
    result: str  # the classification (see classify.Kind)
    detail: str


def mirrors_targets(patch) -> tuple[str, ...]:
    return tuple(t for t in patch.fields.get(MIRRORS_TARGETS_FIELD, "").split() if t)


def verdicts_from_results(series: Series, results: Sequence[Result]) -> list[FixVerdict]:
    by_name = {p.name: p for p in series.patches}
    verdicts = []
    for result in results:
        patch = by_name[result.name]
        verdicts.append(
            FixVerdict(
                patch=patch.name,
                subject=patch.subject,
                mirrors=tuple(patch.mirrors),
                targets=mirrors_targets(patch),
                upstream=result.kind in UPSTREAM_KINDS,
                result=result.kind.value,
                detail=result.detail,
            )
        )
    return verdicts


@functools.lru_cache(maxsize=8)
def _cached_verdicts(sglang_dir: str, series_dir: str, stamp: tuple) -> tuple[FixVerdict, ...]:
    from .package_dir import classify_against_package

    series = load_series(Path(series_dir))
    return tuple(verdicts_from_results(series, classify_against_package(series, Path(sglang_dir))))


def fix_verdicts(sglang_dir: os.PathLike | None = None, series_dir: os.PathLike | None = None) -> list[FixVerdict]:
    """Per patch: is its fix already in the SGLang at ``sglang_dir`` (default: the installed one)?

    ``series_dir`` default: the series pinned to that SGLang's version (:mod:`.releases`), as
    ``sglang-dsv4 patches status`` chooses it."""
    from .package_dir import installed_sglang_dir
    from .releases import choose_series_dir, package_version

    sglang_dir = Path(sglang_dir or installed_sglang_dir()).resolve()
    if series_dir is None:
        series_dir = choose_series_dir(package_version(sglang_dir)).directory
    series_dir = Path(series_dir).resolve()
    # Re-classify when a patch file or the series changes (tests edit series in place).
    stamp = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in series_dir.iterdir() if p.is_file()))
    return list(_cached_verdicts(str(sglang_dir), str(series_dir), stamp))


def upstream_targets(verdicts: Sequence[FixVerdict]) -> dict[str, str]:
    """compat target -> patch name, for fixes the SGLang already has (doctor: not needed)."""
    return {t: v.patch for v in verdicts if v.upstream for t in v.targets}


def needed_targets(verdicts: Sequence[FixVerdict]) -> dict[str, str]:
    """compat target -> patch name, for fixes the SGLang still lacks (doctor: applied)."""
    return {t: v.patch for v in verdicts if not v.upstream for t in v.targets}
