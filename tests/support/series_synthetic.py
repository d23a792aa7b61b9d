"""Small synthetic SGLang-like repositories for the patch tool's tests.

``build_scenario`` makes an upstream repository with tag ``v1`` (the series' base) and tag
``v2`` (a later upstream), plus a series directory with one patch per classification, each
constructed so that exactly one classification holds against ``v2``:

=================  ==========================================================================
patch              what upstream v2 did
=================  ==========================================================================
applies            nothing near it
applies-3way       changed a line inside the patch's context (not next to the changed line)
conflict           changed the same line differently
reverse            made the same change, together with other edits in the same commit
patch-id           made exactly the same change in its own commit, then edited those lines again
absorbed           made the same change and also edited a context line in the same commit
target-gone        deleted the file
=================  ==========================================================================
"""

from __future__ import annotations

import os
from pathlib import Path

from sglang_dsv4_ext.tools.series.checkrepo import export_range
from sglang_dsv4_ext.tools.series.gitrepo import GitRepo

PKG = "python/sglang/srt/"
AUTHOR = {"GIT_AUTHOR_NAME": "Patch Author", "GIT_AUTHOR_EMAIL": "author@example.invalid"}

# name -> (file, subject)
PATCHES = {
    "applies": ("applies.py", "applies: change line 10"),
    "applies-3way": ("threeway.py", "threeway: change line 10"),
    "conflict": ("conflict.py", "conflict: change line 10"),
    "upstream-reverse-applies": ("reverse.py", "reverse: change line 10"),
    "upstream-patch-id": ("patchid.py", "patchid: change line 10"),
    "upstream-absorbed": ("absorbed.py", "absorbed: change line 10"),
    "target-gone": ("gone.py", "gone: change line 10"),
}


def lines(tag: str, n: int = 30, changes: dict[int, str] | None = None) -> str:
    changes = changes or {}
    return "".join(changes.get(i, f"{tag} line {i}") + "\n" for i in range(1, n + 1))


