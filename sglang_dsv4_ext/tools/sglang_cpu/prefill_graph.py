"""Will SGLang's breakable prefill CUDA graph be on? Answered by SGLang's own argument resolution.

In SGLang 0.5.23 the breakable prefill graph is the CUDA default, but
``srt/arg_groups/cuda_graph_hook.py`` turns it off for DeepSeek-V4 (the rule "DeepSeek-V4 (heavy
capture-pool memory pressure)") unless the prefill backend is set explicitly
(``--cuda-graph-backend-prefill breakable``) or a supported prefill-CP combination applies
(``layers/cp/bcg``; none includes the DSV4 backend). Whether the R3 wait-ahead fix (index-K readers,
docs/patch-point-map.md) is in play depends on that answer, so ``doctor`` and ``serve --dry-run`` state it.

How: SGLang's parser (``ServerArgs.add_cli_args`` / ``from_cli_args``) builds an unresolved record and
SGLang's ``handle_cuda_graph_config`` step runs on it through ``run_hook`` (the same dispatch the
resolution pipeline uses), then ``resolved_view`` reads the prefill backend. Two facts come from outside,
because this runs on the launch host, possibly without a GPU and without the checkpoint:

* the model architecture: a ``model_config`` stand-in whose ``hf_config`` is the bundled DeepSeek-V4-Flash
  config (``data/deepseek-v4-flash-config.json``), or another architecture name for comparison;
* the platform: the generated servers run on CUDA, so SGLang's ``is_cuda`` answers True while the step
  runs (its CUDA default for the prefill backend is breakable; elsewhere it is disabled).

The prefill-CP default (``apply_prefill_cp_cuda_graph_default``) runs later in SGLang's pipeline, after
context parallelism resolves; with ``--enable-prefill-cp`` the answer says so instead of guessing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from unittest import mock

from sglang_dsv4_ext.errors import PrefillGraphArgsError

DSV4_ARCHITECTURE = "DeepseekV4ForCausalLM"
BREAKABLE = "breakable"
UNRESOLVED = "unresolved"
_BUNDLED_CONFIG = "deepseek-v4-flash-config.json"
_HOOK_LOGGER = "sglang.srt.arg_groups.cuda_graph_hook"


@dataclass(frozen=True)
class PrefillGraphAnswer:
    backend: str  # SGLang's resolved prefill backend: "breakable", "full" or "disabled"
    why: str

    @property
    def breakable(self) -> bool:
        return self.backend == BREAKABLE

    def sentence(self) -> str:
        if self.backend == UNRESOLVED:
            return f"breakable prefill graph unknown ({self.why})"
        state = "on" if self.breakable else "off"
        r3 = "R3 wait-ahead fix in play" if self.breakable else "R3 wait-ahead fix not in play"
        return f"breakable prefill graph {state} (prefill backend {self.backend}; {self.why}); {r3}"


def _hf_config(architecture: str):
    from transformers import PretrainedConfig

    raw = json.loads(resources.files("sglang_dsv4_ext.data").joinpath(_BUNDLED_CONFIG).read_text())
    fields = {k: v for k, v in raw.items() if not k.startswith("_")}
    fields["architectures"] = [architecture]
    return PretrainedConfig(**fields)


def _model_config_standin(architecture: str):
    """What ``model_config_of`` hands the cuda-graph rules (fields they read): text-only, this architecture."""
    return types.SimpleNamespace(
        hf_config=_hf_config(architecture),
        is_multimodal=False,
        is_multimodal_breakable_cuda_graph_supported=False,
    )


def _parse(server_argv: Sequence[str]):
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang.launch_server", add_help=False)
    ServerArgs.add_cli_args(parser)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            namespace = parser.parse_args(list(server_argv))
    except SystemExit:
        reason = [line for line in stderr.getvalue().splitlines() if ": error: " in line][-1:] or ["(no message)"]
        reason = reason[0].split(": error: ", 1)[-1]
        raise PrefillGraphArgsError(f"SGLang's parser rejected the server arguments: {reason}") from None
    return ServerArgs.from_cli_args(namespace)


@contextlib.contextmanager
def _on_cuda() -> Iterator[None]:
    """SGLang's platform check answers CUDA, as it will on the generated servers.

    Only while the resolution step runs; the modules its rules import are imported before, on the real
    platform (their import-time device probes must not see the stand-in).
    """
    import sglang.srt.configs.model_config  # noqa: F401
    import sglang.srt.layers.cp.bcg  # noqa: F401

    with mock.patch("sglang.srt.utils.is_cuda", lambda: True):
        yield


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _sglang_messages() -> Iterator[list]:
    """SGLang's own cuda-graph resolution messages (its reasons), kept off the terminal."""
    logger = logging.getLogger(_HOOK_LOGGER)
    handler, propagate, level = _Collect(), logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate, logger.level = False, logging.INFO
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.propagate, logger.level = propagate, level


