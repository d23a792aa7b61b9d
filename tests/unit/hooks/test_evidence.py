"""The schedulers' answer in /server_info: each carries its own activation record (runtime/hooks/evidence.py).

Runs SGLang's real reply type (``GetInternalStateReqOutput``, a msgspec struct the scheduler sends to the
tokenizer manager over ZMQ) through the hook, and checks the hook sits on SGLang's real method after
activation. ``SchedulerInternalStateController.get_internal_state`` itself needs a running scheduler
(runtime context, model runner, memory pools), so its stock reply is stood in by a small dict.
"""

from __future__ import annotations

import msgspec
import pytest

from sglang_dsv4_ext.config import load_config
from sglang_dsv4_ext.runtime import activation, compat
from sglang_dsv4_ext.runtime.hooks import evidence


def _reply():
    from sglang.srt.managers.io_struct import GetInternalStateReqOutput

    return GetInternalStateReqOutput(internal_state={"world_size": 1, "startup_time": 1.0})


def test_a_scheduler_that_passed_the_build_check_reports_active_with_its_launch(monkeypatch):
    monkeypatch.setattr(activation.STATE, "config", load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"}))
    monkeypatch.setattr(activation.STATE, "build_checked", True)
    monkeypatch.setattr(activation.STATE, "launch", "4242@1764590000.00")
    monkeypatch.setattr(activation.STATE, "index_k_built", ["bf16"])  # the c4 indexer pool the pool hook built
    reply = _reply()
    assert (
        evidence._after_get_internal_state(activation, reply, object(), None) is None
    )  # SGLang's reply, amended in place
    record = reply.internal_state[evidence.RECORD_KEY]
    assert record["active"] is True and record["index_k_dtype"] == "bf16" and record["launch"] == "4242@1764590000.00"
    assert set(activation.EVIDENCE_FIELDS) <= set(record)
    # What the scheduler sends to the tokenizer manager survives SGLang's encoding.
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(reply), type=type(reply))
    assert decoded.internal_state[evidence.RECORD_KEY] == record


@pytest.mark.parametrize("checked", [False, True], ids=["loaded-not-built", "no-config"])
def test_a_scheduler_that_built_no_dsv4_model_never_reports_active(checked, monkeypatch):
    config = None if checked else load_config({})
    monkeypatch.setattr(activation.STATE, "config", config)
    monkeypatch.setattr(activation.STATE, "build_checked", checked)
    monkeypatch.setattr(activation.STATE, "error", None)
    monkeypatch.setattr(activation.STATE, "refusals", [])
    reply = _reply()
    evidence._after_get_internal_state(activation, reply, object(), None)
    assert reply.internal_state[evidence.RECORD_KEY] == {
        "active": False,
        "reason": "no DeepSeek-V4 model or pool was built with the extension verified in this process",
    }


def test_the_hook_is_on_sglangs_method_after_activation(ext_active):
    current = compat.resolve(compat.SCHEDULER_INTERNAL_STATE.path)[2]
    installed = [h.fn for h in activation.STATE.hooks if h.target is compat.SCHEDULER_INTERNAL_STATE]
    assert len(installed) == 1 and installed[0].func is evidence._after_get_internal_state
    assert installed[0].args == (activation,)  # activation hands itself to the hook through the context
    assert activation.carries_hook(current, installed[0])
