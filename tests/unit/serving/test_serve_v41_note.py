"""serve says that bf16 index-K changes nothing for a model without c4 layers (DeepSeek-V4.1)."""

from __future__ import annotations

import os
import shutil

from sglang_dsv4_ext.tools.cli import main

BF16_PRESET = "dsv4-flash-8gpu-single-tp8-bf16-hicache"
NOTE = "index-K bf16 changes nothing for"
V41_CONFIG, FLASH_CONFIG = "deepseek-v4.1-flash-config.json", "deepseek-v4-flash-config.json"


def _model_dir(tmp_path, config_name: str) -> str:
    """A local model directory holding a bundled config (what a downloaded checkpoint holds)."""
    import sglang_dsv4_ext.data as data

    directory = tmp_path / config_name
    directory.mkdir()
    shutil.copy(os.path.join(data.__path__[0], config_name), directory / "config.json")
    return str(directory)


def _dry_run_output(capsys, *argv) -> str:
    assert main(["serve", "--dry-run", *argv]) == 0
    out, err = capsys.readouterr()
    return out + err


def test_bf16_for_a_local_v41_checkpoint_is_noted(capsys, tmp_path):
    v41 = _model_dir(tmp_path, V41_CONFIG)
    text = _dry_run_output(capsys, "--preset", BF16_PRESET, "--model-path", v41)
    assert f"{NOTE} {v41}: the model has no c4 layers (model_type deepseek_v41)" in text


def test_no_note_with_c4_layers_or_without_bf16(capsys, tmp_path):
    flash = _model_dir(tmp_path, FLASH_CONFIG)
    assert NOTE not in _dry_run_output(capsys, "--preset", BF16_PRESET, "--model-path", flash)
    v41 = _model_dir(tmp_path, V41_CONFIG)
    assert NOTE not in _dry_run_output(capsys, "--preset", BF16_PRESET, "--model-path", v41, "--index-k-dtype", "fp8")
