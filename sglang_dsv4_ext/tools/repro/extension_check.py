"""Is sglang-dsv4-ext active on every server a run reads? Decided before the first request.

Why: a run against a stack where the extension silently did not load (``SGLANG_PLUGINS`` without
it, ``SGLANG_DSV4_EXT=0`` left over, another interpreter) measures stock SGLang under the
extension's name; a PD pair whose prefill and decode disagree on the index-K dtype corrupts
transfers without any error. Neither shows in the harness's verdicts, so ``repro run`` checks each
named server first (``--expect-extension``) and records what it found in the summary either way.

How, per server. Only evidence of the server answering now decides: its schedulers' records in
``/server_info`` (:mod:`.server_info`), which each scheduler computes from its own state when asked.
Active: every DP rank's scheduler reports active, with every field of
:data:`sglang_dsv4_ext.runtime.activation.EVIDENCE_FIELDS`, in one launch. Inactive: a rank has no record (a
stock scheduler has none) or reports not active. Unknown: ``/server_info`` cannot be read, or the
records are incomplete or of several launches.

The activation gauge on ``/metrics`` (:mod:`.server_evidence`) and the server's log in ``sglang-dsv4
serve``'s log directory (``--serve-logs``; the log whose last start serves the URL's port) never
decide: both can outlive their launch (an operator-set ``PROMETHEUS_MULTIPROC_DIR`` keeps every
launch's gauge files and SGLang aggregates them; serve appends restarts to one log). They are checked
against the launch the records report and what they show is noted: a gauge label set without the full
label set or of another launch is ignored, and so is a log that is not evidence of that launch
(:func:`sglang_dsv4_ext.tools.serving.activation_check.check_server_log`: ended, another version, another
launch). A stock server therefore never passes, whatever is left in a metrics or log directory.

``on`` refuses a server that is not active, a record that counts fewer active ranks than ranks
(``ranks``), and servers that disagree on ``index_k_dtype``; ``off`` (a stock baseline) refuses an active
one; ``any`` records only. Whatever ``--expect-extension`` says, one server named twice (two spellings of
its address, or two URLs whose records are of the same launch and process) is refused, and
``--expect-index-k-dtype`` refuses a server whose records do not report that dtype as built.

What a record reports beside its state (:func:`evidence`): the index-K dtype of the c4 indexer pool its
process built (``index_k_dtype``, ``none-built`` before any; a record without ``index_k_dtype_requested``
is of a release that reported the configured value there: "configured, not built"), its ranks
(``{"active", "total", "group"}``, absent where not counted), the SGLang release and the path that release
renders and parses DeepSeek-V4 through (:func:`parsing_path`).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
from collections.abc import Iterable
from typing import TypeGuard, cast
from urllib.parse import urlsplit

from sglang_dsv4_ext.errors import ActivationError, ServerActivationError
from sglang_dsv4_ext.runtime import launch_identity
from sglang_dsv4_ext.runtime.activation import EVIDENCE_FIELDS, REQUESTED_DTYPE_FIELD
from sglang_dsv4_ext.runtime.record_names import NONE_BUILT
from sglang_dsv4_ext.tools.repro import server_info
from sglang_dsv4_ext.tools.repro.server_evidence import EXTENSION_GAUGE
from sglang_dsv4_ext.tools.serving import activation_check

# What every record of a server with the extension active carries, from this version and earlier ones: an earlier
# record has no index_k_dtype_requested (its index_k_dtype is the configuration's), and reads as "configured, not
# built" (_index_k, index_k_text), never as unknown.
RECORD_FIELDS = tuple(f for f in EVIDENCE_FIELDS if f != REQUESTED_DTYPE_FIELD)
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
        and all(isinstance(record.get(f), str) for f in RECORD_FIELDS)
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
            url, UNKNOWN, f"a scheduler's record lacks some of {', '.join(RECORD_FIELDS)} (or one is not a string)"
        )
    launches = sorted({r["launch"] for r in complete})
    if len(launches) > 1:
        return _state(url, UNKNOWN, f"its schedulers report several launches: {', '.join(launches)}")
    labels = [{k: str(r[k]) for k in EVIDENCE_FIELDS if k in r} for r in complete]
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
    decided["evidence"] = evidence(live)
    return decided


def live_launch(state: dict[str, object]) -> str | None:
    """The launch an active server's records report (None: not active, so no launch's counters are its own)."""
    return _label_sets(state)[0]["launch"] if state["state"] == ACTIVE else None


def server_states(snapshot: list[dict[str, object]], log_dir: str | None) -> list[dict[str, object]]:
    return [server_state(entry, log_dir) for entry in snapshot]


# ----- what the records report beside the state ------------------------------------------------
RECIPE, DETECTORS, CANNOT_TELL = "deepseek-recipe", "sglang-detectors", "cannot tell"
_DSV4_PARSERS = ("deepseekv4", "deepseekv41")
_RECIPE_SINCE = (0, 5, 23)


def _records_of(live: dict[str, object]) -> list[dict]:
    return [r for r in cast(list, live.get("records") or []) if isinstance(r, dict)]


def _index_k(records: list[dict]) -> dict[str, object]:
    """``{"built": [dtypes] or None, "requested"/"configured": [dtypes]}`` over a server's records."""
    if not records:
        return {"built": None, "configured": []}
    if all("index_k_dtype_requested" in r for r in records):
        return {
            "built": sorted({str(r.get("index_k_dtype")) for r in records}),
            "requested": sorted({str(r.get("index_k_dtype_requested")) for r in records}),
        }
    return {"built": None, "configured": sorted({str(r.get("index_k_dtype")) for r in records if "index_k_dtype" in r})}


