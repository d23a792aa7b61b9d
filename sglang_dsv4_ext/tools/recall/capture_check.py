"""Index-K capture settings checked before anything starts (``doctor``, ``serve``, ``serve --dry-run``).

Why: a capture setting that is well formed but wrong for the model or the filesystem (c4 layer ids the
model does not have, a capture directory that is a regular file) stops every server when its pool is
built, minutes into start-up, after ``doctor`` said "activated". Both are checked here, before anything
starts, with the pool build's own rules.

How: the layer ids go through :func:`sglang_dsv4_ext.runtime.index_k.capture.selected_layers` (what the pool
build runs) on the c4 layers of a model config: the model path's ``config.json`` when it is readable
here, else the bundled DeepSeek-V4-Flash config; the answer says which. The directory is checked
by trying: a temporary directory is created and removed at once in it (an existing path, which must be a
directory) or in its nearest existing ancestor (the pool build creates the path there); nothing else is left.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sglang_dsv4_ext.config import ENV_CAPTURE, CaptureConfig
from sglang_dsv4_ext.errors import ConfigError, PlanInputError
from sglang_dsv4_ext.tools.sglang_cpu.dsv4_model import Dsv4Model, load_model

BUNDLED = "the bundled DeepSeek-V4-Flash config"


@dataclass(frozen=True)
class CapturePlan:
    """What a process with this capture configuration will capture."""

    directory: str
    layers: list[int]  # c4 layer ids captured (all pipeline stages)
    c4_layers: int  # c4 layers of the model
    model: str  # which model config the ids were checked against

    def sentence(self) -> str:
        return (
            f"index-K capture into {self.directory}: c4 layers {','.join(map(str, self.layers))} "
            f"({len(self.layers)} of {self.c4_layers}; ids checked against {self.model})"
        )


def model_for_path(model_path: str | None) -> tuple[Dsv4Model | None, str]:
    """(model, which config) for a server's ``--model-path``; (None, why) when its config.json is not a
    DeepSeek-V4 config this tool can read (no verdict on layer ids then)."""
    config = Path(model_path) / "config.json" if model_path else None
    if config is None or not config.is_file():
        where = f"{model_path!r} is not a local directory with a config.json" if model_path else "no model path"
        return load_model(), f"{BUNDLED}, as {where}"
    try:
        return load_model(str(config)), str(config)
    except PlanInputError as exc:
        return None, str(exc)


def directory_problem(root: str) -> str | None:
    """Why the pool build could not create a capture run directory under ``root``, or None.

    Tried, not inferred: a temporary directory is made (and removed) where the pool build would make one, in
    ``root`` or else its nearest existing ancestor. ``os.access`` says yes for root even where ``mkdir``
    fails (procfs, sysfs, a read-only mount), so it is never the answer on its own.
    """
    path = Path(root)
    if path.exists():
        if not path.is_dir():
            return "exists and is not a directory"
        failure = _creation_failure(path)
        return f"is a directory where nothing can be created ({failure})" if failure else None
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"cannot be created: {ancestor} is not a directory"
    failure = _creation_failure(ancestor)
    return f"cannot be created: nothing can be created in {ancestor} ({failure})" if failure else None


def _creation_failure(directory: Path) -> str | None:
    """Why no directory can be created in ``directory`` (tried with a temporary one, removed at once), or None."""
    try:
        made = tempfile.mkdtemp(prefix=".sglang-dsv4-capture-check-", dir=directory)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.rmdir(made)
    return None


def check_capture(
    capture: CaptureConfig, model: Dsv4Model | None, model_name: str, check_directory: bool = True
) -> CapturePlan | None:
    """The capture a process with ``capture`` will run (None: layer ids not checked, ``model`` is None);
    :class:`ConfigError` naming the variable for what would stop its pool build."""
    from sglang_dsv4_ext.runtime.index_k import capture as index_k_capture  # imports torch: only when capture is on

    problem = directory_problem(capture.directory) if check_directory else None
    if problem:
        raise ConfigError(
            f"{ENV_CAPTURE}={capture.directory!r}: {problem}; allowed: a directory this user can "
            "write to, or a path where one can be created (each process writes a new subdirectory)"
        )
    if model is None:
        return None
    c4 = index_k_capture.c4_layer_ids(model.compress_ratios)
    try:
        layers = index_k_capture.selected_layers(capture.layers, c4)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (checked against {model_name})") from None
    return CapturePlan(capture.directory, sorted(layers), len(c4), model_name)
