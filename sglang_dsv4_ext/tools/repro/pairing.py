"""What makes two runs a paired comparison, and what a comparison must say about its runs.

A pair is one request key (level, session, round, step) present in both runs with the same
prompt hash. That alone pairs runs of different shape: a run of 2 sessions shares its prompts
with the first 2 sessions of a run of 8, and level 0 of ``--concurrency 8`` has the prompts of
level 0 of ``--concurrency 80``. So the runs' settings that decide the workload or its verdicts
(:data:`settings.SHAPE_SETTINGS`, read from each ``summary.json``'s ``config``) must match too,
and so must the concurrency each paired request ran at (read from the records, which a run
killed before its summary still has). A run compared with itself (the same directory, the same
``run_id``, or a copy: every paired request started at the same moment with the same latency)
shows no difference whatever the stacks do, and is refused. A run that did not finish is
compared on what it recorded, and every output says so.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import cast

from sglang_dsv4_ext.config import IndexKDtype
from sglang_dsv4_ext.errors import PairingError
from sglang_dsv4_ext.tools import exit_codes
from sglang_dsv4_ext.tools.repro import rundir
from sglang_dsv4_ext.tools.repro.settings import SHAPE_SETTINGS

ALLOW_FLAG = "--allow-different-settings"
NOT_COMPARABLE_FLAG = "--fail-if-not-comparable"


@dataclass
class LoadedRun:
    path: str
    summary: dict  # {} when the run wrote none
    records: dict[str, dict]


def load(run_dir: str, check: rundir.RecordCheck | None = None) -> LoadedRun:
    """A run directory's records (a bad line, or one ``check`` refuses, is refused naming FILE:LINE) and summary."""
    summary = rundir.load_summary(run_dir, required=False)
    _, records = rundir.load_run_records(run_dir, summary, check)
    return LoadedRun(run_dir, summary, records)


# ----- a run compared with itself --------------------------------------------------------------
def _same_request(x: dict, y: dict) -> bool:
    return x.get("started_at") == y.get("started_at") and x.get("latency_s") == y.get("latency_s")


def same_run(a: LoadedRun, b: LoadedRun) -> str:
    """Why A and B are one run ("" when they are two)."""
    if os.path.realpath(a.path) == os.path.realpath(b.path):
        return f"A and B are the same directory ({a.path})"
    run_id = a.summary.get("run_id")
    if run_id and run_id == b.summary.get("run_id"):
        return f"A and B are the same run (run_id {run_id}): one directory is a copy of the other"
    common = sorted(a.records.keys() & b.records.keys())
    stamped = [k for k in common if a.records[k].get("started_at") is not None]
    if stamped and len(stamped) == len(common) and all(_same_request(a.records[k], b.records[k]) for k in common):
        return (
            f"A and B hold the same requests (all {len(common)} paired requests started at the same moment "
            "with the same latency): one directory is a copy of the other"
        )
    return ""


def refuse_same_run(a: LoadedRun, b: LoadedRun) -> None:
    why = same_run(a, b)
    if why:
        raise PairingError(
            f"{why}; a run compared with itself shows no difference whatever the stacks do. Compare two runs"
        )


# ----- the settings that make two runs comparable ----------------------------------------------
def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True)


def _show(setting, value) -> str:
    if setting.switch is not None:  # the flag as the operator typed it (or not)
        return "given" if value != setting.default else "not given"
    if value is None:
        return "unset"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return json.dumps(value) if isinstance(value, (dict, str)) else str(value)


def _config_differences(a: LoadedRun, b: LoadedRun) -> tuple[dict[str, str], list[str]]:
    recorded = {side: run.summary.get("config") for side, run in (("A", a), ("B", b))}
    lacking = [side for side, cfg in recorded.items() if not isinstance(cfg, dict)]
    if lacking:
        return {}, [f"{side}'s summary.json records no settings" for side in lacking]
    configs = cast(dict[str, dict], recorded)  # both are dicts (checked above)
    differ, unrecorded = {}, []
    for s in SHAPE_SETTINGS:
        if s.name not in configs["A"] or s.name not in configs["B"]:
            unrecorded.append(s.flag)
        elif _canonical(configs["A"][s.name]) != _canonical(configs["B"][s.name]):
            differ[s.flag] = f"A {_show(s, configs['A'][s.name])}, B {_show(s, configs['B'][s.name])}"
    notes = [f"{', '.join(unrecorded)} not recorded in both summaries"] if unrecorded else []
    return differ, notes


def _concurrency_difference(a: LoadedRun, b: LoadedRun) -> str:
    common = sorted(a.records.keys() & b.records.keys())
    other = [k for k in common if a.records[k].get("concurrency") != b.records[k].get("concurrency")]
    if not other:
        return ""
    k = other[0]
    return (
        f"{len(other)} of {len(common)} paired requests ran at another concurrency "
        f"(first {k}: A {a.records[k].get('concurrency')}, B {b.records[k].get('concurrency')})"
    )


