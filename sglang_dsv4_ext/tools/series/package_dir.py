"""The series against an unpacked or installed ``sglang`` package directory (no git history).

Why: ``status`` must answer "which fixes does this SGLang already have" for the SGLang that
is installed (the same one ``sglang-dsv4 doctor`` inspects), and operators who pip-installed
SGLang may want the source fixes applied to it. Without history there is no patch-id or
three-way merge: a patch is ``upstream-reverse-applies`` (its change is present),
``applies``, ``target-gone`` or ``conflict`` (with the hunks that do not apply).

Paths: the series uses SGLang's git layout ``python/sglang/...``; against a package directory
``DIR`` (the ``sglang`` directory itself) git applies with ``-p3``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from sglang_dsv4_ext.errors import PackageDirError

from .classify import Kind, Result, failing_hunks
from .gitcmd import run_git_in
from .layout import PACKAGE_MARKERS, TREE_PREFIX
from .series import PatchFile, Series

Progress = Callable[[str], None]


class PlainTree:
    """A directory that is not a git repository, with the two methods the checks use."""

    def __init__(self, root: Path, strip: int = 1):
        self.work_tree = Path(root).resolve()
        self.strip = strip

    def run(self, *args: str, check: bool = True, **kw):
        if args and args[0] == "apply":
            args = ("apply", f"-p{self.strip}", *args[1:])
        return run_git_in(self.work_tree, list(args), check=check, **kw)


def installed_sglang_dir() -> Path:
    """The installed ``sglang`` package directory, found without importing SGLang."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise PackageDirError("sglang is not installed in this Python environment; pass --sglang-dir DIR")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def check_package_dir(sglang_dir: Path) -> Path:
    sglang_dir = Path(sglang_dir).resolve()
    init, runtime = PACKAGE_MARKERS
    if not (sglang_dir / init).exists() or not (sglang_dir / runtime).is_dir():
        raise PackageDirError(
            f"{sglang_dir} is not an sglang package directory (expected __init__.py and srt/ in it); "
            "give the directory that `import sglang` loads, e.g. .../site-packages/sglang"
        )
    return sglang_dir


def _package_rel(path: str) -> str | None:
    return path[len(TREE_PREFIX) :] if path.startswith(TREE_PREFIX) else None


def touched_files(patches: Iterable[PatchFile]) -> list[str]:
    return sorted({f for p in patches for f in p.files})


def classify_against_package(series: Series, sglang_dir: Path, progress: Progress = lambda m: None) -> list[Result]:
    """Classify every patch, in order, against a scratch copy of the files the series touches."""
    sglang_dir = check_package_dir(sglang_dir)
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "tree"
        for rel in touched_files(series.patches):
            pkg_rel = _package_rel(rel)
            if pkg_rel is not None and (sglang_dir / pkg_rel).is_file():
                target = scratch / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(sglang_dir / pkg_rel, target)
        scratch.mkdir(exist_ok=True)
        tree = PlainTree(scratch, strip=1)
        for n, patch in enumerate(series.patches, 1):
            result = _classify_one(tree, patch, Path(tmp), apply=True)
            progress(f"[{n}/{len(series.patches)}] {patch.name}: {result.describe()}")
            results.append(result)
    return results


def _classify_one(tree: PlainTree, patch: PatchFile, tmp: Path, *, apply: bool) -> Result:
    path = str(patch.path.resolve())
    if tree.run("apply", "--check", "-R", path, check=False)[0] == 0:
        return Result(patch.name, Kind.UPSTREAM_REVERSE, "its change is already in the package")
    if tree.run("apply", "--check", path, check=False)[0] == 0:
        if apply:
            tree.run("apply", path)
        return Result(patch.name, Kind.APPLIES)
    missing = [f for f in patch.preexisting if not (tree.work_tree / _local(tree, f)).exists()]
    if missing:
        return Result(patch.name, Kind.TARGET_GONE, f"not in the package: {', '.join(missing)}", missing_files=missing)
    hunks = failing_hunks(tree, patch, tmp)
    return Result(patch.name, Kind.CONFLICT, f"{len(hunks)} hunks do not apply", failing_hunks=hunks)


def _local(tree: PlainTree, path: str) -> str:
    return path.split("/", tree.strip - 1)[-1] if tree.strip > 1 else path


def apply_to_package(series: Series, sglang_dir: Path, progress: Progress = print) -> list[Result]:
    """Apply the series in place; patches already present are skipped. All or nothing: a patch
    that does not apply undoes the ones applied in this call and raises."""
    sglang_dir = check_package_dir(sglang_dir)
    tree = PlainTree(sglang_dir, strip=3)
    applied: list[PatchFile] = []
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, patch in enumerate(series.patches, 1):
            result = _classify_one(tree, patch, Path(tmp), apply=True)
            progress(f"[{n}/{len(series.patches)}] {patch.name}: {result.describe()}")
            if result.kind is Kind.APPLIES:
                applied.append(patch)
            elif result.kind is not Kind.UPSTREAM_REVERSE:
                for done in reversed(applied):
                    tree.run("apply", "-R", str(done.path.resolve()))
                hunks = "".join(f"\n  {h}" for h in result.failing_hunks)
                raise PackageDirError(
                    f"{patch.path}: does not apply to {sglang_dir} ({result.describe()}){hunks}\n"
                    f"the {len(applied)} patches applied before it were undone; {sglang_dir} is unchanged"
                )
            results.append(result)
    return results


def overlay_copy(sglang_dir: Path, dest_parent: Path, patches: Iterable[PatchFile]) -> Path:
    """A cheap copy of a package to patch: hard links (or copies across file systems) for every
    file, and real copies of the files the patches change, so the original is never written."""
    sglang_dir = check_package_dir(sglang_dir)
    dest = Path(dest_parent) / "sglang"

    def link_or_copy(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(sglang_dir, dest, copy_function=link_or_copy, ignore=shutil.ignore_patterns("__pycache__"))
    for rel in touched_files(patches):
        pkg_rel = _package_rel(rel)
        if pkg_rel and (dest / pkg_rel).exists():
            target = dest / pkg_rel
            data = target.read_bytes()
            target.unlink()  # break the hard link before anything writes the file
            target.write_bytes(data)
    return dest
