"""The hand-kept mutation table (tests/support/mutation_pass.py) still quotes the code it disables.

A row whose source text no longer occurs in its file (the code moved or was reworded) would disable nothing:
the full pass (``make mutation``, not in CI) reports it only when someone runs it. This checks every row on
every run, in a second, without running the rows' tests (three rows had gone stale this way unnoticed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.mutation_pass import MUTATIONS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("row", MUTATIONS, ids=[row.name for row in MUTATIONS])
def test_each_row_quotes_text_that_occurs_once_in_its_file(row):
    source = (ROOT / row.path).read_text()
    assert source.count(row.original) == 1, f"{row.path}: the row's text occurs {source.count(row.original)} times"
    assert row.mutant != row.original
    assert row.tests, "a row names the tests that must catch it"
    for test in row.tests:
        assert (ROOT / test.split("::", 1)[0]).exists(), test
