"""The API's bodies and answers, with the field names of api/openapi.yaml.

Request bodies are dataclasses with ``to_json()``; answers are parsed by
``from_json()``, which raises ProtocolError for a field of the wrong type.
Timestamps stay the RFC 3339 text the server sent (nanosecond precision,
which ``datetime`` cannot hold); a field the server left out is "" / 0 /
None. ``Row.raw`` keeps the row's JSON object as sent, every field included,
also the ones this version of the client does not know.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from .errors import ProtocolError

__all__ = [
    "Decision",
    "Status",
    "ToolClass",
    "OutcomeKind",
    "StopCode",
    "Request",
    "Expect",
    "ClaimRequest",
    "OutcomeReport",
    "ResolveRequest",
    "Resolution",
    "Alert",
    "Row",
    "ClaimResponse",
    "Page",
    "Result",
    "Outcome",
]


class Decision:
    """Decision names the claim API's answers (strings, so a decision a newer
    server sends is still representable)."""

    PROCEED = "proceed"
    REPLAY = "replay"
    WAIT = "wait"
    RETRY_SAME_KEY = "retry_same_key"
    STOP = "stop"


class Status:
    """Status names what the ledger knows about a key's side effect."""

    PENDING = "pending"
    UNKNOWN = "unknown"
    SUCCEEDED = "succeeded"
    FAILED_POISON = "failed_poison"


class ToolClass:
    """ToolClass says how far the vendor can be trusted with a retry."""

    WRITE_IDEMPOTENT = "write_idempotent"
    WRITE_LEDGER = "write_ledger"
    WRITE_IRREVERSIBLE = "write_irreversible"


class OutcomeKind:
    """OutcomeKind is what happened to one vendor call."""

    RESPONSE = "response"
    TIMEOUT = "timeout"
    NETWORK_ERROR = "network_error"


class StopCode:
    """StopCode says why a stop stops."""

    TOOL_FROZEN = "tool_frozen"
    FAILED_POISON = "failed_poison"


@dataclass
class Request:
    """Request is the vendor call's envelope, kept so the resolver can replay
    it with the same key."""

    method: str
    path: str
    content_type: str = ""
    #: The body as sent: form-encoded for Stripe, JSON text for most others.
    body: str = ""

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"method": self.method, "path": self.path}
        if self.content_type:
            out["content_type"] = self.content_type
        if self.body:
            out["body"] = self.body
        return out

    @classmethod
    def from_json(cls, d: Any, where: str = "request") -> Request:
        d = _obj(d, where)
        return cls(
            method=_str(d, "method", where),
            path=_str(d, "path", where),
            content_type=_str(d, "content_type", where),
            body=_str(d, "body", where),
        )


@dataclass
class Expect:
    """Expect is the amount the call means to move, in minor units; evidence
    that disagrees raises an alert instead of a silent success."""

    amount: int
    currency: str

    def to_json(self) -> Dict[str, Any]:
        return {"amount": self.amount, "currency": self.currency}

    @classmethod
    def from_json(cls, d: Any, where: str = "expect") -> Expect:
        d = _obj(d, where)
        return cls(amount=_int(d, "amount", where), currency=_str(d, "currency", where))


@dataclass
class ClaimRequest:
    """ClaimRequest is the body of ``POST /v1/claims``. The tenant comes from
    the token, never from here."""

    run_id: str
    tool: str
    vendor: str
    tool_class: str
    #: Only the fields that define the side effect (amount, currency,
    #: customer; to, template_id…) — never a timestamp or an id the model
    #: invented, or every retry would be a new intent.
    intent: Optional[Mapping[str, Any]]
    tool_call_id: str = ""
    #: An optional business key (cart id, upstream event id); "" lets the
    #: ledger mint one from the run, the tool and the intent.
    key: str = ""
    request: Optional[Request] = None
    expect: Optional[Expect] = None

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"run_id": self.run_id, "tool": self.tool}
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        out["vendor"] = self.vendor
        out["tool_class"] = self.tool_class
        out["intent"] = self.intent
        if self.key:
            out["key"] = self.key
        if self.request is not None:
            out["request"] = self.request.to_json()
        if self.expect is not None:
            out["expect"] = self.expect.to_json()
        return out


