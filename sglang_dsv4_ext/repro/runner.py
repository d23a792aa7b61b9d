"""Run the sessions at each concurrency level, judge every request, write the results.

Output directory:
  requests.jsonl  one line per finished request (raw output kept for failures)
  summary.json    rates + Wilson 95% intervals per class, per level and per session,
                  reference re-parse table, configuration, the exact re-run command
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from sglang_dsv4_ext import __version__
from sglang_dsv4_ext.repro import client as http
from sglang_dsv4_ext.repro.reparse import attach_reference, raw_from_visible
from sglang_dsv4_ext.repro.scenario import TOOLS, TOOLS_BY_NAME, RequestSpec, ScenarioConfig, session_requests
from sglang_dsv4_ext.repro.stats import rate_with_interval
from sglang_dsv4_ext.repro.verdict import (
    CLASSES,
    CORRUPTION_CLASSES,
    TRANSPORT_CLASSES,
    RepetitionRule,
    classify,
)

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


@dataclass
class RunConfig:
    endpoint: str
    out: str
    model: Optional[str] = None
    label: str = ""
    scenario: ScenarioConfig = field(default_factory=ScenarioConfig)
    concurrency: List[int] = field(default_factory=lambda: [8])
    max_tokens: int = 2048
    temperature: float = 0.0
    request_timeout: float = 300.0
    time_limit: Optional[float] = None
    stream: bool = False
    token_ids: bool = True
    detokenize_url: Optional[str] = None  # default: the endpoint's base URL
    thinking: Optional[bool] = None  # None: the server's default
    extra_body: dict = field(default_factory=dict)
    exact_args: bool = True
    repetition: RepetitionRule = field(default_factory=RepetitionRule)
    api_key_env: Optional[str] = None
    progress: bool = True

    def __post_init__(self):
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise ValueError(f"--concurrency needs integers >= 1, got {self.concurrency}")
        if self.max_tokens < 1:
            raise ValueError(f"--max-tokens must be >= 1, got {self.max_tokens}")
        if self.request_timeout <= 0:
            raise ValueError(f"--request-timeout must be > 0, got {self.request_timeout}")
        if self.time_limit is not None and self.time_limit <= 0:
            raise ValueError(f"--time-limit must be > 0, got {self.time_limit}")

    def to_argv(self) -> List[str]:
        """The command line that repeats this run exactly (same prompts, same settings)."""
        s = self.scenario
        argv = ["sglang-dsv4", "repro", "run", "--endpoint", self.endpoint]
        if self.model:
            argv += ["--model", self.model]
        if self.label:
            argv += ["--label", self.label]
        argv += [
            "--sessions", str(s.sessions), "--rounds", str(s.rounds),
            "--concurrency", ",".join(str(c) for c in self.concurrency),
            "--seed", str(s.seed), "--temperature", repr(self.temperature),
            "--max-tokens", str(self.max_tokens), "--request-timeout", repr(self.request_timeout),
            "--system-prompt-chars", str(s.system_prompt_chars), "--tool-result-chars", str(s.tool_result_chars),
            "--repetition", f"{self.repetition.min_repeats},{self.repetition.min_chars},{self.repetition.max_period}",
        ]  # fmt: skip
        if self.time_limit is not None:
            argv += ["--time-limit", repr(self.time_limit)]
        if not s.answer_step:
            argv.append("--no-answer-step")
        if self.stream:
            argv.append("--stream")
        if not self.token_ids:
            argv.append("--no-token-ids")
        if self.detokenize_url:
            argv += ["--detokenize-url", self.detokenize_url]
        if self.thinking is not None:
            argv += ["--thinking", "on" if self.thinking else "off"]
        if self.extra_body:
            argv += ["--extra-body", json.dumps(self.extra_body, sort_keys=True)]
        if not self.exact_args:
            argv.append("--no-exact-args")
        if self.api_key_env:
            argv += ["--api-key-env", self.api_key_env]
        argv += ["--out", self.out + "-rerun"]
        return argv

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["scenario"] = dataclasses.asdict(self.scenario)
        d["repetition"] = dataclasses.asdict(self.repetition)
        return d


class Progress:
    """One status line: redrawn in place on a terminal, printed every 10 s otherwise."""

    def __init__(self, enabled: bool, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0.0

    def update(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        interval = 0.2 if self.tty else 10.0
        if not force and now - self._last < interval:
            return
        self._last = now
        if self.tty:
            self.stream.write("\r\033[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self, text: str) -> None:
        if self.enabled:
            self.stream.write(("\r\033[K" if self.tty else "") + text + "\n")
            self.stream.flush()


def _bar(done: int, total: int, width: int = 24) -> str:
    filled = int(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


class _Tally:
    def __init__(self):
        self.counts: Dict[str, int] = {c: 0 for c in CLASSES}
        self.n = 0

    def add(self, verdict: str) -> None:
        self.counts[verdict] += 1
        self.n += 1

    def line(self) -> str:
        corrupt = sum(self.counts[c] for c in CORRUPTION_CLASSES)
        transport = sum(self.counts[c] for c in TRANSPORT_CLASSES)
        pct = 100.0 * corrupt / self.n if self.n else 0.0
        return f"ok {self.counts['ok']} corrupt {corrupt} ({pct:.1f}%) transport {transport}"


class Runner:
    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.progress = Progress(cfg.progress)
        self.records: List[dict] = []
        self.planned = 0
        self.stopped_by_time_limit = False
        self._detok_state = "untried"  # untried | ok | unavailable: reason
        self._jsonl = None

    # ----- one request -----
    def _body(self, spec: RequestSpec, model: str) -> dict:
        cfg = self.cfg
        body = {
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
        if cfg.token_ids and not cfg.stream:
            body["return_token_ids"] = True  # SGLang: choices[0].response_token_ids
        if cfg.thinking is not None:
            body["chat_template_kwargs"] = {"thinking": cfg.thinking}
        body.update(cfg.extra_body)
        return body

    async def _maybe_detokenize(self, session, ids) -> tuple:
        if self._detok_state.startswith("unavailable"):
            return None, self._detok_state
        base = self.cfg.detokenize_url or http.base_url(self.cfg.endpoint)
        try:
            text = await http.detokenize(session, base, ids)
            self._detok_state = "ok"
            return text, "token_ids"
        except Exception as exc:
            if self._detok_state == "untried":
                # Routers often do not forward /detokenize: stop asking, say why.
                self._detok_state = f"unavailable: {base}/detokenize failed ({exc}); run `sglang-dsv4 repro reparse` with --detokenize-url or --tokenizer"
            return None, self._detok_state

    async def _one(self, session, spec: RequestSpec, level_idx: int, concurrency: int, model: str, headers) -> dict:
        cfg = self.cfg
        started = time.time()
        t0 = time.monotonic()
        obs = await http.chat(session, http.chat_url(cfg.endpoint), self._body(spec, model), cfg.request_timeout, headers)
        latency = time.monotonic() - t0
        verdict, detail = classify(
            obs, spec.step, spec.expected_tool, spec.expected_args, TOOLS_BY_NAME, cfg.repetition, cfg.exact_args
        )
        rec = {
            "key": spec.key,
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
        if verdict != "ok":
            rec["raw"] = obs.raw_dict()
            raw_text, source = None, "none"
            if obs.transport == "ok" and obs.token_ids is not None:
                raw_text, source = await self._maybe_detokenize(session, obs.token_ids)
            elif obs.transport == "ok":
                raw_text, source = raw_from_visible(rec["raw"])
            attach_reference(rec, raw_text, source, TOOLS_BY_NAME, cfg.repetition, cfg.exact_args)
        return rec

    def _record(self, rec: dict, tally: _Tally, total_level: int, level_label: str, t_start: float) -> None:
        self.records.append(rec)
        tally.add(rec["verdict"])
        self._jsonl.write(json.dumps(rec, ensure_ascii=False) + "\n")
        self._jsonl.flush()
        elapsed = time.monotonic() - t_start
        limit = f"/{self.cfg.time_limit:g}s" if self.cfg.time_limit else "s"
        self.progress.update(
            f"{level_label} {_bar(tally.n, total_level)} {tally.n}/{total_level}  {tally.line()}  "
            f"{tally.n / max(elapsed, 1e-9):.1f} req/s  {elapsed:.0f}{limit}"
        )

    # ----- a whole run -----
    async def _run(self) -> None:
        import aiohttp

        cfg = self.cfg
        headers = {}
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env)
            if not key:
                raise SystemExit(f"--api-key-env {cfg.api_key_env}: that environment variable is not set")
            headers["Authorization"] = f"Bearer {key}"
        t_start = time.monotonic()
        deadline = t_start + cfg.time_limit if cfg.time_limit else None
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
            model = cfg.model
            if not model:
                models = await http.get_json(session, http.base_url(cfg.endpoint) + "/v1/models")
                data = (models or {}).get("data") or []
                model = data[0].get("id") if data else "default"
                cfg.model = model
            info = await http.get_json(session, http.base_url(cfg.endpoint) + "/server_info")
            self.server_info = {k: info.get(k) for k in _SERVER_INFO_KEYS if k in info} if isinstance(info, dict) else None

            for level_idx, conc in enumerate(cfg.concurrency):
                specs_by_session = [session_requests(cfg.scenario, level_idx, s) for s in range(cfg.scenario.sessions)]
                total_level = sum(len(s) for s in specs_by_session)
                tally = _Tally()
                label = f"level {level_idx + 1}/{len(cfg.concurrency)} c={conc}"
                sem = asyncio.Semaphore(conc)

                async def run_session(specs):
                    async with sem:
                        for spec in specs:
                            rec = await self._one(session, spec, level_idx, conc, model, headers)
                            self._record(rec, tally, total_level, label, t_start)

                tasks = [asyncio.ensure_future(run_session(s)) for s in specs_by_session]
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    for t in tasks:
                        t.cancel()
                    self.stopped_by_time_limit = True
                else:
                    done, pending = await asyncio.wait(tasks, timeout=remaining)
                    for t in done:
                        if t.exception() is not None:
                            raise t.exception()
                    if pending:
                        # Time bound: abandon in-flight requests; they are not recorded.
                        for t in pending:
                            t.cancel()
                        await asyncio.gather(*pending, return_exceptions=True)
                        self.stopped_by_time_limit = True
                self.planned += total_level
                self.progress.done(f"{label} {_bar(tally.n, total_level)} {tally.n}/{total_level}  {tally.line()}")
                if self.stopped_by_time_limit:
                    # Levels never started still count as planned-but-not-run.
                    self.planned += (len(cfg.concurrency) - level_idx - 1) * total_level
                    break

    def run(self) -> dict:
        cfg = self.cfg
        os.makedirs(cfg.out, exist_ok=True)
        t0 = time.time()
        with open(os.path.join(cfg.out, "requests.jsonl"), "w") as self._jsonl:
            try:
                asyncio.run(self._run())
            except KeyboardInterrupt:
                self.progress.done("interrupted: writing the summary of what finished")
                self.interrupted = True
        summary = summarize(self.records, cfg, self.planned, self.stopped_by_time_limit)
        summary["started_at"] = t0
        summary["duration_s"] = round(time.time() - t0, 3)
        summary["server_info"] = getattr(self, "server_info", None)
        summary["interrupted"] = getattr(self, "interrupted", False)
        summary["detokenize"] = self._detok_state
        with open(os.path.join(cfg.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2, ensure_ascii=False)
        return summary


def _class_table(records: List[dict]) -> dict:
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


def _session_table(records: List[dict]) -> dict:
    """The incident's metric: share of sessions with at least one corrupted request."""
    sessions: Dict[tuple, bool] = {}
    for r in records:
        k = (r["level"], r["session"])
        sessions[k] = sessions.get(k, False) or r["verdict"] in CORRUPTION_CLASSES
    return rate_with_interval(sum(sessions.values()), len(sessions))


