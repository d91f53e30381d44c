"""Typed errors of the client, one class per API error code.

Every failure is an exception of this module, never a silent success:

- ``APIError`` and its subclasses: the API (or a proxy in front of it)
  answered with an error status. The subclass names the code
  (``NotFound``, ``FingerprintMismatch``, ``Unavailable``, …), the same
  codes the Go SDK maps to its sentinels (``apierror/``).
- ``ProtocolError``: the answer is not the API's (not JSON, no decision,
  too large).
- ``TransportError``: no answer at all (connection refused or reset, a
  timeout).
- ``Stopped``, ``Unsettled`` (``Escalated``, ``ReportFailed``,
  ``QueuedError``) and ``UnknownDecision``: how ``Client.do`` ends when the
  side effect did not, or may not have, happened.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Dict, Optional, Type

if TYPE_CHECKING:  # pragma: no cover - import cycle at runtime
    from .models import Outcome, Row

__all__ = [
    "ReconcilerError",
    "APIError",
    "InvalidInput",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "MethodNotAllowed",
    "InvalidTransition",
    "CompensationPending",
    "NotQueued",
    "ApprovalDecided",
    "ApprovalExpired",
    "BodyTooLarge",
    "FingerprintMismatch",
    "CompensationFailed",
    "ToolMismatch",
    "UnregisteredTool",
    "RequestRequired",
    "Internal",
    "Unimplemented",
    "Unavailable",
    "ProtocolError",
    "TransportError",
    "Stopped",
    "Unsettled",
    "Escalated",
    "ReportFailed",
    "QueuedError",
    "UnknownDecision",
    "error_from_answer",
]


class ReconcilerError(Exception):
    """ReconcilerError is the base of every error this package raises."""


class APIError(ReconcilerError):
    """APIError is an error answer of the API and its HTTP status.

    ``code`` is the body's stable snake_case code (for a body that is not
    the API's, one derived from the status: ``bad_gateway``); ``message`` is
    for people and may change.
    """

    #: The code this class stands for ("" for the base class).
    CODE = ""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"reconciler api: {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message

    @property
    def retryable(self) -> bool:
        """True when the same request may be sent again: the API (or a proxy)
        was unavailable, overloaded or failed inside, or the first send of
        this call (its Idempotency-Key) is still being answered."""
        return self.status == 429 or self.status >= 500 or self.code == "idempotency_key_in_flight"


class InvalidInput(APIError):
    """400 ``invalid_input``, ``bad_json`` or ``bad_body``: the request is refused."""

    CODE = "invalid_input"


class Unauthorized(APIError):
    """401 ``unauthorized``: a missing or unknown token."""

    CODE = "unauthorized"


class Forbidden(APIError):
    """403 ``forbidden``: the token's role may not use the route."""

    CODE = "forbidden"


class NotFound(APIError):
    """404 ``not_found``: no row with this key for the token's tenant."""

    CODE = "not_found"


class MethodNotAllowed(APIError):
    """405 ``method_not_allowed``."""

    CODE = "method_not_allowed"


class InvalidTransition(APIError):
    """409 ``invalid_transition``: the rules forbid the change (a resolve)."""

    CODE = "invalid_transition"


class CompensationPending(APIError):
    """409 ``compensation_pending``: the original is still pending or unknown."""

    CODE = "compensation_pending"


class NotQueued(APIError):
    """409 ``not_queued``: a worker's start of a row that no outbox claim
    inserted (the agent calls it itself)."""

    CODE = "not_queued"


class ApprovalDecided(APIError):
    """409 ``approval_decided``: the approval was granted, denied or expired
    before (also a resent approve whose first answer was lost: read it with
    get_approval)."""

    CODE = "approval_decided"


class ApprovalExpired(APIError):
    """409 ``approval_expired``: the approval's expires_at has passed."""

    CODE = "approval_expired"


class BodyTooLarge(APIError):
    """413 ``body_too_large``."""

    CODE = "body_too_large"


class FingerprintMismatch(APIError):
    """422 ``fingerprint_mismatch``: the key holds another intent, or was
    claimed for another tool, tool class or vendor."""

    CODE = "fingerprint_mismatch"


class CompensationFailed(APIError):
    """422 ``compensation_failed``: the original failed; nothing to undo."""

    CODE = "compensation_failed"


class ToolMismatch(APIError):
    """422 ``tool_mismatch``: the tool is registered with another vendor or
    class than the claim names (get_tool shows the entry)."""

    CODE = "tool_mismatch"


class UnregisteredTool(APIError):
    """422 ``unregistered_tool``: the server runs with registry.strict and
    the tool is not registered."""

    CODE = "unregistered_tool"


class RequestRequired(APIError):
    """422 ``request_required``: an outbox tool's claim needs the request
    envelope (ClaimRequest.request), which the worker sends."""

    CODE = "request_required"


class Internal(APIError):
    """500 ``internal``: the cause is in the server's log."""

    CODE = "internal"


class Unimplemented(APIError):
    """501 ``not_implemented``: the server does not offer the feature."""

    CODE = "not_implemented"


class Unavailable(APIError):
    """503 ``unavailable`` (and a 502/503/504 from a proxy): retry later."""

    CODE = "unavailable"


