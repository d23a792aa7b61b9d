"""A run directory: its file names, claiming one without overwriting, reading its records back.

Why here: a run is evidence. Every module that writes or reads a run goes through these names
and functions, so no code path can truncate an earlier run's ``requests.jsonl``, and every
reader reports a bad line as ``FILE:LINE: what is wrong`` instead of a traceback. A run's records
and its summary are read as one run (:func:`load_run_records`): a records file that is a link into
another directory, a record of another run (its ``run_id``, its start time outside the run's), at a
concurrency that is none of the run's levels, or a record count the summary does not say, is refused,
since a summary judged beside records it did not describe is a verdict about nothing.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeGuard

from sglang_dsv4_ext.errors import ReproInputError
from sglang_dsv4_ext.tools.repro import strict_json
from sglang_dsv4_ext.tools.repro.verdict import CLASSES
from sglang_dsv4_ext.tools.tool_support import urls

REQUESTS = "requests.jsonl"  # one line per finished request
SUMMARY = "summary.json"  # rates, configuration, counts, re-run command
REPARSED = "reparsed.jsonl"  # `repro reparse`: the records with a fresh reference re-parse
AB = "ab.json"  # `repro ab`: the paired comparison
AB_SIDES = ("a", "b")  # `repro ab`: one run directory per endpoint

# Every record carries these; readers refuse a line without them.
RECORD_KEYS = ("key", "prompt_sha256", "verdict", "step")


def default_out(prefix: str) -> str:
    """``repro-runs/<prefix>-<time>``: the directory used when ``--out`` is not given."""
    return os.path.join("repro-runs", time.strftime(f"{prefix}-%Y%m%d-%H%M%S"))


def _holds_something(path: str) -> bool:
    return os.path.isdir(path) and any(os.scandir(path))


def check_out_free(out: str, flag: str = "--out") -> None:
    """Refuse an output directory that is a file or already holds anything (an earlier run)."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise ReproInputError(f"{flag} {out}: exists and is not a directory")
    if _holds_something(out):
        raise ReproInputError(
            f"{flag} {out}: already holds files (an earlier run?); runs are never overwritten. "
            f"Choose a new directory, or leave {flag} out for a new timestamped one"
        )


def claim(out: str, explicit: bool, flag: str = "--out") -> str:
    """Create the directory a run will write into and return it.

    ``explicit`` (the user named it): refuse it when it holds anything. Otherwise (a default,
    timestamped name) never refuse: add ``-2``, ``-3`` ... until the name is free.
    """
    if explicit:
        check_out_free(out, flag)
        try:
            os.makedirs(out, exist_ok=True)
        except OSError as exc:
            raise ReproInputError(f"{flag} {out}: cannot create it ({exc.strerror})") from None
        return out
    candidate, n = out, 1
    while True:
        try:
            os.makedirs(candidate)
            return candidate
        except FileExistsError:
            n += 1
            candidate = f"{out}-{n}"
        except OSError as exc:
            raise ReproInputError(f"cannot create the output directory {candidate} ({exc.strerror})") from None


def free_name(directory: str, name: str) -> str:
    """``directory/name``, or ``directory/<stem>-<time>[-n]<ext>`` when that exists (never overwrite)."""
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return path
    stem, ext = os.path.splitext(name)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, n = os.path.join(directory, f"{stem}-{stamp}{ext}"), 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(directory, f"{stem}-{stamp}-{n}{ext}")
    return path


def requests_path(run_dir: str) -> str:
    path = os.path.join(run_dir, REQUESTS)
    if not os.path.isfile(path):
        raise ReproInputError(f"{path} not found: is {run_dir!r} a repro run directory?")
    return path


def _record_from_line(path: str, lineno: int, line: str, is_last: bool) -> dict:
    where = f"{path}:{lineno}"
    try:
        rec = json.loads(line)
    except ValueError as exc:
        cut_short = is_last and not line.endswith("\n")
        cut = " (the line is cut short: was the run killed while writing?)" if cut_short else ""
        raise ReproInputError(f"{where}: not a JSON line{cut}: {exc}") from None
    if not isinstance(rec, dict):
        raise ReproInputError(f"{where}: expected a JSON object (a request record), got a {type(rec).__name__}")
    missing = [k for k in RECORD_KEYS if not isinstance(rec.get(k), str)]
    if missing:
        raise ReproInputError(f"{where}: record lacks {', '.join(repr(k) for k in missing)} (or it is not a string)")
    if rec["verdict"] not in CLASSES:
        raise ReproInputError(f"{where}: unknown verdict {rec['verdict']!r}; known: {', '.join(CLASSES)}")
    return rec


