"""Build a real SGLang history from PyPI wheels, without a git clone.

Why: the rebase tooling and its tests need real upstream tags to rebase across, and some
operators have no SGLang clone. Each PyPI release's ``sglang/`` package is the source tree of
that tag under ``python/sglang/`` (SGLang's git layout), minus build products.

How: ``pip download --no-deps`` each wheel for one fixed platform tag (so the file and its
sha256 are the same on every machine), cache it, and stream each wheel's ``sglang/`` files
into ``git fast-import`` as one commit per release with an annotated tag ``v<version>``.
Compiled extensions (``*.so``) and byte code are left out: they are not in SGLang's git
tree and would only make the history big. Commit and tag metadata come from the wheel
(newest file time in the archive), so the same wheels always give the same commit ids.

The wheel cache is ``$SGLANG_DSV4_WHEEL_CACHE`` (default ``~/.cache/sglang-dsv4-ext/wheels``)
or the directory given on the command line; a cached wheel is never downloaded again.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sglang_dsv4_ext.errors import HistoryError

from .gitrepo import GitError, GitRepo

ENV_WHEEL_CACHE = "SGLANG_DSV4_WHEEL_CACHE"
DEFAULT_WHEEL_CACHE = Path("~/.cache/sglang-dsv4-ext/wheels")
DEFAULT_VERSIONS = ("0.5.21", "0.5.22", "0.5.23")

# The one wheel flavour we download, so every machine gets byte-identical files.
# (SGLang publishes only CPython 3.11 manylinux_2_34 x86_64 wheels for these releases.)
WHEEL_PYTHON = "3.11"
WHEEL_ABI = "cp311"
WHEEL_PLATFORM = "manylinux_2_34_x86_64"

PACKAGE = "sglang"
TREE_PREFIX = "python/"  # wheel path sglang/x.py -> git path python/sglang/x.py
HISTORY_AUTHOR = "SGLang release from PyPI <pypi-release@sglang.invalid>"
_EXCLUDED_SUFFIXES = (".so", ".pyd", ".dylib", ".pyc", ".pyo")
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\.post[0-9]+)?(\.dev[0-9]+)?$")

Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


@dataclass(frozen=True)
class Wheel:
    version: str
    path: Path
    sha256: str


def wheel_cache_dir(explicit: os.PathLike | None = None) -> Path:
    raw = explicit or os.environ.get(ENV_WHEEL_CACHE) or DEFAULT_WHEEL_CACHE
    path = Path(raw).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def wheel_filename(version: str) -> str:
    return f"{PACKAGE}-{version}-{WHEEL_ABI}-{WHEEL_ABI}-{WHEEL_PLATFORM}.whl"


def check_version(version: str) -> str:
    if not _VERSION_RE.match(version):
        raise HistoryError(f"{version!r} is not a release version (expected e.g. 0.5.23)")
    return version


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def _cache_lock(cache: Path) -> Iterator[None]:
    # Tests and users may fill the same cache concurrently; pip writes in place.
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fetch_wheel(version: str, cache: os.PathLike | None = None, progress: Progress = _quiet) -> Wheel:
    """Return the cached wheel of ``sglang==version``, downloading it once with pip."""
    check_version(version)
    cache_dir = wheel_cache_dir(cache)
    target = cache_dir / wheel_filename(version)
    with _cache_lock(cache_dir):
        if not target.exists():
            progress(f"downloading sglang=={version} into {cache_dir} (pip download --no-deps)")
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                WHEEL_PYTHON,
                "--implementation",
                "cp",
                "--abi",
                WHEEL_ABI,
                "--platform",
                WHEEL_PLATFORM,
                "--disable-pip-version-check",
                "--quiet",
                "--dest",
                str(cache_dir),
                f"{PACKAGE}=={version}",
            ]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if proc.returncode != 0 or not target.exists():
                raise HistoryError(
                    f"could not download sglang=={version} ({wheel_filename(version)}) into "
                    f"{cache_dir}: pip exited {proc.returncode}: {proc.stdout.strip()[-2000:]}"
                )
        else:
            progress(f"using cached {target.name}")
    return Wheel(version, target, sha256_of(target))


def _wheel_source_files(wheel: Wheel) -> list[zipfile.ZipInfo]:
    try:
        archive = zipfile.ZipFile(wheel.path)
    except zipfile.BadZipFile as exc:
        raise HistoryError(f"{wheel.path} is not a readable wheel: {exc}") from None
    with archive:
        infos = [
            info
            for info in archive.infolist()
            if info.filename.startswith(PACKAGE + "/")
            and not info.is_dir()
            and "/__pycache__/" not in info.filename
            and not info.filename.endswith(_EXCLUDED_SUFFIXES)
        ]
    if not infos:
        raise HistoryError(f"{wheel.path} holds no {PACKAGE}/ package files")
    return sorted(infos, key=lambda i: i.filename)


def _wheel_timestamp(infos: Sequence[zipfile.ZipInfo]) -> int:
    newest = max(i.date_time for i in infos)
    return int(_dt.datetime(*newest, tzinfo=_dt.timezone.utc).timestamp())


def _fast_import_stream(wheel: Wheel, mark: int, parent: str | None, branch: str, out, progress: Progress) -> None:
    """Write one release as a fast-import commit (+ annotated tag) to ``out``."""
    infos = _wheel_source_files(wheel)
    when = _wheel_timestamp(infos)
    tag = f"v{wheel.version}"
    with zipfile.ZipFile(wheel.path) as archive:
        out.write(f"commit refs/heads/{branch}\nmark :{mark}\n".encode())
        out.write(f"author {HISTORY_AUTHOR} {when} +0000\n".encode())
        out.write(f"committer {HISTORY_AUTHOR} {when} +0000\n".encode())
        message = (
            f"sglang {wheel.version}: python/sglang from the PyPI wheel\n\n"
            f"Wheel: {wheel.path.name}\nWheel-SHA256: {wheel.sha256}\n"
            f"Files: {len(infos)} (compiled extensions and byte code left out)\n"
        ).encode()
        out.write(b"data %d\n%s\n" % (len(message), message))
        if parent:
            out.write(f"from {parent}\n".encode())
        out.write(b"deleteall\n")
        for n, info in enumerate(infos, 1):
            data = archive.read(info)
            executable = (info.external_attr >> 16) & 0o111
            mode = "100755" if executable else "100644"
            path = TREE_PREFIX + info.filename
            if "\n" in path or '"' in path:
                raise HistoryError(f"{wheel.path.name}: unsupported file name {info.filename!r}")
            out.write(f"M {mode} inline {path}\n".encode())
            out.write(b"data %d\n" % len(data))
            out.write(data)
            out.write(b"\n")
            if n % 2000 == 0:
                progress(f"  sglang {wheel.version}: {n}/{len(infos)} files")
        out.write(b"\n")
        tag_message = (
            f"sglang {wheel.version} (PyPI)\n\nWheel: {wheel.path.name}\nWheel-SHA256: {wheel.sha256}\n"
        ).encode()
        out.write(f"tag {tag}\nfrom :{mark}\n".encode())
        out.write(f"tagger {HISTORY_AUTHOR} {when} +0000\n".encode())
        out.write(b"data %d\n%s\n" % (len(tag_message), tag_message))


def tag_wheel_info(repo: GitRepo, tag: str) -> dict:
    """The Wheel / Wheel-SHA256 lines recorded in a history tag (empty for other tags)."""
    status, body, _ = repo.run("cat-file", "-p", f"refs/tags/{tag}", check=False)
    info = {}
    if status == 0:
        for line in body.splitlines():
            if line.startswith("Wheel: "):
                info["wheel"] = line[len("Wheel: ") :].strip()
            elif line.startswith("Wheel-SHA256: "):
                info["wheel_sha256"] = line[len("Wheel-SHA256: ") :].strip()
    return info


def build_history(
    repo_dir: os.PathLike,
    versions: Sequence[str] = DEFAULT_VERSIONS,
    *,
    cache: os.PathLike | None = None,
    checkout: bool = True,
    progress: Progress = _quiet,
) -> GitRepo:
    """Create (or extend) a repository whose tags ``v<version>`` hold each release's source.

    ``checkout=False`` makes a new repository bare (clone it to work in it).
    ``versions`` must be given oldest first. An existing repository built by this function
    is extended when its tags are a prefix of ``versions``; anything else is refused rather
    than overwritten.
    """
    versions = [check_version(v) for v in versions]
    if not versions:
        raise HistoryError("no versions given")
    if len(set(versions)) != len(versions):
        raise HistoryError(f"versions listed twice: {versions}")
    repo_dir = Path(repo_dir)
    branch = "main"
    if repo_dir.exists() and any(repo_dir.iterdir()):
        repo, todo, parent = _existing_history(repo_dir, versions)
    else:
        repo = GitRepo.init(repo_dir, bare=not checkout)  # no checkout wanted: a bare repository
        todo, parent = versions, None
    wheels = [fetch_wheel(v, cache, progress) for v in todo]
    if todo:
        proc = repo.popen("fast-import", "--quiet", "--done")
        try:
            for n, wheel in enumerate(wheels):
                progress(f"importing sglang {wheel.version} as tag v{wheel.version}")
                _fast_import_stream(wheel, n + 1, parent if n == 0 else None, branch, proc.stdin, progress)
            _, err = proc.communicate(b"done\n")
        except BrokenPipeError:  # fast-import died; its stderr says why
            _, err = proc.communicate()
        if proc.returncode != 0:
            raise HistoryError(f"git fast-import failed in {repo_dir}: {err.decode(errors='replace').strip()}")
    if checkout and not repo.bare:
        progress(f"checking out v{versions[-1]} in {repo_dir}")
        repo.run("checkout", "-q", "-f", "-B", branch, f"v{versions[-1]}")
    return repo


def _existing_history(repo_dir: Path, versions: list[str]):
    """(repo, versions still to import, parent commit) for a history to extend; refuses anything else."""
    try:
        repo = GitRepo(repo_dir)
    except GitError:
        raise HistoryError(f"{repo_dir} exists and is not a git repository; give an empty or new directory") from None
    have = _history_versions(repo)
    if have != versions[: len(have)]:
        raise HistoryError(
            f"{repo_dir} already holds releases {have}, which are not the start of {versions}; give a new directory"
        )
    if not repo.bare and repo.dirty_paths():
        raise HistoryError(f"{repo_dir} has uncommitted changes; refusing to touch it")
    parent = repo.must_rev_parse(f"v{have[-1]}") if have else None
    return repo, versions[len(have) :], parent


def _history_versions(repo: GitRepo) -> list[str]:
    """Versions already in a history built by :func:`build_history`, oldest first."""
    status, out, _ = repo.run("log", "--first-parent", "--reverse", "--format=%s", "main", check=False)
    found = []
    if status == 0:
        for subject in out.splitlines():
            m = re.match(r"^sglang (\S+): python/sglang from the PyPI wheel$", subject)
            if not m:
                raise HistoryError(f"{repo.path} was not built by upstream-history (commit {subject!r})")
            found.append(m.group(1))
    return found


def extract_package(wheel: Wheel, dest: str | os.PathLike, only: Sequence[str] | None = None) -> Path:
    """Unpack the wheel's ``sglang/`` source files (no compiled extensions) under ``dest``.

    ``only``: package-relative paths (``srt/x.py``) to unpack instead of everything; the
    package's ``__init__.py`` always comes along so the result is recognisably a package.
    """
    dest = Path(dest)
    infos = _wheel_source_files(wheel)
    if only is not None:
        wanted = {f"{PACKAGE}/{p}" for p in only} | {f"{PACKAGE}/__init__.py"}
        infos = [i for i in infos if i.filename in wanted]
    with zipfile.ZipFile(wheel.path) as archive:
        for info in infos:
            target = dest / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(info))
    return dest / PACKAGE
