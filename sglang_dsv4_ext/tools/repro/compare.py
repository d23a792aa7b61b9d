"""A/B: compare two runs request by request on identical prompts (exact McNemar test).

Pairs are requests with the same key (level, session, round, step) *and* the same prompt
hash; runs of different settings (shape, seed, concurrency, request bodies, verdict rules) and
a run compared with itself are refused (:mod:`.pairing`). The primary outcome is "corrupted"
(a corruption class) among pairs where both sides got a response; transport failures (HTTP
errors, protocol errors, cut streams, timeouts) are counted and excluded, because they say
nothing about the output. Three outcomes: significant (p < alpha), no significant difference
(with a 95% bound on how far the corruption rates can differ), or cannot tell (too few judged
pairs for the exact test to ever reach p < alpha).
"""

from __future__ import annotations

from sglang_dsv4_ext.errors import PairingError
from sglang_dsv4_ext.tools.repro import pairing
from sglang_dsv4_ext.tools.repro.stats import mcnemar_exact, rate_with_interval, wilson_interval
from sglang_dsv4_ext.tools.repro.verdict import CORRUPTION_CLASSES, TRANSPORT_CLASSES


def load_run(run_dir: str) -> tuple[dict, dict[str, dict]]:
    """(summary or {}, records by key); a bad line is refused naming FILE:LINE."""
    run = pairing.load(run_dir)
    return run.summary, run.records


def _paired_test(pairs: list[tuple[dict, dict]], failed) -> dict:
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


def pairs_needed(alpha: float) -> int:
    """The fewest pairs with which the exact McNemar test can reach p < alpha (all discordant one way)."""
    n = 1
    while mcnemar_exact(0, n) >= alpha:
        n += 1
    return n


def _verdict(primary: dict, alpha: float) -> tuple[str, str]:
    """(outcome, text): significant, not_significant, or cannot_tell."""
    n, a_only, b_only, p = primary["pairs"], primary["a_only"], primary["b_only"], primary["p_value"]
    counts = f"A-only {a_only}, B-only {b_only} of {n} pairs"
    need = pairs_needed(alpha)
    if n < need:
        return "cannot_tell", (
            f"cannot tell: {n} judged pairs, and the exact test needs at least {need} "
            f"to ever reach p < {alpha} ({counts})"
        )
    if p < alpha:
        worse = "A" if a_only > b_only else "B"
        return "significant", f"significant difference: {worse} corrupts more (p={p:.3g} < {alpha}; {counts})"
    # |rate A - rate B| = |A-only - B-only| / n <= discordant / n: bound the discordant share.
    bound = wilson_interval(a_only + b_only, n)[1]
    return "not_significant", (
        f"no significant difference in corruption (p={p:.3g} >= {alpha}; {counts}); "
        f"the corruption rates differ by at most {100 * bound:.1f} points (95% bound)"
    )


def compare_records(a: dict[str, dict], b: dict[str, dict], alpha: float = 0.05) -> dict:
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
    transport = _paired_test(pairs, lambda r: r["verdict"] in TRANSPORT_CLASSES)
    outcome, text = _verdict(primary, alpha)
    return {
        "alpha": alpha,
        "pairs": len(pairs),
        "unpaired_a": len(set(a) - set(b)),
        "unpaired_b": len(set(b) - set(a)),
        "excluded_transport_pairs": len(pairs) - len(judged),
        "corruption": primary,
        "any_failure": any_failure,
        "transport": transport,
        "per_class": per_class,
        "outcome": outcome,
        "significant": outcome == "significant",
        "verdict": text,
        "note": "per-class p-values are uncorrected for multiple comparisons; the primary test is 'corruption'",
    }


def compare_loaded(
    a: pairing.LoadedRun, b: pairing.LoadedRun, alpha: float = 0.05, allow_different_settings: bool = False
) -> dict:
    """The paired comparison of two loaded runs; refuses one run twice, and different settings unless allowed."""
    pairing.refuse_same_run(a, b)
    differ, unchecked = pairing.setting_differences(a, b)
    if not allow_different_settings:
        pairing.refuse_different_settings(differ)
    result = compare_records(a.records, b.records, alpha)
    result.update(settings_differ=differ, settings_unchecked=unchecked, a=pairing.side(a), b=pairing.side(b))
    result["evidence_problems"] = pairing.evidence_problems(result)
    result["comparable"] = not result["evidence_problems"]
    result["sides"] = pairing.side_lines(result)
    result["warnings"] = pairing.warnings(result)
    return result


def compare_runs(run_a: str, run_b: str, alpha: float = 0.05, allow_different_settings: bool = False) -> dict:
    return compare_loaded(pairing.load(run_a), pairing.load(run_b), alpha, allow_different_settings)


def pairing_line(result: dict) -> str:
    """Paired and unpaired counts, as every output of a comparison states them."""
    return (
        f"{result['pairs']} paired requests ({result['unpaired_a']} only in A, {result['unpaired_b']} only in B: "
        f"not compared; {result['excluded_transport_pairs']} pairs with a transport failure excluded)"
    )


def format_comparison(result: dict) -> str:
    la = (result.get("a") or {}).get("label") or "A"
    lb = (result.get("b") or {}).get("label") or "B"
    lines = list(result.get("sides") or [])
    lines += [f"WARNING: {w}" for w in result.get("warnings") or []]
    lines.append(f"A = {la}, B = {lb}: {pairing_line(result)}")
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
    lines.append(verdict_line(result))
    return "\n".join(lines)


def verdict_line(result: dict) -> str:
    """The verdict as printed and on the report page: never bare when the evidence is not comparable as asked."""
    text = ("SIGNIFICANT: " if result["significant"] else "") + result["verdict"]
    if result.get("comparable", True):
        return text
    return (
        f"NOT COMPARABLE AS ASKED ({len(result.get('evidence_problems') or [])} problem(s) above): this is not an "
        f"answer about the stacks the labels name; of what ran: {text}"
    )
