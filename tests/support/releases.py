"""Which SGLang release this process runs, for tests whose subject exists in one release only.

The whole suite runs once per supported release (``.ci/run``); a test of a target only one release
has is skipped on the other with the reason (the row's ``OnRelease.lacks`` says what that release has
instead, and where it is tested).
"""

from __future__ import annotations

import pytest

from sglang_dsv4_ext.runtime import compat

RUNNING = compat.installed_sglang_version()


def only_on(release: str, instead: str):
    """Skip unless SGLang ``release`` is installed; ``instead``: what the other release does, and its test."""
    return pytest.mark.skipif(RUNNING != release, reason=f"SGLang {release} only (this is {RUNNING}): {instead}")


# DeepSeek-V4.1 support was built on SGLang 0.5.23's V4.1 support.
ONLY_WITH_0_5_23_V41 = only_on(
    "0.5.23",
    "DeepSeek-V4.1 is supported on SGLang 0.5.23 only: 0.5.22 has no "
    "_dsv4_low_ratio_regions (V4.1's low-ratio HiCache regions) and sizes V4.1 differently",
)


def skip_unless_this_python_builds_wheels() -> None:
    """Skip when this interpreter's setuptools cannot build a wheel (the packaging tests build ours).

    An environment made with plain ``python3 -m venv`` on Python 3.11 carries setuptools 65.5, which needs the
    ``wheel`` package for ``bdist_wheel``. ``.ci/run``'s 0.5.22 environment (made by uv, with no bundled setuptools)
    gets a newer one among SGLang's dependencies, so there these tests run.
    """
    import importlib.util

    import setuptools
    from packaging.version import Version

    if Version(setuptools.__version__) >= Version("70.1") or importlib.util.find_spec("wheel") is not None:
        return
    pytest.skip(
        f"this interpreter's own setuptools {setuptools.__version__} ({setuptools.__file__}) cannot build "
        f"a wheel without the `wheel` package (a plain `python3 -m venv` environment on Python 3.11)"
    )
