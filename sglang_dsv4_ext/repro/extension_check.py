"""Is sglang-dsv4-ext active on every server a run reads? Decided before the first request.

Why: a run against a stack where the extension silently did not load (``SGLANG_PLUGINS`` without
it, ``SGLANG_DSV4_EXT=0`` left over, another interpreter) measures stock SGLang under the
extension's name; a PD pair whose prefill and decode disagree on the index-K dtype corrupts
transfers without any error. Neither shows in the harness's verdicts, so ``repro run`` checks each
named server first (``--expect-extension``) and records what it found in the summary either way.

How, per server (first source that decides wins):

1. its ``/metrics`` (:func:`server_evidence.snapshot`): the gauge ``sglang:dsv4_ext_active`` at 1
   means active, with its labels; the gauge at 0 means not active;
2. its log in ``sglang-dsv4 serve``'s log directory (``--serve-logs``; the log whose start command
   serves the URL's port), read by :func:`serving.activation_check.check_server_log`: the activation
   line means active, its absence means not active;
3. ``/metrics`` with SGLang's own families but no gauge: not active;
4. otherwise unknown (metrics off or unreadable, no log).

``on`` refuses a server that is not active, and servers that disagree on ``index_k_dtype``;
``off`` (a stock baseline) refuses an active one; ``any`` records only.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
from typing import Dict, List, Optional
from urllib.parse import urlsplit

from sglang_dsv4_ext.errors import ActivationError, ServerActivationError
from sglang_dsv4_ext.repro.server_evidence import EXTENSION_GAUGE
from sglang_dsv4_ext.serving import activation_check

EXPECT_CHOICES = ("on", "off", "any")
ACTIVE, INACTIVE, UNKNOWN = "active", "inactive", "unknown"
# The header serve writes before each start of a child (serving/supervise.py, start_header).
_LOG_HEADER = re.compile(r"^# \d{4}-\d\d-\d\d \d\d:\d\d:\d\d (.*)$")
_SUPERVISOR_LOG = "serve.log"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SHOWN_FIELDS = ("index_k_dtype", "gate", "fp4_budget", "integrity", "version")


def _state(url: str, state: str, source: Optional[str], found: str, labels=None) -> Dict[str, object]:
    return {"url": url, "state": state, "source": source, "found": found, "label_sets": labels or []}


# ----- a server's log in serve's log directory -------------------------------------------------
def _last_start_command(log_path: str) -> List[str]:
    """The argv of the last start recorded in one child's log ([] when none or unreadable)."""
    last = None
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                m = _LOG_HEADER.match(line.rstrip("\n"))
                last = m.group(1) if m else last
        return shlex.split(last) if last else []
    except (OSError, ValueError):
        return []


def _flag_value(argv: List[str], flag: str) -> Optional[str]:
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def _url_port(url: str) -> Optional[int]:
    parts = urlsplit(url)
    return parts.port or _DEFAULT_PORTS.get(parts.scheme)


def server_logs(log_dir: str, url: str) -> List[str]:
    """The logs in ``log_dir`` of SGLang servers started on ``url``'s port (routers left out).

    Several (one per node of a shared log directory): those whose ``--host`` is the URL's host.
    """
    port, host = str(_url_port(url)), urlsplit(url).hostname
    found = []
    for path in sorted(glob.glob(os.path.join(log_dir, "*.log"))):
        argv = _last_start_command(path) if os.path.basename(path) != _SUPERVISOR_LOG else []
        if argv and _flag_value(argv, "--port") == port and not any("sglang_router" in w for w in argv):
            found.append((path, _flag_value(argv, "--host")))
    same_host = [p for p, h in found if h == host]
    return same_host if len(found) > 1 and same_host else [p for p, _ in found]


def _from_log(url: str, log_dir: str) -> Optional[Dict[str, object]]:
    logs = server_logs(log_dir, url)
    if len(logs) != 1:
        return None if not logs else _state(url, UNKNOWN, None, f"several logs in {log_dir} serve its port: "
                                            f"{', '.join(os.path.basename(p) for p in logs)}")
    try:
        fields = activation_check.check_server_log(url, logs[0], {})
    except ActivationError as exc:
        return _state(url, INACTIVE, f"serve-log:{logs[0]}", str(exc))
    return _state(url, ACTIVE, f"serve-log:{logs[0]}", f"activation line in {logs[0]}", [fields])


# ----- one server, all sources ----------------------------------------------------------------
def _from_gauge(entry: Dict[str, object]) -> Optional[Dict[str, object]]:
    url, label_sets = entry["url"], entry.get("extension")
    if label_sets is None:
        return None
    if not label_sets:
        return _state(url, INACTIVE, "metrics", f"{EXTENSION_GAUGE} is exported but not 1")
    return _state(url, ACTIVE, "metrics", f"{EXTENSION_GAUGE} = 1", label_sets)