def index_k_text(index_k: dict | None) -> str:
    """One phrase: the built dtype, or why it is not known."""
    if not index_k:
        return "index-K dtype not recorded"
    if index_k.get("built") is None:
        configured = "/".join(index_k.get("configured") or []) or "?"
        return f"index-K {configured} configured, not built (the record does not say which pool was built)"
    built = "/".join(index_k["built"])
    if built == NONE_BUILT:
        return f"index-K none built yet ({'/'.join(index_k.get('requested') or [])} requested)"
    return f"index-K {built} built"


def _ranks(records: list[dict]) -> dict[str, object] | None:
    """Summed over the records (one per DP group answering); None when a record does not count them."""
    counted = [r.get("ranks") for r in records]
    if not counted or not all(
        isinstance(c, dict) and isinstance(c.get("active"), int) and isinstance(c.get("total"), int) for c in counted
    ):
        return None
    groups = sorted({str(c["group"]) for c in cast(list[dict], counted) if c.get("group")})
    return {
        "active": sum(int(c["active"]) for c in cast(list[dict], counted)),
        "total": sum(int(c["total"]) for c in cast(list[dict], counted)),
        "group": ",".join(groups),
        "short": [c for c in cast(list[dict], counted) if c["active"] < c["total"]],
    }


def ranks_text(ranks: dict | None) -> str:
    if not ranks:
        return "ranks not counted"
    return _rank_count_text(ranks)


def _rank_count_text(count: dict) -> str:
    """``active on A of T ranks (group)``; the group left out where the record names none (a rank count without one)."""
    group = f" ({count['group']})" if count.get("group") else ""
    return f"active on {count['active']} of {count['total']} ranks{group}"


