"""The UPSTREAM_PIN for a new base, and what changes in it: one answer for export and rebase.

Why: ``export`` used to write the pin it computed over the old one. Exported from a repository
whose tags do not record a wheel (a plain clone of SGLang), that dropped the ``wheel`` and
``wheel_sha256`` lines and replaced ``source_tree``, and said only "1 files changed".

How: the pin is recomputed from the repository where it can be (:func:`pin_for`): ``tag`` and
``version`` from the ref's name, ``source_tree`` from the ref's tree, ``wheel`` and
``wheel_sha256`` from the tag of a history built by ``upstream-history`` (whose commit ids are
not recorded), ``commit`` where the tag records no wheel. What the repository cannot tell:

- ``--wheel NAME --wheel-sha256 HEX`` set the wheel lines (refused where the tag records others);
- otherwise a field of the old pin is kept when the base is the pinned release (same tag),
- and left out when it is another release (the old value describes the old release).

Every field that changes, is kept or is left out is reported (``field: old -> new``, with why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sglang_dsv4_ext.errors import SeriesError

from .gitrepo import GitRepo
from .series import PIN_FILE, PIN_KEYS
from .upstream_history import tag_wheel_info, wheel_filename

WHEEL_KEYS = ("wheel", "wheel_sha256")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# Why the repository cannot tell a field (the rest: it could not be read from the ref).
_NOT_RECORDED = {
    "wheel": "this repository's {tag} does not record its wheel, as a tag of `sglang-dsv4 patches "
    "upstream-history` does; pass --wheel NAME --wheel-sha256 HEX to set it",
    "wheel_sha256": "with the wheel",
    "commit": "this repository's {tag} is a history built from the wheel, whose commit ids are not recorded",
}


def pin_for(repo: GitRepo, ref: str, sha: str) -> dict[str, str]:
    """The pin fields ``repo`` itself tells for ``ref`` (a tag of a wheel-built history records its wheel)."""
    pin: dict[str, str] = {}
    is_tag = repo.run("rev-parse", "--verify", "--quiet", f"refs/tags/{ref}", check=False)[0] == 0
    pin["tag"] = ref
    m = re.match(r"^v?(\d+(?:\.\d+)+(?:\S*)?)$", ref)
    if m:
        pin["version"] = m.group(1)
    wheel = tag_wheel_info(repo, ref) if is_tag else {}
    pin.update(wheel)
    if not wheel:
        pin["commit"] = sha
    tree = repo.tree_of(sha, "python/sglang")
    if tree:
        pin["source_tree"] = tree
    return pin


def given_wheel(wheel: str | None, sha256: str | None) -> dict[str, str]:
    """The wheel lines an operator passed (--wheel, --wheel-sha256): both or neither, well formed."""
    if wheel is None and sha256 is None:
        return {}
    if wheel is None or sha256 is None:
        raise SeriesError("give --wheel NAME and --wheel-sha256 HEX together (the pin records a wheel with its hash)")
    if "/" in wheel or not wheel.endswith(".whl"):
        raise SeriesError(f"--wheel {wheel!r}: allowed: a wheel file name, e.g. {wheel_filename('0.5.23')}")
    if not _SHA256_RE.match(sha256.lower()):
        raise SeriesError(f"--wheel-sha256 {sha256!r}: allowed: 64 hexadecimal digits (the wheel's sha256)")
    return {"wheel": wheel, "wheel_sha256": sha256.lower()}


@dataclass
class PinUpdate:
    pin: dict[str, str]
    changes: list[str] = field(default_factory=list)  # one line per field changed, kept or left out


def updated_pin(old: dict[str, str], computed: dict[str, str], given: dict[str, str]) -> PinUpdate:
    """The pin to write for a base whose recomputed fields are ``computed`` (see the module doc)."""
    tag = computed.get("tag", "")
    _refuse_contradicting(computed, given)
    pin = {**computed, **given}
    version = pin.get("version")
    if given and version and not given["wheel"].startswith(f"sglang-{version}-"):
        raise SeriesError(f"--wheel {given['wheel']!r} is not a wheel of sglang {version} (the base {tag})")
    same_release = old.get("tag") == tag
    unknown = [k for k in PIN_KEYS if k in old and k not in pin]
    if same_release:
        pin.update({k: old[k] for k in unknown})
    update = PinUpdate({k: pin[k] for k in PIN_KEYS if pin.get(k)})
    for key in PIN_KEYS:
        line = _change_line(key, old, update.pin, tag, unknown, given)
        if line:
            update.changes.append(line)
    return update


def _change_line(key: str, old: dict[str, str], new: dict[str, str], tag: str, unknown, given) -> str | None:
    before, after = old.get(key), new.get(key)
    same_release = old.get("tag") == tag
    if key in unknown:
        why = _NOT_RECORDED.get(key, "this repository does not tell it").format(tag=tag)
        if same_release:
            return f"{key}: kept {before}: {why}"
        return f"{key}: {before} -> (none): it described {old.get('tag')}; {why}"
    if before == after:
        return None
    line = f"{key}: {before or '(none)'} -> {after or '(none)'}"
    if key in given:
        return line + " (given on the command line)"
    if before and same_release:
        return line + f": this repository's {tag} differs from the pin's"
    return line


def _refuse_contradicting(computed: dict[str, str], given: dict[str, str]) -> None:
    for key, value in given.items():
        if key in computed and computed[key] != value:
            raise SeriesError(
                f"--{key.replace('_', '-')} {value}: this repository's {computed.get('tag')} records "
                f"{key} {computed[key]}; leave the option out, or export from the repository of that wheel"
            )


def pin_report(changes: list[str]) -> list[str]:
    """The lines export and rebase print about the pin (none when nothing changed)."""
    return [f"{PIN_FILE}: {line}" for line in changes]
