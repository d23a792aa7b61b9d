"""Run the sessions at each concurrency level, judge every request, write the results.

Output directory (names in :mod:`.rundir`; an existing run is never overwritten):
  requests.jsonl  one line per finished request (raw output kept for failures), written and
                  flushed as each request finishes
  summary.json    rates + Wilson 95% intervals per class, per level and per session,
                  reference re-parse table, configuration, the exact re-run command, and the
                  true planned / done / not-run counts, also when the run was stopped by its
                  time limit or by a signal (then ``interrupted_by`` names the signal);
                  ``server_evidence``: per server named by ``--server-metrics``, its counters'
                  deltas over the run (:mod:`.server_evidence`) and its extension state;
                  ``extension``: what ``--expect-extension`` asked and each server's state

Before the run directory is claimed, every such server is read once: that snapshot is the
"before" of the deltas, and the extension check (:mod:`.extension_check`) may refuse the run
there, before any request is sent and before anything is written.

Signals: every signal that would end the process (:data:`sglang_dsv4_ext.tools.tool_support.stop_signals.FATAL_SIGNALS`:
SIGINT, SIGTERM, SIGHUP of a dropped SSH session, ...; one ignored at start stays ignored) is handled
alike for the run's whole life. Before the first request it ends the run with
:class:`~sglang_dsv4_ext.tools.tool_support.stop_signals.Stopped` (nothing sent, nothing written); during the
requests it
stops them, the servers are read once more (bounded) and the summary is written with ``interrupted_by``;
during that last read (or the one after a finished run) it gives the read up, the servers' rows say
so, and the summary is still written. :attr:`Runner.signal` is the first signal, for the exit code.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
import time
import uuid
from typing import IO, Any, cast

from tqdm import tqdm

from sglang_dsv4_ext import __version__
from sglang_dsv4_ext.errors import ReproInputError, ServerActivationError
from sglang_dsv4_ext.tools.repro import client as http
from sglang_dsv4_ext.tools.repro import extension_check, rundir, server_evidence, server_info, strict_json
from sglang_dsv4_ext.tools.repro.reparse import attach_reference, format_origin_table, origin_table, raw_from_visible
from sglang_dsv4_ext.tools.repro.scenario import TOOLS, TOOLS_BY_NAME, RequestSpec, session_requests
from sglang_dsv4_ext.tools.repro.settings import RunConfig, metrics_urls, requests_planned
from sglang_dsv4_ext.tools.repro.stats import rate_with_interval
from sglang_dsv4_ext.tools.repro.verdict import CLASSES, CORRUPTION_CLASSES, TRANSPORT_CLASSES, classify
from sglang_dsv4_ext.tools.tool_support import stop_signals, urls

# Server-info keys worth recording next to the results (SGLang names).
_SERVER_INFO_KEYS = (
    "version",
    "model_path",
    "served_model_name",
    "tp_size",
    "disaggregation_mode",
    "disaggregation_transfer_backend",
    "enable_hierarchical_cache",
    "hicache_ratio",
    "enable_deepseek_v4_fp4_indexer",
    "tool_call_parser",
    "reasoning_parser",
    "page_size",
)


def auth_headers(api_key_env: str | None) -> dict:
    """The Authorization header from ``--api-key-env``; refused before anything is written."""
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise ReproInputError(f"--api-key-env {api_key_env}: that environment variable is not set or empty")
    return {"Authorization": f"Bearer {key}"}


def preflight(
    urls, log_dir: str | None, expect: str, expect_dtype: str | None = None, require_records: bool = False
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """(snapshot, extension states) of ``urls``; raises ServerActivationError when the run must not start,
    :class:`~sglang_dsv4_ext.tools.tool_support.stop_signals.Stopped` at a fatal signal (each read is bounded;
    nothing is
    written). ``require_records`` (an A/B): every server's records must be readable, whatever ``expect``."""
    with stop_signals.raising():
        before = server_evidence.snapshot(urls)
        states = extension_check.server_states(before, log_dir)
    unrecorded = extension_check.refuse_unrecorded(states) if require_records else None
    if unrecorded:
        raise ServerActivationError(f"refused before sending any request: {unrecorded}")
    extension_check.check(states, expect, expect_dtype)
    return before, states


