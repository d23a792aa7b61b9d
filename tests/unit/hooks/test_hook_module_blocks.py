"""Every hook module starts with the block a reviewer reads first: Why / How / Upstream status / Retire when.

The hook modules are found from ``HOOK_MODULES`` (what activation collects), so a new module that
forgets its block fails here.
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from sglang_dsv4_ext.runtime.hooks import HOOK_MODULES

LABELS = ("Why", "How", "Upstream status", "Retire when")


def block_fields(docstring: str) -> dict:
    """``{label: text}`` for each label that starts a line of the docstring as ``Label: text``."""
    fields = {}
    for label in LABELS:
        match = re.search(rf"^{label}: *(\S.*)$", docstring, re.M)
        if match:
            fields[label] = match.group(1)
    return fields


def test_block_fields_reads_the_four_labels_and_only_at_line_starts():
    doc = "Title.\n\nWhy: a.\nHow: b.\nUpstream status: c.\nRetire when: d.\n"
    assert block_fields(doc) == {"Why": "a.", "How": "b.", "Upstream status": "c.", "Retire when": "d."}
    assert "Retire when" not in block_fields("Upstream status: c. Retire when: d.\n")
    assert "How" not in block_fields("How:\n")  # a label needs its text


@pytest.mark.parametrize("name", HOOK_MODULES)
def test_hook_module_starts_with_why_how_upstream_retire(name):
    module = importlib.import_module(f"sglang_dsv4_ext.runtime.hooks.{name}")
    doc = inspect.getdoc(module) or ""
    fields = block_fields(doc)
    assert set(fields) == set(LABELS), f"{module.__name__}: missing {set(LABELS) - set(fields)}"
    positions = [doc.index(f"{label}:") for label in LABELS]
    assert positions == sorted(positions), f"{module.__name__}: the block's labels are out of order"
