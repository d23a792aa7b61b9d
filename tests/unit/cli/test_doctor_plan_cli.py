"""``sglang-dsv4 doctor`` / ``plan`` / ``--help`` through the real CLI entry (in this process)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from sglang_dsv4_ext.runtime import activation, compat
from sglang_dsv4_ext.runtime.index_k.dtype import index_k_bytes_per_token
from sglang_dsv4_ext.tools import cli
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model

README = Path(__file__).resolve().parents[3] / "README.md"


def test_doctor_json_lists_every_table_entry_with_a_status(ext_active, capsys):
    code = cli.main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    for key in ("sglang_version", "ext_version", "config", "targets"):
        assert key in report
    assert report["sglang_version"] == compat.installed_sglang_version()
    assert report["sglang_version"] in report["supported_sglang"] == list(compat.SUPPORTED_SGLANG_VERSIONS)
    rows = {row["target"]: row for row in report["targets"]}
    assert set(rows) == {t.path for t in compat.TARGETS}
    allowed = {activation.APPLIED, activation.NOT_NEEDED, activation.SKIPPED_BY_CONFIG, activation.DRIFTED}
    in_release = {t.path for t in compat.installed_table()}
    assert {row["status"] for path, row in rows.items() if path in in_release} <= allowed
    # the rows of the other release only: tests/integration/test_release_0_5_22.py
    assert {row["status"] for path, row in rows.items() if path not in in_release} <= {activation.NOT_IN_RELEASE}
    # The gate's per-accessor verdicts: top-level readers upstream-gated, sub-pool readers ours.
    gated = {t: r["gate"] for t, r in rows.items() if "gate" in r}
    assert gated and set(gated.values()) <= {"upstream-gated", "extension-gated"}
    assert all(rows[t]["status"] == activation.NOT_NEEDED for t, v in gated.items() if v == "upstream-gated")
    assert report["cuda"]["available"] is torch.cuda.is_available()


def test_doctor_shows_each_called_name_and_its_drift(ext_active, capsys, monkeypatch):
    assert cli.main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["called"] for row in report["called"]] == [t.path for t in compat.CALLED]
    assert {row["status"] for row in report["called"]} == {"matches"}
    victim = compat.CALLED[0]
    drifted = compat.Target(victim.path, "(something_else)", victim.area, victim.feature, victim.why)
    monkeypatch.setattr(compat, "CALLED", [drifted, *compat.CALLED[1:]])
    assert cli.main(["doctor"]) == 1  # the verdict is "needs attention", never a clean report
    out = capsys.readouterr().out
    assert f"{victim.path}: signature drifted: expected (something_else)" in out
    line = next(line for line in out.splitlines() if line.startswith(victim.path.removeprefix("sglang.srt.") + " "))
    assert line.split()[-1] == activation.DRIFTED


def test_doctor_human_output(ext_active, capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "mem_cache.deepseek_v4_memory_pool.get_dsv4_indexer_bytes_per_token" in out
    assert "upstream-gated" in out and "extension-gated" in out


def test_plan_json_token_ratio_follows_bytes_per_token(ext_active, capsys):
    assert cli.main(["plan", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    fp8, bf16 = plan["dtypes"]["fp8"], plan["dtypes"]["bf16"]
    model = dsv4_model.load_model()
    c4_layers = model.layer_counts()[4]
    per_token = {d: index_k_bytes_per_token(d, model.index_head_dim) for d in ("fp8", "bf16", "fp4")}
    # Only index-K differs between the columns: c4 layers x (bf16 - fp8 bytes) / 4 tokens per c4 slot.
    extra = c4_layers * (per_token["bf16"] - per_token["fp8"]) / 4
    assert bf16["bytes_per_full_token"] - fp8["bytes_per_full_token"] == extra
    assert fp8["indexer_bytes_per_token"] == per_token["fp8"] and bf16["indexer_bytes_per_token"] == per_token["bf16"]
    token_ratio = fp8["full_tokens"] / bf16["full_tokens"]
    bytes_ratio = bf16["bytes_per_full_token"] / fp8["bytes_per_full_token"]
    # Same bytes for tokens on both sides (fixed bias does not depend on index-K); tokens are
    # floored to 256-token pages, so they agree to within one page of the smaller count.
    assert abs(token_ratio - bytes_ratio) <= 256 / bf16["full_tokens"]
    assert plan["dtypes"]["fp4"]["indexer_bytes_per_token"] == per_token["fp4"]


def test_help_lists_every_subcommand_the_readme_documents(capsys):
    # Checked against the README (what operators are told exists), not the CLI's own table.
    documented = set(re.findall(r"sglang-dsv4 ([a-z][a-z-]+)", README.read_text()))
    assert {"doctor", "plan", "serve", "repro", "patches"} <= documented
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["--help"])
    assert excinfo.value.code == 0
    listed = set(re.findall(r"^    ([a-z][a-z-]+)\s", capsys.readouterr().out, re.M))
    assert documented <= listed, documented - listed
