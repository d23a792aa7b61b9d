"""``sglang-dsv4 report RUN_DIR [RUN_DIR...] -o report.html``: one self-contained HTML page.

Per run: corruption rate per class with Wilson 95% intervals per concurrency level (inline SVG),
the latency distribution (inline SVG histogram), the server evidence deltas and each server's
extension state when the run recorded them (``summary.json`` key ``server_evidence``: one row per
server, see :mod:`sglang_dsv4_ext.tools.repro.server_evidence` and :mod:`sglang_dsv4_ext.tools.repro.extension_check`);
with two runs, the paired A/B comparison and its p-value (:mod:`sglang_dsv4_ext.tools.repro.compare`), its paired
and unpaired counts, and at the top of the page what the comparison must not hide (settings that differ, passed
with ``--allow-different-settings``; a run that did not finish). Two runs that are one run, or whose settings
differ without that flag, are refused like ``repro compare`` refuses them. A run that did not finish
(interrupted, stopped at its time limit, no summary) is marked in its own section too.
No scripts, no network: the page opens offline in any browser.

Bad input (exit 2, one line naming it, nothing written): a record field the page needs that is wrong
(``FILE:LINE: concurrency: ...``, ``latency_s`` not a finite number of seconds >= 0), a summary's
``server_evidence`` that is not a list of servers, an ``-o`` that is a directory, in a missing
directory, or an existing file without ``--force``. A file of a run directory (its ``requests.jsonl``,
``summary.json``, ... or any file in a directory holding a run) is never written over, ``--force`` or not.
"""

from __future__ import annotations

import html
import math
import os
import sys
from collections import Counter

from sglang_dsv4_ext.errors import PairingError, ReproInputError
from sglang_dsv4_ext.tools import exit_codes
from sglang_dsv4_ext.tools.repro import extension_check, pairing, rundir, server_evidence
from sglang_dsv4_ext.tools.repro.cli import add_allow_different_settings, add_not_comparable
from sglang_dsv4_ext.tools.repro.compare import compare_loaded, pairing_line, verdict_line
from sglang_dsv4_ext.tools.repro.stats import wilson_interval
from sglang_dsv4_ext.tools.repro.verdict import CORRUPTION_CLASSES
from sglang_dsv4_ext.tools.tool_support import urls

_W, _H = 560, 200


def _esc(x) -> str:
    return html.escape(str(x))


def level_rates(records: list[dict]) -> list[dict]:
    """Per concurrency level and corruption class: count, n, rate and Wilson 95% interval."""
    by_level: dict[int, list[dict]] = {}
    for r in records:
        by_level.setdefault(int(r["concurrency"]), []).append(r)
    rows = []
    for conc in sorted(by_level):
        recs = by_level[conc]
        counts = Counter(r["verdict"] for r in recs)
        for cls in ("corruption",) + tuple(CORRUPTION_CLASSES):
            c = sum(counts[x] for x in CORRUPTION_CLASSES) if cls == "corruption" else counts[cls]
            lo, hi = wilson_interval(c, len(recs))
            rows.append(
                {
                    "concurrency": conc,
                    "class": cls,
                    "count": c,
                    "n": len(recs),
                    "rate": c / len(recs) if recs else 0.0,
                    "lo": lo,
                    "hi": hi,
                }
            )
    return rows


def _rate_svg(rows: list[dict]) -> str:
    pts = [r for r in rows if r["class"] == "corruption"]
    if not pts:
        return "<p>no records</p>"
    top = max(max(r["hi"] for r in pts), 0.01)
    step = _W / (len(pts) + 1)
    parts = [
        f'<svg width="{_W}" height="{_H + 30}" role="img" aria-label="corruption rate per concurrency">',
        f'<line x1="0" y1="{_H}" x2="{_W}" y2="{_H}" stroke="#888"/>',
    ]
    for i, r in enumerate(pts, start=1):
        x = i * step
        y, ylo, yhi = (_H - _H * v / top for v in (r["rate"], r["lo"], r["hi"]))
        parts += [
            f'<line x1="{x:.1f}" y1="{ylo:.1f}" x2="{x:.1f}" y2="{yhi:.1f}" stroke="#c33"/>',
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#c33"><title>c={r["concurrency"]}: '
            f"{r['rate']:.4f} [{r['lo']:.4f}, {r['hi']:.4f}]</title></circle>",
            f'<text x="{x:.1f}" y="{_H + 20}" text-anchor="middle" font-size="12">c={r["concurrency"]}</text>',
        ]
    parts.append("</svg>")
    return "".join(parts)


