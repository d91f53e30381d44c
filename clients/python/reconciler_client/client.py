"""Client talks to the reconciler claim API; Client.do runs one tool call
under the ledger with the Go SDK's decision semantics (client/do.go)."""

from __future__ import annotations

import contextvars
import http.client
import json
import logging
import math
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import (
    APIError,
    ApprovalDecided,
    Escalated,
    InvalidInput,
    ProtocolError,
    QueuedError,
    ReconcilerError,
    ReportFailed,
    Stopped,
    TransportError,
    UnknownDecision,
    Unsettled,
    code_from_status,
    error_from_answer,
)
from .models import (
    ApprovalPage,
    ApprovalState,
    ApprovalView,
    ClaimRequest,
    ClaimResponse,
    Decision,
    Outcome,
    OutcomeKind,
    OutcomeReport,
    Page,
    ResolveRequest,
    Result,
    Row,
    Status,
    StopCode,
    Tool,
    ToolChange,
)
from .results import classify, is_timeout, result_from_exception
from .scrub import DEFAULT_SCRUB_FIELDS, Scrubber

__all__ = [
    "Client",
    "CallFunc",
    "Traceparent",
    "valid_traceparent",
    "DEFAULT_TIMEOUT",
    "DEFAULT_REPORT_TIMEOUT",
    "DEFAULT_WAIT",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_RETRIES",
    "DEFAULT_MAX_RESPONSE",
]

#: Bounds one API request, in seconds (a long poll gets its wait on top).
DEFAULT_TIMEOUT = 10.0
#: Bounds an outcome report with all its retries. It runs even when do()'s
#: own timeout has passed: the vendor call that used it up is exactly the one
#: whose outcome must reach the ledger.
DEFAULT_REPORT_TIMEOUT = 30.0
#: How long one long-polling claim (?wait=) holds; the API's maximum.
DEFAULT_WAIT = 30.0
#: The pause between long polls that answered at once or failed.
DEFAULT_POLL_INTERVAL = 2.0
#: How often a failed request is sent again (so 1+4 sends).
DEFAULT_RETRIES = 4
#: The largest API answer the client reads; a larger one is refused, not cut.
DEFAULT_MAX_RESPONSE = 4 << 20

#: CallFunc makes the vendor call for one attempt: it must send key as the
#: vendor's idempotency key and local_id in the vendor's metadata
#: (metadata[metadata_local_id] for Stripe, custom_id for PayPal). It returns
#: the vendor's answer as a Result, or raises: an exception that carries an
#: answer (urllib's HTTPError, requests' HTTPError, a StripeError) is that
#: answer; any other is a timeout or a network error, and the row becomes
#: unknown. It must bound its own time (urlopen's timeout=).
CallFunc = Callable[[str, str], Result]

#: Traceparent is where a request's W3C ``traceparent`` header comes from:
#: the header's value, or a callable returning the current one (None or ""
#: for none), asked once per request — e.g. OpenTelemetry's propagator::
#:
#:     from opentelemetry import propagate
#:     def current() -> str:
#:         carrier: dict = {}
#:         propagate.inject(carrier)
#:         return carrier.get("traceparent", "")
#:
#: A value that is not a valid traceparent is not sent (the API would ignore
#: it anyway); a callable that raises sends none.
Traceparent = Union[str, Callable[[], Optional[str]]]

# The traceparent of the do() (or Worker.handle) running in this thread or
# task: it wins over the client's for every request of that call.
_CALL_TRACEPARENT: contextvars.ContextVar[Optional[Traceparent]] = contextvars.ContextVar(
    "reconciler_client_traceparent", default=None
)

#: The row of the attempt whose call is running (do() sets it around the
#: call, on the calling thread): current_attempt_row reads it.
_ATTEMPT_ROW: contextvars.ContextVar[Optional[Row]] = contextvars.ContextVar("reconciler_client_attempt_row", default=None)


def current_attempt_row() -> Optional[Row]:
    """current_attempt_row returns, inside a call that do() is making, the
    row as the claim answered it (its ``raw`` holds fields this client
    version does not name, such as ``vendor_key``); None outside a call."""
    return _ATTEMPT_ROW.get()


_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?$")


def valid_traceparent(value: Any) -> bool:
    """valid_traceparent reports whether value is a W3C traceparent the
    client sends: lower-case hex fields, version not ff (version 00 exactly
    55 characters), trace id and parent id not all zero."""
    if not isinstance(value, str) or len(value) > 512:
        return False
    m = _TRACEPARENT.match(value)
    if m is None:
        return False
    version, trace_id, span_id, rest = m.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return False
    return trace_id.strip("0") != "" and span_id.strip("0") != ""


