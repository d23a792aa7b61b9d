"""The fp8 benchmark's goal lines (``benchmarks.kernels_fp8.goals``) from measured times: each says met,
NOT met or cannot tell from the numbers it is given, and calls the bf16 goal out of reach only where the
bf16 gather measured in the same run says so. Plain dicts of times: no GPU, nothing stubbed."""

import pytest

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
    assert any(line.endswith("fp8 at 90.0% of its limit (gather; goal >= 95%): NOT met") for line in lines_of(r))
    r = measured(ours_fp8_ms=0.030, gather_ms=0.020, ours_fp8_l2_ms=0.029)
    assert any("fp8 at 96.7% of its limit (kernel work (L2 pages); goal >= 95%): met" in line for line in lines_of(r))


def test_fp8_under_one_and_a_half_times_tilelang_from_64_mb_is_not_met():
    assert "decode 64 x 8K: fp8 x TileLang 1.33 (goal >= 1.5): NOT met" in lines_of(measured())
    small = measured(shape="decode 1 x 8K", mb=1.1, ours_fp8_ms=0.0041, tilelang_ms=0.0040)
    assert "decode 1 x 8K: fp8 x TileLang 0.98 (goal >= 1.0): NOT met" in lines_of(small)


def bf16_line(rows, shape="decode 64 x 8K"):
    return next(line for line in kernels_fp8.goals(rows) if line.startswith(f"{shape}: bf16"))


def test_a_missed_bf16_goal_says_what_its_bytes_take_at_the_fastest_read_measured():
    """64 x 8K: 524,288 keys, 134 MB of bf16 rows. The fastest read of the run (a large gather) is reported beside
    the verdict as a measurement; it is never turned into "out of reach" (a kernel may read faster than our
    gathers did)."""
    big = measured(shape="decode 128 x 64K", mb=1107.3, tilelang_ms=0.590, ours_bf16_ms=0.780, bf16_gather_ms=0.715)
    big["keys"] = 128 * 65536  # 2.147 GB of bf16 rows in 715 us: 3.00 TB/s, the fastest read here
    shape = measured(ours_bf16_ms=0.056, bf16_gather_ms=0.050)
    shape["keys"] = 64 * 8192
    # at 3.00 TB/s its 134 MB take 44.7 us: 1.12x a TileLang time of 40 us
    assert bf16_line([big, shape]).endswith(
        "(goal <= 1.10): NOT met; the bf16 rows alone, read at the fastest rate measured in this run (3.00 TB/s), "
        "take 1.12x TileLang's time"
    )
    assert "out of reach" not in " ".join(kernels_fp8.goals([big, shape]))


def test_the_bytes_at_the_fastest_read_not_the_shapes_own_gather_are_reported():
    """The shape's own bf16 gather at 1.25x TileLang (slow for its size): the bytes at the run's fastest read
    rate are what the line reports, 1.06x here."""
    big = measured(shape="decode 128 x 64K", mb=1107.3, tilelang_ms=0.590, ours_bf16_ms=0.780, bf16_gather_ms=0.715)
    big["keys"] = 128 * 65536
    shape = measured(ours_bf16_ms=0.056, bf16_gather_ms=0.0525, tilelang_ms=0.042)
    shape["keys"] = 64 * 8192
    assert shape["bf16_gather_over_tilelang"] == pytest.approx(1.25)
    assert bf16_line([big, shape]).endswith(
        "NOT met; the bf16 rows alone, read at the fastest rate measured in this "
        "run (3.00 TB/s), take 1.06x TileLang's time"
    )


def test_without_any_gather_time_the_bf16_goal_is_only_met_or_not():
    assert bf16_line([measured(ours_bf16_ms=0.052)]).endswith("(goal <= 1.10): NOT met")
    assert bf16_line([measured(ours_bf16_ms=0.043)]).endswith("(goal <= 1.10): met")


def test_bf16_on_mixed_batches_must_be_under_tilelang():
    r = measured(shape="decode 8 mixed: 1 x 64K + 7 x 2K", ours_bf16_ms=0.041, bf16_gather_ms=0.050)
    assert "decode 8 mixed: 1 x 64K + 7 x 2K: bf16 / TileLang 1.02 (goal < 1, mixed): NOT met" in lines_of(r)


def test_the_table_shows_both_gathers_and_the_bf16_floor():
    r = measured(gather_ms=0.0275, values_gather_ms=0.0272, ours_fp8_l2_ms=0.022, bf16_gather_ms=0.048)
    header, _rule, row = kernels_fp8.format_table([r]).splitlines()
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    assert (cells["gather us"], cells["values gather us"]) == ("27.50", "27.20")
    assert (cells["% gather"], cells["bf16 gather / TileLang"]) == ("91.67", "1.20")


def test_a_limit_just_under_95_percent_does_not_print_as_95():
    """94.76% of the gather (an H100 run's 64 x 2K) is NOT met and must not read "95%" beside that verdict."""
    r = measured(ours_fp8_ms=0.01229, gather_ms=0.011646, ours_fp8_l2_ms=0.00832)
    assert any(line.endswith("fp8 at 94.8% of its limit (gather; goal >= 95%): NOT met") for line in lines_of(r))


def test_a_value_is_never_shown_on_the_other_side_of_its_goal():
    assert kernels_fp8.shown(94.96, 95, 1) == "94.96"  # not "95.0" beside NOT met
    assert kernels_fp8.shown(0.996, 1.0, 2) == "0.996"
    assert kernels_fp8.shown(1.1004, 1.10, 2) == "1.1004"
    assert kernels_fp8.shown(1.32, 1.5, 2) == "1.32" and kernels_fp8.shown(95.0, 95, 1) == "95.0"
    r = measured(shape="decode 1 x 8K", mb=1.1, ours_fp8_ms=0.004016, tilelang_ms=0.0040)
    assert "decode 1 x 8K: fp8 x TileLang 0.996 (goal >= 1.0): NOT met" in lines_of(r)
