"""Each source patch's ``Retire-When`` says the same as its hook module's "Retire when:" line.

The patch and the runtime hook are two forms of one fix; they must retire together, in the series
of every release (patches/, patches/sglang-X.Y.Z/). Compared after
folding white space and dropping reST literal quotes and the final full stop.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from sglang_dsv4_ext.tools.series.releases import release_series_dirs
from sglang_dsv4_ext.tools.series.series import load_series

SERIES_DIRS = release_series_dirs(Path(__file__).resolve().parents[3] / "patches")  # every release's series
PATCHES = [(d, p) for d in SERIES_DIRS for p in load_series(d).patches]


def normalised(text: str) -> str:
    return " ".join(text.replace("``", "").split()).rstrip(".")


def module_retire_when(module_name: str) -> str:
    doc = inspect.getdoc(importlib.import_module(module_name)) or ""
    match = re.search(r"^Retire when: (.*?)(?:\n\n|\Z)", doc, re.M | re.S)
    assert match, f"{module_name} has no 'Retire when:' line"
    return match.group(1)


def test_normalised_ignores_layout_but_not_words():
    assert normalised("SGLang ships\n a ``bf16`` path.") == normalised("SGLang ships a bf16 path")
    assert normalised("SGLang ships a path") != normalised("SGLang ships a bf16 path")


@pytest.mark.parametrize("patch", [p for _, p in PATCHES], ids=[f"{d.name}/{p.name[:4]}" for d, p in PATCHES])
def test_patch_retire_when_agrees_with_its_hook_module(patch):
    (module,) = patch.mirrors
    assert normalised(patch.fields["Retire-When"]) == normalised(module_retire_when(module))
