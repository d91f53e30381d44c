"""The API's bodies and answers, with the field names of api/openapi.yaml.

Request bodies are dataclasses with ``to_json()``; answers are parsed by
``from_json()``, which raises ProtocolError for a field of the wrong type.
Timestamps stay the RFC 3339 text the server sent (nanosecond precision,
which ``datetime`` cannot hold); a field the server left out is "" / 0 /
None. ``Row.raw`` keeps the row's JSON object as sent, every field included,
also the ones this version of the client does not know.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from .errors import ProtocolError

__all__ = [
    "Decision",
    "Status",
    "ToolClass",
    "OutcomeKind",
    "StopCode",
    "Autonomy",
    "ApprovalState",
    "Request",
    "Expect",
    "ClaimRequest",
    "OutcomeReport",
    "ResolveRequest",
    "Resolution",
    "Alert",
    "Approval",
    "Row",
    "ClaimResponse",
    "Page",
    "ApprovalView",
    "ApprovalPage",
    "Tool",
    "ToolChange",
    "WorkItem",
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
    #: The tool needs a human's approval for this claim (202): call nothing.
    AWAIT_APPROVAL = "await_approval"
    #: The call goes through the runtime's outbox worker (202): call nothing.
    QUEUED = "queued"


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
    #: An approver denied the approval request.
    APPROVAL_DENIED = "approval_denied"
    #: Nobody decided the approval request within approvals.ttl.
    APPROVAL_EXPIRED = "approval_expired"


class Autonomy:
    """Autonomy is how far a registered tool may act without a human
    (docs/architecture.md §11)."""

    AUTONOMOUS = "autonomous"
    APPROVAL = "approval"
    OUTBOX = "outbox"


class ApprovalState:
    """ApprovalState is where an approval request stands."""

    REQUESTED = "requested"
    GRANTED = "granted"
    DENIED = "denied"
    EXPIRED = "expired"


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
    #: JSON text (at most 64 KiB) kept as row.result when this report
    #: settles the row, so a replay can answer without a call.
    result: str = ""

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
        if self.result:
            out["result"] = self.result
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


_APPROVAL_STRINGS = (
    "id",
    "state",
    "reason",
    "requested_at",
    "expires_at",
    "requested_by",
    "actor",
    "note",
    "decided_by",
    "decided_at",
)


@dataclass
class Approval:
    """Approval is the approval record of a row whose claim needed a human.
    ``id`` names it in /v1/approvals/{id}; ``state`` is an ApprovalState."""

    id: str = ""
    state: str = ""
    #: Why the claim needs approval: the checklist, the class, the autonomy
    #: asked for, or ``policy: <expression>``.
    reason: str = ""
    requested_at: str = ""
    expires_at: str = ""
    #: Fingerprint of the token that made the claim (that token cannot decide).
    requested_by: str = ""
    actor: str = ""
    note: str = ""
    decided_by: str = ""
    decided_at: str = ""

    @classmethod
    def from_json(cls, d: Any, where: str = "approval") -> Approval:
        d = _obj(d, where)
        return cls(**{f: _str(d, f, where) for f in _APPROVAL_STRINGS})


_ROW_STRINGS = (
    "tenant",
    "key",
    "vendor_key",
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
    "result",
    "autonomy",
    "traceparent",
)


@dataclass
class Row:
    """Row is one idempotency key and what is known about its side effect."""

    tenant: str = ""
    key: str = ""
    #: The key to send to the vendor (where its profile's placement says):
    #: the key itself, or the digest of it the vendor's profile asks for.
    vendor_key: str = ""
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
    #: The runtime's JSON text reported with the answer that settled the row.
    result: str = ""
    #: The gate the row was inserted under (Autonomy.APPROVAL or
    #: Autonomy.OUTBOX); "" for an autonomous claim.
    autonomy: str = ""
    #: The W3C trace context of the claim that inserted the row, when the
    #: service traces.
    traceparent: str = ""
    request: Optional[Request] = None
    expect: Optional[Expect] = None
    resolution: Optional[Resolution] = None
    #: Set on a row whose claim needed a human's approval.
    approval: Optional[Approval] = None
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
        if d.get("approval") is not None:
            kw["approval"] = Approval.from_json(d["approval"], where + ".approval")
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
    #: Why a stop stops (StopCode.FAILED_POISON, StopCode.TOOL_FROZEN,
    #: StopCode.APPROVAL_DENIED, StopCode.APPROVAL_EXPIRED).
    code: str = ""
    #: None only for a frozen tool with no row.
    row: Optional[Row] = None
    replay_window_until: str = ""
    #: The API's status: 201 proceed, 202 await_approval and queued, 409
    #: wait, 423 frozen, 200 the rest.
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
class ApprovalView:
    """ApprovalView is one approval request and the row it gates."""

    approval: Approval
    row: Row

    @classmethod
    def from_json(cls, d: Any, where: str = "approval view") -> ApprovalView:
        d = _obj(d, where)
        if d.get("approval") is None or d.get("row") is None:
            raise ProtocolError(f"{where}: want approval and row")
        return cls(approval=Approval.from_json(d["approval"], where + ".approval"), row=Row.from_json(d["row"], where + ".row"))


@dataclass
class ApprovalPage:
    """ApprovalPage is a page of open approval requests, soonest to expire
    first; next_cursor is "" on the last."""

    approvals: List[ApprovalView]
    next_cursor: str = ""


@dataclass
class Tool:
    """Tool is a registry entry as stored (docs/architecture.md §11). The
    nested parts (key_placement, checklist) stay JSON objects; ``raw`` is
    the entry as the server sent it. ``tool_class`` is the API's ``class``."""

    tenant: str = ""
    name: str = ""
    vendor: str = ""
    #: read, or a ToolClass.
    tool_class: str = ""
    side_effect: str = ""
    key_placement: Dict[str, Any] = field(default_factory=dict)
    intent_fields: List[str] = field(default_factory=list)
    checklist: Dict[str, Any] = field(default_factory=dict)
    #: An Autonomy.
    autonomy: str = ""
    policy: str = ""
    version: int = 0
    created_at: str = ""
    updated_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Any, where: str = "tool") -> Tool:
        d = _obj(d, where)
        fields = d.get("intent_fields")
        if fields is None:
            fields = []
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise ProtocolError(f"{where}.intent_fields: want an array of strings")
        return cls(
            tenant=_str(d, "tenant", where),
            name=_str(d, "name", where),
            vendor=_str(d, "vendor", where),
            tool_class=_str(d, "class", where),
            side_effect=_str(d, "side_effect", where),
            key_placement=_obj(d.get("key_placement") or {}, where + ".key_placement"),
            intent_fields=list(fields),
            checklist=_obj(d.get("checklist") or {}, where + ".checklist"),
            autonomy=_str(d, "autonomy", where),
            policy=_str(d, "policy", where),
            version=_int(d, "version", where),
            created_at=_str(d, "created_at", where),
            updated_at=_str(d, "updated_at", where),
            raw=d,
        )