def setting_differences(a: LoadedRun, b: LoadedRun) -> tuple[dict[str, str], list[str]]:
    """({flag: "A x, B y"} for each setting that differs, [what could not be checked])."""
    differ, unchecked = _config_differences(a, b)
    if "--concurrency" not in differ:
        per_record = _concurrency_difference(a, b)
        if per_record:
            differ["--concurrency"] = per_record
    return differ, unchecked


def refuse_different_settings(differ: dict[str, str]) -> None:
    if differ:
        listed = "; ".join(f"{flag}: {text}" for flag, text in differ.items())
        raise PairingError(
            f"the runs differ in settings that decide the workload or its verdicts ({listed}), so their shared "
            "requests are not a paired comparison. Re-run B with A's re-run command (summary.json rerun_command), "
            f"or pass {ALLOW_FLAG} to compare the shared requests anyway (the output then says so at the top)"
        )


# ----- a run that did not finish ---------------------------------------------------------------
def incomplete(summary: dict) -> str:
    """How a run did not finish ("" when it did)."""
    if not summary:
        return "no summary.json (killed before writing it?): cannot tell how many requests were planned"
    if not isinstance(summary.get("requests_planned"), int):
        return "its summary.json has no request counts: cannot tell whether it finished"
    counts = (
        f"{summary.get('requests_done')} of {summary['requests_planned']} requests run, "
        f"{summary.get('not_run')} not run"
    )
    if summary.get("interrupted"):
        return f"interrupted by {summary.get('interrupted_by') or 'a signal'}: {counts}"
    if summary.get("stopped_by_time_limit"):
        return f"stopped at its time limit: {counts}"
    if summary.get("aborted_by"):
        return f"aborted by {summary['aborted_by']}: {counts}"
    if summary.get("not_run"):
        return f"incomplete: {counts}"
    return ""


def _servers(summary: dict) -> list[dict] | None:
    """The run's per-server record (``summary["servers"]``; None for a summary of an earlier release)."""
    servers = summary.get("servers")
    if isinstance(servers, list) and all(isinstance(x, dict) and "url" in x for x in servers):
        return servers
    return None


def side(run: LoadedRun) -> dict:
    """What a comparison records about one of its runs."""
    s = run.summary
    return {
        "run": run.path,
        "label": s.get("label"),
        "server_info": s.get("server_info"),
        "run_id": s.get("run_id"),
        "requests": len(run.records),
        "requests_planned": s.get("requests_planned"),
        "incomplete": incomplete(s),
        "servers": _servers(s),
    }


# ----- what the two sides ran ------------------------------------------------------------------
def _values(servers: list[dict], pick) -> set[str]:
    return {str(v) for v in (pick(x) for x in servers) if v is not None}


def _built_dtypes(servers: list[dict]) -> set[str] | None:
    """The built index-K dtypes of a side's servers; None when one server's is not known."""
    found: set[str] = set()
    for x in servers:
        # A stock server reports nothing: "stock" (SGLang's fp8, or fp4 under its fp4-indexer flag) differs from bf16
        built = (x.get("index_k") or {}).get("built") if x.get("state") == "active" else ["stock"]
        if x.get("state") not in ("active", "inactive") or built is None:
            return None
        # one process that built pools of several dtypes reports "mixed:<a>,<b>" (runtime/activation.py): both count
        found |= {d for entry in built for d in str(entry).removeprefix("mixed:").split(",")}
    return found


def side_lines(result: dict) -> list[str]:
    """The first lines of every comparison: what each side's servers recorded."""
    from sglang_dsv4_ext.tools.repro.extension_check import server_lines

    lines = []
    for name in ("a", "b"):
        info = result.get(name) or {}
        label = info.get("label") or name.upper()
        lines += [f"{name.upper()} ({label}): {line}" for line in server_lines(info.get("servers"))]
    return lines


def _side_problems(name: str, servers: list[dict] | None) -> list[str]:
    if servers is None:
        return [f"{name}'s summary records no servers' state: what {name} ran is unknown"]
    if not servers:
        return [f"{name}'s summary records an empty list of servers: nothing shows what {name} ran"]
    problems = [f"{name}: {x['url']} {x['restarted']}" for x in servers if x.get("restarted")]
    # An active server names its launch and process, so "cannot tell" means the read after the run failed.
    problems += [
        f"{name}: {x['url']} {x['restart_check']}"
        for x in servers
        if x.get("restart_check") and x.get("state") == "active" and not x.get("restarted")
    ]
    problems += [f"{name}: {x['url']} extension state {x.get('state')}" for x in servers if x.get("state") == "unknown"]
    problems += _short_ranks(name, servers)
    if any(x.get("state") == "unknown" for x in servers):
        return problems
    from sglang_dsv4_ext.runtime.record_names import NONE_BUILT

    built = _built_dtypes(servers)
    if built is None or NONE_BUILT in built:
        problems.append(f"{name}: the index-K dtype built is not reported (configured only, or none built)")
    elif len(built) > 1:
        problems.append(
            f"{name}: its servers or ranks report different index-K pools ({'/'.join(sorted(built))}): "
            f"{name} ran a mix, not one stack"
        )
    return problems


