"""Every command's exit status is a name from :mod:`sglang_dsv4_ext.tools.exit_codes`, never a bare number.

A command's entry functions (``run`` and ``main`` of every module) are read from the source: a ``return`` of
an integer literal there is a code defined twice (``exit_codes`` says what each code means, once).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sglang_dsv4_ext

PACKAGE_DIR = Path(sglang_dsv4_ext.__file__).resolve().parent
ENTRY_FUNCTIONS = ("run", "main")


def bare_exit_codes(source: str) -> list[int]:
    """Lines where ``run``/``main`` returns an integer literal."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name in ENTRY_FUNCTIONS:
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Return)
                    and isinstance(inner.value, ast.Constant)
                    and type(inner.value.value) is int
                ):
                    lines.append(inner.lineno)
                elif isinstance(inner, ast.Return) and isinstance(inner.value, ast.IfExp):
                    lines += [
                        inner.lineno
                        for side in (inner.value.body, inner.value.orelse)
                        if isinstance(side, ast.Constant) and type(side.value) is int
                    ]
    return lines


@pytest.mark.parametrize(
    "source, expected",
    [
        ("def run(args):\n    return 0\n", [2]),
        ("def main(argv):\n    if argv:\n        return exit_codes.USAGE\n    return 1 if argv else 0\n", [4, 4]),
        ("def run(args):\n    return exit_codes.OK\n", []),
        ("def helper():\n    return 0\n", []),  # not an entry function: a count, not an exit status
    ],
)
def test_bare_exit_codes_finds_integer_returns_of_entry_functions(source, expected):
    assert bare_exit_codes(source) == expected


def test_no_command_returns_a_bare_exit_code():
    found = {str(p.relative_to(PACKAGE_DIR)): bare_exit_codes(p.read_text()) for p in sorted(PACKAGE_DIR.rglob("*.py"))}
    assert {path: lines for path, lines in found.items() if lines} == {}