def resolve(server_argv: Sequence[str], architecture: str = DSV4_ARCHITECTURE) -> PrefillGraphAnswer:
    """The prefill graph backend SGLang resolves for ``server_argv`` (``sglang.launch_server`` flags)."""
    from sglang.srt.arg_groups.cuda_graph_hook import handle_cuda_graph_config
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.arg_groups.resolution_hooks import run_hook

    server_args = _parse(server_argv)
    server_args._model_config = _model_config_standin(architecture)  # no built_from key: used as given
    with _sglang_messages() as messages, _on_cuda():
        run_hook(handle_cuda_graph_config, server_args)
    backend = str(resolved_view(server_args).cuda_graph_config.prefill.backend)
    return PrefillGraphAnswer(backend, _why(server_args, backend, architecture, messages))


# SGLang's names for the resolution steps that change the prefill backend (declare_resolution sources).
_STEP_WORDS = {
    "_parse_cuda_graph_config": "from the server flags and SGLang's platform default",
    "_apply_cuda_graph_disaggregation_roles": "SGLang turns it off on a --disaggregation-mode decode server",
    "_apply_cuda_graph_compatibility": "SGLang's compatibility rules",
    "_disable_breakable_cudagraph_if_incompatible": "SGLang's breakable-graph incompatibility rules",
}


def _deciding_step(server_args) -> str:
    """The last SGLang resolution step that changed the prefill backend."""
    step, backend = "_parse_cuda_graph_config", None
    for source, declared in getattr(server_args, "_resolved_overrides", None) or ():
        config = declared.get("cuda_graph_config")
        if config is None:
            continue
        if backend is not None and config.prefill.backend != backend:
            step = source
        backend = config.prefill.backend
    return step


def _why(server_args, backend: str, architecture: str, messages: list) -> str:
    if server_args.enable_prefill_cp:
        return "--enable-prefill-cp: SGLang decides after context parallelism resolves; check the server log"
    if ("prefill", "backend") in getattr(server_args, "_cuda_graph_config_locked", set()):
        return "set explicitly by the server flags"
    step = _deciding_step(server_args)
    said = "; ".join(m.rstrip(".") for m in messages)
    words = _STEP_WORDS.get(step, step)
    arch = "DeepSeek-V4" if architecture == DSV4_ARCHITECTURE else architecture
    return f"{words} for {arch}" + (f': SGLang says "{said}"' if said else "")


def in_this_process() -> PrefillGraphAnswer | None:
    """This process's published configuration (a running SGLang server); None when no server args are published.

    The published ``exec`` bag holds the resolved graph configuration; server args published without it
    (resolution not run in this process) are reported as such rather than guessed.
    """
    from sglang.srt.runtime_context import get_context, get_exec

    try:
        config = get_exec().graph.cuda_graph_config
    except (ValueError, AttributeError):  # SGLang raises ValueError for an unpublished namespace
        config = None
    if config is not None:
        return PrefillGraphAnswer(str(config.prefill.backend), "published server args of this process")
    try:
        _ = get_context().server_args  # raises while SGLang has published none
    except ValueError:  # "Global server args is not set yet!"
        return None
    return PrefillGraphAnswer(UNRESOLVED, "server args are published but their CUDA-graph config is not resolved")
