"""A thin GitPython wrapper that makes every git call deterministic and every failure readable.

Why a wrapper: the series must export byte-identically on any machine, so no user or system
git configuration may leak into the output (``diff.noprefix``, ``format.signature``,
``core.abbrev``, ``diff.algorithm`` ...). Commits made while applying patches need a
committer even on a bare CI box without ``user.name``. And a failed git call must say which
command failed and why, not raise an opaque exception from deep inside GitPython.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import git  # GitPython

from sglang_dsv4_ext.errors import GitError

# The identity used for commits this tool creates locally (rebase, apply, history).
# Author identity of the series' patches is preserved from the patch files by `git am`.
TOOL_NAME = "sglang-dsv4 patches"
TOOL_EMAIL = "sglang-dsv4-patches@localhost"

# Configuration forced on every call so output does not depend on ~/.gitconfig or the
# repository's own config. Passed as `-c key=value` (highest precedence after the CLI).
_FORCED_CONFIG: Dict[str, str] = {
    "core.abbrev": "12",
    "core.autocrlf": "false",
    "core.quotePath": "true",
    "diff.noprefix": "false",
    "diff.mnemonicPrefix": "false",
    "diff.renames": "false",
    "diff.algorithm": "myers",
    "diff.relative": "false",
    "diff.suppressBlankEmpty": "false",
    "diff.context": "3",
    "diff.interHunkContext": "0",
    "format.signature": "",
    "format.coverLetter": "false",
    "format.numbered": "false",
    "format.thread": "false",
    "format.signOff": "false",
    "format.useAutoBase": "false",
    "am.keepcr": "false",
    "am.threeWay": "false",
    "apply.whitespace": "nowarn",
    "commit.gpgSign": "false",
    "tag.gpgSign": "false",
    "i18n.commitEncoding": "UTF-8",
    "i18n.logOutputEncoding": "UTF-8",
    "rerere.enabled": "false",
    "advice.detachedHead": "false",
    "merge.conflictStyle": "merge",
    "gc.auto": "0",
    "core.hooksPath": "/dev/null",  # no repository hooks run inside our am/commit calls
}



def _env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {
        "GIT_COMMITTER_NAME": TOOL_NAME,
        "GIT_COMMITTER_EMAIL": TOOL_EMAIL,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_EDITOR": "true",
        "GIT_PAGER": "cat",
        "LC_ALL": "C",
        "LANG": "C",
    }
    if extra:
        env.update(extra)
    return env


def run_git(
    runner: "git.Git",
    args: Sequence[str],
    *,
    stdin: Union[None, bytes, str] = None,
    check: bool = True,
    env: Optional[Dict[str, str]] = None,
    binary: bool = False,
    where: str = "",
) -> Tuple[int, Union[str, bytes], str]:
    """Run ``git ARGS`` through a GitPython runner; return (status, stdout, stderr)."""
    cmd = ["git", *git_config_args(), *args]
    with tempfile.TemporaryFile() as stdin_file:
        if stdin is not None:
            stdin_file.write(stdin.encode() if isinstance(stdin, str) else stdin)
            stdin_file.seek(0)
        status, stdout, stderr = runner.execute(
            cmd,
            istream=stdin_file if stdin is not None else None,
            with_extended_output=True,
            with_exceptions=False,
            stdout_as_string=False,
            strip_newline_in_stdout=False,
            env=_env(env),
        )
    stdout = stdout or b""
    err = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else (stderr or "")
    out: Union[str, bytes] = stdout if binary else stdout.decode("utf-8", "replace")
    if check and status != 0:
        detail = err.strip() or (out.strip() if isinstance(out, str) else "")
        shown = " ".join(args[:3]) + (" ..." if len(args) > 3 else "")
        raise GitError(f"git {shown} failed in {where or runner._working_dir} (exit {status}): {detail}")
    return status, out, err


def run_git_in(directory: Union[str, Path], args: Sequence[str], **kw) -> Tuple[int, Union[str, bytes], str]:
    """Run git in a plain directory that need not be a repository (e.g. ``git apply``).

    GIT_CEILING_DIRECTORIES stops git from discovering a repository *above* the directory,
    so ``git apply`` patches files relative to ``directory`` and nothing else.
    """
    directory = Path(directory).resolve()
    env = {"GIT_CEILING_DIRECTORIES": str(directory.parent), **(kw.pop("env", None) or {})}
    return run_git(git.Git(str(directory)), args, env=env, where=str(directory), **kw)


def git_config_args() -> List[str]:
    args: List[str] = []
    for key, value in _FORCED_CONFIG.items():
        args += ["-c", f"{key}={value}"]
    return args


class GitRepo:
    """One git work tree (or bare repository), driven through GitPython."""

    def __init__(self, path: Union[str, Path], *, search_parent: bool = False):
        self.path = Path(path).resolve()
        try:
            self.repo = git.Repo(str(self.path), search_parent_directories=search_parent)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise GitError(f"{self.path} is not a git repository ({type(exc).__name__})") from None
        self.bare = self.repo.bare
        self.work_tree = None if self.bare else Path(self.repo.working_tree_dir).resolve()
        self.git_dir = Path(self.repo.git_dir).resolve()

    @classmethod
    def init(cls, path: Union[str, Path], *, bare: bool = False) -> "GitRepo":
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        git.Repo.init(str(path), bare=bare, initial_branch="main")
        return cls(path)

    # ---- running git -------------------------------------------------------------------

    def run(
        self,
        *args: str,
        stdin: Union[None, bytes, str] = None,
        check: bool = True,
        env: Optional[Dict[str, str]] = None,
        binary: bool = False,
    ) -> Tuple[int, Union[str, bytes], str]:
        """Run ``git ARGS`` in this repository; return (status, stdout, stderr).

        stdout is returned exactly (no newline stripping) so patch text survives intact.
        """
        return run_git(
            self.repo.git, args, stdin=stdin, check=check, env=env, binary=binary,
            where=str(self.work_tree or self.git_dir),
        )

    def out(self, *args: str, **kw) -> str:
        return self.run(*args, **kw)[1].strip()

    def popen(self, *args: str, env: Optional[Dict[str, str]] = None):
        """Start ``git ARGS`` with a writable stdin (for fast-import streams).

        Returns GitPython's process wrapper; keep a reference to it while the process runs
        (GitPython kills the process when the wrapper is garbage-collected). The wrapper
        forwards ``stdin``, ``communicate`` and ``returncode`` to the Popen object.
        """
        proc = self.repo.git.execute(
            ["git", *git_config_args(), *args],
            istream=subprocess.PIPE,
            as_process=True,
            env=_env(env),
        )
        return proc

    # ---- queries -----------------------------------------------------------------------

    def rev_parse(self, rev: str) -> Optional[str]:
        status, out, _ = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        return out.strip() if status == 0 and out.strip() else None

    def must_rev_parse(self, rev: str) -> str:
        sha = self.rev_parse(rev)
        if sha is None:
            raise GitError(f"{rev!r} does not name a commit in {self.path}")
        return sha

    def tree_of(self, rev: str, path: str = "") -> Optional[str]:
        spec = f"{rev}:{path}" if path else f"{rev}^{{tree}}"
        status, out, _ = self.run("rev-parse", "--verify", "--quiet", spec, check=False)
        return out.strip() if status == 0 and out.strip() else None

    def head_state(self) -> Tuple[Optional[str], Optional[str]]:
        """(symbolic ref HEAD points at or None when detached, commit sha or None when unborn)."""
        status, out, _ = self.run("symbolic-ref", "-q", "HEAD", check=False)
        ref = out.strip() if status == 0 else None
        return ref, self.rev_parse("HEAD")

    def tags(self) -> List[str]:
        return [t.name for t in self.repo.tags]

    def dirty_paths(self) -> List[str]:
        """Tracked files with staged or unstaged changes (what `git rebase` also refuses)."""
        out = self.run("status", "--porcelain=v1", "--untracked-files=no", "-z")[1]  # not stripped: XY columns
        return [entry[3:] for entry in out.split("\0") if entry]

    def unmerged_paths(self) -> List[str]:
        out = self.out("diff", "--name-only", "--diff-filter=U", "-z")
        return sorted({p for p in out.split("\0") if p})

    def path_exists(self, rev: str, path: str) -> bool:
        status, _, _ = self.run("cat-file", "-e", f"{rev}:{path}", check=False)
        return status == 0

    def am_in_progress(self) -> bool:
        return (self.git_dir / "rebase-apply" / "applying").exists()

    def commits_between(self, base: str, head: str) -> List[str]:
        out = self.out("rev-list", "--reverse", "--topo-order", f"{base}..{head}")
        return [line for line in out.splitlines() if line]
