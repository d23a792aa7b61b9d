"""The ``patches/`` directory: ordered series, patch files, DEP-3 headers, pin and tombstones.

Layout::

    patches/
      series             one patch file name per line, in apply order; '#' starts a comment
      UPSTREAM_PIN       the SGLang release the series applies to (key = "value" lines)
      0001-....patch     `git format-patch` output, DEP-3 fields in the commit message body
      dropped/NAME.tombstone
                         why and when a patch left the series, followed by the patch itself

Every problem found here is reported with the file it is in (a corrupt patch by its name and
git's line number), before any repository is touched.
"""

from __future__ import annotations

import email.policy
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli
    import tomli as tomllib

from sglang_dsv4_ext.errors import PatchFileError, SeriesError

from .gitcmd import run_git_in
from .paths import PIN_FILE, SERIES_FILE

TOMBSTONE_DIR = "dropped"
TOMBSTONE_SUFFIX = ".tombstone"

# DEP-3 fields every patch of the project's own series must carry (Covered-By lists test ids,
# Mirrors names the runtime hook module that applies the same fix to an installed SGLang).
REQUIRED_DEP3_FIELDS = (
    "Description",
    "Origin",
    "Forwarded",
    "Reason",
    "Retire-When",
    "Covered-By",
    "Mirrors",
)
PIN_KEYS = ("tag", "version", "commit", "wheel", "wheel_sha256", "source_tree")
_FIELD_RE = re.compile(r"^([A-Z][A-Za-z0-9-]*):[ \t]?(.*)$")
_DIFF_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    path: str
    index: int  # 1-based within its file
    header: str  # the "@@ -a,b +c,d @@ ..." line
    old_start: int
    text: str  # header + body lines


@dataclass
class PatchFile:
    name: str
    path: Path
    text: str
    subject: str
    author: str
    date: str
    message: str  # commit message body (DEP-3 fields included), without the subject
    fields: dict[str, str]
    modified: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    @property
    def files(self) -> list[str]:
        return sorted(set(self.modified + self.created + self.deleted))

    @property
    def preexisting(self) -> list[str]:
        """Files the patch expects to exist before it applies."""
        return sorted(set(self.modified + self.deleted))

    def missing_fields(self) -> list[str]:
        return [f for f in REQUIRED_DEP3_FIELDS if not self.fields.get(f, "").strip()]

    def hunks(self) -> list[tuple[str, str, list[Hunk]]]:
        """Split into (path, file header text, hunks) per file."""
        return split_hunks(self.text)

    @property
    def mirrors(self) -> list[str]:
        return [m.strip() for m in re.split(r"[,\s]+", self.fields.get("Mirrors", "")) if m.strip()]


def mail_headers(head: str) -> Message:
    """The mail header block of a format-patch file (after its ``From <sha>`` line), parsed by
    :mod:`email.parser`: folded lines are unfolded and RFC 2047 encoded words (``git format-patch
    --encode-email-headers`` writes them for non-ASCII subjects) are decoded."""
    return HeaderParser(policy=email.policy.default).parsestr(head.rstrip("\n") + "\n\n")


def parse_dep3(message: str) -> dict[str, str]:
    """DEP-3 fields from a commit message body: each paragraph that starts with a ``Field:`` line
    is a block of RFC 822 style fields, parsed by :mod:`email.parser`.

    A field value keeps its line structure (joined with newlines) so multi-line descriptions
    survive; a lone " ." continuation line stands for an empty line as in DEP-3.
    """
    fields: dict[str, str] = {}
    for paragraph in re.split(r"\n[ \t]*\n", message):
        paragraph = paragraph.strip("\n")
        if not _FIELD_RE.match(paragraph.split("\n", 1)[0]):
            continue
        block = HeaderParser(policy=email.policy.compat32).parsestr(paragraph + "\n\n")
        for key, value in block.items():
            first, *rest = str(value).split("\n")
            lines = [first.strip()] + ["" if line.strip() == "." else line.strip() for line in rest]
            fields[key] = "\n".join(lines).strip()
    return fields


def split_hunks(text: str) -> list[tuple[str, str, list[Hunk]]]:
    """Split a patch into (path, file header text, hunks) per file."""
    return [(path, *_split_file_block(path, lines)) for path, lines in _file_blocks(text)]


