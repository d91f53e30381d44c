"""Putting the vendor key where the vendor's profile places it.

``place_key`` is the Python side of the Go SDK's ``client.Transport``: a
header (``Idempotency-Key``: Resend, Zendesk, Adyen) and/or a dotted path
in a JSON object body (``idempotency_key``: Square; ``variables.input.id``:
Linear's client-chosen id). The key is the ``key`` a ``CallFunc`` gets,
the row's ``vendor_key``.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Tuple, Union

__all__ = ["place_key"]

Body = Union[None, str, bytes, Dict[str, Any]]


def place_key(
    vendor_key: str,
    *,
    headers: Optional[Mapping[str, str]] = None,
    body: Body = None,
    header: str = "",
    body_path: str = "",
) -> Tuple[Dict[str, str], Body]:
    """place_key returns copies of headers and body with vendor_key set in
    header (replacing any value of that name, whatever its case: a model may
    have invented one) and at body_path (objects on the way are made).

    A body given as text or bytes must be a JSON object and comes back as
    compact JSON text of the same type; a dict comes back as a new dict.
    """
    if not vendor_key:
        raise ValueError("place_key: empty vendor key")
    out_headers = {k: v for k, v in (headers or {}).items() if not header or k.lower() != header.lower()}
    if header:
        out_headers[header] = vendor_key
    if not body_path:
        return out_headers, body
    raw = body
    if isinstance(body, (bytes, str)):
        text = body.decode("utf-8") if isinstance(body, bytes) else body
        raw = json.loads(text) if text.strip() else {}
    elif body is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError("place_key: the body is not a JSON object")
    doc = json.loads(json.dumps(raw))  # a deep copy of JSON values
    cur = doc
    parts = body_path.split(".")
    for seg in parts[:-1]:
        nxt = cur.get(seg)
        if nxt is None:
            nxt = {}
            cur[seg] = nxt
        if not isinstance(nxt, dict):
            raise ValueError(f"place_key: {seg} in {body_path} is not an object")
        cur = nxt
    cur[parts[-1]] = vendor_key
    if isinstance(body, bytes):
        return out_headers, json.dumps(doc, separators=(",", ":")).encode("utf-8")
    if isinstance(body, str):
        return out_headers, json.dumps(doc, separators=(",", ":"))
    return out_headers, doc
