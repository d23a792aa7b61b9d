"""``sglang-dsv4 recall`` on synthetic captures whose recall is known exactly."""

from __future__ import annotations

import json

import torch

from sglang_dsv4_ext import cli
from sglang_dsv4_ext.recall import cli as recall


def _capture(path, layer, k_rows, q=None, weights=None):
    t = k_rows.shape[0]
    q = torch.ones(1, 1, 128, dtype=torch.float64) if q is None else q
    weights = torch.ones(1, 1, dtype=torch.float64) if weights is None else weights
    torch.save({"layer": layer, "q": q, "weights": weights, "k": k_rows.unsqueeze(0),
                "seq_lens": torch.tensor([t])}, path)


def test_separable_keys_give_recall_one_for_every_format(tmp_path):
    # logits = 128 * c_t with c_t distinct powers-of-two-spaced levels: every format keeps the order
    levels = torch.arange(1024, dtype=torch.float64) // 512  # 512 keys at 0, 512 at 1: top-512 = the ones
    _capture(tmp_path / "a.pt", 2, levels.unsqueeze(1).expand(1024, 128).clone())
    result = recall.analyse(tmp_path, [512])
    assert {(r["format"], r["recall"]) for r in result["rows"]} == {("bf16", 1.0), ("fp8", 1.0), ("fp4", 1.0)}


def test_keys_only_float64_separates_give_half_recall_for_bf16(tmp_path):
    # 1024 keys: 512 "high" at 1 + 2**-12, 512 "low" at 1. bf16 (8 bits mantissa) rounds both to 1.0,
    # so all logits tie and topk returns the lowest indices; put the high ones at odd positions:
    # the bf16 top-512 (indices 0..511) then holds exactly 256 high keys -> recall 0.5.
    level = torch.ones(1024, dtype=torch.float64)
    level[1::2] += 2.0**-12
    _capture(tmp_path / "b.pt", 4, level.unsqueeze(1).expand(1024, 128).clone())
    rows = {r["format"]: r["recall"] for r in recall.analyse(tmp_path, [512])["rows"]}
    assert rows["bf16"] == 0.5


def test_fp4_round_trip_is_the_e2m1_grid():
    x = torch.tensor([[0.24, 0.26, 1.1, -5.2, 6.0] + [0.0] * 27], dtype=torch.float64)  # scale 1 (amax 6)
    assert recall.fp4_round_trip(x)[0, :5].tolist() == [0.0, 0.5, 1.0, -6.0, 6.0]


def test_cli_json_and_bad_directory(tmp_path, capsys):
    _capture(tmp_path / "a.pt", 2, torch.randn(600, 128, dtype=torch.float64))
    assert cli.main(["recall", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["k"] for r in out["rows"]} == {512, recall.configured_topk()} | {512}
    assert all(r["rows"] == 1 for r in out["rows"])
    assert cli.main(["recall", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_unreadable_capture_files_are_named_without_a_traceback(tmp_path, capsys):
    """Found in review: a truncated file, a non-torch file or a dict without the fields gave a traceback."""
    good = tmp_path / "good.pt"
    _capture(good, 2, torch.randn(600, 128, dtype=torch.float64))
    cases = {
        "truncated.pt": good.read_bytes()[: len(good.read_bytes()) // 2],
        "text.pt": b"not a torch file\n",
    }
    for name, data in cases.items():
        bad = tmp_path / "bad" / name
        bad.parent.mkdir(exist_ok=True)
        bad.write_bytes(data)
        assert cli.main(["recall", str(bad.parent)]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and "not a readable capture file" in err and "Traceback" not in err
        bad.unlink()
    torch.save({"layer": 2, "q": torch.zeros(1, 1, 128)}, tmp_path / "bad" / "fields.pt")
    assert cli.main(["recall", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "fields.pt: not a capture file: lacks weights, k, seq_lens" in err