def _file_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(path, lines) for each ``diff --git`` section; anything before the first one is dropped."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines(keepends=True):
        m = _DIFF_RE.match(line.rstrip("\n"))
        if m:
            blocks.append((m.group(2), [line]))
        elif blocks:
            blocks[-1][1].append(line)
    return blocks


def _split_file_block(path: str, lines: Sequence[str]) -> tuple[str, list[Hunk]]:
    header: list[str] = []
    bodies: list[list[str]] = []
    ended = False
    for line in lines:
        if line.startswith("@@ "):
            bodies.append([line])
            ended = False
        elif not bodies:
            header.append(line)
        elif not ended and (line.startswith(("+", "-", " ", "\\")) or line == "\n"):
            bodies[-1].append(line)
        else:  # the end of the diff (e.g. a mail signature): nothing after it belongs to a hunk
            ended = True
    hunks = []
    for index, body in enumerate(bodies, 1):
        first = body[0].rstrip("\n")
        numbers = _HUNK_RE.match(first)
        if numbers is None:  # git apply calls it a corrupt patch; without this, a traceback
            raise PatchFileError(
                f"{path}: hunk #{index} has a malformed header {first!r} "
                "(expected '@@ -START[,COUNT] +START[,COUNT] @@')"
            )
        hunks.append(Hunk(path, index, first, int(numbers.group(1)), "".join(body)))
    return "".join(header), hunks