# Each API error code and its class. bad_json and bad_body are invalid input
# too: the caller fixes its request either way (the Go SDK does the same).
_BY_CODE: Dict[str, Type[APIError]] = {
    cls.CODE: cls
    for cls in (
        InvalidInput,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        InvalidTransition,
        CompensationPending,
        NotQueued,
        ApprovalDecided,
        ApprovalExpired,
        BodyTooLarge,
        FingerprintMismatch,
        CompensationFailed,
        ToolMismatch,
        UnregisteredTool,
        RequestRequired,
        Internal,
        Unimplemented,
        Unavailable,
    )
}
_BY_CODE["bad_json"] = InvalidInput
_BY_CODE["bad_body"] = InvalidInput


def error_from_answer(status: int, code: str, message: str) -> APIError:
    """error_from_answer returns the APIError subclass of an error answer.

    A code this client does not know keeps the base class; a 502, 503 or
    504 whose body was not the API's (a proxy's page) is Unavailable, as
    retryable as the API's own 503.
    """
    cls = _BY_CODE.get(code)
    if cls is None and status in (502, 503, 504):
        cls = Unavailable
    return (cls or APIError)(status, code, message)


def code_from_status(status: int) -> str:
    """code_from_status names a status whose body carried no code:
    502 → ``bad_gateway``, as the Go SDK does."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return f"http_{status}"
    return phrase.lower().replace(" ", "_")


class ProtocolError(ReconcilerError):
    """ProtocolError means the answer is not the API's: not JSON, not the
    shape the route answers, or larger than the client reads. ``status`` is
    the HTTP status it came with."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class TransportError(ReconcilerError):
    """TransportError means no answer arrived: the connection was refused
    or broke, or the request timed out (``timeout`` is then True). The cause
    is chained (``__cause__``)."""

    def __init__(self, message: str, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class Stopped(ReconcilerError):
    """Stopped is ``do``'s answer when the ledger says not to call the vendor.

    ``code`` is ``failed_poison`` (the vendor refused this intent: a new
    intent needs a new key), ``tool_frozen`` (the kill switch covers the
    tool), ``approval_denied`` (an approver said no) or ``approval_expired``
    (nobody decided within approvals.ttl). ``row`` is None for a frozen tool with no row. When this ``do``
    made the call that failed, the call's exception is ``__cause__``.
    """

    def __init__(
        self,
        code: str,
        key: str,
        row: Optional[Row],
        outcome: Optional[Outcome] = None,
        detail: str = "",
    ) -> None:
        msg = "reconciler: stop: " + code
        if key:
            msg += f" (key {key})"
        if detail:
            msg += ": " + detail
        super().__init__(msg)
        self.code = code
        self.key = key
        self.row = row
        #: How do() ended: its last decision, whether it called, what it reported.
        self.outcome = outcome


class Unsettled(ReconcilerError):
    """Unsettled means nobody knows yet whether the side effect happened.

    The vendor timed out, the connection broke, it answered 5xx, 429 or a
    409 for a key in use, the report could not be delivered, or the key
    stayed in flight elsewhere until the deadline. ``status`` is the row's
    status as last seen (``pending`` or ``unknown``; "" when the report
    never arrived). The row stays open until the resolver, a webhook or a
    later ``do`` of the same intent settles it: never call the vendor again
    under a new key.
    """

    def __init__(
        self,
        key: str,
        status: str = "",
        detail: str = "",
        outcome: Optional[Outcome] = None,
    ) -> None:
        msg = f"reconciler: key {key} not settled"
        if status:
            msg += f" (row {status})"
        if detail:
            msg += ": " + detail
        super().__init__(msg)
        self.key = key
        self.status = status
        self.outcome = outcome


class Escalated(Unsettled):
    """Escalated means a human was paged for the key (its replay window
    closed while the row was open): hand the run to them."""


class ReportFailed(Unsettled):
    """ReportFailed means the outcome report could not be delivered after
    its retries; the row stays pending for the resolver. The report's error
    is ``__cause__``; the call's own error, if any, is ``call_error``."""

    def __init__(
        self,
        key: str,
        detail: str = "",
        outcome: Optional[Outcome] = None,
        call_error: Optional[BaseException] = None,
    ) -> None:
        super().__init__(key, "", detail, outcome)
        self.call_error = call_error


class QueuedError(Unsettled):
    """QueuedError is ``do``'s answer to a ``queued`` claim: the tool's
    calls go through the runtime's outbox worker, so this do() called
    nothing. The worker takes the key's work item from stream RECON_WORK,
    starts it, calls and reports; park the run on the key (its events on
    ``recon.<tenant>.<run_id>.>``, or a later do() with ``wait_queued``)
    and carry on when it settles. It is an Unsettled: the row is open
    (``row``, as last seen) and must never be called under a new key. With
    ``wait_queued`` it is also the answer when do()'s timeout passed before
    the worker settled the key."""

    def __init__(self, key: str, row: Optional[Row], run_id: str, outcome: Optional[Outcome] = None, detail: str = "") -> None:
        super().__init__(key, row.status if row is not None else "", detail or "queued for the outbox worker", outcome)
        self.row = row
        self.run_id = run_id


class UnknownDecision(ReconcilerError):
    """UnknownDecision is ``do``'s answer to a claim decision this client
    does not know (a server newer than the client): nothing was called."""

    def __init__(self, decision: str, outcome: Optional[Outcome] = None) -> None:
        super().__init__(f"reconciler: claim answered the decision {decision!r}, which this client does not know")
        self.decision = decision
        self.outcome = outcome