class _Tally:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {c: 0 for c in CLASSES}
        self.n = 0

    def add(self, verdict: str) -> None:
        self.counts[verdict] += 1
        self.n += 1

    def line(self) -> str:
        corrupt = sum(self.counts[c] for c in CORRUPTION_CLASSES)
        transport = sum(self.counts[c] for c in TRANSPORT_CLASSES)
        pct = 100.0 * corrupt / self.n if self.n else 0.0
        return f"ok {self.counts['ok']} corrupt {corrupt} ({pct:.1f}%) transport {transport}"


def _progress_bar(enabled: bool, total: int, label: str) -> tqdm:
    """Redrawn in place on a terminal; a line every 10 s in a log file."""
    tty = sys.stderr.isatty()
    return tqdm(
        total=total,
        desc=label,
        unit="req",
        file=sys.stderr,
        disable=not enabled,
        mininterval=0.2 if tty else 10.0,
        dynamic_ncols=tty,
    )


class Runner:
    """One run. ``out_given``: the user named ``cfg.out`` (refused when it holds anything);
    otherwise it is a default name, made unique."""

    def __init__(self, cfg: RunConfig, out_given: bool = True, require_records: bool = False):
        self.cfg = cfg
        self.out_given = out_given
        self.require_records = require_records  # an A/B side: no side runs with its servers unchecked
        self.records: list[dict] = []
        self.planned = requests_planned(cfg)
        self.stopped_by_time_limit = False
        self.interrupted_by: str | None = None  # a signal that came before the last request ended
        self.signal: int | None = None  # the first fatal signal, whenever it came (the exit code)
        self._requests_over = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self.server_info: dict | None = None
        self.model_note: str | None = None
        self.aborted_by: str | None = None
        self.detokenizer = http.Detokenizer(cfg.detokenize_url or http.base_url(cfg.endpoint))
        self.metrics_urls = metrics_urls(cfg)
        self.evidence_before: list[dict] | None = None
        self.extension_states: list[dict] | None = None
        self._jsonl: IO[str] | None = None  # requests.jsonl, open while the requests run
        self.run_id = uuid.uuid4().hex

    # ----- one request -----
    def _body(self, spec: RequestSpec, model: str) -> dict:
        cfg = self.cfg
        body = dict(cfg.extra_body)  # harness keys are refused there, so nothing below is replaced
        body.update(
            {
                "model": model,
                "messages": spec.messages,
                "tools": TOOLS,
                "tool_choice": "auto",
                "max_tokens": cfg.max_tokens,
                "temperature": cfg.temperature,
                # Per-request sampling seed: reproducible, and identical between A/B runs.
                "seed": int(spec.prompt_sha256[:8], 16),
                "stream": cfg.stream,
            }
        )
        if cfg.token_ids and not cfg.stream:
            body["return_token_ids"] = True  # SGLang: choices[0].response_token_ids
        if cfg.thinking is not None:
            body["chat_template_kwargs"] = dict(body.get("chat_template_kwargs") or {}, thinking=cfg.thinking)
        return body

    async def _raw_text(self, session, obs, raw: dict, verdict: str):
        if verdict in TRANSPORT_CLASSES:  # a cut or aborted output is kept raw, never re-parsed
            return None, "none"
        if obs.token_ids is None:
            return raw_from_visible(raw)
        text = await self.detokenizer.decode(session, obs.token_ids)
        return (text, "token_ids") if text is not None else (None, self.detokenizer.state)

    async def _one(self, session, spec: RequestSpec, level_idx: int, concurrency: int, model: str, headers) -> dict:
        cfg = self.cfg
        started = time.time()
        t0 = time.monotonic()
        body = self._body(spec, model)
        obs = await http.chat(session, http.chat_url(cfg.endpoint), body, cfg.request_timeout, headers)
        latency = time.monotonic() - t0
        verdict, detail = classify(
            obs, spec.step, spec.expected_tool, spec.expected_args, TOOLS_BY_NAME, cfg.repetition, cfg.exact_args
        )
        rec: dict[str, Any] = {
            "key": spec.key,
            "run_id": self.run_id,  # readers refuse a record beside another run's summary (rundir.load_run_records)
            "level": level_idx,
            "concurrency": concurrency,
            "session": spec.session,
            "round": spec.round,
            "step": spec.step,
            "prompt_sha256": spec.prompt_sha256,
            "expected_tool": spec.expected_tool,
            "expected_args": spec.expected_args,
            "verdict": verdict,
            "detail": detail,
            "http_status": obs.http_status,
            "finish_reason": obs.finish_reason,
            "latency_s": round(latency, 4),
            "started_at": round(started, 3),
            "usage": obs.usage,
        }
        if obs.stream_note:
            rec["stream_note"] = obs.stream_note
        if verdict != "ok":
            rec["raw"] = obs.raw_dict()
            raw_text, source = await self._raw_text(session, obs, rec["raw"], verdict)
            attach_reference(rec, raw_text, source, TOOLS_BY_NAME, cfg.repetition, cfg.exact_args)
        return rec

    def _record(self, rec: dict, tally: _Tally, bar: tqdm) -> None:
        assert self._jsonl is not None, "records are made only while requests.jsonl is open"
        self._jsonl.write(json.dumps(rec, ensure_ascii=False) + "\n")
        self._jsonl.flush()
        self.records.append(rec)
        tally.add(rec["verdict"])
        bar.set_postfix_str(tally.line(), refresh=False)
        bar.update(1)

    # ----- a level -----
    async def _run_level(self, session, level_idx: int, conc: int, headers, deadline: float | None) -> bool:
        """Run one concurrency level; False when the time limit stopped it (no later level runs)."""
        cfg = self.cfg
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            self.stopped_by_time_limit = True
            return False
        specs_by_session = [session_requests(cfg.scenario, level_idx, s) for s in range(cfg.sessions)]
        tally = _Tally()
        bar = _progress_bar(
            cfg.progress,
            sum(len(s) for s in specs_by_session),
            f"level {level_idx + 1}/{len(cfg.concurrency)} c={conc}",
        )
        sem = asyncio.Semaphore(conc)

        async def run_session(specs):
            async with sem:
                for spec in specs:
                    self._record(await self._one(session, spec, level_idx, conc, self.cfg.model, headers), tally, bar)

        tasks = [asyncio.ensure_future(run_session(s)) for s in specs_by_session]
        try:
            done, pending = await asyncio.wait(tasks, timeout=remaining)
            for t in done:
                failure = t.exception()
                if failure is not None:
                    raise failure
            # Time bound: in-flight requests are abandoned; they are not recorded.
            self.stopped_by_time_limit = bool(pending)
        finally:
            # Also on SIGINT/SIGTERM (this coroutine is cancelled): stop every session cleanly.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            bar.close()
        return not self.stopped_by_time_limit

    # ----- a whole run -----
    async def _discover(self, session) -> None:
        if not self.cfg.model:
            self.cfg.model, self.model_note = await http.first_model(session, self.cfg.endpoint)
            if self.model_note:
                print(urls.redact(f"sglang-dsv4 repro: {self.model_note}"), file=sys.stderr)
        info = await http.get_json(session, http.base_url(self.cfg.endpoint) + "/server_info")
        if isinstance(info, dict):
            self.server_info = {k: info.get(k) for k in _SERVER_INFO_KEYS if k in info}

    async def _run(self, headers: dict) -> None:
        import aiohttp

        deadline = time.monotonic() + self.cfg.time_limit if self.cfg.time_limit else None
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
            await self._discover(session)
            for level_idx, conc in enumerate(self.cfg.concurrency):
                if not await self._run_level(session, level_idx, conc, headers, deadline):
                    break

    def _note_signal(self, signum: int) -> None:
        """Remember the first fatal signal; one before the last request ended interrupts the run."""
        if self.signal is not None:  # a second signal while stopping changes nothing
            return
        self.signal = signum
        name = stop_signals.signal_name(signum)
        if not self._requests_over:
            self.interrupted_by = name
        print(f"\nsglang-dsv4 repro: {name}: stopping; writing the summary of what finished", file=sys.stderr)

    def _on_signal(self, signum: int, frame=None) -> None:
        """The handler for the run's whole life (outside the reads that :func:`stop_signals.raising` bounds)."""
        self._note_signal(signum)
        if self._loop is not None and self._task is not None:  # the requests run: cancel them from the loop's thread
            self._loop.call_soon_threadsafe(self._task.cancel)

    async def _main(self, headers: dict) -> None:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        try:
            if self.signal is None:  # a signal between the preflight and here: no request is sent
                await self._run(headers)
        except asyncio.CancelledError:
            if self.signal is None:
                raise
        finally:
            self._loop = self._task = None
            self._requests_over = True

    def run(self) -> dict:
        headers = auth_headers(self.cfg.api_key_env)  # refused before any file is created
        previous = stop_signals.install(self._on_signal)
        try:
            return self._run_and_summarize(headers)
        finally:
            stop_signals.restore(previous)

    def _run_and_summarize(self, headers: dict) -> dict:
        # Before the first request and before the directory is claimed: a refusal or a signal writes nothing.
        self.evidence_before, self.extension_states = preflight(
            self.metrics_urls,
            self.cfg.serve_logs,
            self.cfg.expect_extension,
            self.cfg.expect_index_k_dtype,
            self.require_records,
        )
        if self.signal is not None:
            raise stop_signals.Stopped(self.signal)
        self.cfg.out = rundir.claim(self.cfg.out, self.out_given)
        t0 = time.time()
        with self._open_requests() as self._jsonl:
            try:
                asyncio.run(self._main(headers))
            except KeyboardInterrupt:  # SIGINT where no handler of ours could be installed (not the main thread)
                self._note_signal(signal.SIGINT)
            except Exception as exc:
                # A bug, not a request failure (those are verdicts): keep what was recorded, then raise.
                self.aborted_by = f"{type(exc).__name__}: {exc}"
                self.write_summary(t0)
                raise
        self._requests_over = True
        return self.write_summary(t0)

    def _open_requests(self):
        path = os.path.join(self.cfg.out, rundir.REQUESTS)
        try:
            return open(path, "x", encoding="utf-8")
        except FileExistsError:  # another run claimed the same new directory a moment ago
            raise ReproInputError(f"{path}: another run is writing there; runs are never overwritten") from None

    def write_summary(self, t0: float) -> dict:
        """The one place the summary is assembled and written (add run-level evidence here)."""
        summary = summarize(self.records, self.cfg, self.planned, self.stopped_by_time_limit, self.interrupted_by)
        summary["run_id"] = self.run_id  # `compare` refuses a run compared with (a copy of) itself
        summary["started_at"] = t0
        summary["duration_s"] = round(time.time() - t0, 3)
        summary["server_info"] = self.server_info
        summary["model_note"] = self.model_note
        summary["detokenize"] = self.detokenizer.state
        summary["aborted_by"] = self.aborted_by
        summary["server_evidence"] = self._server_evidence()
        summary["extension"] = {
            "expect": self.cfg.expect_extension,
            "expect_index_k_dtype": self.cfg.expect_index_k_dtype,
            "servers": self.extension_states,
        }
        summary["servers"] = extension_check.servers_recorded(self.extension_states, summary["server_evidence"])
        cleaned, not_finite = strict_json.finite(summary)  # e.g. a NaN in a server's /server_info: null, and said
        summary = cast(dict, cleaned)  # finite gives a dict back for a dict
        if not_finite:
            summary["not_finite"] = {
                "written_as_null": not_finite,
                "why": "read from a server as a value that is not a finite number (not JSON)",
            }
        rundir.write_json_new(os.path.join(self.cfg.out, rundir.SUMMARY), summary)
        return summary

    def _read_after(self, path: str, read) -> list[dict]:
        """Every server's ``path`` once more, each read bounded; a fatal signal gives up the reads left."""
        entries: list[dict] = []
        for url in self.metrics_urls:
            try:
                with stop_signals.raising():
                    entries.append(read(url))
            except stop_signals.Stopped as stop:
                self._note_signal(stop.signum)
                left = self.metrics_urls[len(entries) :]
                entries += [
                    {"url": u, "error": f"{u.rstrip('/')}{path}: the read was given up at {stop}"} for u in left
                ]
                break
        return entries

    def _server_evidence(self) -> list[dict] | None:
        """Per server: counter deltas since the preflight snapshot and the extension state found then."""
        if self.evidence_before is None or self.extension_states is None:  # no preflight (it sets both)
            return None
        launches = [extension_check.live_launch(state) for state in self.extension_states]
        rows = server_evidence.deltas(
            self.evidence_before, self._read_after("/metrics", server_evidence.read_metrics), launches
        )
        infos_after = self._read_after("/server_info", server_info.read)
        for row, state, after in zip(rows, self.extension_states, infos_after):
            row["extension"] = extension_check.describe(state)
            why = extension_check.restart_reason(state, after)
            if why:
                server_evidence.mark_restarted(row, why)
            note = extension_check.recheck_note(state, after)
            if note and not row.get("restarted"):
                row["restart_check"] = note
        return rows


