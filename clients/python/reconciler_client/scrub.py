"""Scrubbing keeps a model from choosing a write's identity.

The key of a write belongs to the ledger: a model that supplies one may mint
a fresh one on each retry and turn one intent into two charges. ``scrub``
removes idempotency_key, request_id, message_id-style fields from a tool
call's arguments, and ``scrub_schema`` from the tool schema the model sees.
The field list and the matching rules are the Go SDK's (client/scrub.go).
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union, overload

__all__ = ["DEFAULT_SCRUB_FIELDS", "Scrubber", "scrub", "scrub_schema"]

#: The argument names scrub removes: fields through which a model could
#: choose (or re-invent on every retry) the identity of a write. Names match
#: case- and separator-insensitively, so "idempotency_key" also removes
#: "Idempotency-Key", "idempotencyKey" and "IDEMPOTENCY KEY".
DEFAULT_SCRUB_FIELDS: Sequence[str] = (
    "idempotency_key",
    "x_idempotency_key",
    "idempotence_key",
    "request_id",
    "x_request_id",
    "client_request_id",
    "message_id",
    "paypal_request_id",
    "dedup_id",
    "deduplication_id",
    # The join fields belong to the ledger too: a model that fills them (with
    # another row's local id, say) sends a vendor object whose webhook would
    # settle the wrong row.
    "metadata_local_id",
    "custom_id",
)


def _keep(ch: str) -> bool:
    # Go's unicode.IsLetter is categories L*, unicode.IsDigit is Nd only
    # (str.isdigit would also keep superscripts).
    return unicodedata.category(ch)[0] == "L" or unicodedata.category(ch) == "Nd"


def _normalize(name: str) -> str:
    """Fold case and drop everything but letters and digits, one character
    at a time as Go's unicode.ToLower does ("Σ" never becomes a final "ς")."""
    out: List[str] = []
    for ch in name:
        if _keep(ch):
            out.extend(c for c in ch.lower() if _keep(c))
    return "".join(out)


class _Number(str):
    """_Number is a JSON number's text, kept so a schema's 1.50 stays 1.50."""


JSONSchema = Union[Dict[str, Any], bool]


class Scrubber:
    """Scrubber removes the given field names (normalised: case and
    separators do not matter) from tool arguments and tool schemas. It is
    read-only after construction and safe to share between threads."""

    def __init__(self, fields: Iterable[str] = DEFAULT_SCRUB_FIELDS) -> None:
        if isinstance(fields, str):
            raise TypeError("Scrubber takes a list of field names, not one string")
        self._names = frozenset(n for n in (_normalize(f) for f in fields) if n)

    def match(self, name: str) -> bool:
        """match reports whether name is one of the scrubbed fields."""
        return isinstance(name, str) and _normalize(name) in self._names

    def scrub(self, args: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
        """scrub returns a copy of args without the scrubbed fields, at any
        depth (nested objects and objects inside arrays). args itself is not
        changed; None stays None."""
        if args is None:
            return None
        if not isinstance(args, Mapping):
            raise TypeError(f"scrub: want a dict of tool arguments, got {type(args).__name__}")
        out: Dict[str, Any] = self._value(args)
        return out

    def _value(self, v: Any) -> Any:
        if isinstance(v, Mapping):
            return {k: self._value(x) for k, x in v.items() if not self.match(k)}
        if isinstance(v, (list, tuple)):
            return [self._value(x) for x in v]
        return v

    @overload
    def scrub_schema(self, schema: str) -> str: ...

    @overload
    def scrub_schema(self, schema: bytes) -> str: ...

    @overload
    def scrub_schema(self, schema: JSONSchema) -> JSONSchema: ...

    def scrub_schema(self, schema: Union[str, bytes, JSONSchema]) -> Union[str, JSONSchema]:
        """scrub_schema deletes the scrubbed fields from a JSON Schema shown
        to a model: every matching name under "properties" (at any depth:
        nested objects, items, $defs, anyOf…) and its entry in the sibling
        "required".

        A dict (or a boolean schema) gives a scrubbed deep copy; JSON text
        (str or bytes) gives compact JSON text with keys sorted and numbers
        as written, byte for byte what the Go SDK's ScrubSchema writes. A
        schema that is not an object or a boolean raises ValueError (JSON
        text that does not parse too: json.JSONDecodeError is one).
        """
        if isinstance(schema, (str, bytes, bytearray)):
            text = schema.decode("utf-8") if isinstance(schema, (bytes, bytearray)) else schema
            v = json.loads(text, parse_int=_Number, parse_float=_Number, parse_constant=_no_constant)
            _check_schema(v)
            return _dump(self._schema(v))
        _check_schema(schema)
        scrubbed: JSONSchema = self._schema(schema)
        return scrubbed

    def _schema(self, v: Any) -> Any:
        """_schema returns a scrubbed copy of a schema value."""
        if isinstance(v, Mapping):
            out = {k: self._schema(x) for k, x in v.items()}
            props = out.get("properties")
            if isinstance(props, dict):
                out["properties"] = {k: x for k, x in props.items() if not self.match(k)}
                req = out.get("required")
                if isinstance(req, list):
                    out["required"] = [r for r in req if not (isinstance(r, str) and self.match(r))]
            return out
        if isinstance(v, (list, tuple)):
            return [self._schema(x) for x in v]
        return v


def _no_constant(name: str) -> Any:
    raise ValueError(f"scrub schema: {name} is not JSON")


def _check_schema(v: Any) -> None:
    if not isinstance(v, (Mapping, bool)):
        raise ValueError("scrub schema: want an object (or a boolean schema)")


def _dump(v: Any) -> str:
    """_dump writes v as Go's encoding/json does with SetEscapeHTML(false):
    compact, keys sorted, numbers as written, U+2028 and U+2029 escaped."""
    if isinstance(v, _Number):
        return str.__str__(v)
    if isinstance(v, dict):
        return "{" + ",".join(_dump_str(k) + ":" + _dump(v[k]) for k in sorted(v)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_dump(x) for x in v) + "]"
    if isinstance(v, str):
        return _dump_str(v)
    return json.dumps(v)  # True, False, None


def _dump_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


_default = Scrubber()


def scrub(args: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """scrub removes DEFAULT_SCRUB_FIELDS from a tool call's arguments (see
    Scrubber.scrub)."""
    return _default.scrub(args)


@overload
def scrub_schema(schema: str) -> str: ...


@overload
def scrub_schema(schema: bytes) -> str: ...


@overload
def scrub_schema(schema: JSONSchema) -> JSONSchema: ...


def scrub_schema(schema: Union[str, bytes, JSONSchema]) -> Union[str, JSONSchema]:
    """scrub_schema deletes DEFAULT_SCRUB_FIELDS from a tool's JSON Schema
    (see Scrubber.scrub_schema)."""
    return _default.scrub_schema(schema)