def _version_tuple(version: str) -> tuple[int, ...] | None:
    m = re.match(r"^\s*v?(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in m.groups()) if m else None


def parsing_path(version: str | None, tool_call_parser: str | None) -> dict[str, str]:
    """``{"path", "why"}``: how this SGLang renders DeepSeek-V4 prompts and parses DSML/think output.

    Both releases choose the DeepSeek-V4 encoding in ``chat_encoding.resolve_chat_encoding_spec`` (the
    ``deepseekv4``/``deepseekv41`` tool-call parser, else the checkpoint's architecture); 0.5.23 serves it
    through DeepSeek's ``deepseek-recipe`` package at token level (``serving_deepseek_recipe.py``), 0.5.22
    through SGLang's own ``encoding_dsv4.py`` and Python detectors (``function_call/deepseekv4_detector.py``).
    """
    release = _version_tuple(version) if version else None
    if release is None:
        return {"path": CANNOT_TELL, "why": f"SGLang version {version!r} not a release number"}
    if tool_call_parser not in _DSV4_PARSERS:
        return {
            "path": CANNOT_TELL,
            "why": f"tool_call_parser {tool_call_parser!r}: SGLang then picks the encoding by the checkpoint's "
            "architecture, which /server_info does not report",
        }
    if release >= _RECIPE_SINCE:
        return {"path": RECIPE, "why": f"SGLang {version} with {tool_call_parser}: deepseek-recipe, token level"}
    return {"path": DETECTORS, "why": f"SGLang {version} with {tool_call_parser}: SGLang's Python detectors"}


def evidence(live: dict[str, object]) -> dict[str, object]:
    """What one server's live ``/server_info`` reports beside the state (see the module doc); {} unread."""
    if "error" in live:
        return {}
    records = _records_of(live)
    versions = sorted({str(r["sglang"]) for r in records if isinstance(r.get("sglang"), str)})
    version = versions[0] if len(versions) == 1 else cast(str | None, live.get("version"))
    return {
        "identities": sorted(server_info.identities(records)),
        "startup_time": live.get("startup_time"),
        "index_k": _index_k(records),
        "ranks": _ranks(records),
        "sglang": version,
        "parsing": parsing_path(version, cast(str | None, live.get("tool_call_parser"))),
    }


def describe(state: dict[str, object]) -> str:
    """One line for tables: the state, the configuration it reports and where it was read (notes left out)."""
    if state["state"] != ACTIVE:
        return f"{state['state']}: {state['found']}"
    fields = [f"{k}={'/'.join(_values(state, k))}" for k in _SHOWN_FIELDS if _values(state, k)]
    found = cast(dict, state.get("evidence") or {})
    extra = f"; {index_k_text(found.get('index_k'))}; {ranks_text(found.get('ranks'))}" if found else ""
    return f"active {' '.join(fields)} ({state['source']}){extra}"


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


def _refuse_missing_ranks(states: list[dict[str, object]]) -> str | None:
    short = [
        (s["url"], c)
        for s in states
        for c in cast(dict, (cast(dict, s.get("evidence") or {}).get("ranks") or {})).get("short", [])
    ]
    if not short:
        return None
    found = "; ".join(f"{url}: {_rank_count_text(c)}" for url, c in short)
    return (
        f"--expect-extension on: the extension is not active on every rank ({found}): a rank without it builds "
        "stock pools and the run would measure a mix. Fix: start every node of the server with the extension "
        "(`sglang-dsv4 doctor` on each node says why it did not load), or pass --expect-extension any to only "
        "record the state."
    )


def _server_dtype_refusal(state: dict[str, object], wanted: str) -> str | None:
    index_k = cast(dict, (cast(dict, state.get("evidence") or {})).get("index_k") or {})
    if state["state"] != ACTIVE:
        return f"{state['url']}: not shown active ({state['state']}), so no built index-K dtype is reported"
    if index_k.get("built") is None:
        return f"{state['url']}: {index_k_text(index_k)}: cannot tell which dtype it runs"
    if index_k["built"] != [wanted]:
        return f"{state['url']}: {index_k_text(index_k)}"
    return None


def _refuse_other_dtype(states: list[dict[str, object]], wanted: str | None) -> str | None:
    if wanted is None:
        return None
    found = [why for why in (_server_dtype_refusal(s, wanted) for s in states) if why]
    if not found:
        return None
    return (
        f"--expect-index-k-dtype {wanted}: not every server reports a {wanted} index-K pool built "
        f"({'; '.join(found)}). Fix: point the run at the {wanted} stack (SGLANG_DSV4_INDEX_K_DTYPE={wanted}; "
        "SGLang's --enable-deepseek-v4-fp4-indexer builds fp4), or ask for the dtype it runs."
    )


def refuse_one_server_twice(states: list[dict[str, object]], what: str = "--server-metrics") -> str | None:
    """Two states that are one server: the same address key, or records of the same launch and process."""
    seen: dict[str, str] = {}
    for s in states:
        url = str(s["url"])
        keys = [server_info.address_key(url)] + list(cast(dict, s.get("evidence") or {}).get("identities") or [])
        for key in keys:
            if key in seen and seen[key] != url:
                how = "its address" if key.startswith(("http", "https")) else f"launch/process {key}"
                return (
                    f"{what}: {seen[key]} and {url} are one server ({how}); each server has one row of evidence "
                    "and one server compared with itself shows no difference. Name each server once"
                )
            seen.setdefault(key, url)
    return None


def refusal(states: list[dict[str, object]], expect: str, expect_dtype: str | None = None) -> str | None:
    """Why the run must not start with ``--expect-extension expect``, or None."""
    first = refuse_one_server_twice(states) or _refuse_other_dtype(states, expect_dtype)
    if first:
        return first
    if expect == "on":
        return _refuse_inactive(states) or _refuse_missing_ranks(states) or _refuse_mixed_dtypes(states)
    if expect == "off":
        return _refuse_active(states)
    return None


def refuse_unrecorded(states: list[dict[str, object]]) -> str | None:
    """For an A/B: every server's records must have been read, whatever ``--expect-extension`` says."""
    unread = [s for s in states if s["state"] == UNKNOWN]
    if not unread:
        return None
    found = "; ".join(f"{s['url']}: {s['found']}" for s in unread)
    return (
        f"an A/B needs every server's record, and these could not be read ({found}): a side whose state is "
        "not known could be running anything. Fix: name each side's prefill and decode servers with "
        "--server-metrics-a / --server-metrics-b URL[,URL...] (behind sglang-router, its GET /workers list is "
        "read when it serves one), each answering /server_info"
    )


def check(states: list[dict[str, object]], expect: str, expect_dtype: str | None = None) -> None:
    """Raise :class:`ServerActivationError` (one paragraph) when the run must not start."""
    reason = refusal(states, expect, expect_dtype)
    if reason:
        raise ServerActivationError(f"refused before sending any request: {reason}")


# ----- the same server after the run ---------------------------------------------------------
def restart_reason(before: dict[str, object], after: dict[str, object]) -> str | None:
    """Why the server answering after the run is not the one checked before it (None: the same, or cannot tell)."""
    found = cast(dict, before.get("evidence") or {})
    was = set(found.get("identities") or [])
    if "error" in after or (not was and before.get("state") == UNKNOWN):
        return None
    now = server_info.identities(_records_of(after))
    if now == was:
        return None if was else _startup_changed(found.get("startup_time"), after.get("startup_time"))
    if not was:  # read before as a stock server; records now: another launch (the extension loaded in it)
        return (
            f"its schedulers had no launch/process record before the run; after it they report {', '.join(sorted(now))}"
        )
    after_text = ", ".join(sorted(now)) or "none"
    return f"its schedulers' launch/process changed: before {', '.join(sorted(was))}; after {after_text}"


def _startup_changed(was, now) -> str | None:
    """A server without records (stock) restarted: SGLang's ``/server_info`` ``startup_time`` (the startup
    durations its tokenizer manager was given once, ``http_server.py``) is one launch's; other durations, another."""
    if was is None or now is None or was == now:
        return None
    return "its /server_info startup_time changed (SGLang's startup durations of another launch)"


def recheck_note(before: dict[str, object], after: dict[str, object]) -> str | None:
    """What could not be re-checked after the run (None when it was)."""
    if "error" in after:
        return f"cannot tell whether it restarted during the run: {after['error']} (read after the run)"
    if not cast(dict, before.get("evidence") or {}).get("identities"):
        return "cannot tell whether it restarted during the run: its records name no launch and process"
    return None


# ----- what a run records per server, and its lines -------------------------------------------
def servers_recorded(states: list[dict] | None, rows: list[dict] | None) -> list[dict] | None:
    """Per server, what a comparison reads: state, built index-K dtype, ranks, SGLang and parsing path,
    and whether it restarted during the run (from the re-read after it)."""
    if states is None:
        return None
    by_url = {str(r.get("url")): r for r in rows or []}
    out = []
    for state in states:
        found = state.get("evidence") or {}
        row = by_url.get(str(state["url"]), {})
        out.append(
            {
                "url": state["url"],
                "state": state["state"],
                "index_k": found.get("index_k"),
                "ranks": found.get("ranks"),
                "sglang": found.get("sglang"),
                "parsing": found.get("parsing"),
                "restarted": row.get("restarted"),
                "restart_check": row.get("restart_check"),
            }
        )
    return out


def server_lines(servers: list[dict] | None) -> list[str]:
    """One line per server: its state, built index-K dtype, ranks, SGLang and parsing path, and "cannot tell
    whether it restarted" where the read after the run could not show it; restarts first."""
    if servers is None:
        return ["servers: not recorded (a summary of an earlier release): state, index-K dtype and parser unknown"]
    lines = [f"RESTARTED: {s['url']}: {s['restarted']}" for s in servers if s.get("restarted")]
    for s in servers:
        parsing = (s.get("parsing") or {}).get("path", CANNOT_TELL)
        index_k = (
            index_k_text(s.get("index_k")) if s.get("state") == ACTIVE else "index-K not reported (no active record)"
        )
        lines.append(
            f"server {s['url']}: extension {s.get('state', 'not recorded')}; {index_k}; "
            f"{ranks_text(s.get('ranks'))}; SGLang {s.get('sglang') or '?'}, parsing {parsing}"
            + (f"; {s['restart_check']}" if s.get("restart_check") and not s.get("restarted") else "")
        )
    return lines
