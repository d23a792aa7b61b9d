"""Each source patch's ``Retire-When`` says the same as its hook module's "Retire when:" line.

The patch and the runtime hook are two forms of one fix; they must retire together. Compared after
folding white space and dropping reST literal quotes and the final full stop.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from sglang_dsv4_ext.series.series import load_series

SERIES_DIR = Path(__file__).resolve().parents[3] / "patches"


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


@pytest.mark.parametrize("patch", load_series(SERIES_DIR).patches, ids=lambda p: p.name[:4])
def test_patch_retire_when_agrees_with_its_hook_module(patch):
    (module,) = patch.mirrors
    assert normalised(patch.fields["Retire-When"]) == normalised(module_retire_when(module))