def parse_patch_file(path: Path, name: str | None = None) -> PatchFile:
    """Read and validate one format-patch file; raise PatchFileError naming it."""
    name = name or path.name
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PatchFileError(f"{path}: cannot read patch file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchFileError(f"{path}: not UTF-8 text (byte {exc.start}); is it a patch file?") from None
    if "\ndiff --git " not in text and not text.startswith("diff --git "):
        raise PatchFileError(f"{path}: corrupt patch: no 'diff --git' section found")
    head, sep, rest = text.partition("\n\n")
    head_lines = head.splitlines()
    if not sep or not head_lines or not head_lines[0].startswith("From "):
        raise PatchFileError(
            f"{path}: not a git format-patch file (it must start with a 'From <sha> ...' line and mail headers)"
        )
    headers = mail_headers("\n".join(head_lines[1:]))
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", str(headers.get("Subject", ""))).strip()
    if not subject:
        raise PatchFileError(f"{path}: the mail header has no Subject line")
    body, _, _ = ("\n" + rest).partition("\n---\n")
    if "\ndiff --git " in "\n" + body:
        body = body.split("\ndiff --git ", 1)[0]
    # Let git parse the diff: it reports the line of a corrupt hunk precisely.
    status, out, err = run_git_in(path.parent, ["apply", "--numstat", "--summary", str(path.resolve())], check=False)
    if status != 0:
        detail = err.strip().replace("error: ", "")
        raise PatchFileError(f"{path}: corrupt patch: {detail}")
    patch = PatchFile(
        name=name,
        path=path,
        text=text,
        subject=subject,
        author=str(headers.get("From", "")),
        date=str(headers.get("Date", "")),
        message=body.strip("\n"),
        fields=parse_dep3(body),
    )
    _collect_paths(patch)
    if not patch.files:
        raise PatchFileError(f"{path}: corrupt patch: it changes no file")
    return patch


def _collect_paths(patch: PatchFile) -> None:
    for path, header, _hunks in split_hunks(patch.text):
        if "\nnew file mode " in "\n" + header:
            patch.created.append(path)
        elif "\ndeleted file mode " in "\n" + header:
            patch.deleted.append(path)
        else:
            patch.modified.append(path)


# ---- the series file --------------------------------------------------------------------


def read_series_names(series_dir: Path) -> list[str]:
    series_file = series_dir / SERIES_FILE
    if not series_file.exists():
        raise SeriesError(f"{series_file}: no series file (one patch file name per line)")
    names: list[str] = []
    for lineno, raw in enumerate(series_file.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "/" in line or " " in line:
            raise SeriesError(f"{series_file}:{lineno}: {line!r} is not a patch file name in {series_dir}")
        if line in names:
            raise SeriesError(f"{series_file}:{lineno}: {line!r} is listed twice")
        names.append(line)
    return names


def format_series_file(names: Sequence[str], header: str = "") -> str:
    lines = [header.rstrip("\n")] if header else []
    return "\n".join(lines + list(names)) + "\n"


def series_header(series_dir: Path) -> str:
    """The leading comment block of the series file, kept verbatim on rewrite."""
    series_file = series_dir / SERIES_FILE
    if not series_file.exists():
        return ""
    lines = []
    for raw in series_file.read_text().splitlines():
        if raw.startswith("#") or not raw.strip():
            lines.append(raw)
        else:
            break
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + ("\n" if lines else "")


@dataclass
class Series:
    directory: Path
    patches: list[PatchFile]
    pin: dict[str, str]

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.patches]

    def get(self, name: str) -> PatchFile:
        for patch in self.patches:
            if patch.name == name:
                return patch
        listed = ", ".join(self.names) or "(none)"
        raise SeriesError(f"{name!r} is not in {self.directory / SERIES_FILE}; patches: {listed}")


def load_series(series_dir: Path) -> Series:
    """Load and validate the whole series; every error names its file."""
    series_dir = Path(series_dir).resolve()  # git runs in other directories; keep paths absolute
    if not series_dir.is_dir():
        raise SeriesError(f"{series_dir}: not a directory (the patches/ series directory)")
    names = read_series_names(series_dir)
    patches = []
    for name in names:
        path = series_dir / name
        if not path.exists():
            raise SeriesError(f"{series_dir / SERIES_FILE} lists {name!r}, but {path} does not exist")
        patches.append(parse_patch_file(path, name))
    return Series(series_dir, patches, read_pin(series_dir))


def unlisted_patch_files(series: Series) -> list[str]:
    listed = set(series.names)
    return sorted(p.name for p in series.directory.glob("*.patch") if p.name not in listed)


# ---- UPSTREAM_PIN ---------------------------------------------------------------------------

_PIN_HEADER = (
    "# The SGLang release this patch series applies to (sglang-dsv4 patches).\n"
    "# tag/version: the upstream tag; wheel/wheel_sha256: the PyPI wheel whose sglang/ tree the\n"
    "# tag holds in a history built by `sglang-dsv4 patches upstream-history` (commit ids of such a\n"
    "# history are not recorded: the wheel is); source_tree: git tree id of python/sglang at the tag.\n"
)


def read_pin(series_dir: Path) -> dict[str, str]:
    """The UPSTREAM_PIN (a TOML file of ``key = "value"`` lines), or {} when there is none."""
    pin_file = Path(series_dir) / PIN_FILE
    if not pin_file.exists():
        return {}
    text = pin_file.read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SeriesError(f'{pin_file}: not a pin file of key = "value" lines: {exc}') from None
    for key, value in data.items():
        where = f"{pin_file}:{_line_of_key(text, key)}"
        if key not in PIN_KEYS:
            raise SeriesError(f"{where}: unknown key {key!r}; allowed: {', '.join(PIN_KEYS)}")
        if not isinstance(value, str):
            raise SeriesError(f'{where}: {key} must be a quoted string (key = "value"), got {value!r}')
    return dict(data)


def _line_of_key(text: str, key: str) -> int:
    """The line a top-level key is set on (TOML errors give one; a wrong key needs ours)."""
    for lineno, line in enumerate(text.splitlines(), 1):
        if re.match(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*[=.]", line):
            return lineno
    return 1


def format_pin(pin: dict[str, str]) -> str:
    body = "".join(f'{k} = "{pin[k]}"\n' for k in PIN_KEYS if pin.get(k))
    return _PIN_HEADER + body


# ---- tombstones -----------------------------------------------------------------------------


def tombstone_path(series_dir: Path, name: str) -> Path:
    return Path(series_dir) / TOMBSTONE_DIR / (name + TOMBSTONE_SUFFIX)


def format_tombstone(patch: PatchFile, reason: str, dropped_on: str, classification: str) -> str:
    """The record left in patches/dropped/ when a patch leaves the series (it keeps the patch)."""
    lines = [
        f"Tombstone: {patch.name}",
        f"Subject: {patch.subject}",
        f"Dropped-On: {dropped_on}",
        f"Classification: {classification}",
        "Reason: " + reason.strip().replace("\n", "\n "),
        "",
        "The patch as it was when dropped follows.",
        "",
    ]
    return "\n".join(lines) + "\n" + patch.text


def read_tombstones(series_dir: Path) -> list[dict[str, str]]:
    stones = []
    for path in sorted((Path(series_dir) / TOMBSTONE_DIR).glob("*" + TOMBSTONE_SUFFIX)):
        head = path.read_text().split("\n\n", 1)[0]
        info = parse_dep3(head)
        info["file"] = str(path)
        stones.append(info)
    return stones
