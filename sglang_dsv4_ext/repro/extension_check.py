"""Is sglang-dsv4-ext active on every server a run reads? Decided before the first request.

Why: a run against a stack where the extension silently did not load (``SGLANG_PLUGINS`` without
it, ``SGLANG_DSV4_EXT=0`` left over, another interpreter) measures stock SGLang under the
extension's name; a PD pair whose prefill and decode disagree on the index-K dtype corrupts
transfers without any error. Neither shows in the harness's verdicts, so ``repro run`` checks each
named server first (``--expect-extension``) and records what it found in the summary either way.

How, per server. Only evidence of the server answering now decides: its schedulers' records in
``/server_info`` (:mod:`.server_info`), which each scheduler computes from its own state when asked.
Active: every DP rank's scheduler reports active, with every field of
:data:`sglang_dsv4_ext.plugin.activation.EVIDENCE_FIELDS`, in one launch. Inactive: a rank has no record (a
stock scheduler has none) or reports not active. Unknown: ``/server_info`` cannot be read, or the
records are incomplete or of several launches.

The activation gauge on ``/metrics`` (:mod:`.server_evidence`) and the server's log in ``sglang-dsv4
serve``'s log directory (``--serve-logs``; the log whose last start serves the URL's port) never
decide: both can outlive their launch (an operator-set ``PROMETHEUS_MULTIPROC_DIR`` keeps every
launch's gauge files and SGLang aggregates them; serve appends restarts to one log). They are checked
against the launch the records report and what they show is noted: a gauge label set without the full
label set or of another launch is ignored, and so is a log that is not evidence of that launch
(:func:`sglang_dsv4_ext.serving.activation_check.check_server_log`: ended, another version, another
launch). A stock server therefore never passes, whatever is left in a metrics or log directory.

``on`` refuses a server that is not active, and servers that disagree on ``index_k_dtype``;
``off`` (a stock baseline) refuses an active one; ``any`` records only.
"""

from __future__ import annotations

import glob
import os
import shlex
from collections.abc import Iterable
from typing import TypeGuard, cast
from urllib.parse import urlsplit

from sglang_dsv4_ext.errors import ActivationError, ServerActivationError
from sglang_dsv4_ext.plugin import launch_identity
from sglang_dsv4_ext.plugin.activation import EVIDENCE_FIELDS
from sglang_dsv4_ext.repro import server_info
from sglang_dsv4_ext.repro.server_evidence import EXTENSION_GAUGE
from sglang_dsv4_ext.serving import activation_check

EXPECT_CHOICES = ("on", "off", "any")
ACTIVE, INACTIVE, UNKNOWN = "active", "inactive", "unknown"
_SUPERVISOR_LOG = "serve.log"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SHOWN_FIELDS = ("index_k_dtype", "gate", "fp4_budget", "integrity", "version", "launch")
_SOURCE = "server_info"


# One set of the activation gauge's labels (a /metrics sample, or a scheduler's record): field -> value.
LabelSet = dict[str, str]


def _label_sets(state: dict[str, object]) -> list[LabelSet]:
    return cast(list[LabelSet], state["label_sets"])  # what _state puts there


def _state(url: str, state: str, found: str, labels=None, notes=None) -> dict[str, object]:
    return {
        "url": url,
        "state": state,
        "source": _SOURCE if state == ACTIVE else None,
        "found": found,
        "label_sets": labels or [],
        "notes": notes or [],
    }


# ----- a server's log in serve's log directory -------------------------------------------------
def _last_start_command(log_path: str) -> list[str]:
    """The argv of the last start recorded in one child's log ([] when none or unreadable)."""
    last = None
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                m = activation_check.START_HEADER.match(line.rstrip("\n"))
                last = m.group(2) if m else last
        return shlex.split(last) if last else []
    except (OSError, ValueError):
        return []


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def _url_port(url: str) -> int | None:
    parts = urlsplit(url)
    return parts.port or _DEFAULT_PORTS.get(parts.scheme)


def server_logs(log_dir: str, url: str) -> list[str]:
    """The logs in ``log_dir`` of SGLang servers started on ``url``'s port (routers left out).

    Several (one per node of a shared log directory): those whose ``--host`` is the URL's host.
    """
    port, host = str(_url_port(url)), urlsplit(url).hostname
    found = []
    for path in sorted(glob.glob(os.path.join(log_dir, "*.log"))):
        argv = _last_start_command(path) if os.path.basename(path) != _SUPERVISOR_LOG else []
        if argv and _flag_value(argv, "--port") == port and not any("sglang_router" in w for w in argv):
            found.append((path, _flag_value(argv, "--host")))
    same_host = [p for p, h in found if h == host]
    return same_host if len(found) > 1 and same_host else [p for p, _ in found]


