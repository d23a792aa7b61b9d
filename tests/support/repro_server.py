"""A stand-in OpenAI-compatible chat server that injects known failure kinds at known rates.

Real HTTP on 127.0.0.1 (random free port), stdlib only. For every request it picks one
kind from ``rates`` with a generator seeded by (server seed, prompt hash), so a run is
deterministic and the test can compare each verdict with what was injected
(``server.injected[prompt_sha256]``). Token ids are fake (one id per character, the code
point) and ``/detokenize`` turns them back, which is enough to exercise the raw-output
re-parse path.

Kinds and the verdict each must produce:
  ok, dsml_in_content, malformed_dsml, tool_call_in_reasoning, invalid_arguments,
  wrong_tool, degenerate_repetition, truncated_length, timeout   -> same name
  http_500, reset                                                -> http_error
  swallowed_malformed, swallowed_ok (tool steps only: the server  -> wrong_tool
    "parser" dropped the call; raw output is broken / fine)
  SHAPE_KINDS: HTTP 200 with well-formed JSON of another shape     -> protocol_error
    (``choices: [null]``, ``choices`` a string, ``message`` a string, ``tool_calls``
    holding strings, the body or SSE chunk a list)

ABORT_KINDS: SGLang's graceful abort (a scheduler or session-controller abort without a status code):
HTTP 200 whose choice ends with ``finish_reason: "abort"`` and the partial output so far, here half the
tool call's arguments (half the answer text on an answer step), streamed or not, as ``serving_chat.py``
passes ``FINISH_ABORT`` through (``_generate_chat_stream``; ``tokenizer_manager._handle_abort_finish_reason``
for the non-streaming reply) -> aborted; counted as an aborted request like SGLang's scheduler counts it.

CUT_KINDS: a reply the transport cuts. Streaming (``EXPECTED_STREAM_VERDICT``): ``cut_stream`` sends
the deltas up to half the tool call's arguments (half the answer text on an answer step) and closes
the connection (no finish_reason, no ``[DONE]``) -> stream_cut; ``cut_stream_chunked`` does the same
in chunked framing without the last chunk (what a dying uvicorn leaves) -> stream_cut;
``done_without_finish`` sends every delta and ``[DONE]`` but no finish_reason -> stream_cut (the
choice never said it ended); ``no_done`` sends every delta and the finish_reason but no ``[DONE]``
-> judged (ok). Without streaming (``EXPECTED_VERDICT``) the two cuts are half a JSON body: closed
early -> protocol_error, short of its Content-Length -> http_error; the other two a normal reply.

``stall_after=N``: requests after the N-th wait ``stall_s`` seconds before answering (a run's time
limit then stops it with exactly N recorded, for tests of a run that did not finish).

``models_reply`` replaces the ``GET /v1/models`` answer (e.g. a list instead of an object).

``GET /metrics`` answers like SGLang with ``--enable-metrics`` and the extension active, rendered by
prometheus_client (SGLang's exporter): SGLang's request counter, ``sglang:num_aborted_requests``
(one per injected ``reset`` or ``timeout``, counted when the request arrives), any counter a test
sets in ``counters``, and the extension's gauge ``sglang:dsv4_ext_active`` with each label set in
``extension`` (default: one active bf16 server, :data:`ACTIVE_BF16`). ``extension=[]`` leaves the
gauge out (a stock server, or one where the extension did not load); ``metrics=False`` answers 404
(SGLang without ``--enable-metrics``). ``metrics_dir`` renders instead what prometheus_client's
``MultiProcessCollector`` finds in that directory (SGLang's exporter with ``PROMETHEUS_MULTIPROC_DIR``).

``GET /server_info`` answers like SGLang's, with ``internal_states``: one per DP rank, each carrying the
scheduler's activation record from ``records`` under ``sglang_dsv4_ext`` (``None``: a stock scheduler,
no record). By default one rank, active with the first label set of ``extension`` (a process of its own,
the built index-K dtype as requested, ``ranks`` 1 of 1), or stock when ``extension`` is empty;
``server_info=False`` answers 404. ``server_info_extra`` adds top-level keys.

Hostile answers (:data:`READ_FAULTS`): ``metrics_faults[i]`` is how the i-th ``GET /metrics`` (0: the
read before a run, 1: the read after it) is answered, ``server_info_faults[i]`` the i-th ``GET
/server_info``; None or past the end of the list: normally. ``drip`` sends the status line, the headers and
then one byte of the body every ``drip_s`` seconds (at most ``drip_limit_s`` in all, then it closes: a test
of unbounded code fails instead of hanging); ``truncated`` declares the whole body's length and closes after
half of it; ``bad_status`` answers a status line that is not HTTP; ``long_header`` a header line longer than
any HTTP client reads (64 KiB); ``nan`` (``/metrics`` only) reports the aborted-requests counter as ``NaN``.
``metrics_gets`` / ``server_info_gets`` count the reads that began.

``workers=[URL, ...]`` makes it answer ``GET /workers`` as sglang-router does (``{"workers": [{"url", "worker_type",
"is_healthy", ...}], "total", "stats"}``, SGLang's ``docs/advanced_features/sgl_model_gateway.md``); a router has no
``/server_info`` of its own here (``server_info=False``). ``restart_at=N``: when the N-th chat request arrives the
server is started again, as after a crash: counters from zero, a new launch and process in its records
(``restart_records=[...]``: the records of the launch started then, e.g. a stock server restarted with the extension)
and other startup durations in ``startup_time``, as SGLang reports each launch's.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang_dsv4_ext.tools.repro import dsml
from sglang_dsv4_ext.tools.repro.scenario import TOOLS_BY_NAME, _args_for, expected_from_user_text, prompt_sha256

KINDS = (
    "ok",
    "dsml_in_content",
    "malformed_dsml",
    "tool_call_in_reasoning",
    "invalid_arguments",
    "wrong_tool",
    "degenerate_repetition",
    "truncated_length",
    "timeout",
    "http_500",
    "reset",
    "swallowed_malformed",
    "swallowed_ok",
)
# Replies of the wrong shape: (non-streaming body, one SSE chunk).
SHAPES = {
    "shape_choices_null": ({"choices": [None]}, {"choices": [None]}),
    "shape_choices_string": ({"choices": "none today"}, {"choices": "none today"}),
    "shape_message_string": (
        {"choices": [{"message": "hello", "finish_reason": "stop"}]},
        {"choices": [{"delta": "hello", "finish_reason": None}]},
    ),
    "shape_tool_calls_strings": (
        {"choices": [{"message": {"role": "assistant", "tool_calls": ["read_file"]}, "finish_reason": "tool_calls"}]},
        {"choices": [{"delta": {"tool_calls": ["read_file"]}, "finish_reason": None}]},
    ),
    "shape_list": ([{"choices": []}], [{"choices": []}]),
}
SHAPE_KINDS = tuple(SHAPES)
CUT_KINDS = ("cut_stream", "cut_stream_chunked", "done_without_finish", "no_done")
ABORT_KINDS = ("abort",)
EXPECTED_VERDICT = {k: k for k in KINDS}
EXPECTED_VERDICT["abort"] = "aborted"
EXPECTED_VERDICT.update(
    {"http_500": "http_error", "reset": "http_error", "swallowed_malformed": "wrong_tool", "swallowed_ok": "wrong_tool"}
)
EXPECTED_VERDICT.update({k: "protocol_error" for k in SHAPE_KINDS})
EXPECTED_VERDICT.update(
    {"cut_stream": "protocol_error", "cut_stream_chunked": "http_error", "done_without_finish": "ok", "no_done": "ok"}
)
EXPECTED_STREAM_VERDICT = dict(
    EXPECTED_VERDICT, cut_stream="stream_cut", cut_stream_chunked="stream_cut", done_without_finish="stream_cut"
)
TOOL_STEP_ONLY = {"swallowed_malformed", "swallowed_ok"}
# The activation gauge's labels of a server running the extension with bf16 index-K (activation.py:
# EVIDENCE_FIELDS), in launch 4242@1764590000.00 (launch_identity).
ACTIVE_BF16 = {
    "version": "stand-in",
    "sglang": "0.5.23",
    "index_k_dtype": "bf16",
    "gate": "auto",
    "fp4_budget": "exact",
    "integrity": "off",
    "index_k_dtype_requested": "bf16",
    "launch": "4242@1764590000.00",
    "process": "4243@1764590003.50",
}
ABORTING_KINDS = ("reset", "timeout", "abort")  # a real SGLang counts these as aborted requests
READ_FAULTS = ("drip", "truncated", "bad_status", "long_header", "nan")


def _malformed(raw: str, rng: random.Random) -> str:
    """Break well-formed DSML in one of the ways corrupted decoding does."""
    m = dsml.DSML_MARKER
    variants = [
        lambda s: s.replace(f"</{m}invoke>", "", 1),  # unclosed invoke
        lambda s: s.replace(f"{m}parameter name", f"{m}paramter name", 1),  # garbled tag name
        lambda s: s.replace(f"<{m}parameter", f"{m}parameter", 1),  # lost "<"
        lambda s: s.replace(f'<{m}invoke name="', f'<{m}invoke name="\uff5cDSM', 1),  # marker bleeding into a name
        lambda s: s[: len(s) // 2],  # cut mid-markup without a length stop
    ]
    return rng.choice(variants)(raw)


def _invalid_args(tool: str, args: dict, rng: random.Random) -> str:
    schema = TOOLS_BY_NAME[tool]["function"]["parameters"]
    variant = rng.randrange(3)
    if variant == 0:
        return "{" + json.dumps(args)[1:-1][: max(1, len(json.dumps(args)) // 2)]  # not JSON
    bad = dict(args)
    if variant == 1:
        bad.pop(schema["required"][0], None)  # missing required key
    else:
        key = schema["required"][0]
        typ = schema["properties"][key]["type"]
        bad[key] = {"string": 12345, "integer": "twelve", "boolean": "yes"}[typ]  # wrong type
    return json.dumps(bad)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: _Server

    def log_message(self, *args):  # keep test output quiet
        pass

    def handle(self):
        try:
            super().handle()
        except (ConnectionError, OSError, ValueError):
            pass  # the client went away (timeouts) or we reset the socket on purpose

    def _send_json(self, status: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        owner = self.server.owner
        if self.path == "/metrics" and owner.metrics:
            fault = owner.next_fault("metrics")
            text = owner.metrics_text()
            if fault == "nan":
                text = re.sub(r"^(sglang:num_aborted_requests_total) .*$", r"\1 NaN", text, flags=re.M)
            self._send_body(200, "text/plain; version=0.0.4", text.encode(), None if fault == "nan" else fault)
        elif self.path == "/workers" and owner.workers is not None:
            workers = [
                {
                    "id": str(i),
                    "url": u,
                    "worker_type": "regular",
                    "is_healthy": True,
                    "load": 0,
                    "connection_mode": "Http",
                }
                for i, u in enumerate(owner.workers)
            ]
            stats = {"prefill_count": 0, "decode_count": 0, "regular_count": len(workers)}
            self._send_json(200, {"workers": workers, "total": len(workers), "stats": stats})
        elif self.path == "/health":
            self._send_json(200, {})
        elif self.path == "/v1/models":
            self._send_json(200, owner.models_reply)
        elif self.path == "/server_info" and owner.server_info:
            fault = owner.next_fault("server_info")
            info = {
                "version": "stand-in",
                "tool_call_parser": "deepseekv4",
                "label": owner.label,
                "startup_time": owner.startup_time,
                "internal_states": owner.internal_states(),
                **owner.server_info_extra,
            }
            self._send_body(200, "application/json", json.dumps(info).encode(), fault)
        else:
            self._send_json(404, {"error": "not found"})

    def _send_body(self, status: int, content_type: str, body: bytes, fault: str | None) -> None:
        """A reply, or the hostile answer ``fault`` (see the module doc) in its place."""
        if fault == "bad_status":
            self.wfile.write(b"SGLANG 200 OK-ish\r\n\r\n" + body)
            return
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if fault == "long_header":
            self.send_header("X-Padding", "x" * (70 << 10))
        self.end_headers()
        if fault == "truncated":
            self.wfile.write(body[: len(body) // 2])
        elif fault == "drip":
            self._drip(body)
        else:
            self.wfile.write(body)

    def _drip(self, body: bytes) -> None:
        owner = self.server.owner
        self.wfile.flush()
        end = time.monotonic() + owner.drip_limit_s
        for i in range(len(body)):
            if time.monotonic() > end:
                return
            self.wfile.write(body[i : i + 1])
            self.wfile.flush()
            time.sleep(owner.drip_s)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(length) or b"{}")
        owner = self.server.owner
        if self.path == "/detokenize":
            self._send_json(200, {"text": "".join(chr(i) for i in req["tokens"])})
            return
        if self.path != "/v1/chat/completions":
            self._send_json(404, {"error": "not found"})
            return
        if owner.delay:
            time.sleep(owner.delay)
        kind, resp = owner.respond(req)
        if owner.stall_after is not None and owner.requests > owner.stall_after:
            time.sleep(owner.stall_s)
        if kind == "timeout":
            time.sleep(owner.timeout_sleep)
        self._reply(kind, resp, req)

    def _reply(self, kind: str, resp: dict, req: dict) -> None:
        if kind == "http_500":
            self._send_json(500, {"error": {"message": "injected internal error"}})
        elif kind == "reset":
            # SO_LINGER 0 makes close() send a TCP RST instead of a FIN.
            self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.request.close()
        elif kind in SHAPES:
            self._send_shape(*SHAPES[kind], stream=req.get("stream"))
        elif req.get("stream"):
            self._send_stream(resp, kind)
        elif kind in ("cut_stream", "cut_stream_chunked"):
            self._send_cut_body(resp, declare_length=kind == "cut_stream_chunked")
        else:
            self._send_json(200, resp)

    def _start_stream(self, chunked: bool = False) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _send_cut_body(self, resp: dict, declare_length: bool) -> None:
        """Half a JSON body: the connection closes early, or short of the declared Content-Length."""
        body = json.dumps(resp).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if declare_length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])

    def _send_shape(self, body, chunk, stream: bool) -> None:
        if not stream:
            self._send_json(200, body)
            return
        self._start_stream()
        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")

    def _send_stream(self, resp: dict, kind: str) -> None:
        events = _stream_events(resp)
        if kind in ("cut_stream", "cut_stream_chunked"):
            events = events[:-2]  # cut before the last delta (half the arguments, or half the text)
        elif kind == "done_without_finish":
            events = events[:-1] + [b"data: [DONE]\n\n"]
        elif kind != "no_done":
            events.append(b"data: [DONE]\n\n")
        chunked = kind == "cut_stream_chunked"
        self._start_stream(chunked)
        for event in events:
            # Chunked framing without the closing zero-length chunk when cut.
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event) if chunked else event)


def _stream_events(resp: dict) -> list[bytes]:
    """The SSE events of a reply, in SGLang's order: deltas, then a finish_reason chunk of its own."""
    choice = resp["choices"][0]
    msg = choice["message"]
    events = []

    def emit(delta, finish=None):
        chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")

    emit({"role": "assistant"})
    for field in ("reasoning_content", "content"):
        text = msg.get(field) or ""
        half = len(text) // 2
        for piece in (text[:half], text[half:]):
            if piece:
                emit({field: piece})
    for i, tc in enumerate(msg.get("tool_calls") or []):
        args = tc["function"]["arguments"]
        head = {"name": tc["function"]["name"], "arguments": ""}
        emit({"tool_calls": [{"index": i, "id": tc["id"], "type": "function", "function": head}]})
        half = len(args) // 2
        for piece in (args[:half], args[half:]):
            emit({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    emit({}, choice["finish_reason"])
    return events


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many concurrent connects; the default 5 causes SYN retries
    owner: InjectingServer


_PROCESSES = itertools.count(4243)


def _next_process() -> str:
    """A scheduler's ``pid@start time`` no other stand-in of this test process reports (launch_identity's form)."""
    return f"{next(_PROCESSES)}@1764590003.50"


def _record(labels: dict) -> dict:
    """A scheduler's record as the extension answers it in /server_info (runtime/hooks/evidence.py): active, the built
    index-K dtype beside the requested one, and its ranks counted (one rank of one TP group)."""
    return dict(
        labels,
        active=True,
        process=_next_process(),
        index_k_dtype_requested=labels.get("index_k_dtype"),
        ranks={"active": 1, "total": 1, "group": "tp"},
    )


class InjectingServer:
    def __init__(
        self,
        rates: dict[str, float],
        seed: int = 0,
        timeout_sleep: float = 2.0,
        delay: float = 0.0,
        label: str = "",
        models_reply=None,
        extension=(ACTIVE_BF16,),
        metrics: bool = True,
        stall_after: int | None = None,
        stall_s: float = 5.0,
        records=None,
        server_info: bool = True,
        metrics_dir: str | None = None,
        metrics_faults=(),
        server_info_faults=(),
        drip_s: float = 1.0,
        drip_limit_s: float = 60.0,
        server_info_extra: dict | None = None,
        workers: list[str] | None = None,
        restart_at: int | None = None,
        restart_records: list | None = None,
    ):
        known = KINDS + SHAPE_KINDS + CUT_KINDS + ABORT_KINDS
        unknown = set(rates) - set(known)
        if unknown:
            raise ValueError(f"unknown kinds {sorted(unknown)}; known: {known}")
        if sum(rates.values()) > 1 + 1e-9:
            raise ValueError(f"rates sum to {sum(rates.values())} > 1")
        self.rates = [(k, rates[k]) for k in known if k in rates and k != "ok"]
        default_models = {"object": "list", "data": [{"id": "stand-in-model"}]}
        self.models_reply = default_models if models_reply is None else models_reply
        self.seed = seed
        self.timeout_sleep = timeout_sleep
        self.delay = delay
        self.label = label
        self.injected: dict[str, str] = {}
        self.requests = 0
        self.extension = [dict(labels) for labels in extension]
        self.metrics = metrics
        self.stall_after, self.stall_s = stall_after, stall_s
        self.metrics_dir = metrics_dir
        if records is None:  # one scheduler of its own: a process of the labels' launch that no other stand-in has
            records = [_record(self.extension[0]) if self.extension else None]
        self.records = records
        self.server_info = server_info
        self.server_info_extra = dict(server_info_extra or {})
        unknown = {f for f in (*metrics_faults, *server_info_faults) if f is not None} - set(READ_FAULTS)
        if unknown:
            raise ValueError(f"unknown read faults {sorted(unknown)}; known: {READ_FAULTS}")
        self.faults = {"metrics": list(metrics_faults), "server_info": list(server_info_faults)}
        self.gets = {"metrics": 0, "server_info": 0}
        self.drip_s, self.drip_limit_s = drip_s, drip_limit_s
        self.counters: dict[str, float] = {"sglang:num_aborted_requests": 0.0}
        self.workers = workers
        self.restart_at = restart_at
        self.restart_records = restart_records
        # SGLang's /server_info startup_time: the startup durations of this launch (observability/startup_time.py)
        self.startup_time = {"load_weight": 41.25, "kv_cache_allocation": 3.5, "scheduler_e2e": 52.0,
                             "cuda_graph": {}, "tokenizer_e2e": 55.75}  # fmt: skip
        self._lock = threading.Lock()
        self._httpd: _Server | None = None

    # ----- lifecycle -----
    def start(self) -> str:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self):
        self.url = self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def next_fault(self, endpoint: str) -> str | None:
        """How this read of ``endpoint`` is answered (None: normally); counts the read."""
        with self._lock:
            i = self.gets[endpoint]
            self.gets[endpoint] += 1
        faults = self.faults[endpoint]
        return faults[i] if i < len(faults) else None

    @property
    def metrics_gets(self) -> int:
        return self.gets["metrics"]

    @property
    def server_info_gets(self) -> int:
        return self.gets["server_info"]

    def _restart(self) -> None:
        """Started again (under the lock): counters from zero, every record of a new launch and process."""
        self.counters = {family: 0.0 for family in self.counters}
        self.requests = 1
        self.startup_time = dict(self.startup_time, load_weight=self.startup_time["load_weight"] + 0.5)
        records = self.records if self.restart_records is None else self.restart_records
        self.records = [
            None if r is None else dict(r, launch="5151@1764599999.00", process=_next_process()) for r in records
        ]

    def internal_states(self) -> list[dict]:
        states = []
        for record in self.records:
            state = {"world_size": 1, "memory_usage": {}}
            if record is not None:
                state["sglang_dsv4_ext"] = record
            states.append(state)
        return states

    def metrics_text(self) -> str:
        from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

        registry = CollectorRegistry()
        if self.metrics_dir:
            from prometheus_client import multiprocess

            multiprocess.MultiProcessCollector(registry, path=self.metrics_dir)
        Counter("sglang:num_requests", "stand-in", registry=registry).inc(self.requests)
        with self._lock:
            counters = dict(self.counters)
        for family, value in counters.items():
            Counter(family, "stand-in", registry=registry).inc(value)
        if self.extension:
            names = sorted(self.extension[0])  # every label set of one test has the same names
            gauge = Gauge("sglang:dsv4_ext_active", "stand-in", labelnames=names, registry=registry)
            for labels in self.extension:
                (gauge.labels(**labels) if names else gauge).set(1)  # {}: a sample without labels
        return generate_latest(registry).decode()

    # ----- behaviour -----
    def _pick(self, sha: str, step: str) -> str:
        u = random.Random(f"{self.seed}:{sha}").random()
        acc = 0.0
        for kind, rate in self.rates:
            acc += rate
            if u < acc:
                return "ok" if (kind in TOOL_STEP_ONLY and step != "tool") else kind
        return "ok"

    def respond(self, req: dict):
        messages: list[dict] = req["messages"]
        sha = prompt_sha256(messages, req.get("tools"))
        last = messages[-1]
        expected = expected_from_user_text(last["content"]) if last["role"] == "user" else None
        step = "tool" if expected else "answer"
        kind = self._pick(sha, step)
        with self._lock:
            self.injected[sha] = kind
            self.requests += 1
            if self.restart_at is not None and self.requests == self.restart_at:
                self._restart()
            self.counters["sglang:num_aborted_requests"] += kind in ABORTING_KINDS
        rng = random.Random(f"body:{self.seed}:{sha}")
        if expected:
            tool, args = expected
        else:  # an answer step: a plausible call for the failure kinds that need one
            tool = rng.choice(sorted(TOOLS_BY_NAME))
            args = _args_for(tool, rng, "cache")
        out = _Output()
        _BUILDERS.get(kind, _build_nothing)(out, step, tool, args, rng)
        return kind, _completion(req, out)


class _Output:
    """What the stand-in "model" produced and what the client is sent."""

    def __init__(self):
        self.content, self.reasoning, self.calls, self.finish, self.raw = "", "", [], "stop", None


def _build_ok(out: _Output, step, tool, args, rng) -> None:
    if step == "tool":
        out.calls, out.finish, out.raw = [(tool, json.dumps(args))], "tool_calls", dsml.render([(tool, args)])
    else:
        out.content = out.raw = "Done: noted the result; ready for the next step."


def _build_dsml_in_content(out: _Output, step, tool, args, rng) -> None:
    out.content = out.raw = dsml.render([(tool, args)])


def _build_malformed(out: _Output, step, tool, args, rng) -> None:
    out.content = out.raw = _malformed(dsml.render([(tool, args)]), rng)


def _build_in_reasoning(out: _Output, step, tool, args, rng) -> None:
    out.reasoning = "I should call the tool now.\n" + dsml.render([(tool, args)])
    out.raw = out.reasoning + dsml.THINK_END


def _build_invalid_arguments(out: _Output, step, tool, args, rng) -> None:
    out.calls, out.finish = [(tool, _invalid_args(tool, args, rng))], "tool_calls"


def _build_wrong_tool(out: _Output, step, tool, args, rng) -> None:
    if step == "tool":
        other = rng.choice(sorted(set(TOOLS_BY_NAME) - {tool}))
        out.calls = [(other, json.dumps(_args_for(other, rng, "cache")))]
    else:
        out.calls = [("delete_repository", json.dumps({"confirm": True}))]
    out.finish = "tool_calls"


def _build_repetition(out: _Output, step, tool, args, rng) -> None:
    out.content = out.raw = "I will check the cache module now. " * 40
    out.finish = rng.choice(["stop", "length"])


def _build_truncated(out: _Output, step, tool, args, rng) -> None:
    out.content = out.raw = "Let me look at the eviction path in"
    out.finish = "length"


def _build_swallowed_malformed(out: _Output, step, tool, args, rng) -> None:
    out.raw = _malformed(dsml.render([(tool, args)]), rng)


def _build_swallowed_ok(out: _Output, step, tool, args, rng) -> None:
    out.raw = dsml.render([(tool, args)])


def _build_abort(out: _Output, step, tool, args, rng) -> None:
    """What was generated before the abort: half the call's arguments (half the answer)."""
    _build_ok(out, step, tool, args, rng)
    if out.calls:
        name, arguments = out.calls[0]
        out.calls = [(name, arguments[: len(arguments) // 2])]
        out.raw = out.raw[: len(out.raw) // 2]
    else:
        out.content = out.raw = out.content[: len(out.content) // 2]
    out.finish = "abort"


def _build_nothing(out: _Output, step, tool, args, rng) -> None:
    """Transport and shape kinds: the handler sends something else."""


_BUILDERS = {
    "ok": _build_ok,
    "timeout": _build_ok,  # a good answer, sent too late
    "dsml_in_content": _build_dsml_in_content,
    "malformed_dsml": _build_malformed,
    "tool_call_in_reasoning": _build_in_reasoning,
    "invalid_arguments": _build_invalid_arguments,
    "wrong_tool": _build_wrong_tool,
    "degenerate_repetition": _build_repetition,
    "truncated_length": _build_truncated,
    "swallowed_malformed": _build_swallowed_malformed,
    "swallowed_ok": _build_swallowed_ok,
    "abort": _build_abort,
    # Cut replies: what was cut is a good reply.
    "cut_stream": _build_ok,
    "cut_stream_chunked": _build_ok,
    "done_without_finish": _build_ok,
    "no_done": _build_ok,
}


def _completion(req: dict, out: _Output) -> dict:
    msg = {"role": "assistant", "content": out.content or None, "reasoning_content": out.reasoning or None}
    if out.calls:
        msg["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(out.calls)
        ]
    choice = {"index": 0, "message": msg, "finish_reason": out.finish}
    if req.get("return_token_ids") and out.raw is not None:
        choice["response_token_ids"] = [ord(c) for c in out.raw]
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "model": req.get("model"),
        "choices": [choice],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
