"""SGLang's real decode-side PD handshake check, against a prefill bootstrap served over loopback HTTP.

``CommonKVManager.try_ensure_parallel_info`` fetches the prefill's server info from its bootstrap
and refuses a pair whose page size, kv_cache_dtype or (0.5.23) KV layout differ. Real: that method
and the HTTP round trip. Stubbed: the decode manager is a namespace of the fields the check reads,
and the rank mapping that follows an accepted pair (it needs a full TP/CP/PP topology).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

PREFILL_INFO = dict(
    attn_tp_size=1,
    attn_cp_size=1,
    dp_size=1,
    pp_size=1,
    page_size=256,
    kv_cache_dtype="fp8_e4m3",
    follow_bootstrap_room=True,
    dsv41_spec_layout=None,
)
DECODE_FIELDS = dict(
    prefill_info_table={},
    kv_args=SimpleNamespace(page_size=256, state_types=()),
    kv_cache_dtype_str="fp8_e4m3",
    attn_tp_size=1,
    dsv41_spec_layout=None,
    is_mla_backend=True,
    is_hybrid_mla_backend=False,
    dcp_size=1,
    _resolve_rank_mapping=lambda info: None,
)


class BootstrapRoute(BaseHTTPRequestHandler):
    info: dict = {}

    def do_GET(self):  # noqa: N802 (http.server API)
        body = json.dumps(self.info).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def decode_side_check(prefill: dict, decode: dict):
    """Run the check with the prefill's server info and the decode manager's fields (each on top of
    the defaults above); returns what SGLang returns (True for an accepted pair) or raises its error."""
    from sglang.srt.disaggregation.common.conn import CommonKVManager

    handler = type("Route", (BootstrapRoute,), {"info": {**PREFILL_INFO, **prefill}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        manager = SimpleNamespace(**{**DECODE_FIELDS, "prefill_info_table": {}, **decode})
        return CommonKVManager.try_ensure_parallel_info(manager, f"127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
