"""`plan` says what bf16 costs in indexer time against stock SM120's default, from measured rates."""

from sglang_dsv4_ext.tools import cli
from sglang_dsv4_ext.tools.plan import decode_reads


def test_plan_prints_the_measured_indexer_time_beside_the_bytes(capsys):
    assert cli.main(["plan", "--kv-budget-gib", "12", "--context", "128K"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("indexer logits time"))
    assert "not SM120" in line  # measured on an H200: says so
    for label, low, high in decode_reads.MEASURED_INDEXER_TIME:
        assert f"{label} {low:.2f}-{high:.2f}x" in line
    assert any("TileLang" in label for label, _, _ in decode_reads.MEASURED_INDEXER_TIME)