def _latency_svg(latencies: list[float]) -> str:
    if not latencies:
        return "<p>no latencies</p>"
    lo, hi = min(latencies), max(latencies)
    bins = 20
    width = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for v in latencies:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    peak = max(counts)
    bw = _W / bins
    bars = "".join(
        f'<rect x="{i * bw:.1f}" y="{_H - _H * c / peak:.1f}" width="{bw - 1:.1f}" '
        f'height="{_H * c / peak:.1f}" fill="#37a"><title>{lo + i * width:.2f}-{lo + (i + 1) * width:.2f}'
        f" s: {c}</title></rect>"
        for i, c in enumerate(counts)
    )
    return (
        f'<svg width="{_W}" height="{_H + 20}" role="img" aria-label="latency histogram">{bars}'
        f'<text x="0" y="{_H + 15}" font-size="12">{lo:.2f} s</text>'
        f'<text x="{_W}" y="{_H + 15}" font-size="12" text-anchor="end">{hi:.2f} s</text></svg>'
    )


def _table(rows: list[dict], cols: list[str]) -> str:
    head = "".join(f"<th>{_esc(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_esc(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return "n/a" if v is None else str(v)


def run_section(run_dir: str, summary: dict, records: dict[str, dict]) -> str:
    recs = list(records.values())
    rates = level_rates(recs)
    lat = sorted(float(r["latency_s"]) for r in recs if r.get("latency_s") is not None)
    planned = summary.get("requests_planned")
    of_planned = f" of {planned} planned" if isinstance(planned, int) else ""
    unfinished = pairing.incomplete(summary)
    parts = [
        f'<section class="run"><h2>{_esc(summary.get("label") or os.path.basename(run_dir.rstrip("/")))}</h2>',
        f"<p>{_esc(run_dir)}: {len(recs)} requests{_esc(of_planned)}</p>",
        f'<p class="incomplete">did not finish: {_esc(unfinished)}</p>' if unfinished else "",
        _server_list(summary),
        _rate_svg(rates),
        _table(rates, ["concurrency", "class", "count", "n", "rate", "lo", "hi"]),
        "<h3>latency</h3>",
        _latency_svg(lat),
    ]
    if lat:
        parts.append(f"<p>median {lat[len(lat) // 2]:.3f} s, p90 {lat[int(0.9 * (len(lat) - 1))]:.3f} s</p>")
    evidence = [server_evidence.shown(row) for row in summary.get("server_evidence") or []]
    if evidence:
        cols = sorted({k for row in evidence for k in row}, key=lambda k: (k != "url", k))
        parts += ["<h3>server evidence (deltas during the run)</h3>", _table(evidence, cols)]
    parts.append("</section>")
    return "".join(parts)


def _server_list(summary: dict) -> str:
    """Each server's recorded state, built index-K dtype, ranks, SGLang and parsing path; restarts marked."""
    lines = extension_check.server_lines(summary.get("servers"))
    items = "".join(
        f'<li class="{"restarted" if line.startswith("RESTARTED") else "server"}">{_esc(line)}</li>' for line in lines
    )
    return f'<ul class="servers">{items}</ul>'


def ab_section(ab: dict) -> str:
    primary = ab["corruption"]
    return (
        f'<section class="ab"><h2>A/B</h2><p>{_esc(pairing_line(ab))}</p><p>{_esc(verdict_line(ab))}</p>'
        f"<p>p-value {_esc(_fmt(primary.get('p_value')))}, pairs {_esc(ab.get('pairs'))}</p></section>"
    )


# What each piece of evidence on the page proves, and what it cannot (docs/evidence.md's tables, in short).
READING_GUIDE = (
    (
        "what each side ran (state, index-K built, ranks, SGLang, parsing)",
        "what each server's schedulers reported when its run started: the dtype of the index-K pool their "
        "processes built, the ranks their records count, the release and the path it parses DeepSeek-V4 through",
        "ranks a record does not count ('ranks not counted': run doctor on every node); 'configured, not built' "
        "is what was asked, not what was built",
    ),
    (
        "not comparable as asked",
        "the evidence does not show the A/B compared what it was asked (same dtype on both sides, a side unknown, "
        "only configured or a mix of pools, a label naming another stack, a restart or a failed read after the run, "
        "one side failing in transport far more, two parsing paths)",
        "that the stacks differ or not: the numbers are still the paired comparison of what ran, and the verdict "
        "line says NOT COMPARABLE AS ASKED",
    ),
    (
        "no 'not comparable as asked' line",
        "each side's recorded servers report one built dtype (or stock), the sides differ in it or in the "
        "extension's state, the labels agree with them, no restart was seen, transport failures are not lopsided",
        "servers the records do not cover (not named, ranks not counted); which pool a stock server built "
        "(SGLang's fp8, or fp4 under its flag)",
    ),
    (
        "RESTARTED",
        "the server answering after the run is another launch or process (for a stock server: records or other "
        "startup durations now), or a counter went down",
        "when it restarted or what served the requests after it; its deltas are not shown",
    ),
    (
        "corruption rate with its Wilson 95% interval",
        "the rate on this workload, per concurrency level",
        "the rate on other traffic; requests of one session are not independent, so the interval is too narrow "
        "when failures cluster",
    ),
    (
        "A/B: significant / no significant difference / cannot tell",
        "on identical prompts with identical settings the stacks corrupt at different rates / differ by at most "
        "the printed bound / too few judged pairs to tell",
        "that the index-K dtype is the cause (any difference between the stacks counts); that the stacks are "
        "equal when the bound is wider than the effect looked for",
    ),
    (
        "transport classes (http_error, protocol_error, stream_cut, aborted, timeout)",
        "the request says nothing about the model's output: left out of the corruption rate and of every pair",
        "that nothing was corrupt: a cut or aborted output is kept raw, never judged",
    ),
    (
        "server evidence (deltas during the run)",
        "what each server counted while the harness ran: aborts, PD transfer failures, HiCache traffic, "
        "integrity pages checked and mismatches ('not checked' when no page was)",
        "which request a counter belongs to; 0 mismatches says nothing about pages not checked",
    ),
)


def guide_block() -> str:
    head = "<tr><th>evidence</th><th>proves</th><th>cannot prove</th></tr>"
    rows = "".join(f"<tr><td>{_esc(a)}</td><td>{_esc(b)}</td><td>{_esc(c)}</td></tr>" for a, b, c in READING_GUIDE)
    title = "<h2>What this page proves, and what it cannot</h2>"
    return f'<section class="guide">{title}<table>{head}{rows}</table></section>'


def sides_block(lines: list[str]) -> str:
    """What each side's servers recorded: state, built index-K dtype, ranks, SGLang, parsing path."""
    items = "".join(f"<li>{_esc(line)}</li>" for line in lines)
    return f'<div class="sides"><h2>What each side ran</h2><ul>{items}</ul></div>'


def warnings_block(lines: list[str]) -> str:
    items = "".join(f"<li>{_esc(w)}</li>" for w in lines)
    return f'<div class="warnings"><h2>Read this first</h2><ul>{items}</ul></div>' if lines else ""


# ----- what the page reads, checked ---------------------------------------------------------------
def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_record(rec: dict) -> None:
    """The fields the page plots (rundir adds FILE:LINE to the ValueError)."""
    if "concurrency" not in rec:
        raise ValueError("record lacks 'concurrency' (the level the request ran at)")
    conc = rec["concurrency"]
    if not _is_number(conc) or conc != int(conc) or conc < 1:
        raise ValueError(f"concurrency: must be an integer >= 1 (the level the request ran at), got {conc!r}")
    latency = rec.get("latency_s")
    if latency is not None and not (_is_number(latency) and math.isfinite(latency) and latency >= 0):
        raise ValueError(f"latency_s: must be a finite number of seconds >= 0, got {latency!r}")


def check_summary(run_dir: str, summary: dict) -> None:
    evidence = summary.get("server_evidence")
    if evidence is None:
        return
    if not isinstance(evidence, list) or not all(
        isinstance(r, dict) and isinstance(r.get("url"), str) for r in evidence
    ):
        shown = type(evidence).__name__ if not isinstance(evidence, list) else "a list holding other things"
        raise ReproInputError(
            f"{os.path.join(run_dir, rundir.SUMMARY)}: server_evidence: expected a list of "
            f"objects, one per server with its url (as `repro run` writes it), got {shown}"
        )


def _load(run_dir: str) -> pairing.LoadedRun:
    run = pairing.load(run_dir, check_record)
    check_summary(run_dir, run.summary)
    return run


def check_output(path: str, run_dirs: list[str], force: bool) -> None:
    """Refuse an ``-o`` the page must not be written to (see the module doc)."""
    if os.path.isdir(path):
        raise ReproInputError(
            f"-o {path}: is a directory; give the HTML file to write, e.g. {os.path.join(path, 'report.html')}"
        )
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise ReproInputError(f"-o {path}: directory {parent} does not exist")
    if not os.path.lexists(path):
        return
    home = rundir.evidence_home(path, run_dirs)
    if home is not None:
        raise ReproInputError(
            f"-o {path}: a file of the run directory {home}; a run's files are never written "
            "over, --force or not (choose a new file name)"
        )
    if not os.path.isfile(path):
        raise ReproInputError(f"-o {path}: exists and is not a regular file")
    if not force:
        raise ReproInputError(f"-o {path}: exists; pass --force to overwrite it")


def build_page(run_dirs: list[str], allow_different_settings: bool = False) -> str:
    return _page(*_sections(run_dirs, allow_different_settings))


def _sections(run_dirs: list[str], allow_different_settings: bool) -> tuple[list[str], dict | None]:
    runs = [_load(d) for d in run_dirs]
    sections = [run_section(r.path, r.summary, r.records) for r in runs]
    ab = None
    if len(runs) == 2:
        ab = compare_loaded(runs[0], runs[1], allow_different_settings=allow_different_settings)
        sections.insert(0, ab_section(ab))
        sections.insert(0, warnings_block(ab["warnings"]))
        sections.insert(0, sides_block(ab["sides"]))
    return sections + [guide_block()], ab


def _page(sections: list[str], ab: dict | None = None) -> str:
    del ab  # the sections hold what the page shows of it
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}"
        ".warnings,.incomplete,.restarted{background:#fee;border:2px solid #c33;padding:0.5em}"
    )
    page = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>sglang-dsv4 report</title>"
        f"<style>{style}</style></head><body><h1>sglang-dsv4 repro report</h1>{''.join(sections)}</body></html>"
    )
    return urls.redact(page)  # also runs whose summary.json was written before URLs were redacted there


