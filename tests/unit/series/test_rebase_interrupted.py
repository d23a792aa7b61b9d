"""``patches rebase`` interrupted (Ctrl-C, SIGTERM, or killed outright) keeps its state and its commits in
agreement, and ``--continue`` / ``--abort`` work right after.

The rebase runs for real on the synthetic repositories of tests/support/series_synthetic.py. The signal is
sent to this process from inside SGLang-free code the rebase calls (``classify_and_apply``, wrapped to call
the real one first), at the moment the issue was seen: the patch committed, its step not yet saved.
"""

from __future__ import annotations

import os
import signal

import pytest

from sglang_dsv4_ext.errors import GitError
from sglang_dsv4_ext.tools import exit_codes
from sglang_dsv4_ext.tools.series import rebase
from sglang_dsv4_ext.tools.series.series import load_series
from tests.support import series_synthetic as S
from tests.support.cli_calls import run_patches as run_cli

KEYS = ["applies", "applies-3way"]  # both apply on v2: the rebase only stops where it is interrupted


class Killed(BaseException):
    """Stands in for SIGKILL: the process ends mid-step and no handler runs (nothing catches a BaseException
    the tool does not know)."""


def _interrupt_first_patch(monkeypatch, action):
    """Run ``action`` right after the real classify_and_apply of the first patch has committed it."""
    real = rebase.classify_and_apply
    calls = []

    def classify_then_interrupt(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append(result)
        if len(calls) == 1:
            action()
        return result

    monkeypatch.setattr(rebase, "classify_and_apply", classify_then_interrupt)


def _commits_since(repo, sha):
    return repo.out("rev-list", "--count", f"{sha}..HEAD").strip()


def _state_agrees_with_commits(repo):
    state = rebase.load_state(repo)
    applied = [r for r in state.results if r["kind"] in ("applies", "applies-3way", "resolved")]
    assert int(_commits_since(repo, state.onto_sha)) == len(applied), (state.results, repo.out("log", "--oneline"))
    assert state.step_head == repo.must_rev_parse("HEAD")
    return state


def _start(repo, series_dir):
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]
    return args, run_cli("rebase", *args, "--onto", "v2")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_a_patch_committed_finishes_that_step_and_continue_goes_on(
    tmp_path, capsys, monkeypatch, signum
):
    """Found in review: Ctrl-C left a traceback and a state of 1 patch beside 2 commits; --continue then called
    the patch's own commit "already-applied" and advised a rebase onto the upstream release."""
    repo, series_dir = S.build_scenario(tmp_path, KEYS)
    _interrupt_first_patch(monkeypatch, lambda: os.kill(os.getpid(), signum))
    args, rc = _start(repo, series_dir)
    err = capsys.readouterr().err
    assert rc == exit_codes.for_signal(signum) and "Traceback" not in err
    assert (
        f"stopped by {signal.Signals(signum).name} after 1 of 2 patches; the saved state and the commits agree" in err
    )
    state = _state_agrees_with_commits(repo)
    assert len(state.results) == 1 and state.stop_index is None

    monkeypatch.undo()
    assert run_cli("rebase", *args, "--continue") == 0
    out, err = capsys.readouterr()
    assert "already-applied" not in out + err and "rebase done: 2 patches on v2" in out
    assert len(load_series(series_dir).names) == 2


def test_abort_right_after_an_interruption_restores_everything(tmp_path, capsys, monkeypatch):
    repo, series_dir = S.build_scenario(tmp_path, KEYS)
    before = S.snapshot(repo, series_dir)
    _interrupt_first_patch(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGINT))
    args, rc = _start(repo, series_dir)
    assert rc == exit_codes.for_signal(signal.SIGINT)
    monkeypatch.undo()
    assert run_cli("rebase", *args, "--abort") == 0
    assert not rebase.in_progress(repo) and S.snapshot(repo, series_dir) == before


def test_a_step_that_failed_under_the_signal_is_rolled_back(tmp_path, capsys, monkeypatch):
    """A terminal's Ctrl-C also reaches the git child: its command fails while the signal is held. The step is
    rolled back to the last save, then the rebase stops."""

    def signal_then_git_dies():
        os.kill(os.getpid(), signal.SIGINT)
        raise GitError("git am died of SIGINT")

    repo, series_dir = S.build_scenario(tmp_path, KEYS)
    _interrupt_first_patch(monkeypatch, signal_then_git_dies)
    args, rc = _start(repo, series_dir)
    err = capsys.readouterr().err
    assert rc == exit_codes.for_signal(signal.SIGINT) and "after 0 of 2 patches" in err
    state = _state_agrees_with_commits(repo)
    assert state.results == []

    monkeypatch.undo()
    assert run_cli("rebase", *args, "--continue") == 0
    assert "rebase done: 2 patches on v2" in capsys.readouterr().out


def test_continue_after_a_kill_mid_step_rolls_the_unsaved_commit_back(tmp_path, capsys, monkeypatch):
    """Killed outright (no handler runs) after the first patch committed: the state lists none. --continue
    resets HEAD to where the state left off and applies the patch again, never calling it "already-applied"."""

    def killed():
        raise Killed()

    repo, series_dir = S.build_scenario(tmp_path, KEYS)
    _interrupt_first_patch(monkeypatch, killed)
    with pytest.raises(Killed):
        _start(repo, series_dir)
    state = rebase.load_state(repo)
    assert state.results == [] and _commits_since(repo, state.onto_sha) == "1"  # the disagreement

    monkeypatch.undo()
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]
    assert run_cli("rebase", *args, "--continue") == 0
    out, err = capsys.readouterr()
    assert "the step in progress when the rebase was interrupted was not saved: HEAD" in err  # progress lines
    assert "already-applied" not in out + err and "rebase done: 2 patches on v2" in out