def summarize(records: List[dict], cfg: RunConfig, planned: int, stopped: bool) -> dict:
    per_level = {}
    for idx, conc in enumerate(cfg.concurrency):
        recs = [r for r in records if r["level"] == idx]
        if recs or not stopped:
            t = _class_table(recs)
            t["concurrency"] = conc
            t["sessions_with_corruption"] = _session_table(recs)
            per_level[str(idx)] = t
    origin: Dict[str, Dict[str, int]] = {}
    for r in records:
        if r["verdict"] != "ok":
            o = (r.get("reference") or {}).get("origin", "unknown")
            origin.setdefault(r["verdict"], {}).setdefault(o, 0)
            origin[r["verdict"]][o] += 1
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
        "not_run": max(0, planned - len(records)),
        "stopped_by_time_limit": stopped,
        "overall": overall,
        "per_level": per_level,
        "reference_origin_by_verdict": origin,
        "rerun_command": shlex.join(cfg.to_argv()),
        "config": cfg.as_dict(),
    }


def format_summary(summary: dict) -> str:
    """A short human-readable table of a summary."""
    lines = []
    o = summary["overall"]
    lines.append(
        f"{summary.get('label') or 'run'}: {summary['requests_done']}/{summary['requests_planned']} requests"
        + (" (stopped at the time limit)" if summary["stopped_by_time_limit"] else "")
    )
    head = f"{'class':<24}" + "".join(f"{'c=' + str(t['concurrency']):>26}" for t in summary["per_level"].values()) + f"{'all':>26}"
    lines.append(head)

    def cell(entry):
        if entry["n"] == 0:
            return f"{'-':>26}"
        lo, hi = entry["ci95"]
        return f"{entry['count']:>5} {100 * entry['rate']:5.1f}% [{100 * lo:4.1f},{100 * hi:5.1f}]".rjust(26)

    for c in summary["classes"]:
        lines.append(f"{c:<24}" + "".join(cell(t["per_class"][c]) for t in summary["per_level"].values()) + cell(o["per_class"][c]))
    lines.append(f"{'corruption (responses)':<24}" + "".join(cell(t["corruption"]) for t in summary["per_level"].values()) + cell(o["corruption"]))
    lines.append(
        f"{'sessions w/ corruption':<24}"
        + "".join(cell(t["sessions_with_corruption"]) for t in summary["per_level"].values())
        + cell(o["sessions_with_corruption"])
    )
    if summary.get("reference_origin_by_verdict"):
        lines.append("failure origin from the raw-output re-parse:")
        for v, row in summary["reference_origin_by_verdict"].items():
            lines.append(f"  {v:<24} " + ", ".join(f"{k} {n}" for k, n in sorted(row.items())))
    lines.append(f"re-run: {summary['rerun_command']}")
    return "\n".join(lines)
