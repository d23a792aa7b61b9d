"""tools/recall/capture_check.py behaviour that mutmut's mutants showed untested (docs/mutation-testing.md).

The capture check ``doctor`` and ``serve`` run before anything starts, called directly: which model config the
layer ids are checked against (the model path's ``config.json``, else the bundled one, and why), the capture
directory tried where the pool build would create it (an existing directory, a file, a path below a file, procfs,
where nothing can be created), nothing left behind, and the plan or the refusal naming the variable.
"""

from __future__ import annotations

import json
import os

import pytest

from sglang_dsv4_ext.config import ENV_CAPTURE, ENV_CAPTURE_LAYERS, CaptureConfig
from sglang_dsv4_ext.errors import ConfigError
from sglang_dsv4_ext.tools.recall import capture_check

PROCFS = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs procfs (Linux)")


def _model_dir(tmp_path, config: dict | None) -> str:
    """A model directory with ``config`` as its config.json (none when None)."""
    model = tmp_path / "model"
    model.mkdir()
    if config is not None:
        (model / "config.json").write_text(json.dumps(config))
    return str(model)


FOUR_LAYERS = {"num_hidden_layers": 4, "compress_ratios": [0, 4, 128, 4]}  # c4 layers 1 and 3


# ----- which model config the layer ids are checked against -----
def test_the_model_paths_config_is_read_when_it_is_a_local_directory_with_one(tmp_path):
    model, name = capture_check.model_for_path(_model_dir(tmp_path, FOUR_LAYERS))
    assert name == str(tmp_path / "model" / "config.json")
    assert model.compress_ratios == [0, 4, 128, 4]


def test_the_bundled_config_stands_in_for_no_model_path_or_one_without_a_config(tmp_path):
    model, name = capture_check.model_for_path(None)
    assert name == "the bundled DeepSeek-V4-Flash config, as no model path"
    assert model.num_hidden_layers == 43 and len(model.compress_ratios) == 44  # V4-Flash: 43 layers and the MTP one
    empty = _model_dir(tmp_path, None)
    model, name = capture_check.model_for_path(empty)
    assert name == f"the bundled DeepSeek-V4-Flash config, as {empty!r} is not a local directory with a config.json"
    assert model.num_hidden_layers == 43


def test_a_config_json_that_is_not_a_deepseek_v4_config_gives_no_model_and_says_why(tmp_path):
    path = _model_dir(tmp_path, {})
    assert capture_check.model_for_path(path) == (
        None,
        f"model config {path}/config.json: missing num_hidden_layers, compress_ratios (not a DeepSeek-V4 config?)",
    )


# ----- the capture directory, tried where the pool build creates it -----
def test_an_existing_directory_or_a_path_that_can_be_created_passes_and_nothing_is_left(tmp_path):
    assert capture_check.directory_problem(str(tmp_path)) is None
    assert capture_check.directory_problem(str(tmp_path / "new" / "deeper")) is None
    assert os.listdir(tmp_path) == []  # the trial directory removed, the path not created


def test_a_file_or_a_path_below_a_file_cannot_hold_the_capture(tmp_path):
    (tmp_path / "notes").write_text("")
    assert capture_check.directory_problem(str(tmp_path / "notes")) == "exists and is not a directory"
    assert capture_check.directory_problem(str(tmp_path / "notes" / "a" / "b")) == (
        f"cannot be created: {tmp_path / 'notes'} is not a directory"
    )


@PROCFS
def test_a_directory_where_nothing_can_be_created_is_named_with_the_systems_reason():
    assert capture_check.directory_problem("/proc") == (
        "is a directory where nothing can be created (No such file or directory)"
    )
    assert capture_check.directory_problem("/proc/sglang-dsv4-capture/deeper") == (
        "cannot be created: nothing can be created in /proc (No such file or directory)"
    )


# ----- the plan, or the refusal naming the variable -----
def _four_layer_model(tmp_path):
    return capture_check.model_for_path(_model_dir(tmp_path, FOUR_LAYERS))


def test_the_plan_lists_the_layers_captured_of_the_models_c4_layers(tmp_path):
    model, name = _four_layer_model(tmp_path)
    plan = capture_check.check_capture(CaptureConfig(directory=str(tmp_path / "cap"), layers="3,1"), model, name)
    assert plan == capture_check.CapturePlan(str(tmp_path / "cap"), [1, 3], 2, name)
    assert (
        plan.sentence()
        == f"index-K capture into {tmp_path / 'cap'}: c4 layers 1,3 (2 of 2; ids checked against {name})"
    )
    every_other = capture_check.check_capture(CaptureConfig(directory=str(tmp_path), layers="every:2"), model, name)
    assert (every_other.layers, every_other.c4_layers) == ([1], 2)


def test_layer_ids_the_model_lacks_are_refused_naming_the_config_they_were_checked_against(tmp_path):
    model, name = _four_layer_model(tmp_path)
    with pytest.raises(ConfigError) as err:
        capture_check.check_capture(CaptureConfig(directory=str(tmp_path), layers="2"), model, name)
    assert str(err.value) == (
        f"{ENV_CAPTURE_LAYERS}='2': [2] are not c4 indexer layers of this model; allowed ids: 1,3 "
        f"(checked against {name})"
    )


def test_a_directory_the_pool_build_cannot_create_is_refused_unless_not_checked(tmp_path):
    model, name = _four_layer_model(tmp_path)
    (tmp_path / "notes").write_text("")
    capture = CaptureConfig(directory=str(tmp_path / "notes"), layers="all")
    with pytest.raises(ConfigError) as err:
        capture_check.check_capture(capture, model, name)
    assert str(err.value) == (
        f"{ENV_CAPTURE}={str(tmp_path / 'notes')!r}: exists and is not a directory; allowed: a directory this user "
        "can write to, or a path where one can be created (each process writes a new subdirectory)"
    )
    assert capture_check.check_capture(capture, model, name, check_directory=False).layers == [1, 3]


def test_without_a_model_config_the_directory_is_still_checked_and_no_plan_made(tmp_path):
    assert capture_check.check_capture(CaptureConfig(directory=str(tmp_path), layers="99"), None, "x") is None
    (tmp_path / "notes").write_text("")
    with pytest.raises(ConfigError):
        capture_check.check_capture(CaptureConfig(directory=str(tmp_path / "notes")), None, "x")
