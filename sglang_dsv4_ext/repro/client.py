"""HTTP to an OpenAI-compatible endpoint; every failure becomes an Observation, never an exception."""

from __future__ import annotations

import asyncio
import json
from typing import List, Optional

import aiohttp

from sglang_dsv4_ext.repro.verdict import Observation

_SNIPPET = 2000


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


def _calls_from_message(msg: dict) -> List[dict]:
    calls = []
    for tc in msg.get("tool_calls") or []:
        fn = tc.get("function") or {}
        calls.append({"name": fn.get("name") or "", "arguments": fn.get("arguments") if fn.get("arguments") is not None else ""})
    return calls


def observation_from_body(data: dict) -> Observation:
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices:
        return Observation(transport="http_error", error="response has no choices", body_snippet=json.dumps(data)[:_SNIPPET])
    choice = choices[0]
    msg = choice.get("message") or {}
    return Observation(
        finish_reason=choice.get("finish_reason"),
        content=msg.get("content") or "",
        reasoning=msg.get("reasoning_content") or msg.get("reasoning") or "",
        tool_calls=_calls_from_message(msg),
        token_ids=choice.get("response_token_ids"),
        usage=data.get("usage"),
    )


async def _read_stream(resp: aiohttp.ClientResponse) -> Observation:
    """Accumulate an SSE chat stream: content, reasoning and tool-call deltas by index."""
    obs = Observation()
    calls: dict = {}
    buf = b""
    async for chunk in resp.content.iter_any():
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            data = json.loads(payload)
            if isinstance(data, dict) and data.get("error"):
                return Observation(transport="http_error", error=f"error in stream: {json.dumps(data['error'])[:300]}")
            if data.get("usage"):
                obs.usage = data["usage"]
            for choice in data.get("choices") or []:
                delta = choice.get("delta") or {}
                obs.content += delta.get("content") or ""
                obs.reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
                for tc in delta.get("tool_calls") or []:
                    slot = calls.setdefault(tc.get("index", 0), {"name": "", "arguments": ""})
                    fn = tc.get("function") or {}
                    slot["name"] += fn.get("name") or ""
                    slot["arguments"] += fn.get("arguments") or ""
                if choice.get("finish_reason"):
                    obs.finish_reason = choice["finish_reason"]
    obs.tool_calls = [calls[i] for i in sorted(calls)]
    return obs


async def _post(session: aiohttp.ClientSession, url: str, body: dict, headers: dict) -> Observation:
    async with session.post(url, json=body, headers=headers) as resp:
        if resp.status != 200:
            text = await resp.text(errors="replace")
            return Observation(
                transport="http_error", http_status=resp.status, error=f"HTTP {resp.status}", body_snippet=text[:_SNIPPET]
            )
        if body.get("stream"):
            obs = await _read_stream(resp)
        else:
            raw = await resp.read()
            try:
                data = json.loads(raw)
            except ValueError:
                return Observation(
                    transport="http_error",
                    http_status=200,
                    error="response is not JSON",
                    body_snippet=raw[:_SNIPPET].decode(errors="replace"),
                )
            obs = observation_from_body(data)
        obs.http_status = resp.status
        return obs


async def chat(
    session: aiohttp.ClientSession,
    url: str,
    body: dict,
    timeout_s: float,
    headers: Optional[dict] = None,
) -> Observation:
    """POST one chat completion; classify transport problems instead of raising."""
    try:
        return await asyncio.wait_for(_post(session, url, body, headers or {}), timeout_s)
    except asyncio.TimeoutError:
        return Observation(transport="timeout", error=f"no complete response within {timeout_s:g} s")
    except (aiohttp.ClientError, ConnectionError, OSError, ValueError) as exc:
        # Resets, refused connections, truncated bodies, broken SSE JSON.
        return Observation(transport="http_error", error=f"{type(exc).__name__}: {exc}"[:500])


async def get_json(session: aiohttp.ClientSession, url: str, timeout_s: float = 5.0) -> Optional[dict]:
    """Best-effort GET returning JSON or None (model list, server info)."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                return None
            return await resp.json(content_type=None)
    except Exception:
        return None


async def detokenize(session: aiohttp.ClientSession, base: str, ids: List[int], timeout_s: float = 30.0) -> str:
    async with session.post(
        base.rstrip("/") + "/detokenize",
        json={"tokens": ids, "skip_special_tokens": False},
        timeout=aiohttp.ClientTimeout(total=timeout_s),
    ) as resp:
        if resp.status != 200:
            raise RuntimeError(f"/detokenize answered HTTP {resp.status}")
        return (await resp.json(content_type=None))["text"]
