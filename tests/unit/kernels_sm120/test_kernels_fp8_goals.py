"""The fp8 benchmark's goal lines (``benchmarks.kernels_fp8.goals``) from measured times: each says met,
NOT met or cannot tell from the numbers it is given, and calls the bf16 goal out of reach only where the
bf16 gather measured in the same run says so. Plain dicts of times: no GPU, nothing stubbed."""

from benchmarks import kernels_fp8


def measured(shape="decode 64 x 8K", mb=69.2, **ms):
    """One shape's row as time_shape builds it (milliseconds), then its ratios."""
    times = dict(ours_fp8_ms=0.030, ours_bf16_ms=0.050, ours_fp4_ms=0.1, tilelang_ms=0.040)
    times.update(ms)
    r = dict(shape=shape, rows=64, keys=0, fp8_key_bytes=mb * 1e6, **{k: v for k, v in times.items() if v is not None})
    kernels_fp8._ratios(r)
    return r


def lines_of(r):
    return kernels_fp8.goals([r])


def test_without_a_tilelang_time_every_goal_is_cannot_tell():
    assert lines_of(measured(tilelang_ms=None)) == ["decode 64 x 8K: cannot tell (no TileLang time)"]


def test_without_the_gather_or_the_l2_time_the_limit_goal_is_cannot_tell():
    lines = lines_of(measured(gather_ms=0.028))
    assert any("within 5% of its limit: cannot tell" in line for line in lines)


def test_the_limit_is_the_larger_floor_and_under_95_percent_is_not_met():
    r = measured(ours_fp8_ms=0.030, gather_ms=0.027, ours_fp8_l2_ms=0.020)
    assert any(line.endswith("fp8 at 90% of its limit (gather; goal >= 95%): NOT met") for line in lines_of(r))
    r = measured(ours_fp8_ms=0.030, gather_ms=0.020, ours_fp8_l2_ms=0.029)
    assert any("fp8 at 97% of its limit (kernel work (L2 pages); goal >= 95%): met" in line for line in lines_of(r))


def test_fp8_under_one_and_a_half_times_tilelang_from_64_mb_is_not_met():
    assert "decode 64 x 8K: fp8 x TileLang 1.33 (goal >= 1.5): NOT met" in lines_of(measured())
    small = measured(shape="decode 1 x 8K", mb=1.1, ours_fp8_ms=0.0041, tilelang_ms=0.0040)
    assert "decode 1 x 8K: fp8 x TileLang 0.98 (goal >= 1.0): NOT met" in lines_of(small)


def test_bf16_is_called_out_of_reach_only_where_its_own_gather_is_over_the_goal():
    over = measured(ours_bf16_ms=0.052, bf16_gather_ms=0.048, gather_ms=0.028)  # gather 1.20x TileLang
    line = next(line for line in lines_of(over) if "bf16" in line)
    assert line.endswith("NOT met; out of reach on this card: reading the bf16 rows alone takes 1.20x TileLang's time")
    reachable = measured(ours_bf16_ms=0.052, bf16_gather_ms=0.036)  # gather 0.90x: our kernel is what is slow
    line = next(line for line in lines_of(reachable) if "bf16" in line)
    assert line.endswith("(goal <= 1.10): NOT met")
    unmeasured = measured(ours_bf16_ms=0.052)
    assert next(line for line in lines_of(unmeasured) if "bf16" in line).endswith("NOT met")


def test_bf16_on_mixed_batches_must_be_under_tilelang():
    r = measured(shape="decode 8 mixed: 1 x 64K + 7 x 2K", ours_bf16_ms=0.041, bf16_gather_ms=0.050)
    assert "decode 8 mixed: 1 x 64K + 7 x 2K: bf16 / TileLang 1.02 (goal < 1, mixed): NOT met" in lines_of(r)


def test_the_table_shows_both_gathers_and_the_bf16_floor():
    r = measured(gather_ms=0.0275, values_gather_ms=0.0272, ours_fp8_l2_ms=0.022, bf16_gather_ms=0.048)
    header, _rule, row = kernels_fp8.format_table([r]).splitlines()
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    assert (cells["gather us"], cells["values gather us"]) == ("27.50", "27.20")
    assert (cells["% gather"], cells["bf16 gather / TileLang"]) == ("91.67", "1.20")


def test_a_gather_our_fp8_kernel_beats_is_latency_not_a_floor():
    """At one short row every gather is launch and latency: ours fp8 beats the fp8 gather there, so the
    bf16 gather's time says nothing about what a bf16 kernel can reach."""
    r = measured(shape="decode 1 x 8K", mb=1.1, ours_fp8_ms=0.0042, tilelang_ms=0.0042, gather_ms=0.0052)
    r.update(ours_bf16_ms=0.0050, bf16_gather_ms=0.0056)
    kernels_fp8._ratios(r)
    assert next(line for line in lines_of(r) if "bf16" in line).endswith("(goal <= 1.10): NOT met")