def _read_lines(path: str) -> list:
    try:
        with open(path, "rb") as f:
            return f.read().splitlines(keepends=True)
    except OSError as exc:
        raise ReproInputError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _numbered_records(path: str) -> Iterator[tuple[int, dict]]:
    """(line number, record) of every record of a ``requests.jsonl``, checked; a bad line raises naming FILE:LINE."""
    lines = _read_lines(path)
    for i, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ReproInputError(f"{path}:{i}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        if line.strip():
            yield i, _record_from_line(path, i, line, i == len(lines))


RecordCheck = Callable[[dict], None]  # raises ValueError naming the field; the caller adds FILE:LINE


def load_records(run_dir: str, check: RecordCheck | None = None) -> tuple[str, dict[str, dict]]:
    """(path, records by key) of a run; a key recorded twice is refused naming both lines, and so is a record
    ``check`` (a reader's own needs, e.g. the report's fields) refuses, naming FILE:LINE."""
    path = requests_path(run_dir)
    records: dict[str, dict] = {}
    first_line: dict[str, int] = {}
    for n, (lineno, rec) in enumerate(_numbered_records(path), start=1):
        if check is not None:
            try:
                check(rec)
            except ValueError as exc:
                raise ReproInputError(f"{path}:{lineno}: {exc}") from None
        key = rec["key"]
        if key in records:
            raise ReproInputError(f"{path}: request {key!r} is recorded twice (records {first_line[key]} and {n})")
        records[key], first_line[key] = rec, n
    return path, records


# ----- one run's records and summary, read as one run ------------------------------------------
CLOCK_SLACK_S = 2.0  # records' started_at and the summary's started_at/duration_s are rounded to 1 ms


def check_own_file(run_dir: str, name: str) -> None:
    """Refuse a run file that is a symbolic link into another directory (another run's file)."""
    path = os.path.join(run_dir, name)
    if not os.path.islink(path):
        return
    real = os.path.realpath(path)
    if os.path.dirname(real) != os.path.realpath(run_dir):
        raise ReproInputError(
            f"{path}: a link to {real}, a file of another directory; a run's {name} must be its own "
            "(copy the run directory instead of linking its files)"
        )


def _int(value) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_run_id(summary: dict, rec: dict) -> None:
    run_id, of_record = summary.get("run_id"), rec.get("run_id")
    if isinstance(run_id, str) and of_record is not None and of_record != run_id:
        raise ValueError(
            f"a record of run {of_record!r}, but {SUMMARY} is of run {run_id!r}: one run's records beside "
            "another run's summary"
        )


def _check_level(summary: dict, rec: dict) -> None:
    config = summary.get("config")
    levels = config.get("concurrency") if isinstance(config, dict) else None
    if not isinstance(levels, list) or not levels or "concurrency" not in rec:
        return
    conc, level = rec["concurrency"], rec.get("level")
    shown = ",".join(str(c) for c in levels)
    if conc not in levels:
        raise ValueError(f"concurrency {conc!r} is none of the run's levels ({shown}, {SUMMARY} config.concurrency)")
    if _int(level) and not (0 <= level < len(levels) and levels[level] == conc):
        raise ValueError(f"level {level} at concurrency {conc!r}, but the run's levels are {shown} ({SUMMARY})")


def _check_shape(summary: dict, rec: dict) -> None:
    """The record's session and round are within the run's --sessions and --rounds, its step one the run has."""
    config = summary.get("config")
    if not isinstance(config, dict):
        return
    for field, setting in (("session", "sessions"), ("round", "rounds")):
        value, count = rec.get(field), config.get(setting)
        if _int(value) and _int(count) and not 0 <= value < count:
            raise ValueError(f"{field} {value} is past the run's {count} {setting} ({SUMMARY} config.{setting})")
    if rec["step"] == "answer" and config.get("answer_step") is False:
        raise ValueError(f"an answer step, but the run had none ({SUMMARY} config.answer_step is false)")


def _check_time(summary: dict, rec: dict) -> None:
    """For a record without a run id (sglang-dsv4-ext 0.3.0 wrote none): it started while the run ran.

    A record with one is judged by it alone, so a wall clock set back during a run refuses no record of it."""
    start, duration, started = summary.get("started_at"), summary.get("duration_s"), rec.get("started_at")
    if "run_id" in rec or not (_number(start) and _number(duration) and _number(started)):
        return
    if not start - CLOCK_SLACK_S <= started <= start + duration + CLOCK_SLACK_S:
        raise ValueError(
            f"started at {started} (epoch seconds), outside the run {SUMMARY} describes "
            f"({start:.3f} for {duration} s): a record of another run"
        )


def record_of_summary(summary: dict) -> RecordCheck:
    """The check that a record is one of the run ``summary`` describes (run id, level, shape, start time)."""

    def check(rec: dict) -> None:
        _check_run_id(summary, rec)
        _check_level(summary, rec)
        _check_shape(summary, rec)
        _check_time(summary, rec)

    return check


def _both(first: RecordCheck | None, second: RecordCheck) -> RecordCheck:
    def check(rec: dict) -> None:
        if first is not None:
            first(rec)
        second(rec)

    return check


def _check_count(run_dir: str, summary: dict, count: int) -> None:
    done = summary.get("requests_done")
    if _int(done) and done != count:
        raise ReproInputError(
            f"{os.path.join(run_dir, REQUESTS)}: holds {count} records, but {os.path.join(run_dir, SUMMARY)} says "
            f"the run recorded {done} (requests_done): the records and the summary are not of one run"
        )


def load_run_records(run_dir: str, summary: dict, check: RecordCheck | None = None) -> tuple[str, dict[str, dict]]:
    """:func:`load_records`, each record also checked against the run's ``summary`` ({} when it wrote none):
    refused naming FILE:LINE when it is not a record of that run, and when the count is not the summary's."""
    for name in (REQUESTS, SUMMARY):
        check_own_file(run_dir, name)
    path, records = load_records(run_dir, _both(check, record_of_summary(summary)))
    _check_count(run_dir, summary, len(records))
    return path, records


def load_summary(run_dir: str, required: bool) -> dict:
    """The run's ``summary.json`` ({} when absent and not ``required``)."""
    path = os.path.join(run_dir, SUMMARY)
    if not os.path.isfile(path):
        if required:
            raise ReproInputError(
                f"{path} not found: the run did not write its summary (killed with SIGKILL?); "
                "it holds the verdict settings this command needs"
            )
        return {}
    try:
        with open(path, "rb") as f:
            summary = strict_json.loads(f.read())
    except OSError as exc:
        raise ReproInputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except strict_json.NotJSONValueError as exc:  # sglang-dsv4-ext 0.3.0 wrote a counter that was not a number so
        raise ReproInputError(f"{path}: not valid JSON ({exc}; write null in its place)") from None
    except ValueError as exc:
        raise ReproInputError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(summary, dict):
        raise ReproInputError(f"{path}: expected a JSON object, got a {type(summary).__name__}")
    return summary


EVIDENCE_FILES = (REQUESTS, SUMMARY, AB)  # a directory holding one of these is a run's (or an A/B's)


def _holds_same_file(directory: str, path: str) -> bool:
    """Whether ``directory`` holds ``path``'s file under some name (a hard link)."""
    try:
        st = os.stat(path)
        return any(os.path.samestat(st, e.stat()) for e in os.scandir(directory) if e.is_file())
    except OSError:
        return False


def evidence_home(path: str, run_dirs: Iterable[str] = ()) -> str | None:
    """The run directory an existing file ``path`` belongs to, else None: its real directory is one of
    ``run_dirs`` or holds a run's files (:data:`EVIDENCE_FILES`), or it is one of ``run_dirs``' files under
    another name (a hard link). Such a file is never written over (``report -o``, ``--force`` or not)."""
    home = os.path.dirname(os.path.realpath(path))
    named = {os.path.realpath(d): d for d in run_dirs}
    if home in named:
        return named[home]
    if any(os.path.isfile(os.path.join(home, name)) for name in EVIDENCE_FILES):
        return home
    return next((d for d in run_dirs if _holds_same_file(d, path)), None)


def write_json_new(path: str, obj) -> None:
    """Write ``obj`` as strict JSON (no ``NaN``: :mod:`.strict_json`) to a file that must not exist yet.

    The text is built before the file is created, so a value that is not JSON never leaves half a file.
    """
    text = io.StringIO()
    strict_json.dump(obj, text)
    with open(path, "x", encoding="utf-8") as f:
        f.write(urls.redact(text.getvalue()))