_log = logging.getLogger("reconciler_client")
# A library's records go nowhere until the application configures logging
# (the Go SDK's default is a discarding logger too).
_log.addHandler(logging.NullHandler())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """_NoRedirect refuses redirects: urllib would resend the bearer token to
    whatever host a redirect names, and the API never redirects."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


@dataclass
class _Call:
    """_Call is one API round trip."""

    method: str
    path: str  # already escaped
    query: Optional[Dict[str, str]] = None
    body: Optional[Dict[str, Any]] = None
    #: Added to the request timeout (a long poll).
    extra: float = 0.0
    #: The non-2xx statuses whose body is a normal answer (a claim's 409 wait, 423 stop).
    accept: Tuple[int, ...] = ()
    #: A 2xx without a body is the answer (a DELETE's 204).
    empty_ok: bool = False


@dataclass
class _Step:
    """_Step is what a decision handler of do() gets: the claim, its answer,
    the outcome so far, the call and do()'s deadline."""

    claim: ClaimRequest
    resp: ClaimResponse
    out: Outcome
    call: CallFunc
    deadline: Optional[float]
    wait_queued: bool = False
    wait_approval: bool = True


class Client:
    """Client talks to the reconciler claim API at base_url
    (``http://127.0.0.1:8080``) with a bearer token. It is safe for
    concurrent use by many threads.

    Keyword arguments (seconds for times):

    - ``timeout``: bounds one API request (default 10).
    - ``report_timeout``: bounds an outcome report with its retries (30).
    - ``wait``: how long one long-polling claim holds (30, the API's most).
    - ``poll_interval``: the pause between long polls that answer at once (2).
    - ``retries``, ``backoff``: how often a failed request is sent again and
      the first pause between sends (doubling, jittered, at most 2 s). Only
      requests that a resend cannot make worse are retried: a claim finds the
      same row, a report with the same body is applied once.
    - ``tenant``: the tenant an admin token reads (get and list add ?tenant=).
    - ``scrub_fields``: replaces the field names scrub removes.
    - ``max_response``: the largest answer read (4 MiB).
    - ``logger``: a logging.Logger (default "reconciler_client"); tokens and
      bodies are never logged.
    - ``traceparent``: a W3C traceparent, or a callable returning the
      current one (see Traceparent), sent on every request so the server's
      spans join the caller's trace; do() and Worker.handle take one per
      call too.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        report_timeout: float = DEFAULT_REPORT_TIMEOUT,
        wait: float = DEFAULT_WAIT,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        retries: int = DEFAULT_RETRIES,
        backoff: float = 0.1,
        tenant: str = "",
        scrub_fields: Optional[Sequence[str]] = None,
        max_response: int = DEFAULT_MAX_RESPONSE,
        logger: Optional[logging.Logger] = None,
        traceparent: Optional[Traceparent] = None,
    ) -> None:
        u = urllib.parse.urlsplit(base_url) if isinstance(base_url, str) else None
        if u is None or u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError(f"client: base url {base_url!r}: want http(s)://host[:port][/prefix]")
        if not isinstance(token, str) or not token.strip() or any(c in token for c in " \t\r\n"):
            raise ValueError("client: token is empty or contains white space")
        if min(timeout, report_timeout, poll_interval, backoff) <= 0:
            raise ValueError("client: timeouts, poll interval and backoff must be positive")
        if not 0 < wait <= DEFAULT_WAIT:
            raise ValueError(f"client: wait must be more than 0 and at most {DEFAULT_WAIT:g} s")
        if retries < 0:
            raise ValueError("client: negative retries")
        if max_response <= 0:
            raise ValueError("client: max response must be positive")
        self._base = base_url.rstrip("/")
        self._token = token
        self._tenant = tenant
        self._timeout = float(timeout)
        self._report_timeout = float(report_timeout)
        self._wait = float(wait)
        self._poll = float(poll_interval)
        self._retries = retries
        self._backoff = float(backoff)
        self._max_backoff = 2.0
        self._max_response = max_response
        self._scrubber = Scrubber(DEFAULT_SCRUB_FIELDS if scrub_fields is None else scrub_fields)
        self._log = logger or _log
        if traceparent is not None and not isinstance(traceparent, str) and not callable(traceparent):
            raise ValueError("client: traceparent must be a string or a callable returning one")
        self._traceparent = traceparent
        self._opener = urllib.request.build_opener(_NoRedirect())

    def __repr__(self) -> str:
        return f"Client({self._base!r})"  # never the token

    def scrub(self, args: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
        """scrub removes model-supplied idempotency fields from a tool call's
        arguments with the client's field list (see Scrubber.scrub)."""
        return self._scrubber.scrub(args)

    # The claim API.

    def claim(self, req: ClaimRequest) -> ClaimResponse:
        """claim asks for a key before a vendor call. Every decision is an
        answer, not an error: proceed (201), replay, retry_same_key, stop
        (200), wait (409) and stop/tool_frozen (423). A transport failure or
        a 5xx is retried: a resent claim finds the row the first one made. If
        the first claim's answer was lost after it inserted the row, the
        resent claim answers wait (the row's lease is held), never a second
        proceed."""
        return self._claim(req, 0.0, None)

    def claim_wait(self, req: ClaimRequest, wait: float) -> ClaimResponse:
        """claim_wait is claim with ?wait=: an in-flight row is waited on for
        up to wait seconds (at most 30) before the answer is wait."""
        return self._claim(req, wait, None)

    def _claim(self, req: ClaimRequest, wait: float, deadline: Optional[float]) -> ClaimResponse:
        if req.intent is None:
            raise InvalidInput(0, "invalid_input", "claim: intent is required")
        c = _Call("POST", "/v1/claims", body=req.to_json(), accept=(409, 423))
        if wait > 0:
            c.query = {"wait": _format_wait(wait)}
            c.extra = wait
        status, answer = self._send(c, True, deadline)
        return ClaimResponse.from_json(answer, status)

    def report(self, key: str, outcome: OutcomeReport) -> Row:
        """report reports one vendor call. It is resent with the same body on
        a transport failure or a 5xx: the ledger applies a repeated report
        once. When it finally fails the row stays pending for the resolver."""
        _, answer = self._send(_Call("POST", _key_path(key, "/outcome"), body=outcome.to_json()), True, None)
        return _row_of(answer)

    def get(self, key: str) -> Row:
        """get returns the row of key (NotFound when the tenant has none)."""
        q = {"tenant": self._tenant} if self._tenant else None
        _, answer = self._send(_Call("GET", _key_path(key, ""), query=q), True, None)
        return _row_of(answer)

    def list(self, *, status: str = "", run_id: str = "", limit: int = 0, cursor: str = "") -> Page:
        """list returns a page of rows, newest first; pass the page's
        next_cursor as cursor for the next one."""
        q: Dict[str, str] = {}
        if self._tenant:
            q["tenant"] = self._tenant
        if status:
            q["status"] = status
        if run_id:
            q["run_id"] = run_id
        if limit > 0:
            q["limit"] = str(limit)
        if cursor:
            q["cursor"] = cursor
        _, answer = self._send(_Call("GET", "/v1/claims", query=q), True, None)
        if not isinstance(answer, dict):
            raise ProtocolError("list: the answer is not a JSON object")
        rows = answer.get("rows")
        if rows is None:
            rows = []
        if not isinstance(rows, list):
            raise ProtocolError("list: rows is not an array")
        nxt = answer.get("next_cursor") or ""
        if not isinstance(nxt, str):
            raise ProtocolError("list: next_cursor is not a string")
        return Page(rows=[Row.from_json(r, f"rows[{i}]") for i, r in enumerate(rows)], next_cursor=nxt)

    def compensate(self, key: str, action: str) -> ClaimResponse:
        """compensate claims the derived key that undoes key's side effect
        (refund, void). It answers like a claim; a second request finds the
        first compensation row. CompensationPending while the original is
        open, CompensationFailed when it failed."""
        c = _Call("POST", _key_path(key, "/compensations"), body={"action": action}, accept=(409, 423))
        status, answer = self._send(c, True, None)
        return ClaimResponse.from_json(answer, status)

    def resolve(self, key: str, req: ResolveRequest) -> Row:
        """resolve closes a row by hand (admin token): succeeded or
        failed_poison, with a note saying why."""
        _, answer = self._send(_Call("POST", _key_path(key, "/resolve"), body=req.to_json()), True, None)
        return _row_of(answer)

    def start(self, key: str, wait: float = 0.0) -> ClaimResponse:
        """start is the outbox worker's claim of a queued key (``POST
        /v1/claims/{key}/start``, no body: what to call is the row's). The
        first start of a queued row answers proceed (attempt 1, the lease),
        exactly once across workers; a start while that attempt is in flight
        answers wait (409; ``wait`` seconds long-poll it, as claim_wait);
        later ones follow the claim table (retry_same_key, replay, stop).
        NotFound when the tenant has no such row, NotQueued when no outbox
        claim inserted it. Resent on a transport failure or a 5xx: a resent
        start whose first answer was lost finds the lease held (wait),
        never a second proceed. Worker.handle does all of it."""
        c = _Call("POST", _key_path(key, "/start"), accept=(409,))
        if wait > 0:
            c.query = {"wait": _format_wait(wait)}
            c.extra = wait
        status, answer = self._send(c, True, None)
        return ClaimResponse.from_json(answer, status)

    # The tool registry (docs/architecture.md §11).

    def put_tool(self, name: str, entry: Mapping[str, Any]) -> ToolChange:
        """put_tool registers the tool name in the token's tenant's registry,
        or replaces its entry. entry is the entry's JSON form, as in a
        registry file: vendor, class, side_effect, key_placement
        (``{"header": "Idempotency-Key"}``), intent_fields, checklist,
        autonomy, policy. An entry equal to the stored one changes nothing
        (changed False, same version). A PUT is idempotent, so it is resent
        on a transport failure or a 5xx. A bad entry is InvalidInput naming
        the field."""
        if not isinstance(entry, Mapping):
            raise InvalidInput(0, "invalid_input", "put_tool: entry must be a JSON object")
        status, answer = self._send(_Call("PUT", _tool_path(name), body=dict(entry)), True, None)
        if not isinstance(answer, dict) or not isinstance(answer.get("changed"), bool):
            raise ProtocolError("put_tool: the answer has no tool and changed", status)
        return ToolChange(tool=_tool_of(answer), changed=answer["changed"], created=status == 201)

    def get_tool(self, name: str) -> Tool:
        """get_tool returns the registry entry of name (NotFound when it is
        not registered); an admin token reads the client's tenant's."""
        q = {"tenant": self._tenant} if self._tenant else None
        _, answer = self._send(_Call("GET", _tool_path(name), query=q), True, None)
        return _tool_of(answer)

    def list_tools(self) -> List[Tool]:
        """list_tools returns the tenant's registry, by name."""
        q = {"tenant": self._tenant} if self._tenant else None
        status, answer = self._send(_Call("GET", "/v1/tools", query=q), True, None)
        tools = answer.get("tools") if isinstance(answer, dict) else None
        if tools is None and isinstance(answer, dict):
            tools = []
        if not isinstance(tools, list):
            raise ProtocolError("list_tools: the answer has no tools", status)
        return [Tool.from_json(t, f"tools[{i}]") for i, t in enumerate(tools)]

    def delete_tool(self, name: str) -> None:
        """delete_tool removes the registry entry of name: its claims are
        then served as an unregistered tool's. NotFound when it is not
        registered — also when a resent DELETE finds the first one's work
        done."""
        self._send(_Call("DELETE", _tool_path(name), empty_ok=True), True, None)

    # Approvals: a tenant, approver or admin token reads them; an approver
    # token of the tenant or an admin token decides them.

    def list_approvals(self, *, limit: int = 0, cursor: str = "") -> ApprovalPage:
        """list_approvals returns a page of the open approval requests,
        soonest to expire first (an admin token: every tenant's, or the
        client's tenant's); pass next_cursor as cursor for the next page."""
        q: Dict[str, str] = {}
        if self._tenant:
            q["tenant"] = self._tenant
        if limit > 0:
            q["limit"] = str(limit)
        if cursor:
            q["cursor"] = cursor
        status, answer = self._send(_Call("GET", "/v1/approvals", query=q), True, None)
        if not isinstance(answer, dict):
            raise ProtocolError("list_approvals: the answer is not a JSON object", status)
        items = answer.get("approvals")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise ProtocolError("list_approvals: approvals is not an array", status)
        nxt = answer.get("next_cursor") or ""
        if not isinstance(nxt, str):
            raise ProtocolError("list_approvals: next_cursor is not a string", status)
        views = [ApprovalView.from_json(v, f"approvals[{i}]") for i, v in enumerate(items)]
        return ApprovalPage(approvals=views, next_cursor=nxt)

    def get_approval(self, approval_id: str) -> ApprovalView:
        """get_approval returns one approval, in any state, with its row
        (NotFound: no such approval for the token's tenant)."""
        _, answer = self._send(_Call("GET", _approval_path(approval_id, "")), True, None)
        return ApprovalView.from_json(answer)

    def approve(self, approval_id: str, actor: str, note: str = "") -> ApprovalView:
        """approve grants an approval request (an approver token of the
        tenant or an admin token, never the token that made the claim:
        Forbidden). The key's next claim answers proceed, once.
        ApprovalDecided when it was decided before, ApprovalExpired when its
        expires_at has passed."""
        return self._decide(approval_id, "/approve", ApprovalState.GRANTED, actor, note)

    def deny(self, approval_id: str, actor: str, note: str) -> ApprovalView:
        """deny denies an approval request (note, saying why, is required):
        the row becomes failed_poison and the key's claims stop with
        approval_denied. Errors as approve."""
        return self._decide(approval_id, "/deny", ApprovalState.DENIED, actor, note)

    def _decide(self, approval_id: str, verb: str, want: str, actor: str, note: str) -> ApprovalView:
        body: Dict[str, Any] = {"actor": actor}
        if note:
            body["note"] = note
        try:
            _, answer = self._send(_Call("POST", _approval_path(approval_id, verb), body=body), True, None)
        except ApprovalDecided:
            # A resent decision whose first answer was lost finds its own
            # work done: that is this call's success, not a conflict.
            view = self.get_approval(approval_id)
            a = view.approval
            if a.state == want and a.actor == actor and a.note == note:
                return view
            raise
        return ApprovalView.from_json(answer)

    # do(): one tool call under the ledger.

    def do(
        self,
        claim: ClaimRequest,
        call: CallFunc,
        *,
        timeout: Optional[float] = None,
        wait_queued: bool = False,
        traceparent: Optional[Traceparent] = None,
        wait_approval: bool = True,
    ) -> Outcome:
        """do runs one tool call under the ledger:

        - it claims the intent's key;
        - on proceed or retry_same_key it calls ``call(key, local_id)``,
          classifies what happened — an answer (status, receipt, vendor
          headers), a timeout, a network error — and reports it, resending
          the same report if it is lost;
        - on replay it returns the stored receipt without calling;
        - on wait it long-polls the claim (``?wait=``) until the row settles,
          a human is paged for it or ``timeout`` seconds have passed, and
          then acts on the new decision;
        - on stop it raises Stopped;
        - on await_approval (the tool needs a human for this claim) it calls
          nothing and long-polls the claim as on wait until a human decides:
          a grant makes the next claim proceed, once, and do() calls then
          (``outcome.awaited_approval`` says it waited); a denial or an
          expiry raises Stopped with code approval_denied or
          approval_expired;
        - on queued (the tool's calls go through the outbox worker) it
          calls nothing and raises QueuedError, an Unsettled the runtime
          parks the run on; with ``wait_queued`` it polls the claim until
          the worker settled the key and returns its replay (or raises
          Stopped), or QueuedError when ``timeout`` passes first.

        A return means the side effect happened (row.status succeeded).
        Stopped means the ledger or the vendor refused the intent. Unsettled
        (Escalated, ReportFailed) means nobody knows yet: the row stays
        pending or unknown, and the resolver, a webhook or a later do() with
        the same intent closes it — never call the vendor again under a new
        key. A decision this client does not know raises UnknownDecision
        without a call. API and transport errors of the claim itself are
        raised as they are (APIError, TransportError, ProtocolError).

        ``wait_approval=False`` makes do() raise Unsettled at once, with
        ``outcome.awaited_approval`` set, on a key that awaits a human,
        instead of waiting for the decision (a model's tool call must not
        hang on a person).

        ``timeout`` bounds the claim and the wait (None: wait while the key
        stays in flight or awaits a human); on a timeout while it awaited
        approval do() raises Unsettled and the request stays open for the
        human. ``traceparent`` (a value or a callable, see Traceparent)
        replaces the client's for every request of this call. The call
        bounds its own time, and the report has
        its own deadline (report_timeout), so a call that used the time up
        still reaches the ledger. An exception that is not an Exception
        (KeyboardInterrupt, SystemExit) inside the call is reported as a
        network error (the vendor may have committed) and re-raised.
        """
        tok = _CALL_TRACEPARENT.set(traceparent) if traceparent is not None else None
        try:
            return self._do(claim, call, timeout, wait_queued, wait_approval)
        finally:
            if tok is not None:
                _CALL_TRACEPARENT.reset(tok)

    def _do(
        self, claim: ClaimRequest, call: CallFunc, timeout: Optional[float], wait_queued: bool, wait_approval: bool = True
    ) -> Outcome:
        deadline = time.monotonic() + timeout if timeout is not None else None
        resp = self._claim(claim, 0.0, deadline)
        waited = approval = queued = False
        while True:
            out = _outcome_of(resp)
            out.waited, out.awaited_approval, out.queued = waited, approval, queued
            self._log.debug("claim decided: key=%s run_id=%s decision=%s", out.key, claim.run_id, resp.decision)
            handler = self._DECISIONS.get(resp.decision)
            if handler is None:
                raise UnknownDecision(resp.decision, out)
            step = handler(self, _Step(claim, resp, out, call, deadline, wait_queued, wait_approval))
            if isinstance(step, Outcome):
                return step
            approval = approval or resp.decision == Decision.AWAIT_APPROVAL
            queued = queued or resp.decision == Decision.QUEUED
            resp, waited = step, True

    def _on_attempt(self, s: _Step) -> Outcome:
        return self._attempt(s.out, s.call)

    def _on_replay(self, s: _Step) -> Outcome:
        row = s.resp.row
        s.out.replayed = True
        if row is not None:
            s.out.result = Result(http_status=row.last_http_status, receipt_id=row.upstream_receipt_id)
        return s.out

    def _on_stop(self, s: _Step) -> Outcome:
        raise Stopped(s.resp.code, s.out.key, s.resp.row, s.out)

    def _on_wait(self, s: _Step) -> ClaimResponse:
        if s.resp.row is None:
            raise ProtocolError("claim: wait without a row", s.resp.http_status)
        # A later claim of a key that awaits a human answers wait: without
        # wait_approval that is the same answer as the first claim's.
        a = s.resp.row.approval
        if not s.wait_approval and a is not None and a.state == ApprovalState.REQUESTED:
            return self._on_await_approval(s)
        return self._wait_settled(s, (Decision.WAIT,), lambda row: _deadline(row, s.out))

    def _on_await_approval(self, s: _Step) -> ClaimResponse:
        if s.resp.row is None:
            raise ProtocolError("claim: await_approval without a row", s.resp.http_status)
        s.out.awaited_approval = True
        if not s.wait_approval:
            raise Unsettled(s.resp.row.key, s.resp.row.status, "the key awaits a human's approval", s.out)
        # The row's claims answer wait until a human decides; the long poll
        # wakes at once on a decision made through the same server.
        detail = "do() timed out while the key awaited approval"
        if s.resp.row.approval is not None and s.resp.row.approval.id:
            detail += f" ({s.resp.row.approval.id})"
        # (An await_approval again is a wait too: only the first claim makes the request.)
        hold = (Decision.WAIT, Decision.AWAIT_APPROVAL)
        return self._wait_settled(s, hold, lambda row: Unsettled(row.key, row.status, detail, s.out))

    def _on_queued(self, s: _Step) -> ClaimResponse:
        row = s.resp.row
        if row is None:
            raise ProtocolError("claim: queued without a row", s.resp.http_status)
        s.out.queued = True
        if not s.wait_queued:
            raise QueuedError(row.key, row, row.run_id, s.out)
        # The agent's claims of a queued key answer queued until the row
        # settles, at once even with ?wait=: the loop polls.
        return self._wait_settled(
            s,
            (Decision.QUEUED,),
            lambda r: QueuedError(r.key, r, r.run_id, s.out, "do() timed out before the worker settled the key"),
        )

    #: Each decision's handler: it returns the Outcome do() ends with, or
    #: the next claim answer to act on (after a wait), or raises. A new
    #: decision of the API is one entry here; an answer not listed raises
    #: UnknownDecision before anything is called.
    _DECISIONS: Dict[str, Callable[[Client, _Step], Union[Outcome, ClaimResponse]]] = {
        Decision.PROCEED: _on_attempt,
        Decision.RETRY_SAME_KEY: _on_attempt,
        Decision.REPLAY: _on_replay,
        Decision.STOP: _on_stop,
        Decision.WAIT: _on_wait,
        Decision.AWAIT_APPROVAL: _on_await_approval,
        Decision.QUEUED: _on_queued,
    }

    def _attempt(self, out: Outcome, call: CallFunc) -> Outcome:
        """_attempt calls the vendor once and reports what happened."""
        out.called = True
        attempt = out.row.attempt if out.row is not None else 0
        err: Optional[BaseException] = None
        try:
            tok = _ATTEMPT_ROW.set(out.row)
            try:
                ret = call(out.key, out.local_id)
            finally:
                _ATTEMPT_ROW.reset(tok)
        except Exception as e:  # the call's error return, as in the Go SDK
            err = e
            res = result_from_exception(e) or Result()
        except BaseException:
            # The vendor may have committed before the interrupt: report
            # unknown so the row leaves its lease and the resolver looks.
            try:
                self._report(out.key, OutcomeReport(kind=OutcomeKind.NETWORK_ERROR, attempt=attempt))
            except ReconcilerError:
                pass
            raise
        else:
            if isinstance(ret, Result):
                res = ret
            else:
                # Not an answer: unknown, never a success.
                res, err = Result(), TypeError(f"the call returned {type(ret).__name__}, not a Result")
        rep = classify(res, err)
        rep.attempt = attempt
        out.result, out.kind = res, rep.kind
        if rep.kind != OutcomeKind.RESPONSE:
            self._log.warning("vendor call got no answer: key=%s kind=%s err=%s", out.key, rep.kind, err)
        try:
            row = self._report(out.key, rep)
        except ReconcilerError as e:
            raise ReportFailed(out.key, f"outcome report failed: {e}", out, err) from e
        out.row = row
        if row.status == Status.SUCCEEDED:
            if err is not None:
                # The vendor said 2xx (or 409 with a receipt) but the call
                # still failed, e.g. decoding its body: the side effect happened.
                self._log.warning("vendor call succeeded with an error: key=%s err=%s", out.key, err)
            return out
        detail = str(err) if err is not None else f"vendor answered {res.http_status}"
        if row.status == Status.FAILED_POISON:
            raise Stopped(StopCode.FAILED_POISON, out.key, row, out, detail) from err
        raise Unsettled(out.key, row.status, detail, out) from err

    def _report(self, key: str, rep: OutcomeReport) -> Row:
        """_report delivers an outcome under its own deadline, not do()'s: a
        call that used up do()'s time is exactly the one whose outcome must
        reach the ledger."""
        deadline = time.monotonic() + self._report_timeout
        _, answer = self._send(_Call("POST", _key_path(key, "/outcome"), body=rep.to_json()), True, deadline)
        return _row_of(answer)

    def _wait_settled(
        self, s: _Step, hold: Tuple[str, ...], on_deadline: Callable[[Row], ReconcilerError]
    ) -> ClaimResponse:
        """_wait_settled long-polls until a claim of the row answers a
        decision not in hold (wait; or queued), a human is paged for it, or
        the deadline (on_deadline's error for the row as last seen)."""
        row = s.resp.row
        assert row is not None
        if row.paged_at:
            raise _escalated(row, s.out)
        while True:
            start = time.monotonic()
            wait = self._wait
            if s.deadline is not None:
                left = s.deadline - start
                if left <= 0:
                    raise on_deadline(row)
                wait = min(wait, left)
            resp: Optional[ClaimResponse] = None
            err: Optional[ReconcilerError] = None
            try:
                resp = self._claim(s.claim, wait, s.deadline)
            except ReconcilerError as e:
                err = e
            if resp is not None and resp.decision not in hold:
                return resp
            if resp is not None and resp.row is not None:
                row = s.out.row = resp.row
            if s.deadline is not None and time.monotonic() >= s.deadline:
                raise on_deadline(row) from err
            if isinstance(err, APIError) and not err.retryable:
                raise err  # a revoked token, a key gone: asking again cannot help
            if resp is not None and resp.row is not None and resp.row.paged_at:
                raise _escalated(resp.row, s.out)
            if resp is not None and time.monotonic() - start >= self._poll:
                continue  # a long poll that waited: ask again at once
            if err is not None:
                self._log.warning("long poll failed: key=%s err=%s", row.key, err)
            # A failed poll, or a wait answered at once (a server shutting
            # down): pause so the loop never spins.
            pause = self._poll
            if s.deadline is not None:
                pause = min(pause, max(0.0, s.deadline - time.monotonic()))
            time.sleep(pause)

    # HTTP.

    def _send(self, c: _Call, retry: bool, deadline: Optional[float]) -> Tuple[int, Any]:
        """_send sends c, retrying when retry is true and the failure is one
        a resend cannot make worse, and returns the answer's status and
        decoded JSON. deadline (time.monotonic) bounds the retries."""
        data: Optional[bytes] = None
        if c.body is not None:
            try:
                data = json.dumps(c.body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
            except (TypeError, ValueError) as e:
                raise InvalidInput(0, "invalid_input", f"encode {c.method} {c.path}: {e}") from e
        attempts = 1 + (self._retries if retry else 0)
        last: Optional[ReconcilerError] = None
        for i in range(attempts):
            if i > 0:
                assert last is not None
                pause = self._pause(i)
                if deadline is not None and time.monotonic() + pause >= deadline:
                    raise last
                self._log.warning(
                    "retrying reconciler request: method=%s path=%s attempt=%d err=%s", c.method, c.path, i + 1, last
                )
                time.sleep(pause)
            try:
                return self._once(c, data, deadline)
            except APIError as e:
                if not e.retryable:
                    raise
                last = e
            except (TransportError, ProtocolError) as e:
                last = e
            if deadline is not None and time.monotonic() >= deadline:
                break
        assert last is not None
        raise last

    def _pause(self, i: int) -> float:
        """_pause is the jittered backoff before send number i+1: many
        runtimes retrying after one outage must not stampede."""
        d = min(self._backoff * 2.0 ** (i - 1), self._max_backoff)
        return d / 2 + random.uniform(0, d / 2)

    def _once(self, c: _Call, data: Optional[bytes], deadline: Optional[float]) -> Tuple[int, Any]:
        timeout = self._timeout + c.extra
        if deadline is not None:
            timeout = max(0.001, min(timeout, deadline - time.monotonic()))
        url = self._base + c.path
        if c.query:
            url += "?" + urllib.parse.urlencode(c.query)
        headers = {"Authorization": "Bearer " + self._token, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        tp = self._current_traceparent()
        if tp:
            headers["traceparent"] = tp
        req = urllib.request.Request(url, data=data, headers=headers, method=c.method)
        where = f"{c.method} {c.path}"
        try:
            resp = self._opener.open(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            resp = e  # an answer with an error status: its body says which
        except (OSError, http.client.HTTPException) as e:  # URLError is an OSError
            raise TransportError(f"{where}: {_reason(e)}", timeout=is_timeout(e)) from e
        status = resp.code if isinstance(resp, urllib.error.HTTPError) else resp.status
        try:
            # One byte past the cap tells a complete answer from a cut one.
            body = resp.read(self._max_response + 1) if resp.fp is not None else b""
        except (OSError, http.client.HTTPException) as e:
            raise TransportError(f"{where}: read answer: {_reason(e)}", timeout=is_timeout(e)) from e
        finally:
            if resp.fp is not None:
                resp.close()
        ok = 200 <= status < 300 or status in c.accept
        if ok and c.empty_ok and 200 <= status < 300 and not body.strip():
            return status, None
        answer, parsed = _decode(body)
        if ok and not _is_error_body(answer):
            if len(body) > self._max_response:
                raise ProtocolError(f"{where}: answer larger than {self._max_response} bytes", status)
            if not parsed:
                raise ProtocolError(f"{where}: decode answer: {answer}", status)
            return status, answer
        raise _decode_error(status, answer if parsed else None, body)


    def _current_traceparent(self) -> str:
        """_current_traceparent is the header of this request: the running
        call's source, else the client's; "" when none is valid."""
        src = _CALL_TRACEPARENT.get()
        if src is None:
            src = self._traceparent
        if src is None:
            return ""
        value: Any = src
        if callable(src):
            try:
                value = src()
            except Exception as e:  # tracing must never fail a write
                self._log.debug("traceparent source failed: %s", e)
                return ""
        if not value:
            return ""
        if not valid_traceparent(value):
            self._log.debug("traceparent not sent: not a valid W3C traceparent")
            return ""
        return str(value)


def _decode(body: bytes) -> Tuple[Any, bool]:
    """_decode returns the JSON value of body and True, or the reason it is
    not JSON and False."""
    try:
        return json.loads(body.decode("utf-8")), True
    except (UnicodeDecodeError, ValueError) as e:
        return f"not JSON ({e})", False


def _is_error_body(v: Any) -> bool:
    """_is_error_body reports whether v is the API's error shape; a 409
    answers either a decision (wait) or an error (compensation_pending)."""
    return isinstance(v, dict) and v.get("error") is not None


def _decode_error(status: int, answer: Any, body: bytes) -> APIError:
    """_decode_error builds the APIError of an error answer; a body that is
    not the API's (a proxy's HTML page) gets a code from the status."""
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        code, msg = answer["error"].get("code"), answer["error"].get("message")
        if isinstance(code, str) and code:
            return error_from_answer(status, code, msg if isinstance(msg, str) else "")
    text = body.decode("utf-8", "replace").strip()
    if len(text) > 200:
        text = text[:200] + "…"
    return error_from_answer(status, code_from_status(status), text)


def _reason(e: BaseException) -> str:
    reason = getattr(e, "reason", None)
    return str(reason) if reason is not None else (str(e) or type(e).__name__)


def _row_of(answer: Any) -> Row:
    if not isinstance(answer, dict) or not isinstance(answer.get("row"), dict):
        raise ProtocolError("the answer has no row")
    return Row.from_json(answer["row"])


def _outcome_of(resp: ClaimResponse) -> Outcome:
    out = Outcome(decision=resp.decision)
    if resp.row is not None:
        out.row = resp.row
        out.key, out.local_id = resp.row.key, resp.row.metadata_local_id
    return out


def _escalated(row: Row, out: Outcome) -> Escalated:
    """_escalated is do()'s answer for a row a human was paged for: its replay
    window closed while it was open, and only the human (or a late webhook)
    will settle it."""
    return Escalated(row.key, row.status, "escalated to a human", out)


def _deadline(row: Row, out: Outcome) -> Unsettled:
    return Unsettled(row.key, row.status, "do() timed out while the key was in flight elsewhere", out)


def _format_wait(seconds: float) -> str:
    """_format_wait writes a wait as a Go duration the API parses: 30s, 1500ms."""
    ms = max(1, math.ceil(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _tool_of(answer: Any) -> Tool:
    if not isinstance(answer, dict) or not isinstance(answer.get("tool"), dict):
        raise ProtocolError("the answer has no tool")
    return Tool.from_json(answer["tool"])


def _segment(kind: str, name: str) -> str:
    """_segment escapes one path segment; a name of dots only would be a
    dot segment that a proxy may resolve away, and no entry has one."""
    if not isinstance(name, str) or name.strip(".") == "":
        raise InvalidInput(0, "invalid_input", f"{kind} {name!r}: not a name")
    return urllib.parse.quote(name, safe="")


def _tool_path(name: str) -> str:
    return "/v1/tools/" + _segment("tool name", name)


def _approval_path(approval_id: str, suffix: str) -> str:
    return "/v1/approvals/" + _segment("approval id", approval_id) + suffix


def _key_path(key: str, suffix: str) -> str:
    """_key_path is the escaped path of a claim's route, escaped as Go's
    url.PathEscape does. A business key may hold "/", "?", "#" or "%"; a key
    of "." or ".." would be a dot segment that a proxy may resolve away, so
    its dots are encoded too."""
    if key.strip(".") == "":
        k = "%2E" * len(key)
    else:
        k = urllib.parse.quote(key, safe="$&+,:;=@")
    return "/v1/claims/" + k + suffix
