"""`plan` says what bf16 costs in indexer time against stock SM120's default, from measured rates."""

from sglang_dsv4_ext.tools import cli
from sglang_dsv4_ext.tools.plan import decode_reads


def test_plan_prints_the_measured_indexer_time_of_each_card_beside_the_bytes(capsys):
    assert cli.main(["plan", "--kv-budget-gib", "12", "--context", "128K"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("indexer logits time")]
    assert len(lines) == len(decode_reads.MEASURED_INDEXER_TIME) >= 2
    for line, (card, rows) in zip(lines, decode_reads.MEASURED_INDEXER_TIME.items(), strict=True):
        assert card in line and "not SM120" in line  # measured on other cards: says which, and that SM120 was not
        for label, low, high in rows:
            assert f"{label} {low:.2f}-{high:.2f}x" in line
        assert any("TileLang" in label for label, _, _ in rows)
