"""Deterministic export of commits as the series.

Why: review must see only real changes. Re-exporting an unchanged series, on any machine
with any git configuration, must write byte-identical files (a zero ``git diff``).

How: ``git format-patch`` with every output-shaping option given explicitly
(``--zero-commit --no-signature --full-index --no-numbered ...``; the configuration that
could still leak in is forced in :mod:`.gitrepo`), then the mail header is reduced to the
fields ``git am`` needs (From, Date, Subject and MIME lines). Names are stable: a patch keeps
its file name across rebases (matched by provenance in a rebase, by subject in a plain
export); a new patch gets the next unused number, so dropping one never renumbers the rest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from .gitrepo import GitRepo
from .series import (
    PIN_FILE,
    SERIES_FILE,
    TOMBSTONE_DIR,
    Series,
    SeriesError,
    format_pin,
    format_series_file,
    series_header,
)

FORMAT_PATCH_ARGS = (
    "format-patch",
    "--stdout",
    "--zero-commit",
    "--no-signature",
    "--full-index",
    "--no-renames",
    "--no-numbered",
    "--no-cover-letter",
    "--no-thread",
    "--no-attach",
    "--subject-prefix=PATCH",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--diff-algorithm=myers",
    "--no-relative",
    "--stat=72",
    "--no-color",
    "--no-ext-diff",
    "--no-base",
    "--encode-email-headers",
    "-U3",
    "-O/dev/null",
)
_KEPT_HEADERS = ("from", "date", "subject", "mime-version", "content-type", "content-transfer-encoding")
_NUMBER_RE = re.compile(r"^(\d{4})-")


def normalise_patch(text: str) -> str:
    """Reduce the mail header to what `git am` needs; keep the message and diff verbatim."""
    head, sep, rest = text.partition("\n\n")
    lines = head.splitlines()
    kept = [lines[0]]
    keep = False
    for line in lines[1:]:
        if line[:1] in (" ", "\t"):
            if keep:
                kept.append(line)
            continue
        keep = line.split(":", 1)[0].strip().lower() in _KEPT_HEADERS
        if keep:
            kept.append(line)
    return "\n".join(kept) + sep + rest.rstrip("\n") + "\n"


def format_commit(repo: GitRepo, commit: str) -> str:
    out = repo.run(*FORMAT_PATCH_ARGS, "-1", commit)[1]
    if not out.strip():
        raise SeriesError(f"commit {commit[:12]} has no changes to export (an empty commit)")
    return normalise_patch(out)


def slug(subject: str, limit: int = 52) -> str:
    """File-name part from a subject: lower case, '-' between words, cut at a word end."""
    s = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    if len(s) > limit:
        cut = s[: limit + 1]
        s = cut[: cut.rfind("-")] if "-" in cut else s[:limit]
    return s.strip("-") or "patch"


def next_number(series_dir: Path, names: Sequence[str]) -> int:
    used = [0]
    candidates = list(names) + [p.name for p in (series_dir / TOMBSTONE_DIR).glob("*")]
    for name in candidates:
        m = _NUMBER_RE.match(name)
        if m:
            used.append(int(m.group(1)))
    return max(used) + 1


def commit_subject(repo: GitRepo, commit: str) -> str:
    return repo.out("log", "-1", "--format=%s", commit)


def name_commits_by_subject(repo: GitRepo, commits: Sequence[str], series: Series) -> tuple[list[str], list[str]]:
    """(file name for each commit, series patches no commit matched)."""
    by_subject: dict[str, str] = {}
    for patch in series.patches:
        by_subject.setdefault(patch.subject, patch.name)
    names: list[str] = []
    number = next_number(series.directory, series.names)
    for commit in commits:
        subject = commit_subject(repo, commit)
        name = by_subject.pop(subject, None)
        if name is None:
            name = f"{number:04d}-{slug(subject)}.patch"
            number += 1
        names.append(name)
    unmatched = [n for n in series.names if n in by_subject.values()]
    return names, unmatched


def render_series(repo: GitRepo, commits: Sequence[str], names: Sequence[str]) -> list[tuple[str, str]]:
    if len(commits) != len(names):
        raise ValueError("one name per commit")
    return [(name, format_commit(repo, commit)) for commit, name in zip(commits, names)]


def planned_changes(series_dir: Path, files: dict[str, str], removed: Sequence[str]) -> list[str]:
    """Which files writing ``files`` (relative name -> text) and removing ``removed`` would change."""
    changed = []
    for rel, text in sorted(files.items()):
        path = series_dir / rel
        if not path.exists() or path.read_text() != text:
            changed.append(rel)
    changed += [r for r in removed if (series_dir / r).exists()]
    return changed


def series_files(
    series_dir: Path,
    rendered: Sequence[tuple[str, str]],
    pin: dict[str, str] | None,
    tombstones: dict[str, str],
    header: str | None = None,
) -> dict[str, str]:
    """Every file a series directory should hold: patches, series, pin, new tombstones.
    ``header``: the series file's comment block (default: the one ``series_dir`` has)."""
    files = {name: text for name, text in rendered}
    header = series_header(series_dir) if header is None else header
    files[SERIES_FILE] = format_series_file([n for n, _ in rendered], header)
    if pin is not None:
        files[PIN_FILE] = format_pin(pin)
    for rel, text in tombstones.items():
        files[rel] = text
    return files


def write_files(series_dir: Path, files: dict[str, str], removed: Sequence[str]) -> list[str]:
    changed = planned_changes(series_dir, files, removed)
    for rel, text in files.items():
        path = series_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text)
            tmp.replace(path)
    for rel in removed:
        path = series_dir / rel
        if path.exists():
            path.unlink()
    return changed