def _log_note(url: str, log_dir: str | None, launch: str | None) -> str | None:
    """What the server's log says, as a note (it never decides)."""
    if not log_dir:
        return None
    logs = server_logs(log_dir, url)
    if len(logs) != 1:
        names = ", ".join(os.path.basename(p) for p in logs)
        return (
            f"several logs in {log_dir} serve its port: {names}"
            if logs
            else f"no log in {log_dir} starts a server on port {_url_port(url)}"
        )
    try:
        fields = activation_check.check_server_log(url, logs[0], {}, launch=launch)
    except ActivationError as exc:
        return f"its log is not evidence of the server answering now: {exc}"
    if launch is None:
        return (
            f"its log {logs[0]} shows activation in launch {fields['launch']}, but nothing ties that launch "
            "to the server answering now: ignored"
        )
    return f"its log {logs[0]} shows the same launch active"


# ----- the activation gauge on /metrics --------------------------------------------------------
def _gauge_note(entry: dict[str, object], launch: str | None) -> str | None:
    """What the gauge says, as a note: label sets of the live launch, of others, without every label."""
    label_sets = cast(list[LabelSet] | None, entry.get("extension"))  # server_evidence's snapshot entry
    if not label_sets:
        return None
    partial = [ls for ls in label_sets if not set(EVIDENCE_FIELDS) <= set(ls)]
    full = [ls for ls in label_sets if set(EVIDENCE_FIELDS) <= set(ls)]
    current = [ls for ls in full if launch is not None and launch_identity.same(ls["launch"], launch)]
    stale = sorted({ls["launch"] for ls in full} - {ls["launch"] for ls in current})
    notes = []
    if current:
        notes.append(f"{EXTENSION_GAUGE} shows this launch in {len(current)} process(es)")
    if stale:
        notes.append(
            f"ignored {EXTENSION_GAUGE} of launch {', '.join(stale)}, not of the server answering now "
            "(left in a shared PROMETHEUS_MULTIPROC_DIR?)"
        )
    if partial:
        notes.append(
            f"ignored {len(partial)} {EXTENSION_GAUGE} sample(s) without the labels "
            f"{', '.join(EVIDENCE_FIELDS)} (not this sglang-dsv4-ext's)"
        )
    return "; ".join(notes)


# ----- one server, all sources ----------------------------------------------------------------
def _complete(record: dict | None) -> TypeGuard[dict]:
    return (
        isinstance(record, dict)
        and record.get("active") is True
        and all(isinstance(record.get(f), str) for f in EVIDENCE_FIELDS)
    )


def _from_records(url: str, records: list[dict | None]) -> dict[str, object]:
    """The decision from the schedulers' records (one per DP rank)."""
    if all(r is None for r in records):
        return _state(
            url,
            INACTIVE,
            "its schedulers' /server_info has no sglang-dsv4-ext record (SGLANG_DSV4_EXT=0? "
            "SGLANG_PLUGINS without sglang_dsv4_ext? an sglang-dsv4-ext 0.3.0 or older, without records?)",
        )
    inactive = [(i, r) for i, r in enumerate(records) if r is None or r.get("active") is not True]
    if inactive:
        why = "; ".join(
            f"DP rank {i}: " + ("no record" if r is None else str(r.get("reason", "not active"))) for i, r in inactive
        )
        return _state(url, INACTIVE, f"not active in every scheduler: {why}")
    complete = [r for r in records if _complete(r)]
    if len(complete) != len(records):
        return _state(
            url, UNKNOWN, f"a scheduler's record lacks some of {', '.join(EVIDENCE_FIELDS)} (or one is not a string)"
        )
    launches = sorted({r["launch"] for r in complete})
    if len(launches) > 1:
        return _state(url, UNKNOWN, f"its schedulers report several launches: {', '.join(launches)}")
    labels = [{k: str(r[k]) for k in EVIDENCE_FIELDS} for r in complete]
    return _state(url, ACTIVE, f"every scheduler reports active in launch {launches[0]}", labels)


def server_state(
    entry: dict[str, object], log_dir: str | None, live: dict[str, object] | None = None
) -> dict[str, object]:
    """``{"url", "state", "source", "found", "label_sets", "notes"}`` of one server (see the module doc).

    ``entry``: its /metrics snapshot entry; ``live``: its /server_info (read now when not given).
    """
    url = str(entry["url"])
    live = server_info.read(url) if live is None else live
    if "error" in live:
        decided = _state(
            url,
            UNKNOWN,
            f"its /server_info could not be read ({live['error']}): nothing shows the "
            "state of the server answering now",
        )
    else:
        decided = _from_records(url, cast(list[dict | None], live["records"]))  # server_info.parse's list
    launch = _label_sets(decided)[0]["launch"] if decided["state"] == ACTIVE else None
    decided["notes"] = [n for n in (_gauge_note(entry, launch), _log_note(url, log_dir, launch)) if n]
    return decided


