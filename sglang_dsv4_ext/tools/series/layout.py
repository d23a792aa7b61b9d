"""What makes a tree SGLang's: the one answer for a git checkout and for a package directory.

Why: against a repository of another project every patch used to read as ``target-gone``,
``status`` exited 0 and ``apply`` advised a rebase. A missing *file* is a question of SGLang's
version (classification and rebase answer it); a missing *package* means the tree is not
SGLang's at any version, and the commands that drive a repository refuse it, naming what is
missing.

How: the series changes files of SGLang's package, ``python/sglang/`` in SGLang's git tree
(:data:`TREE_PREFIX`; the package directory itself when it is installed). Every SGLang release
has the package's ``__init__.py`` and its ``srt/`` runtime there (:data:`PACKAGE_MARKERS`); the
series' files differ from release to release, so they are not part of the test.
"""

from __future__ import annotations

from sglang_dsv4_ext.errors import PackageDirError

TREE_PREFIX = "python/sglang/"
PACKAGE_MARKERS = ("__init__.py", "srt")


def missing_package_markers(repo, rev: str) -> list[str]:
    """The paths of :data:`PACKAGE_MARKERS` that ``rev`` of ``repo`` (a GitRepo) lacks."""
    wanted = [TREE_PREFIX + marker for marker in PACKAGE_MARKERS]
    return [path for path in wanted if not repo.path_exists(rev, path)]


def refuse_foreign_tree(repo, rev: str, label: str) -> None:
    """Raise, naming what is missing, unless ``rev`` of ``repo`` holds SGLang's package."""
    missing = missing_package_markers(repo, rev)
    if missing:
        raise PackageDirError(
            f"{repo.path} at {label} is not an SGLang source tree: it has no {' and no '.join(missing)} "
            f"(the series changes files under {TREE_PREFIX}). Give a checkout of SGLang, or a history "
            "built by `sglang-dsv4 patches upstream-history`; nothing was changed."
        )
