"""SGLang's real ``PrefillCudaGraphRunner`` without its ``__init__``: the fields its replay path reads, set once.

The runner's ``__init__`` captures CUDA graphs for every shape; the GPU race (:mod:`.race`) and the CPU
replay test (``tests/integration/test_gate_prefill_replay.py``) build it with ``object.__new__`` instead
and run its real ``execute`` / ``_wait_for_layer_loads`` around a replay of their own. The plain
attributes those methods read in SGLang 0.5.23 (and 0.5.22) are set here and nowhere else.
"""

from __future__ import annotations

import contextlib
import inspect
from types import SimpleNamespace


def prefill_runner_without_init(pool, *, backend, replay, tokens: int, device_module):
    """``(runner, static_batch)``: a ``PrefillCudaGraphRunner`` for ``pool`` whose graph replay calls ``replay``.

    ``backend`` is SGLang's ``cuda_graph_config.Backend`` member; ``replay(shape_key, static_forward_batch,
    **kwargs)`` stands in for the captured graph; the eager model body calls ``runner.layer_model.forward``,
    which ``execute`` swaps for the replay.
    """
    import torch
    from sglang.srt.model_executor.cuda_graph_config import Backend
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    runner = object.__new__(PrefillCudaGraphRunner)
    static_batch = SimpleNamespace(
        input_ids=torch.zeros(tokens, dtype=torch.long),
        positions=torch.arange(tokens),
        attn_tp_sequence_sharded=False,
        mm_input_embeds=None,
        input_embeds=None,
    )

    def model_forward(input_ids, positions, forward_batch, **kwargs):
        return runner.layer_model.forward(input_ids, positions, forward_batch)

    runner.model_runner = SimpleNamespace(
        token_to_kv_pool=pool,
        model=SimpleNamespace(forward=model_forward),
        pp_group=SimpleNamespace(is_first_rank=False),
    )
    runner._is_full_backend = backend == Backend.FULL
    runner.prefill_backend_name = backend
    runner.capture_hidden_mode = CaptureHiddenMode.NULL
    runner.enable_cp_bcg_capture = False
    runner.max_context_size = None
    runner._capture_chunked_prefix = False
    runner.is_dsv41_model = False
    runner._qwen_bcg_hc_sidechannel = False
    runner.layer_model = SimpleNamespace(forward=None)
    runner.device_module = device_module
    runner.raw_num_tokens = tokens
    runner.model_context = contextlib.nullcontext
    runner.backend = SimpleNamespace(replay_session=contextlib.nullcontext, replay=replay)
    # What this SGLang's load_batch returns: 0.5.23 the batch and its shared-read ends, 0.5.22 the batch.
    returns_read_ends = "tuple" in str(inspect.signature(PrefillCudaGraphRunner.load_batch).return_annotation)
    runner.load_batch = lambda forward_batch, **kwargs: (static_batch, None) if returns_read_ends else static_batch
    runner._prefill_forward_context = lambda forward_batch, **kwargs: contextlib.nullcontext()
    return runner, static_batch
