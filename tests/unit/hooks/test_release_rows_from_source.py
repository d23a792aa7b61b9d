"""Every row of the table, as each supported release has it, against that release's real source.

The suite runs once per release (``.ci/run``), but where no SGLang 0.5.22 interpreter is configured the
0.5.22 rows were checked nowhere: a dropped 0.5.22 variant (``OnRelease``) of a row, wrapped or called,
would refuse every DeepSeek-V4 build on 0.5.22 with nothing failing here. So the rows are read against the
0.5.22 wheel's own files (PyPI's, downloaded once per machine into pytest's temporary root and reused), parsed
without importing them (tests/support/release_source.py); the same reader is first held to the installed
release, where ``compat.check_targets`` judges the live functions, so the two readings are known to agree.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

from sglang_dsv4_ext.runtime import compat
from tests.support.release_source import ReleaseSource

pytestmark = pytest.mark.slow  # the other release's wheel: downloaded on first use, parsed whole

OTHER_RELEASE = "0.5.22"
ENV_WHEEL = "DSV4_TEST_SGLANG_0_5_22_WHEEL"  # a wheel already on this machine (skips the download)
ROWS = [*compat.TARGETS, *compat.CALLED]


def _wheel(cache_dir: str) -> str | None:
    given = os.environ.get(ENV_WHEEL)
    if given:
        return given
    found = sorted(glob.glob(os.path.join(cache_dir, f"sglang-{OTHER_RELEASE}-*.whl")))
    if found:
        return found[0]
    os.makedirs(cache_dir, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", f"sglang=={OTHER_RELEASE}", "-d", cache_dir]
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=600)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
        return None
    found = sorted(glob.glob(os.path.join(cache_dir, f"sglang-{OTHER_RELEASE}-*.whl")))
    return found[0] if found else None


@pytest.fixture(scope="session")
def other_release(tmp_path_factory) -> ReleaseSource:
    cache = os.path.join(str(tmp_path_factory.getbasetemp().parent), f"sglang-{OTHER_RELEASE}-wheel")
    wheel = _wheel(cache)
    if wheel is None:
        pytest.skip(
            f"SGLang {OTHER_RELEASE}'s wheel could not be had: `pip download --no-deps sglang=={OTHER_RELEASE}` "
            f"failed (no package index reachable?); set {ENV_WHEEL} to a copy of it"
        )
    return ReleaseSource.from_wheel(wheel)


@pytest.fixture(scope="session")
def installed_release() -> ReleaseSource:
    import sglang

    return ReleaseSource.from_directory(os.path.dirname(os.path.dirname(sglang.__file__)))


def _enum_defaults_by_name(signature: str) -> str:
    """A live enum default's repr (``<KVLayout.V4: 'v4'>``) as the source spells it (``KVLayout.V4``)."""
    return re.sub(r"<(\w+\.\w+): [^>]*>", r"\1", signature)


def _mismatches(source: ReleaseSource, release: str) -> list[str]:
    wrong = []
    for row in ROWS:
        as_there = row.row_for(release)
        found = source.find(row.path)
        if as_there is None:
            continue  # not hooked or called on that release (OnRelease.lacks says what it does instead)
        if found is None:
            wrong.append(f"{row.path}: missing in {release}")
            continue
        if as_there.signature == compat.ANY_SIGNATURE:
            continue
        actual = source.signature(row.path)
        if actual != _enum_defaults_by_name(as_there.signature):
            wrong.append(f"{row.path}: the row has {as_there.signature} for {release}, its source {actual}")
    return wrong


def test_the_reader_agrees_with_the_live_check_on_the_installed_release(installed_release):
    release = compat.rows_release(compat.installed_sglang_version())
    assert compat.check_targets(compat.table_for(release, ROWS)) == []  # the live functions match the rows
    assert _mismatches(installed_release, release) == []  # and so does the reader


def test_every_row_matches_the_other_releases_source(other_release):
    """Each OnRelease entry for 0.5.22 (and every row without one: the same signature there) against 0.5.22."""
    assert _mismatches(other_release, OTHER_RELEASE) == []


def test_a_dropped_release_variant_is_caught(other_release):
    """What the test above catches: the 0.5.22 variant of the _forward_prepare_normal row dropped from the table."""
    import dataclasses

    [row] = [r for r in compat.CALLED if r.path.endswith("._forward_prepare_normal")]
    assert row.on(OTHER_RELEASE) is not None
    dropped = dataclasses.replace(row, releases=())
    actual = other_release.signature(row.path)
    assert actual == row.row_for(OTHER_RELEASE).signature != dropped.row_for(OTHER_RELEASE).signature