@dataclass
class OutcomeReport:
    """OutcomeReport is the body of ``POST /v1/claims/{key}/outcome``: what
    one vendor call did."""

    kind: str
    http_status: int = 0
    receipt_id: str = ""
    headers: Optional[Dict[str, str]] = None
    #: The claim answer's row.attempt (do() sets it): a report that arrives
    #: after a later attempt began leaves that attempt's lease alone.
    attempt: int = 0

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"kind": self.kind}
        if self.http_status:
            out["http_status"] = self.http_status
        if self.receipt_id:
            out["receipt_id"] = self.receipt_id
        if self.headers:
            out["headers"] = dict(self.headers)
        if self.attempt:
            out["attempt"] = self.attempt
        return out


@dataclass
class ResolveRequest:
    """ResolveRequest is the body of ``POST /v1/claims/{key}/resolve``
    (admin token)."""

    #: The row's tenant: an admin token has none.
    tenant: str
    #: succeeded or failed_poison.
    status: str
    #: Why; required.
    note: str
    receipt_id: str = ""
    actor: str = ""

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"tenant": self.tenant, "status": self.status}
        if self.receipt_id:
            out["receipt_id"] = self.receipt_id
        out["note"] = self.note
        if self.actor:
            out["actor"] = self.actor
        return out


@dataclass
class Resolution:
    """Resolution records who closed a row and on what evidence."""

    source: str = ""
    vendor_event_id: str = ""
    actor: str = ""
    note: str = ""
    at: str = ""

    @classmethod
    def from_json(cls, d: Any, where: str = "resolution") -> Resolution:
        d = _obj(d, where)
        return cls(**{f: _str(d, f, where) for f in ("source", "vendor_event_id", "actor", "note", "at")})


@dataclass
class Alert:
    """Alert is one anomaly recorded on a row (a late success, a mismatch…)."""

    kind: str = ""
    source: str = ""
    vendor_event_id: str = ""
    detail: str = ""
    at: str = ""

    @classmethod
    def from_json(cls, d: Any, where: str = "alert") -> Alert:
        d = _obj(d, where)
        return cls(**{f: _str(d, f, where) for f in ("kind", "source", "vendor_event_id", "detail", "at")})


_ROW_STRINGS = (
    "tenant",
    "key",
    "intent_fingerprint",
    "metadata_local_id",
    "run_id",
    "tool",
    "tool_call_id",
    "vendor",
    "tool_class",
    "status",
    "upstream_receipt_id",
    "first_seen_at",
    "updated_at",
    "succeeded_at",
    "paged_at",
    "pending_until",
    "replay_window_until",
    "next_check_at",
    "compensation_of",
    "compensation_action",
)


@dataclass
class Row:
    """Row is one idempotency key and what is known about its side effect."""

    tenant: str = ""
    key: str = ""
    intent_fingerprint: str = ""
    #: rl_ + 32 hex: write it into the vendor's metadata so a webhook finds the row.
    metadata_local_id: str = ""
    run_id: str = ""
    tool: str = ""
    tool_call_id: str = ""
    vendor: str = ""
    tool_class: str = ""
    status: str = ""
    #: Transport attempts granted for this key (proceed is 1, each retry_same_key adds one).
    attempt: int = 0
    upstream_receipt_id: str = ""
    idempotent_replayed: bool = False
    vendor_should_retry: Optional[bool] = None
    last_http_status: int = 0
    first_seen_at: str = ""
    updated_at: str = ""
    succeeded_at: str = ""
    #: Set when a human was paged for the row.
    paged_at: str = ""
    #: End of the in-flight lease.
    pending_until: str = ""
    replay_window_until: str = ""
    next_check_at: str = ""
    compensation_of: str = ""
    compensation_action: str = ""
    request: Optional[Request] = None
    expect: Optional[Expect] = None
    resolution: Optional[Resolution] = None
    alerts: List[Alert] = field(default_factory=list)
    #: The row's JSON object as the server sent it.
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Any, where: str = "row") -> Row:
        d = _obj(d, where)
        kw: Dict[str, Any] = {f: _str(d, f, where) for f in _ROW_STRINGS}
        kw["attempt"] = _int(d, "attempt", where)
        kw["last_http_status"] = _int(d, "last_http_status", where)
        kw["idempotent_replayed"] = bool(_opt_bool(d, "idempotent_replayed", where))
        kw["vendor_should_retry"] = _opt_bool(d, "vendor_should_retry", where)
        if d.get("request") is not None:
            kw["request"] = Request.from_json(d["request"], where + ".request")
        if d.get("expect") is not None:
            kw["expect"] = Expect.from_json(d["expect"], where + ".expect")
        if d.get("resolution") is not None:
            kw["resolution"] = Resolution.from_json(d["resolution"], where + ".resolution")
        alerts = d.get("alerts")
        if alerts is not None:
            if not isinstance(alerts, list):
                raise ProtocolError(f"{where}.alerts: want an array")
            kw["alerts"] = [Alert.from_json(a, f"{where}.alerts[{i}]") for i, a in enumerate(alerts)]
        return cls(raw=d, **kw)


