"""HTTP to an OpenAI-compatible endpoint; every failure becomes an Observation, never an exception.

Replies are read through pydantic models of the chat-completion shape (unknown keys ignored).
Well-formed JSON of another shape (``choices: [null]``, ``message`` a string, ``tool_calls``
holding strings, an SSE chunk that is a list) is a ``protocol_error`` observation for that one
request, not a crash of the run. A stream that ends before any chunk carried a
``finish_reason`` (the connection closed, or a chunked body cut) is ``stream_cut``: a transport
failure whose partial output is kept, never judged (see :func:`_stream_end`).

Redirects are never followed (aiohttp follows them by default, and re-sends a POST on a 307 or 308):
the server a run measures is the one it checked before the first request (its extension state, its
evidence), and a redirect leads to one that nobody checked. A redirect is an ``http_error`` naming
its target (:func:`_redirect_note`); a side request that is redirected gives no answer.

What this client says about a request (an error, the detokenizer's state) names URLs without their user
and password (:func:`sglang_dsv4_ext.tools.tool_support.urls.redact`): those texts go into the records. The
model's output is kept as it came, URLs in it included: it is the evidence.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, ValidationError

from sglang_dsv4_ext.errors import DetokenizeError
from sglang_dsv4_ext.tools.repro.verdict import Observation
from sglang_dsv4_ext.tools.tool_support import urls

_SNIPPET = 2000


# ----- the reply shapes this client accepts --------------------------------------------------
class _Shape(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Function(_Shape):
    name: str | None = None
    arguments: Any = None  # a JSON string per the API; judged by the verdict, whatever it is


class _ToolCall(_Shape):
    index: int | None = None  # streaming deltas: which call a fragment belongs to
    function: _Function | None = None


class _Message(_Shape):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None

    def reasoning_text(self) -> str:
        return self.reasoning_content or self.reasoning or ""


class _Choice(_Shape):
    message: _Message | None = None
    delta: _Message | None = None
    finish_reason: str | None = None
    response_token_ids: list[int] | None = None


class _Completion(_Shape):
    choices: list[_Choice]
    usage: dict[str, Any] | None = None


class _Chunk(_Shape):
    choices: list[_Choice] = []
    usage: dict[str, Any] | None = None
    error: Any = None


class _ModelList(_Shape):
    data: list[dict[str, Any]]


class _Detokenized(_Shape):
    text: str


def _shape_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(root)"
    return f"{where}: {first['msg']}"


def _protocol_error(what: str, detail: str, snippet: str = "", status: int | None = 200) -> Observation:
    return Observation(
        transport="protocol_error", http_status=status, error=f"{what}: {detail}"[:500], body_snippet=snippet[:_SNIPPET]
    )


# ----- URLs ------------------------------------------------------------------------------------
def chat_url(endpoint: str) -> str:
    url = endpoint.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return url + "/chat/completions"
    return url + "/v1/chat/completions"


def base_url(endpoint: str) -> str:
    url = endpoint.rstrip("/")
    for suffix in ("/chat/completions", "/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url


# ----- non-streaming replies -------------------------------------------------------------------
def _calls(msg: _Message) -> list[dict]:
    calls = []
    for tc in msg.tool_calls or []:
        fn = tc.function or _Function()
        calls.append({"name": fn.name or "", "arguments": fn.arguments if fn.arguments is not None else ""})
    return calls


def observation_from_body(data) -> Observation:
    """The observation of one parsed (JSON) chat-completion reply."""
    try:
        body = _Completion.model_validate(data)
    except ValidationError as exc:
        return _protocol_error("reply is not a chat completion", _shape_error(exc), json.dumps(data))
    if not body.choices:
        return _protocol_error("reply is not a chat completion", "choices is empty", json.dumps(data))
    choice = body.choices[0]
    msg = choice.message or _Message()
    obs = Observation(
        finish_reason=choice.finish_reason,
        content=msg.content or "",
        reasoning=msg.reasoning_text(),
        tool_calls=_calls(msg),
        token_ids=choice.response_token_ids,
        usage=body.usage,
    )
    if choice.finish_reason is None:  # SGLang's reply for a request that never finished: a partial output
        obs.transport, obs.error = "aborted", _NO_FINISH
    return obs


# serving_chat.py's non-streamed reply: ``finish_reason["type"] if finish_reason else None``.
_NO_FINISH = (
    "finish_reason null in a non-streamed reply: the server answered a request that did not finish; "
    "partial output kept, not judged"
)


# ----- streaming replies -----------------------------------------------------------------------
class _StreamAccumulator:
    """Content, reasoning and tool-call deltas of an SSE chat stream, tool calls by index."""

    def __init__(self) -> None:
        self.obs = Observation()
        self.calls: dict[int, dict] = {}

    def add(self, chunk: _Chunk) -> None:
        if chunk.usage:
            self.obs.usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta or _Message()
            self.obs.content += delta.content or ""
            self.obs.reasoning += delta.reasoning_text()
            for tc in delta.tool_calls or []:
                slot = self.calls.setdefault(tc.index or 0, {"name": "", "arguments": ""})
                fn = tc.function or _Function()
                slot["name"] += fn.name or ""
                if fn.arguments is not None:
                    slot["arguments"] += fn.arguments if isinstance(fn.arguments, str) else json.dumps(fn.arguments)
            if choice.finish_reason:
                self.obs.finish_reason = choice.finish_reason

    def result(self) -> Observation:
        self.obs.tool_calls = [self.calls[i] for i in sorted(self.calls)]
        return self.obs


def _sse_payloads(buf: bytes):
    """(complete ``data:`` payloads, rest of the buffer)."""
    payloads = []
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        line = line.strip()
        if line.startswith(b"data:"):
            payloads.append(line[5:].strip())
    return payloads, buf


def _chunk_or_error(payload: bytes):
    """A validated chunk, or the protocol-error Observation that replaces the reply."""
    text = payload.decode(errors="replace")
    try:
        data = json.loads(payload)
    except ValueError as exc:
        return _protocol_error("stream chunk is not JSON", str(exc), text)
    try:
        chunk = _Chunk.model_validate(data)
    except ValidationError as exc:
        return _protocol_error("stream chunk is not a chat-completion chunk", _shape_error(exc), text)
    if chunk.error:
        return Observation(
            transport="http_error", http_status=200, error=f"error in stream: {json.dumps(chunk.error)[:300]}"
        )
    return chunk


def _stream_end(acc: _StreamAccumulator, done: bool, how: str) -> Observation:
    """The observation of a stream that ended (``done``: with ``[DONE]``; ``how``: otherwise, how).

    SGLang sends a choice's ``finish_reason`` in a chunk of its own after every content and
    tool-call delta, then usage, then ``[DONE]`` (serving_chat.py ``_generate_chat_stream``).
    Without a finish_reason the choice never ended: the text so far is a cut, not an answer
    (``stream_cut``, a transport class, partial output kept). With one but no ``[DONE]`` the
    choice was complete and only the trailer is missing: it is judged, and the record says so.
    """
    obs = acc.result()
    if obs.finish_reason is None:
        ended = "with [DONE]" if done else f"without [DONE]: {how}"
        obs.transport = "stream_cut"
        obs.error = f"stream ended {ended} before any chunk carried a finish_reason; partial output kept"[:500]
    elif not done:
        obs.stream_note = f"no [DONE] after finish_reason={obs.finish_reason} ({how})"[:300]
    return obs


async def _read_stream(resp: aiohttp.ClientResponse) -> Observation:
    acc = _StreamAccumulator()
    buf = b""
    try:
        async for piece in resp.content.iter_any():
            payloads, buf = _sse_payloads(buf + piece)
            for payload in payloads:
                if payload == b"[DONE]":
                    return _stream_end(acc, True, "")
                chunk = _chunk_or_error(payload)
                if isinstance(chunk, Observation):
                    return chunk
                acc.add(chunk)
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError) as exc:
        # A chunked stream cut mid-way (the server died, a proxy dropped it): keep what arrived.
        return _stream_end(acc, False, f"{type(exc).__name__}: {exc}")
    return _stream_end(acc, False, "the server closed the connection")


# ----- one request -----------------------------------------------------------------------------
async def _read_body(resp: aiohttp.ClientResponse) -> Observation:
    raw = await resp.read()
    try:
        data = json.loads(raw)
    except ValueError:
        return _protocol_error("reply is not JSON", f"{len(raw)} bytes", raw[:_SNIPPET].decode(errors="replace"))
    return observation_from_body(data)


def _redirect_note(resp: aiohttp.ClientResponse) -> str:
    """`` redirect to LOCATION not followed`` for a redirect status, else ""."""
    if not 300 <= resp.status < 400:
        return ""
    where = resp.headers.get("Location")
    return f" redirect to {urls.redact(where)!r} not followed" if where else " redirect (no Location) not followed"


async def _post(session: aiohttp.ClientSession, url: str, body: dict, headers: dict) -> Observation:
    async with session.post(url, json=body, headers=headers, allow_redirects=False) as resp:
        if resp.status != 200:
            text = await resp.text(errors="replace")
            return Observation(
                transport="http_error",
                http_status=resp.status,
                error=f"HTTP {resp.status}{_redirect_note(resp)}"[:500],
                body_snippet=text[:_SNIPPET],
            )
        obs = await (_read_stream(resp) if body.get("stream") else _read_body(resp))
        obs.http_status = resp.status
        return obs


async def chat(
    session: aiohttp.ClientSession,
    url: str,
    body: dict,
    timeout_s: float,
    headers: dict | None = None,
) -> Observation:
    """POST one chat completion; classify transport problems instead of raising."""
    try:
        return await asyncio.wait_for(_post(session, url, body, headers or {}), timeout_s)
    except asyncio.TimeoutError:
        return Observation(transport="timeout", error=f"no complete response within {timeout_s:g} s")
    except (aiohttp.ClientError, ConnectionError, OSError) as exc:
        # Resets, refused connections, truncated bodies.
        return Observation(transport="http_error", error=urls.redact(f"{type(exc).__name__}: {exc}")[:500])


# ----- side requests ---------------------------------------------------------------------------
async def get_json(session: aiohttp.ClientSession, url: str, timeout_s: float = 5.0):
    """GET returning parsed JSON, or None when the server does not answer it with JSON."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False) as resp:
            if resp.status != 200:
                return None
            return await resp.json(content_type=None)
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError):
        return None


