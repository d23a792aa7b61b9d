"""argparse value types shared by the commands: numbers checked for range, with messages that say
what is allowed (argparse prints them as ``argument --flag: <message>``)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _as_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def finite_float(*, minimum: float, inclusive: bool, unit: str = "") -> Callable[[str], float]:
    """A finite float > minimum (or >= with ``inclusive``); NaN and infinities are refused."""
    what = f"a finite number{' of ' + unit if unit else ''} {'>=' if inclusive else '>'} {minimum:g}"

    def parse(text: str) -> float:
        value = _as_float(text)
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
            raise argparse.ArgumentTypeError(f"{text!r}: allowed: {what}")
        return value

    return parse


def int_at_least(minimum: int, *, also: int | None = None, also_means: str = "") -> Callable[[str], int]:
    """An integer >= minimum; ``also`` is one more accepted value (e.g. -1 meaning 'off')."""
    what = f"an integer >= {minimum}" + (f", or {also} ({also_means})" if also is not None else "")

    def parse(text: str) -> int:
        value = _as_int(text)
        if value is None or (value < minimum and value != also):
            raise argparse.ArgumentTypeError(f"{text!r}: allowed: {what}")
        return value

    return parse


def int_in_range(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _as_int(text)
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: allowed range {low}-{high}")
        return value

    return parse
