"""argparse value types shared by the commands: numbers checked for range, with messages that say
what is allowed (argparse prints them as ``argument --flag: <message>``).

One rule for the text of a number, in every command: ASCII only, as written (no surrounding space, no
``_`` separators). Python's ``int()`` and ``float()`` also take other scripts' digits (``'١٢'``), and
``str.isdigit()`` takes digits ``int()`` refuses (``'²'``): neither decides here.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

_INTEGER = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(nan|inf|infinity)", re.IGNORECASE)


def parse_int(text: str) -> int | None:
    """The integer ``text`` spells in ASCII digits (an optional sign), or None."""
    return int(text) if text.isascii() and _INTEGER.fullmatch(text) else None


def parse_float(text: str) -> float:
    """The number ``text`` spells in ASCII (decimal or exponent form, ``nan``, ``inf``), NaN where it spells none;
    callers refuse NaN and the infinities where they are not allowed."""
    return float(text) if text.isascii() and _FLOAT.fullmatch(text) else math.nan


def whole_number(text: str) -> int | None:
    """A count written as ASCII digits alone (no sign), or None."""
    return int(text) if text.isascii() and text.isdigit() else None


def _as_float(text: str) -> float:
    return parse_float(text)


def _as_int(text: str) -> int | None:
    return parse_int(text)


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