def _class_table(records: list[dict]) -> dict:
    n = len(records)
    counts = {c: 0 for c in CLASSES}
    for r in records:
        counts[r["verdict"]] += 1
    corrupt = sum(counts[c] for c in CORRUPTION_CLASSES)
    judged = n - sum(counts[c] for c in TRANSPORT_CLASSES)
    return {
        "n": n,
        "per_class": {c: rate_with_interval(counts[c], n) for c in CLASSES},
        "any_failure": rate_with_interval(n - counts["ok"], n),
        # Corruption among requests that got a response (transport failures excluded).
        "corruption": rate_with_interval(corrupt, judged),
    }


def _session_table(records: list[dict]) -> dict:
    """The incident's metric: share of sessions with at least one corrupted request."""
    sessions: dict[tuple, bool] = {}
    for r in records:
        k = (r["level"], r["session"])
        sessions[k] = sessions.get(k, False) or r["verdict"] in CORRUPTION_CLASSES
    return rate_with_interval(sum(sessions.values()), len(sessions))


def summarize(
    records: list[dict], cfg: RunConfig, planned: int, stopped: bool, interrupted_by: str | None = None
) -> dict:
    cut_short = stopped or interrupted_by is not None
    per_level = {}
    for idx, conc in enumerate(cfg.concurrency):
        recs = [r for r in records if r["level"] == idx]
        if recs or not cut_short:
            t = _class_table(recs)
            t["concurrency"] = conc
            t["sessions_with_corruption"] = _session_table(recs)
            per_level[str(idx)] = t
    overall = _class_table(records)
    overall["sessions_with_corruption"] = _session_table(records)
    return {
        "tool": f"sglang-dsv4-ext {__version__} repro",
        "label": cfg.label,
        "endpoint": cfg.endpoint,
        "model": cfg.model,
        "classes": list(CLASSES),
        "corruption_classes": list(CORRUPTION_CLASSES),
        "transport_classes": list(TRANSPORT_CLASSES),
        "requests_planned": planned,
        "requests_done": len(records),
        "not_run": planned - len(records),
        "stopped_by_time_limit": stopped,
        "interrupted": interrupted_by is not None,
        "interrupted_by": interrupted_by,
        "overall": overall,
        "per_level": per_level,
        "reference_origin_by_verdict": origin_table(records),
        # Judged streams that ended after their finish_reason but without [DONE] (client.py).
        "streams_without_done": sum(1 for r in records if r.get("stream_note")),
        "rerun_command": shlex.join(cfg.to_argv()),
        "config": cfg.as_dict(),
    }