def _without_gauge(entry: Dict[str, object], log_note: str) -> Dict[str, object]:
    url = entry["url"]
    if "error" in entry:
        return _state(url, UNKNOWN, None, f"its /metrics could not be read ({entry['error']}){log_note}")
    if entry.get("sglang_metrics"):
        return _state(url, INACTIVE, "metrics", f"its /metrics has SGLang's metrics but no {EXTENSION_GAUGE} "
                      "(SGLANG_DSV4_EXT=0? SGLANG_PLUGINS without sglang_dsv4_ext? an older sglang-dsv4-ext?)"
                      f"{log_note}")
    return _state(url, UNKNOWN, None,
                  f"its /metrics has no SGLang metrics (SGLang started without --enable-metrics?){log_note}")


def server_state(entry: Dict[str, object], log_dir: Optional[str]) -> Dict[str, object]:
    """``{"url", "state", "source", "found", "label_sets"}`` of one snapshot entry (see the module doc)."""
    decided = _from_gauge(entry)
    if decided is None and log_dir:
        decided = _from_log(entry["url"], log_dir)
    if decided is not None:
        return decided
    log_note = f"; no log in {log_dir} starts a server on port {_url_port(entry['url'])}" if log_dir else ""
    return _without_gauge(entry, log_note)


def server_states(snapshot: List[Dict[str, object]], log_dir: Optional[str]) -> List[Dict[str, object]]:
    return [server_state(entry, log_dir) for entry in snapshot]


def describe(state: Dict[str, object]) -> str:
    """One line for tables: the state, the configuration it reports and where it was read."""
    if state["state"] != ACTIVE:
        return f"{state['state']}: {state['found']}"
    fields = [f"{k}={'/'.join(_values(state, k))}" for k in _SHOWN_FIELDS if _values(state, k)]
    return f"active {' '.join(fields)} ({state['source']})"


def _values(state: Dict[str, object], key: str) -> List[str]:
    return sorted({ls[key] for ls in state["label_sets"] if key in ls})


# ----- the decision --------------------------------------------------------------------------
_FIX_UNKNOWN = ("to show it, start SGLang with --enable-metrics (the extension then exports {gauge}), or pass "
                "--serve-logs DIR (the log directory of `sglang-dsv4 serve`), or name each prefill/decode server "
                "with --server-metrics URL[,URL...] (a router has no such metrics)")
_FIX_INACTIVE = ("where it is not active, restart the server with the extension loaded (SGLANG_PLUGINS naming "
                 "sglang_dsv4_ext or unset, SGLANG_DSV4_EXT not 0; `sglang-dsv4 doctor` on its node says why), or "
                 "pass --expect-extension off for a stock baseline")
_FIX_ANY = "to run anyway and only record the state, pass --expect-extension any"


def _refuse_inactive(states: List[Dict[str, object]]) -> Optional[str]:
    missing = [s for s in states if s["state"] != ACTIVE]
    if not missing:
        return None
    found = "; ".join(f"{s['url']}: {s['found']}" for s in missing)
    fixes = [_FIX_UNKNOWN.format(gauge=EXTENSION_GAUGE)] if any(s["state"] == UNKNOWN for s in missing) else []
    fixes += [_FIX_INACTIVE] if any(s["state"] == INACTIVE for s in missing) else []
    return (f"--expect-extension on: sglang-dsv4-ext is not shown active on every server, so the run would not "
            f"measure the extension. {found}. Fix: {'; '.join(fixes + [_FIX_ANY])}.")


def _refuse_mixed_dtypes(states: List[Dict[str, object]]) -> Optional[str]:
    dtypes = {s["url"]: _values(s, "index_k_dtype") for s in states}
    if len({d for values in dtypes.values() for d in values}) <= 1:
        return None
    found = ", ".join(f"{url}: {'/'.join(v) or '?'}" for url, v in dtypes.items())
    return (f"--expect-extension on: the servers disagree on index_k_dtype ({found}); prefill and decode must use "
            "the same index-K dtype or PD transfers are corrupted without an error. Fix: start every server with "
            "the same SGLANG_DSV4_INDEX_K_DTYPE (`sglang-dsv4 serve` does so for a whole stack), or pass "
            "--expect-extension any to only record the state.")


def _refuse_active(states: List[Dict[str, object]]) -> Optional[str]:
    active = [s for s in states if s["state"] == ACTIVE]
    if not active:
        return None
    found = "; ".join(f"{s['url']}: {describe(s)}" for s in active)
    return (f"--expect-extension off (a stock baseline): sglang-dsv4-ext is active on {found}. Fix: restart it "
            "with SGLANG_DSV4_EXT=0, point the run at the stock stack, or pass --expect-extension on (or any).")


def refusal(states: List[Dict[str, object]], expect: str) -> Optional[str]:
    """Why the run must not start with ``--expect-extension expect``, or None."""
    if expect == "on":
        return _refuse_inactive(states) or _refuse_mixed_dtypes(states)
    if expect == "off":
        return _refuse_active(states)
    return None


def check(states: List[Dict[str, object]], expect: str) -> None:
    """Raise :class:`ServerActivationError` (one paragraph) when the run must not start."""
    reason = refusal(states, expect)
    if reason:
        raise ServerActivationError(f"refused before sending any request: {reason}")
