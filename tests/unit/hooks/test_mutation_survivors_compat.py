"""runtime/compat.py behaviour that mutmut's mutants showed untested (docs/mutation-testing.md).

The helpers doctor and activation judge SGLang with: a row as one release has it, the positional
arguments the gate probe passes after ``layer_id``, how a drift is described, the comparison of a
target with what is installed (run here on real functions: ``os.path.join`` and ones defined below),
and following ``__wrapped__`` to the original.
"""

from __future__ import annotations

import functools
import os

from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.compat import ALWAYS, ANY_SIGNATURE, SAME_SIGNATURE, Drift, OnRelease, Target


def _target(path: str = "pkg.mod.Class.method", signature: str = "(self, layer_id, loc)", releases=()) -> Target:
    return Target(path, signature, "pool", ALWAYS, "why", releases)


# ----- a row on one release -----
def test_a_row_is_itself_where_a_release_has_it_unchanged_and_none_where_the_target_is_absent():
    row = _target(
        releases=(
            OnRelease("0.5.21", "same signature", SAME_SIGNATURE),
            OnRelease("0.5.20", "absent", None),
            OnRelease("0.5.19", "older", "(self, layer_id)"),
        )
    )
    assert row.row_for("0.5.23") is row
    assert row.row_for("0.5.21") is row
    assert row.row_for("0.5.20") is None
    assert row.row_for("0.5.19").signature == "(self, layer_id)"
    assert row.on("0.5.19").lacks == "older"


def test_a_rows_attribute_module_and_owner_come_from_its_path():
    row = _target("sglang.srt.mem_cache.pool.DSV4Pool.Inner.load")
    assert (row.attribute, row.module, row.owner_path) == (
        "load",
        "sglang.srt.mem_cache.pool",
        "sglang.srt.mem_cache.pool.DSV4Pool.Inner",
    )
    assert _target("sglang.srt.utils.helper").module == "sglang.srt.utils"


def test_the_arguments_after_layer_id_count_only_positional_ones_without_a_default():
    counts = {
        "(self, layer_id, loc)": 1,
        "(layer_id, loc, cache_k)": 2,
        "(self, layer_id, loc, cache_k=None, *args, **kwargs)": 1,
        "(self, layer_id)": 0,
        "(self, loc)": 0,
    }
    assert {sig: _target(signature=sig).required_args_after_layer_id() for sig in counts} == counts


def test_the_rows_release_is_a_supported_one_else_the_newest():
    assert compat.rows_release("0.5.22") == "0.5.22"
    assert compat.rows_release("0.6.0") == compat.SUPPORTED_SGLANG_VERSIONS[-1]
    assert compat.installed_table() == compat.table_for(compat.installed_sglang_version())


# ----- drifts -----
def test_a_drift_says_what_is_missing_or_which_parameters_differ():
    assert Drift("a.b", "(x)", None, "ImportError: no a").describe() == "a.b: missing (ImportError: no a)"
    assert Drift("a.b", "(x, y=1)", "(x, z)", "signature differs").describe() == (
        "a.b: signature drifted: expected (x, y=1), found (x, z) (found lacks y=1; found adds z)"
    )
    assert compat.parameter_difference("(x, y)", "(y, x)") == "same parameters in another order"
    assert compat.parameter_difference("()", "(x)") == "found adds x"


def _defaults(a, b=1, *args, c, d="x", **kw):
    return a


def _keyword_only(a, *, k):
    return a


def test_a_signature_is_normalised_with_kinds_and_defaults():
    assert compat.normalised_signature(_defaults) == "(a, b=1, *args, c, d='x', **kw)"
    assert compat.normalised_signature(_keyword_only) == "(a, *, k)"


def test_targets_are_compared_with_the_installed_functions():
    targets = [
        _target("os.path.join", "(a, *p)"),
        _target("os.path.isdir", ANY_SIGNATURE),  # being there is enough
        _target("os.path.join", "(a, b)"),
        _target("os.path.no_such_function", "(a)"),
        _target("builtins.next", "(iterator)"),  # a builtin without a signature
        _target("os.path.no_such_function_either", ANY_SIGNATURE),
    ]
    drifts = compat.check_targets(targets)
    assert [(d.target, d.expected, d.actual) for d in drifts] == [
        ("os.path.join", "(a, b)", "(a, *p)"),
        ("os.path.no_such_function", "(a)", None),
        ("builtins.next", "(iterator)", None),
        ("os.path.no_such_function_either", ANY_SIGNATURE, None),
    ]
    details = [d.detail for d in drifts]
    assert details[0] == "signature differs"
    assert details[1] == f"AttributeError: module {os.path.__name__!r} has no attribute 'no_such_function'"
    assert details[2].startswith("not inspectable: ")
    assert details[3] == f"AttributeError: module {os.path.__name__!r} has no attribute 'no_such_function_either'"


def test_the_installed_sglang_matches_its_releases_rows():
    from importlib.metadata import version

    assert compat.installed_sglang_version() == version("sglang")
    assert compat.check_targets() == []


def test_a_hooked_target_is_judged_by_the_function_it_wraps():
    @functools.wraps(_keyword_only)
    def hooked(*args, **kwargs):
        return _keyword_only(*args, **kwargs)

    assert compat.unwrap_to_original(hooked) is _keyword_only

    def loop():
        return None

    loop.__wrapped__ = loop  # a wrapper naming itself: followed once, not forever
    assert compat.unwrap_to_original(loop) is loop


def test_the_modules_of_targets_are_listed_once_in_table_order_and_the_owner_imported():
    rows = [_target("os.path.join"), _target("json.dumps"), _target("os.path.isdir")]
    assert compat.target_modules(rows) == ["os.path", "json"]
    assert compat.owner_of(rows[0]) is os.path


def test_several_parameters_are_listed_comma_separated():
    assert compat.parameter_difference("(a, b, c)", "(a, d, e)") == "found lacks b, c; found adds d, e"


def test_the_installed_release_picks_the_rows_that_judge_it(monkeypatch):
    """Judged as if the other supported release were installed: its rows, which this release's functions
    do not all match (run under either release: the other one is the pretended one)."""
    real = compat.installed_sglang_version()
    other = next(v for v in compat.SUPPORTED_SGLANG_VERSIONS if v != real)
    monkeypatch.setattr(compat, "installed_sglang_version", lambda: other)
    assert compat.installed_table() == compat.table_for(other) != compat.table_for(real)
    drifts = compat.check_targets()
    assert drifts and drifts == compat.check_targets(compat.table_for(other))