@dataclass
class ToolChange:
    """ToolChange is the answer of a PUT of a registry entry: the entry as
    stored, and whether the PUT changed it (an equal entry keeps its
    version)."""

    tool: Tool
    changed: bool
    #: True when the PUT registered the tool (201).
    created: bool = False


@dataclass
class WorkItem:
    """WorkItem is one message of stream RECON_WORK (subject
    ``recon_work.<tenant>.<tool>``): the event JSON of a queued key, status
    ``queued``, with its ``work`` object — what the outbox worker calls.
    Parse the message's data with ``WorkItem.from_json``; ``raw`` keeps it."""

    key: str
    tenant: str
    run_id: str
    tool: str
    vendor: str
    tool_class: str
    metadata_local_id: str
    tool_call_id: str = ""
    status: str = ""
    at: str = ""
    #: The claim's intent object.
    intent: Optional[Dict[str, Any]] = None
    #: The envelope of the call to send (method, path, content type, body).
    request: Optional[Request] = None
    expect: Optional[Expect] = None
    #: When the vendor forgets the key ("" when it does not replay).
    replay_window_until: str = ""
    #: The W3C trace context of the claim that queued the key, if traced.
    traceparent: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Any, where: str = "work item") -> WorkItem:
        """from_json reads a work item: a decoded JSON object, or the
        message's data (bytes or str)."""
        if isinstance(d, (bytes, bytearray, memoryview)):
            d = bytes(d).decode("utf-8")
        if isinstance(d, str):
            try:
                d = json.loads(d)
            except ValueError as e:
                raise ProtocolError(f"{where}: not JSON ({e})") from e
        d = _obj(d, where)
        w = _obj(d.get("work"), where + ".work")
        intent = w.get("intent")
        if intent is not None and not isinstance(intent, dict):
            raise ProtocolError(f"{where}.work.intent: want a JSON object")
        item = cls(
            key=_str(d, "key", where),
            tenant=_str(d, "tenant", where),
            run_id=_str(d, "run_id", where),
            tool=_str(d, "tool", where),
            tool_call_id=_str(d, "tool_call_id", where),
            status=_str(d, "status", where),
            at=_str(d, "at", where),
            traceparent=_str(d, "traceparent", where),
            vendor=_str(w, "vendor", where + ".work"),
            tool_class=_str(w, "tool_class", where + ".work"),
            metadata_local_id=_str(w, "metadata_local_id", where + ".work"),
            intent=intent,
            request=Request.from_json(w["request"], where + ".work.request") if w.get("request") is not None else None,
            expect=Expect.from_json(w["expect"], where + ".work.expect") if w.get("expect") is not None else None,
            replay_window_until=_str(w, "replay_window_until", where + ".work"),
            raw=d,
        )
        if not item.key or not item.tool:
            raise ProtocolError(f"{where}: want key and tool")
        return item


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
    #: The row's vendor_key: what the call got as its key (the ledger key
    #: unless the vendor's profile shortens or reshapes it).
    vendor_key: str = ""
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
    #: True when the claim answered await_approval and do() waited for a
    #: human's decision (the call, if any, came after the grant).
    awaited_approval: bool = False
    #: True when the claim answered queued: the outbox worker makes the
    #: call, never this do() (with wait_queued, do() waited for it).
    queued: bool = False

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