def _short_ranks(name: str, servers: list[dict]) -> list[str]:
    """Servers recorded (``--expect-extension any``) with fewer active ranks than ranks: stock pools on the rest."""
    short = []
    for x in servers:
        ranks = x.get("ranks")
        counted = (ranks.get("short") or []) if isinstance(ranks, dict) else []
        short += [f"{x['url']} active on {c.get('active')} of {c.get('total')} ranks" for c in counted]
    if not short:
        return []
    return [f"{name}: {'; '.join(short)}: the ranks without the extension built stock pools, so {name} ran a mix"]


# Words of a --label that name what a side ran; "stock" is SGLang's own pool (fp8, or fp4 under its flag).
_LABEL_WORDS = (*IndexKDtype.values(), "stock")


def _label_claims(label: str | None) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", (label or "").lower())) & set(_LABEL_WORDS)


def _label_problem(name: str, label: str | None, servers: list[dict] | None) -> list[str]:
    """A label that names another stack than the side's records report (a swapped or stale --label)."""
    claims, built = _label_claims(label), _built_dtypes(servers) if servers else None
    if not claims or not built:
        return []
    stock = built == {"stock"}
    contradicted = [
        c
        for c in sorted(claims)
        if (c == "stock" and not stock)
        or (c == IndexKDtype.BF16 and stock)
        or (c != "stock" and not stock and c not in built)
    ]
    if not contradicted:
        return []
    ran = "stock SGLang (no extension record)" if stock else f"index-K {'/'.join(sorted(built))}"
    return [
        f"{name} is labelled {label!r}, but its servers report {ran}: "
        "the label names another stack (swapped or stale --label?)"
    ]


def evidence_problems(result: dict) -> list[str]:
    """Why the evidence does not show that the A/B compared what it was asked ([] when it does)."""
    a, b = ((result.get(n) or {}).get("servers") for n in ("a", "b"))
    problems = _side_problems("A", a) + _side_problems("B", b)
    for n in ("a", "b"):
        problems += _label_problem(n.upper(), (result.get(n) or {}).get("label"), (result.get(n) or {}).get("servers"))
    problems += _transport_problem(result)
    if not a or not b:
        return problems
    dtypes = (_built_dtypes(a), _built_dtypes(b))
    if dtypes[0] is not None and dtypes[0] == dtypes[1]:
        problems.append(
            f"both sides report the same index-K dtype ({'/'.join(sorted(dtypes[0]))}): the A/B does not compare dtypes"
        )
    problems += _parsing_problem(a, b)
    return problems


def _transport_problem(result: dict) -> list[str]:
    """One side failing in transport (aborted, cut, HTTP errors) far more often: its corruption is not seen."""
    t, alpha = result.get("transport"), result.get("alpha", 0.05)
    if not t or t["p_value"] >= alpha:
        return []
    worse, more, fewer = (
        ("A", t["a_only"], t["b_only"]) if t["a_only"] > t["b_only"] else ("B", t["b_only"], t["a_only"])
    )
    return [
        f"{worse} fails in transport (aborted, cut, HTTP error, timeout) far more often ({more} pairs against {fewer}, "
        f"p={t['p_value']:.3g} < {alpha}): the corruption verdict covers only the requests both sides answered, "
        f"and {worse}'s failures may hide its corruption"
    ]


def _parsing_problem(a: list[dict], b: list[dict]) -> list[str]:
    paths = [_values(x, lambda s: (s.get("parsing") or {}).get("path")) or {"cannot tell"} for x in (a, b)]
    if paths[0] == paths[1] and len(paths[0]) == 1 and "cannot tell" not in paths[0]:
        return []
    shown = f"A {'/'.join(sorted(paths[0]))}, B {'/'.join(sorted(paths[1]))}"
    if "cannot tell" in paths[0] | paths[1]:
        return [f"cannot tell that the sides parse through one path ({shown})"]
    return [f"the sides parse through different paths ({shown}): a difference may be the parser, not the index-K dtype"]


def warnings(result: dict) -> list[str]:
    """The lines every output of a comparison shows first (terminal and report page alike)."""
    lines = [
        f"not comparable as asked ({NOT_COMPARABLE_FLAG} exits {exit_codes.NOT_COMPARABLE}): {p}"
        for p in result.get("evidence_problems") or []
    ]
    if result.get("settings_differ"):
        listed = "; ".join(f"{flag}: {text}" for flag, text in result["settings_differ"].items())
        lines.append(
            f"the runs differ in settings that decide the workload or its verdicts ({listed}); "
            f"compared anyway ({ALLOW_FLAG}): a difference may be the settings, not the stacks"
        )
    for note in result.get("settings_unchecked") or []:
        lines.append(
            f"cannot check that the runs had the same settings: {note}; "
            "pairs are checked on prompt hash and concurrency only"
        )
    for name in ("a", "b"):
        info = result.get(name) or {}
        if info.get("incomplete"):
            lines.append(
                f"{name.upper()} ({info['run']}) did not finish: {info['incomplete']}; "
                "only its recorded requests are paired"
            )
    return lines
