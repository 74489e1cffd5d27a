"""The HTTP side of ``POST /v1/traces`` (OTLP/HTTP): content types, content encodings
and the answers' statuses. Pure.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from producers.ingest.body import Problem

#: Media types of OTLP/HTTP, by whether the body is OTLP JSON.
PROTOBUF = "application/x-protobuf"
JSON = "application/json"

#: gRPC status codes the ``google.rpc.Status`` of an error answer carries, by HTTP status.
GRPC_CODES = {400: 3, 401: 16, 403: 7, 413: 8, 415: 3, 503: 14}

# zlib window bits: gzip only; zlib (HTTP's "deflate"), and raw deflate, which some
# clients send under the same name.
_WBITS = {"gzip": 16 + 15, "x-gzip": 16 + 15, "deflate": 15}


def media_type(headers: Mapping[str, str]) -> str | None:
    """``application/x-protobuf`` or ``application/json`` for an OTLP request, else None."""
    media = headers.get("content-type", PROTOBUF).split(";", 1)[0].strip().lower()
    return media if media in (PROTOBUF, JSON) else None


def decompress(body: bytes, *, encoding: str | None, max_bytes: int) -> bytes | Problem:
    """The body without its ``Content-Encoding``, at most ``max_bytes`` of it.

    Args:
        body: The body as received.
        encoding: The ``Content-Encoding`` header (``gzip``, ``deflate``, ``identity``).
        max_bytes: Most bytes the decompressed body may have (a small gzip body can
            expand a thousandfold).

    Returns:
        The decompressed body, or the problem: 415 for an unknown encoding, 400 for a
        body that does not decompress, 413 for one that decompresses past the limit.
    """
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        return body
    if name not in _WBITS:
        return Problem(415, f"Content-Encoding {name!r} is not supported: send gzip, "
                            "deflate or none")
    for wbits in (_WBITS[name], -15) if name == "deflate" else (_WBITS[name],):
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(body, max_bytes + 1)
        except zlib.error as exc:
            last = Problem(400, f"the body is not valid {name}: {exc}")
            continue
        if len(out) > max_bytes or inflater.unconsumed_tail:
            return Problem(413, f"the body decompresses to more than {max_bytes:,} bytes "
                                "(EVALFLEET_INGEST_MAX_REQUEST_BYTES); export smaller batches")
        if not inflater.eof:
            return Problem(400, f"the {name} body is cut short")
        return out
    return last
