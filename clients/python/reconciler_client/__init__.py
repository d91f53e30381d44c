"""reconciler_client is the Python client of the reconciler idempotency
ledger for AI-agent tool writes: it puts every write tool call under the
ledger, so a timeout retried by the model loop, the harness and the HTTP
client is still one side effect. Standard library only; Python 3.9 or later.

- ``Client(base_url, token)``: ``claim``, ``claim_wait``, ``report``,
  ``get``, ``list``, ``compensate`` and ``resolve`` (admin) mirror the claim
  API (api/openapi.yaml); every error answer is an ``APIError`` subclass
  named by its code (``NotFound``, ``FingerprintMismatch``, ``Unavailable``…).
- ``Client.do(claim, call)`` claims the intent's key, calls the vendor only
  on proceed or retry_same_key, classifies and reports the answer (resending
  a lost report with the same body), replays a stored receipt, long-polls a
  key in flight elsewhere, and raises ``Stopped`` or ``Unsettled`` when the
  side effect did not (or may not have) happened. It never calls the vendor
  under a new key.
- ``do`` of a tool that needs a human (``await_approval``) waits for the
  approver's decision, then calls once or raises ``Stopped``
  (approval_denied, approval_expired); of an outbox tool (``queued``) it
  calls nothing and raises ``QueuedError``, or with ``wait_queued`` waits
  for the worker's result. ``Worker`` is that outbox worker: it handles
  work items the runtime pulls from stream RECON_WORK.
- ``start``, ``put_tool``/``get_tool``/``list_tools``/``delete_tool`` and
  ``list_approvals``/``get_approval``/``approve``/``deny`` cover the
  worker's route, the tool registry and the approval gate.
- ``traceparent=`` (a value or a callable, per client or per call) sends a
  W3C traceparent header on every request.
- ``scrub`` and ``scrub_schema`` keep a model from choosing a write's
  identity: they remove idempotency_key, request_id, message_id-style fields
  from tool arguments and from the tool schema the model sees.
- ``guarded_tool(client, tool=…, run_id=…)`` decorates a plain function
  (sync or async) into a write tool a model calls: the signature a
  framework reads has no key-like parameter, the intent is the registry's
  intent_fields, the vendor key is placed where the registry says, and the
  tool returns text the model acts on (``timeout: outcome unknown — do not
  retry with new arguments``…). OpenAI Agents' ``function_tool``,
  LangChain's ``@tool`` or a hand-rolled loop take it as it is.
- ``result_from_response``, ``result_from_exception`` and ``stripe_result``
  turn a vendor's answer (urllib, requests, httpx, stripe-python) into the
  ``Result`` a call returns.

The semantics are the Go SDK's (client/ in the repository); a Client is
safe for concurrent use by many threads, and do() runs the call on the
calling thread, starting none of its own.
"""

from .client import (
    DEFAULT_MAX_RESPONSE,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_REPORT_TIMEOUT,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    DEFAULT_WAIT,
    CallFunc,
    Client,
    Traceparent,
    current_attempt_row,
    valid_traceparent,
)
from .errors import (
    APIError,
    ApprovalDecided,
    ApprovalExpired,
    BodyTooLarge,
    CompensationFailed,
    CompensationPending,
    Escalated,
    FingerprintMismatch,
    Forbidden,
    Internal,
    InvalidInput,
    InvalidTransition,
    MethodNotAllowed,
    NotFound,
    NotQueued,
    ProtocolError,
    QueuedError,
    ReconcilerError,
    ReportFailed,
    RequestRequired,
    Stopped,
    ToolMismatch,
    TransportError,
    Unauthorized,
    Unavailable,
    Unimplemented,
    UnknownDecision,
    UnregisteredTool,
    Unsettled,
)
from .models import (
    Alert,
    Approval,
    ApprovalPage,
    ApprovalState,
    ApprovalView,
    Autonomy,
    ClaimRequest,
    ClaimResponse,
    Decision,
    Expect,
    Outcome,
    OutcomeKind,
    OutcomeReport,
    Page,
    Request,
    Resolution,
    ResolveRequest,
    Result,
    Row,
    Status,
    StopCode,
    Tool,
    ToolChange,
    ToolClass,
    WorkItem,
)
from .results import RESULT_HEADERS, classify, is_timeout, result_from_exception, result_from_response, stripe_result
from .guard import GuardAnswer, GuardContext, answer_error, guarded_tool, model_tool_name
from .scrub import DEFAULT_SCRUB_FIELDS, Scrubber, scrub, scrub_schema
from .worker import DEFAULT_MAX_DELAY, DEFAULT_NAK_DELAY, WorkFunc, Worker, WorkOutcome, WorkStatus

__version__ = "0.1.0"

__all__ = [
    "Client",
    "CallFunc",
    "Traceparent",
    "valid_traceparent",
    "Worker",
    "WorkFunc",
    "WorkOutcome",
    "WorkStatus",
    "DEFAULT_MAX_DELAY",
    "DEFAULT_NAK_DELAY",
    "DEFAULT_TIMEOUT",
    "DEFAULT_REPORT_TIMEOUT",
    "DEFAULT_WAIT",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_RETRIES",
    "DEFAULT_MAX_RESPONSE",
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
    "ClaimResponse",
    "OutcomeReport",
    "ResolveRequest",
    "Resolution",
    "Alert",
    "Approval",
    "ApprovalView",
    "ApprovalPage",
    "Tool",
    "ToolChange",
    "WorkItem",
    "Row",
    "Page",
    "Result",
    "Outcome",
    "RESULT_HEADERS",
    "result_from_response",
    "result_from_exception",
    "stripe_result",
    "classify",
    "is_timeout",
    "DEFAULT_SCRUB_FIELDS",
    "Scrubber",
    "scrub",
    "scrub_schema",
    "guarded_tool",
    "GuardContext",
    "GuardAnswer",
    "answer_error",
    "model_tool_name",
    "current_attempt_row",
]
