"""Which SGLang release this process runs, for tests whose subject exists in one release only.

The whole suite runs once per supported release (``.ci/run``); a test of a target only one release
has is skipped on the other with the reason (the row's ``OnRelease.lacks`` says what that release has
instead, and where it is tested).
"""

from __future__ import annotations

import pytest

from sglang_dsv4_ext import compat

RUNNING = compat.installed_sglang_version()


def only_on(release: str, instead: str):
    """Skip unless SGLang ``release`` is installed; ``instead``: what the other release does, and its test."""
    return pytest.mark.skipif(RUNNING != release, reason=f"SGLang {release} only (this is {RUNNING}): {instead}")
