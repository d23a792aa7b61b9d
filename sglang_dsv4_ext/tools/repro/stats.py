"""Interval estimates and the paired test used by the harness (stdlib only)."""

from __future__ import annotations

import math

Z95 = 1.959963984540054  # two-sided 95% normal quantile


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when ``n == 0``.

    Chosen over the normal approximation because failure rates here are often 0 or
    close to it, where the Wald interval collapses to a point.
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # Clamp rounding noise at the edges (e.g. successes == 0 gives lo == -1e-17).
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_with_interval(count: int, n: int) -> dict:
    lo, hi = wilson_interval(count, n)
    return {"count": count, "n": n, "rate": (count / n) if n else None, "ci95": [lo, hi]}


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts.

    ``b``: pairs where only A failed; ``c``: pairs where only B failed. Under the null
    hypothesis each discordant pair is A-only with probability 1/2, so the p-value is
    the two-sided binomial tail ``min(1, 2 * P[X <= min(b, c)])`` with X ~ Bin(b+c, 1/2).
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    # Sum in log space so large n does not overflow floats.
    log_half_n = -n * math.log(2)
    log_n_fact = math.lgamma(n + 1)
    tail = sum(math.exp(log_n_fact - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n) for i in range(k + 1))
    return min(1.0, 2 * tail)