def _cell(entry: dict) -> str:
    if entry["n"] == 0:
        return f"{'-':>26}"
    lo, hi = entry["ci95"]
    return f"{entry['count']:>5} {100 * entry['rate']:5.1f}% [{100 * lo:4.1f},{100 * hi:5.1f}]".rjust(26)


def _stop_note(summary: dict) -> str:
    if summary.get("interrupted_by"):
        return f" (interrupted by {summary['interrupted_by']}; {summary['not_run']} not run)"
    if summary["stopped_by_time_limit"]:
        return f" (stopped at the time limit; {summary['not_run']} not run)"
    return ""


def _evidence_lines(rows: list[dict] | None) -> list[str]:
    if not rows:
        return []
    lines = ["server evidence (deltas during the run):"] + server_evidence.format_table(rows).splitlines()
    return lines + [f"  {row['url']}: extension {row.get('extension', 'not checked')}" for row in rows]


def format_summary(summary: dict) -> str:
    """A short human-readable table of a summary."""
    levels = list(summary["per_level"].values())
    columns = levels + [summary["overall"]]

    def row(name: str, pick) -> str:
        return f"{name:<24}" + "".join(_cell(pick(t)) for t in columns)

    done, planned = summary["requests_done"], summary["requests_planned"]
    lines = [f"{summary.get('label') or 'run'}: {done}/{planned} requests{_stop_note(summary)}"]
    lines += extension_check.server_lines(summary.get("servers"))
    lines.append(f"{'class':<24}" + "".join(f"{'c=' + str(t['concurrency']):>26}" for t in levels) + f"{'all':>26}")
    for c in summary["classes"]:
        lines.append(row(c, lambda t, c=c: t["per_class"][c]))
    lines.append(row("corruption (responses)", lambda t: t["corruption"]))
    lines.append(row("sessions w/ corruption", lambda t: t["sessions_with_corruption"]))
    if summary.get("streams_without_done"):
        lines.append(
            f"{summary['streams_without_done']} stream(s) ended after their finish_reason without [DONE] "
            "(judged; each record's stream_note says how it ended)"
        )
    lines += _evidence_lines(summary.get("server_evidence"))
    if summary.get("reference_origin_by_verdict"):
        lines.append("failure origin from the raw-output re-parse:")
        lines += format_origin_table(summary["reference_origin_by_verdict"])
    lines.append(f"re-run: {summary['rerun_command']}")
    return "\n".join(lines)
