"""A/B: compare two runs request by request on identical prompts (exact McNemar test).

Pairs are requests with the same key (level, session, round, step) *and* the same prompt
hash; runs made with different seeds or scenario sizes are refused rather than compared
unpaired. The primary outcome is "corrupted" (a corruption class) among pairs where both
sides got a response; transport failures (HTTP errors, timeouts) are counted and
excluded, because they say nothing about the output.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from sglang_dsv4_ext.errors import PairingError
from sglang_dsv4_ext.repro import rundir
from sglang_dsv4_ext.repro.stats import mcnemar_exact, rate_with_interval
from sglang_dsv4_ext.repro.verdict import CORRUPTION_CLASSES, TRANSPORT_CLASSES


def load_run(run_dir: str) -> Tuple[dict, Dict[str, dict]]:
    """(summary or {}, records by key); a bad line is refused naming FILE:LINE."""
    _, records = rundir.load_records(run_dir)
    return rundir.load_summary(run_dir, required=False), records


def _paired_test(pairs: List[Tuple[dict, dict]], failed) -> dict:
    a_only = sum(1 for a, b in pairs if failed(a) and not failed(b))
    b_only = sum(1 for a, b in pairs if failed(b) and not failed(a))
    both = sum(1 for a, b in pairs if failed(a) and failed(b))
    n = len(pairs)
    return {
        "pairs": n,
        "a": rate_with_interval(a_only + both, n),
        "b": rate_with_interval(b_only + both, n),
        "a_only": a_only,
        "b_only": b_only,
        "both": both,
        "p_value": mcnemar_exact(a_only, b_only),
    }


def check_alpha(alpha: float) -> None:
    if not 0 < alpha < 1:  # also refuses NaN
        raise ValueError(f"--alpha must be in (0, 1), got {alpha}")


def compare_records(a: Dict[str, dict], b: Dict[str, dict], alpha: float = 0.05) -> dict:
    check_alpha(alpha)
    common = sorted(set(a) & set(b))
    mismatched = [k for k in common if a[k]["prompt_sha256"] != b[k]["prompt_sha256"]]
    if mismatched:
        raise PairingError(
            f"{len(mismatched)} of {len(common)} shared requests have different prompts (first: {mismatched[0]}); "
            "re-run B with A's re-run command (same --seed, --sessions, --rounds, --concurrency, prompt sizes)"
        )
    if not common:
        raise PairingError("the two runs share no request keys; were they made with the same settings?")
    pairs = [(a[k], b[k]) for k in common]
    judged = [(x, y) for x, y in pairs if not {x["verdict"], y["verdict"]} & set(TRANSPORT_CLASSES)]

    def corrupted(r):
        return r["verdict"] in CORRUPTION_CLASSES

    primary = _paired_test(judged, corrupted)
    per_class = {c: _paired_test(judged, lambda r, c=c: r["verdict"] == c) for c in CORRUPTION_CLASSES}
    any_failure = _paired_test(pairs, lambda r: r["verdict"] != "ok")
    significant = primary["p_value"] < alpha
    if not significant:
        text = (
            f"no significant difference in corruption (p={primary['p_value']:.3g} >= {alpha}; "
            f"A-only {primary['a_only']}, B-only {primary['b_only']} of {primary['pairs']} pairs)"
        )
    else:
        worse = "A" if primary["a_only"] > primary["b_only"] else "B"
        text = (
            f"significant difference: {worse} corrupts more (p={primary['p_value']:.3g} < {alpha}; "
            f"A-only {primary['a_only']}, B-only {primary['b_only']} of {primary['pairs']} pairs)"
        )
    return {
        "alpha": alpha,
        "pairs": len(pairs),
        "unpaired_a": len(set(a) - set(b)),
        "unpaired_b": len(set(b) - set(a)),
        "excluded_transport_pairs": len(pairs) - len(judged),
        "corruption": primary,
        "any_failure": any_failure,
        "per_class": per_class,
        "significant": significant,
        "verdict": text,
        "note": "per-class p-values are uncorrected for multiple comparisons; the primary test is 'corruption'",
    }


def compare_runs(run_a: str, run_b: str, alpha: float = 0.05) -> dict:
    sa, ra = load_run(run_a)
    sb, rb = load_run(run_b)
    result = compare_records(ra, rb, alpha)
    result["a"] = {"run": run_a, "label": sa.get("label"), "server_info": sa.get("server_info")}
    result["b"] = {"run": run_b, "label": sb.get("label"), "server_info": sb.get("server_info")}
    return result


def format_comparison(result: dict) -> str:
    la = (result.get("a") or {}).get("label") or "A"
    lb = (result.get("b") or {}).get("label") or "B"
    excluded = result["excluded_transport_pairs"]
    lines = [f"A = {la}, B = {lb}: {result['pairs']} paired requests ({excluded} with a transport failure excluded)"]
    lines.append(f"{'outcome':<24}{'A rate':>10}{'B rate':>10}{'A-only':>8}{'B-only':>8}{'p':>10}")

    def row(name, t):
        ar = t["a"]["rate"] or 0.0
        br = t["b"]["rate"] or 0.0
        return f"{name:<24}{100 * ar:>9.1f}%{100 * br:>9.1f}%{t['a_only']:>8}{t['b_only']:>8}{t['p_value']:>10.3g}"

    lines.append(row("corruption", result["corruption"]))
    for c, t in result["per_class"].items():
        if t["a_only"] or t["b_only"] or t["both"]:
            lines.append(row("  " + c, t))
    lines.append(row("any failure", result["any_failure"]))
    lines.append(("SIGNIFICANT: " if result["significant"] else "") + result["verdict"])
    return "\n".join(lines)
