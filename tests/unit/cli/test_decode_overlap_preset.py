"""PD presets turn overlap scheduling off on decode servers; --keep-overlap-schedule opts out.

Through the real ``sglang-dsv4 serve --dry-run`` (every generated command line goes through
SGLang's own argument parser first), in this process.
"""

from __future__ import annotations

import pytest

from sglang_dsv4_ext.tools.cli import main

PRESET = "dsv4-flash-8gpu-pd-4p4d-bf16-hicache"


def _dry_run(capsys, *extra):
    capsys.readouterr()
    assert main(["serve", "--preset", PRESET, "--dry-run", *extra]) == 0
    return {
        line.split("--disaggregation-mode ")[1].split()[0]: line
        for line in capsys.readouterr().out.splitlines()
        if "--disaggregation-mode " in line
    }


@pytest.mark.parametrize("opt_out", [False, True])
def test_decode_overlap_schedule(capsys, opt_out):
    servers = _dry_run(capsys, *(["--keep-overlap-schedule"] if opt_out else []))
    assert set(servers) == {"prefill", "decode"}
    assert "--disable-overlap-schedule" not in servers["prefill"]
    assert ("--disable-overlap-schedule" in servers["decode"]) is not opt_out