async def first_model(session: aiohttp.ClientSession, endpoint: str):
    """(model id, None) from ``GET /v1/models``, or ("default", why) when it gives none."""
    url = base_url(endpoint) + "/v1/models"
    data = await get_json(session, url)
    if data is None:
        return "default", f"GET {url} gave no JSON; sending model 'default' (set --model)"
    try:
        models = _ModelList.model_validate(data)
    except ValidationError as exc:
        return "default", f"GET {url} is not a model list ({_shape_error(exc)}); sending model 'default' (set --model)"
    ids = [m.get("id") for m in models.data if isinstance(m.get("id"), str)]
    if not ids:
        return "default", f"GET {url} lists no model id; sending model 'default' (set --model)"
    return ids[0], None


def detokenize_endpoint(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/detokenize") else url + "/detokenize"


class Detokenizer:
    """``POST /detokenize`` (special tokens kept): the one client the runner and reparse share.

    After the first failure it stops asking (routers often do not forward ``/detokenize``) and
    :attr:`state` says why, naming the URL and what to do instead.
    """

    def __init__(self, url: str, timeout_s: float = 30.0):
        self.url = detokenize_endpoint(url)
        self.timeout_s = timeout_s
        self.state = "untried"  # untried | ok | unavailable: reason

    async def decode(self, session: aiohttp.ClientSession, ids: list[int]) -> str | None:
        """The text of ``ids``, or None once the endpoint has failed (see :attr:`state`)."""
        if self.state.startswith("unavailable"):
            return None
        try:
            text = await self._post(session, ids)
        except (DetokenizeError, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            self.state = urls.redact(
                f"unavailable: {self.url} failed ({exc}); run `sglang-dsv4 repro reparse` "
                "with --detokenize-url or --tokenizer"
            )
            return None
        self.state = "ok"
        return text

    def decode_blocking(self, ids: list[int]) -> str:
        """:meth:`decode` for synchronous callers (offline reparse); raises once unavailable."""

        async def once():
            async with aiohttp.ClientSession() as session:
                return await self.decode(session, ids)

        text = asyncio.run(once())
        if text is None:
            raise DetokenizeError(self.state)
        return text

    async def _post(self, session: aiohttp.ClientSession, ids: list[int]) -> str:
        body = {"tokens": ids, "skip_special_tokens": False}
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with session.post(self.url, json=body, timeout=timeout, allow_redirects=False) as resp:
            if resp.status != 200:
                raise DetokenizeError(f"HTTP {resp.status}{_redirect_note(resp)}")
            try:
                return _Detokenized.model_validate(await resp.json(content_type=None)).text
            except (ValueError, ValidationError) as exc:
                raise DetokenizeError(f"the reply is not {{'text': ...}}: {str(exc)[:200]}") from None