@dataclass
class ClaimResponse:
    """ClaimResponse is the answer to a claim or a compensation."""

    decision: str
    #: Why a stop stops (StopCode.FAILED_POISON, StopCode.TOOL_FROZEN).
    code: str = ""
    #: None only for a frozen tool with no row.
    row: Optional[Row] = None
    replay_window_until: str = ""
    #: The API's status: 201 proceed, 409 wait, 423 frozen, 200 the rest.
    http_status: int = 0

    @property
    def key(self) -> str:
        """The row's key ("" for a frozen tool with no row)."""
        return self.row.key if self.row is not None else ""

    @classmethod
    def from_json(cls, d: Any, http_status: int) -> ClaimResponse:
        d = _obj(d, "claim answer")
        decision = _str(d, "decision", "claim answer")
        if not decision:
            raise ProtocolError("claim: answer without a decision", http_status)
        row = Row.from_json(d["row"]) if d.get("row") is not None else None
        return cls(
            decision=decision,
            code=_str(d, "code", "claim answer"),
            row=row,
            replay_window_until=_str(d, "replay_window_until", "claim answer"),
            http_status=http_status,
        )


@dataclass
class Page:
    """Page is a page of rows, newest first; next_cursor is "" on the last."""

    rows: List[Row]
    next_cursor: str = ""


@dataclass
class Result:
    """Result is what one vendor call answered: its HTTP status, the vendor's
    object id and the headers the ledger's classification reads
    (Idempotent-Replayed, Stripe-Should-Retry). A call that got no answer
    raises instead (do() reports a timeout or a network error)."""

    http_status: int = 0
    receipt_id: str = ""
    headers: Dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    """Outcome is how do() ended."""

    #: The claim decision do() acted on last (proceed, retry_same_key, replay
    #: or stop; a wait is followed by another decision).
    decision: str = ""
    key: str = ""
    local_id: str = ""
    #: The row as do() last saw it: after the report, or as replayed.
    row: Optional[Row] = None
    #: True when do() called the vendor; result is then its answer.
    called: bool = False
    result: Result = field(default_factory=Result)
    #: The outcome kind reported for the call.
    kind: str = ""
    #: True when the receipt came from the ledger without a call.
    replayed: bool = False
    #: True when the key was in flight elsewhere and do() waited.
    waited: bool = False

    @property
    def receipt_id(self) -> str:
        """The vendor object id of the side effect, if known."""
        if self.row is not None and self.row.upstream_receipt_id:
            return self.row.upstream_receipt_id
        return self.result.receipt_id


def _obj(d: Any, where: str) -> Dict[str, Any]:
    if not isinstance(d, dict):
        raise ProtocolError(f"{where}: want a JSON object, got {type(d).__name__}")
    return d


def _str(d: Mapping[str, Any], name: str, where: str) -> str:
    v = d.get(name)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ProtocolError(f"{where}.{name}: want a string, got {type(v).__name__}")
    return v


def _int(d: Mapping[str, Any], name: str, where: str) -> int:
    v = d.get(name)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(f"{where}.{name}: want an integer, got {type(v).__name__}")
    return v


def _opt_bool(d: Mapping[str, Any], name: str, where: str) -> Optional[bool]:
    v = d.get(name)
    if v is None:
        return None
    if not isinstance(v, bool):
        raise ProtocolError(f"{where}.{name}: want a boolean, got {type(v).__name__}")
    return v
