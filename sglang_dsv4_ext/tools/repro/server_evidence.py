"""Server-side evidence for a repro run: every server's Prometheus counters before and after.

The harness counts corrupted tool calls; the servers count what they saw meanwhile. Reading each
server's ``/metrics`` (SGLang's own exporter, ``--enable-metrics``) before and after a run and
printing the deltas next to the corruption rates settles "did the failures coincide with aborted
requests, PD transfer failures or timeouts, HiCache loads, integrity mismatches?" in one run.

Parsing uses ``prometheus_client``'s text parser (the library SGLang exports with). Counters are
summed over their label sets per server. A server that cannot be read is reported, not fatal: every
read is bounded as a whole (:mod:`.server_http`), and whatever goes wrong (refused, past the deadline,
a body cut short, not HTTP, not Prometheus text) makes that server's row "unavailable" with the reason,
never a lost summary. A counter that is not a finite number (Prometheus text may say ``NaN`` or
``+Inf``) has no delta: it is None, and the row's ``notes`` say what the server reported (the summary
stays strict JSON).

Each snapshot entry also carries the extension's activation gauge (:data:`EXTENSION_GAUGE`, set to 1
by every process whose DeepSeek-V4 pool was built with the extension's hooks verified): its label
sets (``version, sglang, index_k_dtype, gate, fp4_budget, integrity``) under ``"extension"``, or
None when the server does not export it; ``"sglang_metrics"`` says whether SGLang's own families
were there at all (metrics on), which tells "extension not active" from "nothing to read".

Integrity comes as three counts (pages checked, pages loaded but not checked, mismatches; the extension
exports them at 0 from pool creation): :func:`shown` never prints "0 mismatches" beside 0 checked pages.
:mod:`.extension_check` decides from that whether a run may start.

Call site for the runner (two lines)::

    before = server_evidence.snapshot(urls)          # before the first request
    ...run...
    summary["server_evidence"] = server_evidence.deltas(before, server_evidence.snapshot(urls))
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import cast

from sglang_dsv4_ext.tools.repro import server_http

# label shown in the summary -> SGLang 0.5.23 metric family (counter name without ``_total``)
EVIDENCE_METRICS = {
    "aborted_requests": "sglang:num_aborted_requests",
    "pd_transfer_failed": "sglang:num_transfer_failed_reqs",  # includes KV transfer timeouts
    "pd_bootstrap_failed": "sglang:num_bootstrap_failed_reqs",
    "hicache_load_back_tokens": "sglang:load_back_tokens",
    "hicache_backup_tokens": "sglang:hicache_backup_tokens",
    "integrity_checked": "sglang:dsv4_index_k_integrity_pages_checked",
    "integrity_not_checked": "sglang:dsv4_index_k_integrity_pages_unchecked",  # summed over its reasons
    "integrity_mismatches": "sglang:dsv4_index_k_integrity_mismatches",
}
RESTARTED = "restarted during the run: deltas not comparable"
# The integrity families carry a ``launch`` label: only the launch of the server answering now counts (see deltas).
INTEGRITY_FAMILIES = frozenset(f for label, f in EVIDENCE_METRICS.items() if label.startswith("integrity_"))
NOT_CHECKED = "not checked"  # shown instead of a mismatch count of 0 when no page was checked
# The extension's activation gauge (sglang_dsv4_ext/runtime/activation.py): value 1, one label set per process.
EXTENSION_GAUGE = "sglang:dsv4_ext_active"
_SGLANG_PREFIX = "sglang:"


def _families(text: str) -> list:
    from prometheus_client.parser import text_string_to_metric_families

    return list(text_string_to_metric_families(text))


def _counters(families, by_launch: dict[str, dict[str, float]] | None = None) -> dict[str, float]:
    """Evidence families summed over their label sets; an integrity sample with a ``launch`` label goes to
    ``by_launch[launch]`` instead (when given), so that counters an earlier launch left are never counted."""
    wanted = set(EVIDENCE_METRICS.values())
    out: dict[str, float] = {}
    for family in families:
        for sample in family.samples:
            base = sample.name[: -len("_total")] if sample.name.endswith("_total") else None
            if base not in wanted:
                continue
            launch = sample.labels.get("launch")
            target = out if by_launch is None or base not in INTEGRITY_FAMILIES or launch is None else None
            if target is None:
                target = by_launch.setdefault(str(launch), {})  # type: ignore[union-attr]
            target[base] = target.get(base, 0.0) + float(sample.value)
    return out


def _extension_label_sets(families) -> list[dict[str, str]] | None:
    """Distinct label sets of the activation gauge at 1 (``[]``: exported but not 1; None: not exported)."""
    found: list[dict[str, str]] | None = None
    for family in families:
        for sample in family.samples:
            if sample.name != EXTENSION_GAUGE:
                continue
            found = [] if found is None else found
            if float(sample.value) > 0 and dict(sample.labels) not in found:
                found.append(dict(sample.labels))
    return found


def parse_counters(text: str) -> dict[str, float]:
    """``{family: value summed over label sets}`` for the evidence families present in ``text``."""
    return _counters(_families(text))


def parse_metrics(text: str) -> dict[str, object]:
    """``{"counters", "extension", "sglang_metrics"}`` of one server's Prometheus text (see the module doc)."""
    families = _families(text)
    by_launch: dict[str, dict[str, float]] = {}
    return {
        "counters": _counters(families, by_launch),
        "integrity_by_launch": by_launch,
        "extension": _extension_label_sets(families),
        "sglang_metrics": any(f.name.startswith(_SGLANG_PREFIX) for f in families),
    }


