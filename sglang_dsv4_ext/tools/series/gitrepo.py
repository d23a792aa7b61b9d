"""A git repository driven through GitPython (the ``[series]`` extra), with readable failures.

Every call goes through the deterministic configuration of :mod:`.gitcmd` (no user or system
git configuration leaks into exported patches). GitPython is imported when a repository is
first opened, not at import: without it, the commands that drive a repository fail with one
line naming the extra to install, and everything that needs only the ``git`` program (reading
the series, ``status`` / ``check`` / ``apply`` against a package directory, ``doctor``) works.
"""

from __future__ import annotations

import importlib
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sglang_dsv4_ext.errors import GitError, MissingExtraError

from .gitcmd import GitResult, git_command, git_env, git_result, run_git_in

__all__ = ["GitError", "GitRepo", "gitpython", "run_git", "run_git_in"]

SERIES_EXTRA_HINT = "pip install 'sglang-dsv4-ext[series]'"


def gitpython():
    """The ``git`` module of GitPython, or a one-line error naming the extra that provides it."""
    try:
        return importlib.import_module("git")
    except ModuleNotFoundError as exc:
        if exc.name != "git":
            raise
        raise MissingExtraError(
            f"this command drives a git repository through GitPython, which is not installed: {SERIES_EXTRA_HINT}"
        ) from None
    except ImportError as exc:  # GitPython is there but cannot start (e.g. no git program)
        raise GitError(f"GitPython cannot start: {str(exc).splitlines()[0]}") from None


def run_git(
    runner,
    args: Sequence[str],
    *,
    stdin: None | bytes | str = None,
    check: bool = True,
    env: dict[str, str] | None = None,
    binary: bool = False,
    where: str = "",
    config: dict[str, str] | None = None,
) -> GitResult:
    """Run ``git ARGS`` through a GitPython runner (``git.Git``); return (status, stdout, stderr).

    ``config``: configuration on top of the forced one (:func:`.gitcmd.git_config_args`)."""
    with tempfile.TemporaryFile() as stdin_file:
        if stdin is not None:
            stdin_file.write(stdin.encode() if isinstance(stdin, str) else stdin)
            stdin_file.seek(0)
        status, stdout, stderr = runner.execute(
            git_command(args, config),
            istream=stdin_file if stdin is not None else None,
            with_extended_output=True,
            with_exceptions=False,
            stdout_as_string=False,
            strip_newline_in_stdout=False,
            env=git_env(env),
        )
    return git_result(args, status, stdout, stderr, check=check, binary=binary, where=where or runner._working_dir)


class GitRepo:
    """One git work tree (or bare repository), driven through GitPython.

    ``config``: git configuration every call of this object gets on top of the forced one
    (:data:`.gitcmd.RERERE_CONFIG` for a rebase with a resolution record); None for the rest."""

    def __init__(self, path: str | Path, *, search_parent: bool = False, config: dict[str, str] | None = None):
        git = gitpython()
        self.config = dict(config or {})
        self.path = Path(path).resolve()
        try:
            self.repo = git.Repo(str(self.path), search_parent_directories=search_parent)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise GitError(f"{self.path} is not a git repository ({type(exc).__name__})") from None
        self.bare = self.repo.bare
        self.work_tree = None if self.bare else Path(self.repo.working_tree_dir).resolve()
        self.git_dir = Path(self.repo.git_dir).resolve()

    @classmethod
    def init(cls, path: str | Path, *, bare: bool = False) -> GitRepo:
        git = gitpython()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        git.Repo.init(str(path), bare=bare, initial_branch="main")
        return cls(path)

    # ---- running git -------------------------------------------------------------------

    def run(
        self,
        *args: str,
        stdin: None | bytes | str = None,
        check: bool = True,
        env: dict[str, str] | None = None,
        binary: bool = False,
    ) -> GitResult:
        """Run ``git ARGS`` in this repository; return (status, stdout, stderr).

        stdout is returned exactly (no newline stripping) so patch text survives intact.
        """
        return run_git(
            self.repo.git,
            args,
            stdin=stdin,
            check=check,
            env=env,
            binary=binary,
            where=str(self.work_tree or self.git_dir),
            config=self.config,
        )

    def out(self, *args: str, **kw) -> str:
        return self.run(*args, **kw)[1].strip()

    def popen(self, *args: str, env: dict[str, str] | None = None):
        """Start ``git ARGS`` with a writable stdin (for fast-import streams).

        Returns GitPython's process wrapper; keep a reference to it while the process runs
        (GitPython kills the process when the wrapper is garbage-collected). The wrapper
        forwards ``stdin``, ``communicate`` and ``returncode`` to the Popen object.
        """
        return self.repo.git.execute(
            git_command(args, self.config), istream=subprocess.PIPE, as_process=True, env=git_env(env)
        )

    # ---- queries -----------------------------------------------------------------------

    def rev_parse(self, rev: str) -> str | None:
        status, out, _ = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        return out.strip() if status == 0 and out.strip() else None

    def must_rev_parse(self, rev: str) -> str:
        sha = self.rev_parse(rev)
        if sha is None:
            raise GitError(f"{rev!r} does not name a commit in {self.path}")
        return sha

    def tree_of(self, rev: str, path: str = "") -> str | None:
        spec = f"{rev}:{path}" if path else f"{rev}^{{tree}}"
        status, out, _ = self.run("rev-parse", "--verify", "--quiet", spec, check=False)
        return out.strip() if status == 0 and out.strip() else None

    def head_state(self) -> tuple[str | None, str | None]:
        """(symbolic ref HEAD points at or None when detached, commit sha or None when unborn)."""
        status, out, _ = self.run("symbolic-ref", "-q", "HEAD", check=False)
        ref = out.strip() if status == 0 else None
        return ref, self.rev_parse("HEAD")

    def tags(self) -> list[str]:
        return [t.name for t in self.repo.tags]

    def dirty_paths(self) -> list[str]:
        """Tracked files with staged or unstaged changes (what `git rebase` also refuses)."""
        out = self.run("status", "--porcelain=v1", "--untracked-files=no", "-z")[1]  # not stripped: XY columns
        return [entry[3:] for entry in out.split("\0") if entry]

    def unmerged_paths(self) -> list[str]:
        out = self.out("diff", "--name-only", "--diff-filter=U", "-z")
        return sorted({p for p in out.split("\0") if p})

    def path_exists(self, rev: str, path: str) -> bool:
        status, _, _ = self.run("cat-file", "-e", f"{rev}:{path}", check=False)
        return status == 0

    def am_in_progress(self) -> bool:
        return (self.git_dir / "rebase-apply" / "applying").exists()

    def commits_between(self, base: str, head: str) -> list[str]:
        out = self.out("rev-list", "--reverse", "--topo-order", f"{base}..{head}")
        return [line for line in out.splitlines() if line]
