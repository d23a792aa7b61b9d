"""JSON as RFC 8259 has it: no ``NaN``, ``Infinity`` or ``-Infinity``, read or written.

Why: Python's ``json`` reads and writes those by default, so a server's ``NaN`` (a Prometheus counter, a
``/server_info`` field, an ``--extra-body`` value) used to land in ``summary.json`` as ``NaN``, which no
strict JSON reader accepts. What repro reads as JSON of its own (``/server_info`` records, ``--extra-body``,
a summary) goes through :func:`loads`; what it writes goes through :func:`dump`, which refuses such a
value rather than write invalid JSON. A summary is first passed through :func:`finite`, so a value a
server sent that is not a number becomes null with its place and value said, never a lost summary.
"""

from __future__ import annotations

import json
import math


class NotJSONValueError(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity`` in the text."""


def _refuse(constant: str):
    raise NotJSONValueError(f"{constant} is not a JSON value")


def loads(text):
    """``json.loads`` that raises ``ValueError`` for ``NaN`` / ``Infinity`` / ``-Infinity``."""
    return json.loads(text, parse_constant=_refuse)


def dump(obj, f) -> None:
    """``json.dump`` (indented, UTF-8 kept) that raises ``ValueError`` for a float that is not finite."""
    json.dump(obj, f, indent=2, ensure_ascii=False, allow_nan=False)


def finite(obj, where: str = "") -> tuple[object, list[str]]:
    """(``obj`` with every float that is not finite replaced by None, ``["where: value", ...]`` of each)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None, [f"{where or '.'}: {obj}"]
    if isinstance(obj, dict):
        items = [(k, finite(v, f"{where}.{k}" if where else str(k))) for k, v in obj.items()]
        return {k: v for k, (v, _) in items}, [p for _, (_, found) in items for p in found]
    if isinstance(obj, (list, tuple)):
        elements = [finite(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        return [v for v, _ in elements], [p for _, found in elements for p in found]
    return obj, []