def live_launch(state: dict[str, object]) -> str | None:
    """The launch an active server's records report (None: not active, so no launch's counters are its own)."""
    return _label_sets(state)[0]["launch"] if state["state"] == ACTIVE else None


def server_states(snapshot: list[dict[str, object]], log_dir: str | None) -> list[dict[str, object]]:
    return [server_state(entry, log_dir) for entry in snapshot]


def describe(state: dict[str, object]) -> str:
    """One line for tables: the state, the configuration it reports and where it was read (notes left out)."""
    if state["state"] != ACTIVE:
        return f"{state['state']}: {state['found']}"
    fields = [f"{k}={'/'.join(_values(state, k))}" for k in _SHOWN_FIELDS if _values(state, k)]
    return f"active {' '.join(fields)} ({state['source']})"


def _values(state: dict[str, object], key: str) -> list[str]:
    return sorted({ls[key] for ls in _label_sets(state) if key in ls})


# ----- the decision --------------------------------------------------------------------------
_FIX_UNKNOWN = (
    "to show it, make each server's /server_info readable from here (SGLang serves it with or without "
    "--enable-metrics; the schedulers answer it with their own activation record), naming each "
    "prefill/decode server with --server-metrics URL[,URL...] (a router has no such record); "
    "{gauge} and --serve-logs cannot show it alone (they may be left over from another launch)"
)
_FIX_INACTIVE = (
    "where it is not active, restart the server with the extension loaded (SGLANG_PLUGINS naming "
    "sglang_dsv4_ext or unset, SGLANG_DSV4_EXT not 0; `sglang-dsv4 doctor` on its node says why), or "
    "pass --expect-extension off for a stock baseline"
)
_FIX_ANY = "to run anyway and only record the state, pass --expect-extension any"


def _refuse_inactive(states: list[dict[str, object]]) -> str | None:
    missing = [s for s in states if s["state"] != ACTIVE]
    if not missing:
        return None
    found = "; ".join(
        f"{s['url']}: {s['found']}" + "".join(f" ({n})" for n in cast(Iterable[str], s.get("notes", ())))
        for s in missing
    )
    fixes = [_FIX_UNKNOWN.format(gauge=EXTENSION_GAUGE)] if any(s["state"] == UNKNOWN for s in missing) else []
    fixes += [_FIX_INACTIVE] if any(s["state"] == INACTIVE for s in missing) else []
    return (
        f"--expect-extension on: sglang-dsv4-ext is not shown active on every server, so the run would not "
        f"measure the extension. {found}. Fix: {'; '.join(fixes + [_FIX_ANY])}."
    )


def _refuse_mixed_dtypes(states: list[dict[str, object]]) -> str | None:
    dtypes = {s["url"]: _values(s, "index_k_dtype") for s in states}
    if len({d for values in dtypes.values() for d in values}) <= 1:
        return None
    found = ", ".join(f"{url}: {'/'.join(v) or '?'}" for url, v in dtypes.items())
    return (
        f"--expect-extension on: the servers disagree on index_k_dtype ({found}); prefill and decode must use "
        "the same index-K dtype or PD transfers are corrupted without an error. Fix: start every server with "
        "the same SGLANG_DSV4_INDEX_K_DTYPE (`sglang-dsv4 serve` does so for a whole stack), or pass "
        "--expect-extension any to only record the state."
    )


def _refuse_active(states: list[dict[str, object]]) -> str | None:
    active = [s for s in states if s["state"] == ACTIVE]
    if not active:
        return None
    found = "; ".join(f"{s['url']}: {describe(s)}" for s in active)
    return (
        f"--expect-extension off (a stock baseline): sglang-dsv4-ext is active on {found}. Fix: restart it "
        "with SGLANG_DSV4_EXT=0, point the run at the stock stack, or pass --expect-extension on (or any)."
    )


def refusal(states: list[dict[str, object]], expect: str) -> str | None:
    """Why the run must not start with ``--expect-extension expect``, or None."""
    if expect == "on":
        return _refuse_inactive(states) or _refuse_mixed_dtypes(states)
    if expect == "off":
        return _refuse_active(states)
    return None


def check(states: list[dict[str, object]], expect: str) -> None:
    """Raise :class:`ServerActivationError` (one paragraph) when the run must not start."""
    reason = refusal(states, expect)
    if reason:
        raise ServerActivationError(f"refused before sending any request: {reason}")
