"""Live activation evidence: each scheduler answers ``/server_info`` with its own activation record.

Why: the activation line lives in a log that later starts append to, and the activation gauge in
prometheus files that an operator-set ``PROMETHEUS_MULTIPROC_DIR`` keeps across launches (SGLang leaves
the variable on the shared parent directory, ``srt/utils/common.py: set_prometheus_multiproc_dir``, and
``add_prometheus_middleware`` aggregates every ``.db`` file there): both can show "active" for a later
stock server. ``/server_info`` (``srt/entrypoints/http_server.py``) returns ``internal_states``, which
the tokenizer manager gathers from the schedulers when the request arrives.

How: an AFTER hook on ``SchedulerInternalStateController.get_internal_state`` adds
``internal_state["sglang_dsv4_ext"]``, the process's evidence record (activation's, handed to the hook through
its ``HookContext``): ``active``
with the configuration and launch identity once this scheduler passed the DeepSeek-V4 build check,
else ``active: false`` with the reason. A stock scheduler (``SGLANG_DSV4_EXT=0``, ``SGLANG_PLUGINS``
without us) has no hook and answers without the key. ``repro --expect-extension`` reads it first.

Upstream status: not upstream (SGLang does not report which plugins are active in a process).
Retire when: SGLang reports each process's loaded plugins and their state in ``/server_info``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.record_names import EVIDENCE_RECORD_KEY as RECORD_KEY

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.hooks import Hook, HookContext, ProcessRecord


def _after_get_internal_state(process: ProcessRecord, result: object, self: object, recv_req: object) -> None:
    state = getattr(result, "internal_state", None)
    if isinstance(state, dict):
        state[RECORD_KEY] = process.evidence_record()
    return None  # the same reply, with our record in it


def hooks(ctx: HookContext) -> list[Hook]:
    from sglang_dsv4_ext.runtime.hooks import Hook

    return [Hook(compat.SCHEDULER_INTERNAL_STATE, functools.partial(_after_get_internal_state, ctx.process), "after")]