def commit(repo: GitRepo, files: dict[str, str | None], message: str, when: int) -> str:
    for rel, text in files.items():
        path = repo.work_tree / rel
        if text is None:
            repo.run("rm", "-q", rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        repo.run("add", rel)
    date = f"{when} +0000"
    repo.run("commit", "-q", "-m", message, env={**AUTHOR, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    return repo.must_rev_parse("HEAD")


def file_of(name: str) -> str:
    return PKG + PATCHES[name][0]


def base_files() -> dict[str, str]:
    files = {file_of(n): lines(Path(f).stem) for n, (f, _) in PATCHES.items()}
    files["python/sglang/__init__.py"] = "# synthetic sglang\n"
    files[PKG + "__init__.py"] = ""
    return files


def our_change(name: str) -> dict[str, str]:
    stem = Path(PATCHES[name][0]).stem
    return {file_of(name): lines(stem, changes={10: f"{stem} line 10 FIXED"})}


def init_repo(path: Path) -> GitRepo:
    repo = GitRepo.init(path)
    commit(repo, base_files(), "upstream v1", 1_700_000_000)
    repo.run("tag", "v1")
    return repo


def make_series(repo: GitRepo, series_dir: Path, names: list[str], base: str = "v1") -> Path:
    """Commit our patches on top of ``base`` on a side branch and export them as the series."""
    series_dir.mkdir(parents=True, exist_ok=True)
    (series_dir / "series").write_text("# test series\n")
    (series_dir / "UPSTREAM_PIN").write_text(f'tag = "{base}"\n')
    head_ref, head = repo.head_state()
    repo.run("checkout", "-q", "-B", "ours", base)
    for i, name in enumerate(names):
        body = (
            f"{PATCHES[name][1]}\n\nDescription: test patch {name}\nOrigin: vendor, test\nForwarded: no\n"
            f"Reason: test\nRetire-When: never\nCovered-By: tests/test_patchtool_rebase.py\nMirrors: none\n"
        )
        commit(repo, our_change(name), body, 1_700_100_000 + i)
    export_range(repo.path, series_dir, base, "HEAD", {}, progress=lambda m: None)
    repo.run("checkout", "-q", head_ref.split("/", 2)[-1] if head_ref else head)
    repo.run("branch", "-q", "-D", "ours")
    return series_dir


def make_upstream_v2(repo: GitRepo) -> str:
    """Upstream history v1 -> v2 that gives each patch its classification (see module doc)."""
    repo.run("checkout", "-q", "main")
    when = 1_700_200_000
    stem = lambda n: Path(PATCHES[n][0]).stem  # noqa: E731
    # patch-id: the very same change in its own commit ...
    commit(repo, our_change("upstream-patch-id"), "upstream takes the patch-id fix", when)
    # ... then upstream edits those lines again (reverse no longer applies, forward neither)
    commit(
        repo,
        {
            file_of("upstream-patch-id"): lines(
                stem("upstream-patch-id"),
                changes={10: "patchid line 10 FIXED and refined", 11: "patchid line 11 refined"},
            )
        },
        "upstream refines patchid",
        when + 1,
    )
    # reverse: same change plus an unrelated far-away edit, one commit (patch-id differs)
    commit(
        repo,
        {
            file_of("upstream-reverse-applies"): lines(
                stem("upstream-reverse-applies"), changes={10: "reverse line 10 FIXED", 25: "reverse line 25 upstream"}
            )
        },
        "upstream: reverse fix and more",
        when + 2,
    )
    # absorbed: same change plus an edit two lines below it (inside the patch's context)
    commit(
        repo,
        {
            file_of("upstream-absorbed"): lines(
                stem("upstream-absorbed"), changes={10: "absorbed line 10 FIXED", 12: "absorbed line 12 upstream"}
            )
        },
        "upstream: absorbed fix and more",
        when + 3,
    )
    # 3-way: a context line edited, one unchanged line away from ours
    commit(
        repo,
        {file_of("applies-3way"): lines(stem("applies-3way"), changes={12: "threeway line 12 upstream"})},
        "upstream edits threeway context",
        when + 4,
    )
    # conflict: the same line, differently
    commit(
        repo,
        {file_of("conflict"): lines(stem("conflict"), changes={10: "conflict line 10 UPSTREAM"})},
        "upstream edits conflict line 10",
        when + 5,
    )
    # target gone
    commit(repo, {file_of("target-gone"): None}, "upstream removes gone.py", when + 6)
    repo.run("tag", "v2")
    return repo.must_rev_parse("v2")


def build_scenario(tmp: Path, names: list[str]) -> tuple[GitRepo, Path]:
    repo = init_repo(tmp / "upstream")
    series_dir = make_series(repo, tmp / "patches", names)
    make_upstream_v2(repo)
    repo.run("checkout", "-q", "v1")  # a detached HEAD somewhere else, like a fresh clone at the old tag
    repo.run("checkout", "-q", "main")
    return repo, series_dir


def snapshot(repo: GitRepo, series_dir: Path) -> dict:
    """Everything abort must restore: HEAD ref and commit, refs, index, work tree, series files."""
    files = {}
    for root, dirs, names in os.walk(repo.work_tree):
        dirs[:] = [d for d in dirs if d != ".git"]
        for n in names:
            p = Path(root) / n
            files[str(p.relative_to(repo.work_tree))] = p.read_bytes()
    series_files = {str(p.relative_to(series_dir)): p.read_bytes() for p in series_dir.rglob("*") if p.is_file()}
    return {
        "head": repo.head_state(),
        "refs": repo.out("for-each-ref", "--format=%(refname) %(objectname)"),
        "index": repo.out("ls-files", "-s"),
        "status": repo.out("status", "--porcelain=v1", "--untracked-files=all"),
        "files": files,
        "series": series_files,
        "git_state_dirs": sorted(
            p.name for p in repo.git_dir.iterdir() if p.name in ("rebase-apply", "dsv4-patches-rebase")
        ),
    }
