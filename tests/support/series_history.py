"""A real SGLang history (PyPI wheels 0.5.21, 0.5.22, 0.5.23) shared by the patch-tool tests.

Built once per test process with :func:`build_history` from the wheel cache
(``$SGLANG_DSV4_WHEEL_CACHE``, default ``~/.cache/sglang-dsv4-ext/wheels``); the first run on a
machine downloads the three wheels (~100 MB) from PyPI, later runs only read the cache.
Tests work on their own ``git clone --shared`` so refs they create do not leak between tests.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sglang_dsv4_ext.tools.series.gitrepo import GitRepo, run_git_in
from sglang_dsv4_ext.tools.series.upstream_history import DEFAULT_VERSIONS, build_history

_CACHE = {}


def shared_history() -> GitRepo:
    if "repo" not in _CACHE:
        tmp = Path(tempfile.mkdtemp(prefix="dsv4-history-"))
        atexit.register(shutil.rmtree, tmp, True)
        _CACHE["repo"] = build_history(tmp / "sglang", DEFAULT_VERSIONS, checkout=False)
    return _CACHE["repo"]


def clone_history(dest: Path, checkout: str, sparse: Sequence[str] | None = None) -> GitRepo:
    """A private clone (objects shared, refs and work tree its own) checked out at ``checkout``.

    ``sparse``: check out only these paths (a sparse checkout, as a user may have); SGLang's
    ~5000 files otherwise make every branch switch of a test cost seconds on a shared disk.
    """
    source = shared_history()
    run_git_in(dest.parent, ["clone", "-q", "--shared", "--no-checkout", str(source.path), str(dest)])
    repo = GitRepo(dest)
    if sparse is not None:
        repo.run("config", "core.sparseCheckout", "true")
        (repo.git_dir / "info").mkdir(exist_ok=True)
        (repo.git_dir / "info" / "sparse-checkout").write_text("".join(f"/{p}\n" for p in sparse))
    repo.run("checkout", "-q", "-B", "main", checkout)
    return repo