def read_metrics(url: str) -> dict[str, object]:
    """One server: ``{"url", "counters", "extension", "sglang_metrics"}`` or ``{"url", "error"}``
    (never raises for a server that cannot be read in time or a reply that is not Prometheus text)."""
    try:
        text = server_http.get_text(url, "/metrics")
    except server_http.ServerReadError as exc:
        return {"url": url, "error": str(exc)}
    try:
        parsed = parse_metrics(text)
    except (ValueError, TypeError, IndexError) as exc:  # prometheus_client's parser on non-Prometheus text
        return {"url": url, "error": f"{url.rstrip('/')}/metrics: not Prometheus text ({exc})"}
    return {"url": url, **parsed}


def snapshot(urls: Iterable[str]) -> list[dict[str, object]]:
    return [read_metrics(u) for u in urls]


def _delta(before: dict[str, float], after: dict[str, float], family: str) -> tuple[float | None, str]:
    """(increase, "") or (None, why there is none beyond "not exported")."""
    if family not in after:
        return None, ""  # the server does not export it (metrics off, feature off, older SGLang)
    read = (("before", before.get(family, 0.0)), ("after", after[family]))
    not_finite = [f"{when} {value}" for when, value in read if not math.isfinite(value)]
    if not_finite:
        return None, f"the server reported {' and '.join(not_finite)} (not a finite number: no delta)"
    return after[family] - before.get(family, 0.0), ""


def _unreadable(b: dict[str, object], a: dict[str, object]) -> str:
    for when, entry in (("before", b), ("after", a)):
        if entry.get("error"):
            return f"{entry['error']} (read {when} the run)"
    return ""


def _of_launch(entry: dict[str, object], launch: str | None) -> dict[str, float]:
    """``entry``'s counters with the integrity families of ``launch`` only (none when the launch is unknown)."""
    from sglang_dsv4_ext.runtime import launch_identity

    counters = dict(cast(dict[str, float], entry["counters"]))
    by_launch = cast(dict[str, dict[str, float]], entry.get("integrity_by_launch") or {})
    for label, values in by_launch.items():
        if launch is not None and launch_identity.same(label, launch):
            counters.update(values)
    return counters


def deltas(
    before: list[dict[str, object]], after: list[dict[str, object]], launches: list[str | None] | None = None
) -> list[dict[str, object]]:
    """Per server: each evidence label's increase during the run (None: not exported, or not a finite number,
    said in ``notes``; ``error``: unavailable, and why).

    ``launches``: per server, the launch its ``/server_info`` record reports (None: not active, or unknown).
    The integrity counts are those of that launch alone, so a stock server whose shared
    ``PROMETHEUS_MULTIPROC_DIR`` holds an earlier launch's counters reads n/a, never "checked 0". Without
    ``launches`` no integrity count carrying a launch label is used.
    """
    rows = []
    launches = launches if launches is not None else [None] * len(after)
    for b, a, launch in zip(before, after, launches):
        row: dict[str, object] = {"url": a["url"]}
        error = _unreadable(b, a)
        if error:
            row["error"] = error
            rows.append(row)
            continue
        notes = []
        counted = [_of_launch(entry, launch) for entry in (b, a)]  # readable: _unreadable says so
        for label, family in EVIDENCE_METRICS.items():
            row[label], why = _delta(counted[0], counted[1], family)
            notes += [f"{label}: {why}"] if why else []
        if notes:
            row["notes"] = "; ".join(notes)
        went_down = [
            f"{lbl} went down by {-cast(float, row[lbl]):g}" for lbl in EVIDENCE_METRICS if _negative(row.get(lbl))
        ]
        if went_down:  # counters only rise within one launch: from zero again means another launch
            mark_restarted(row, ", ".join(went_down))
        rows.append(row)
    return rows


def _negative(value) -> bool:
    return isinstance(value, (int, float)) and value < 0


def mark_restarted(row: dict[str, object], why: str) -> None:
    """The server restarted during the run: its deltas are of two launches, so none is shown."""
    for label in EVIDENCE_METRICS:
        row[label] = None
    earlier = str(row["restarted"]).removeprefix(RESTARTED + " (").removesuffix(")") if row.get("restarted") else ""
    row["restarted"] = f"{RESTARTED} ({'; '.join(w for w in (earlier, why) if w)})"


def shown(row: dict[str, object]) -> dict[str, object]:
    """``row`` as printed and on the report page: a mismatch count of 0 is shown only beside pages checked.

    0 mismatches over 0 checked pages is :data:`NOT_CHECKED`; beside a server (or an older summary) that
    does not say how many pages it checked, it is n/a (None): cannot tell. A count above 0 is always shown.
    """
    if "integrity_mismatches" not in row or row["integrity_mismatches"]:
        return row
    checked = row.get("integrity_checked")
    if checked is None:
        return {**row, "integrity_mismatches": None}
    return {**row, "integrity_mismatches": NOT_CHECKED} if checked == 0 else row


def _cell(value) -> str:
    if value is None:
        return "n/a"
    return value if isinstance(value, str) else f"{value:g}"


def format_table(rows: list[dict[str, object]]) -> str:
    labels = list(EVIDENCE_METRICS)
    lines = ["server".ljust(28) + "".join(lbl[:22].rjust(24) for lbl in labels)]
    for row in map(shown, rows):
        if "error" in row:
            lines.append(f"{row['url']:<28}  unavailable: {row['error']}")
            continue
        if row.get("restarted"):
            lines.append(f"{row['url']:<28}  RESTARTED: {row['restarted']}")
            continue
        cells = [_cell(row[lbl]) for lbl in labels]
        lines.append(f"{row['url']:<28}" + "".join(c.rjust(24) for c in cells))
        if row.get("notes"):
            lines.append(f"{'':<28}  n/a: {row['notes']}")
        if row.get("restart_check"):
            lines.append(f"{'':<28}  {row['restart_check']}")
    return "\n".join(lines)