def _write(path: str, page: str, force: bool) -> None:
    try:
        with open(path, "w" if force else "x", encoding="utf-8") as f:
            f.write(page)
    except FileExistsError:  # created since it was checked
        raise ReproInputError(f"-o {path}: exists; pass --force to overwrite it") from None
    except OSError as exc:
        raise ReproInputError(f"-o {path}: cannot write it ({exc.strerror or exc})") from None


def _check_comparison_asked(args) -> None:
    """--fail-if-not-comparable judges an A/B: with another number of runs there is none, and it must not pass."""
    from sglang_dsv4_ext.tools.repro.pairing import NOT_COMPARABLE_FLAG

    if getattr(args, "fail_if_not_comparable", False) and len(args.run_dirs) != 2:
        raise ReproInputError(
            f"{NOT_COMPARABLE_FLAG}: the page holds an A/B only for exactly 2 runs, got {len(args.run_dirs)}; "
            "give the two runs to compare, or leave the flag out"
        )


def run(args) -> int:
    try:
        _check_comparison_asked(args)
        check_output(args.output, args.run_dirs, args.force)
        sections, ab = _sections(args.run_dirs, args.allow_different_settings)
        _write(args.output, _page(sections, ab), args.force)
    except (ReproInputError, PairingError) as exc:  # bad input, named
        print(urls.redact(f"sglang-dsv4 report: {exc}"), file=sys.stderr)
        return exit_codes.USAGE
    print(f"wrote {args.output} ({len(args.run_dirs)} run(s))")
    if ab is not None and getattr(args, "fail_if_not_comparable", False) and not ab["comparable"]:
        print(f"not comparable as asked: {'; '.join(ab['evidence_problems'])}", file=sys.stderr)
        return exit_codes.NOT_COMPARABLE
    return exit_codes.OK


def add_subparser(subparsers) -> None:
    p = subparsers.add_parser("report", help="one self-contained HTML page of repro runs", description=__doc__)
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="repro output directories (requests.jsonl)")
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write (default %(default)s)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    add_allow_different_settings(p)
    add_not_comparable(p)
    p.set_defaults(func=run)
