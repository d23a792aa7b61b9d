"""The plain-torch replay (benchmarks/gate_replay.py) carries copies of SGLang's ``LayerLoadingEvent``
and ``LayerDoneCounter``; they must stay what the installed SGLang ships, or the model replays
another mechanism. Compared as syntax trees (formatting and comments do not count, code does).
"""

import ast
import inspect
import textwrap

import pytest

COPIED_CLASSES = ("LayerLoadingEvent", "LayerDoneCounter")


def class_tree(source: str) -> str:
    return ast.dump(ast.parse(textwrap.dedent(source)), include_attributes=False)


@pytest.mark.parametrize("name", COPIED_CLASSES)
def test_replay_copy_matches_installed_sglang(name):
    from sglang.srt.managers import cache_controller

    from benchmarks import gate_replay

    ours = class_tree(inspect.getsource(getattr(gate_replay, name)))
    theirs = class_tree(inspect.getsource(getattr(cache_controller, name)))
    assert ours == theirs, f"benchmarks/gate_replay.py's {name} differs from SGLang's cache_controller.{name}"


def test_both_read_the_module_level_device_module():
    """The copies differ from SGLang only in how ``device_module`` is bound (torch.cuda on NVIDIA)."""
    import torch
    from sglang.srt.managers import cache_controller

    from benchmarks import gate_replay

    assert gate_replay.device_module is torch.cuda
    assert "device_module" in cache_controller.__dict__


def test_the_comparison_sees_a_changed_wait():
    """A copy whose wait_until no longer waits would not pass the comparison."""
    from sglang.srt.managers import cache_controller

    source = inspect.getsource(cache_controller.LayerDoneCounter)
    drifted = source.replace("self.events[self.consumer_index].wait(threshold)", "pass")
    assert drifted != source
    assert class_tree(drifted) != class_tree(source)
