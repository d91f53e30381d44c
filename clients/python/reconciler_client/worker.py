"""Worker is the runtime's outbox worker (docs/architecture.md §11): it
makes the calls of tools whose autonomy is outbox, one work item at a time.

It takes no NATS library: the runtime pulls the messages of stream
RECON_WORK (subject ``recon_work.<tenant>.<tool>``, e.g. with nats-py's
pull subscription on ``recon_work.<tenant>.>``), hands each one's data to
``Worker.handle`` and acks or naks the message as the answer says::

    worker = Worker(client, {"stripe.payment_intents.create": charge}, tenant="acme")
    for msg in await sub.fetch(10):
        done = worker.handle(msg.data, traceparent=(msg.headers or {}).get("traceparent"))
        await (msg.term() if done.term else msg.ack() if done.ack else msg.nak(delay=done.delay))

The message only names the key: ``handle`` reads the key's row first
(``GET /v1/claims/{key}``) and terminates, calling nothing, an item that is
not a work item, names another tenant than ``tenant`` (or a key that is no
row of the token's tenant), or disagrees with the row (tool, run, vendor,
local id, request, expectation). The handler gets the row's request, as
``start`` returns it, never a body taken from the message.

``handle`` starts the key (``POST /v1/claims/{key}/start``: proceed once
across workers), calls the tool's handler with the key and the local id,
classifies and reports its answer exactly as ``Client.do`` does (the same
code), and tells the caller whether the item is finished (ack) or must come
back (nak: the ledger failed transiently, the kill switch holds the tool,
an attempt's lease is still running, or the vendor asked for a retry).

Two answers come back with a nak so that the call is made after all:

- start answers ``wait`` while an attempt's lease runs (``pending_until`` in
  the future). That is another worker's call in flight, or this item's own
  start whose answer was lost (the client resent it after a transport
  error; the server had granted attempt 1): acking would make no call at
  all. The nak's delay is the lease's remainder (plus a small margin, at
  least 1 s, at most ``max_delay``); when the item comes back, start
  answers ``retry_same_key`` for a write_idempotent tool and the worker
  calls with the same key, which the vendor dedupes. A ``wait`` whose lease
  is over is the resolver's row (status RESOLVER): ack.
- the call left the row ``pending`` (a vendor 429, or a 409 without a
  receipt: the lease ended, the vendor should be retried): nak with
  ``nak_delay``; the next start answers ``retry_same_key``.
"""

from __future__ import annotations

import contextvars
import re
import threading
import time
from datetime import datetime
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Union

from .client import _CALL_TRACEPARENT, Client, valid_traceparent
from .errors import (
    APIError,
    Forbidden,
    InvalidInput,
    NotFound,
    NotQueued,
    ProtocolError,
    ReportFailed,
    Stopped,
    TransportError,
    Unauthorized,
    Unsettled,
)
from .models import ClaimResponse, Decision, Outcome, Result, Row, Status, WorkItem

__all__ = ["Worker", "WorkFunc", "WorkOutcome", "WorkStatus", "DEFAULT_NAK_DELAY", "DEFAULT_MAX_DELAY"]

#: WorkFunc makes the vendor call of one work item: send key as the
#: vendor's idempotency key (where the tool's key_placement says) and
#: local_id in the vendor's metadata; item.request is the envelope to send.
#: It answers and raises as a CallFunc of Client.do does.
WorkFunc = Callable[[str, str, WorkItem], Result]

#: The pause a nak asks for (seconds) when the item should come back later.
DEFAULT_NAK_DELAY = 5.0

#: The longest nak delay that waits out a lease (seconds), as the Go
#: Worker's nak backoff cap: an item comes back at least this often.
DEFAULT_MAX_DELAY = 30.0

#: What a nak that waits out a lease adds to the lease's end (seconds): the
#: lease is the server's clock, the delay this machine's.
LEASE_MARGIN = 0.5


class WorkStatus:
    """WorkStatus says what handle did with a work item."""

    #: The handler was called and its answer reported (outcome.row says how
    #: it went; error is set when the row did not succeed). Ack, except
    #: when the row is still pending (a vendor 429, a 409 without a
    #: receipt: the vendor should be retried): nak with nak_delay, and the
    #: next start answers retry_same_key.
    DONE = "done"
    #: The row was not queued for a worker (no outbox claim made it). Ack.
    NOT_QUEUED = "not_queued"
    #: The key is settled (replay or stop): nothing to call. Ack.
    SETTLED = "settled"
    #: An attempt's lease runs: another worker's call is in flight, or this
    #: item's own start was granted and its answer lost. Nothing was
    #: called. Nak with the lease's remainder as the delay (at most
    #: max_delay): after the lease, start answers retry_same_key (a
    #: write_idempotent tool: the same key again) or the row is the
    #: resolver's.
    IN_FLIGHT = "in_flight"
    #: An attempt was made and its lease is over without an answer the
    #: ledger may retry: the resolver (or a human) closes the row. Ack.
    RESOLVER = "resolver"
    #: The kill switch covers the tool: nothing was started. Nak with a delay.
    FROZEN = "frozen"
    #: This worker has no handler for the item's tool: nothing was
    #: started, so a worker that has one can take it. Nak.
    NO_HANDLER = "no_handler"
    #: The ledger failed (a 5xx, no answer, an answer not the API's) after
    #: the client's retries: nothing was called. Nak.
    RETRY = "retry"
    #: The worker's token may not start the row (401, 403, or 404: no such
    #: row for its tenant): a configuration error, not the item's. Nak.
    REFUSED = "refused"
    #: The message is not a work item, or names a key the API refuses: it
    #: can never be handled. Term it (WorkOutcome.term).
    INVALID = "invalid"
    #: The item names another tenant than the worker's (``tenant=``), or a
    #: key that is no row of the worker's tenant: nothing was started or
    #: called. Term it.
    FOREIGN = "foreign"
    #: The item disagrees with the row it names in the ledger (tool, run,
    #: vendor, local id, request, expectation): a message the relay did not
    #: make from the row. Nothing was started or called. Term it.
    FORGED = "forged"


@dataclass
class WorkOutcome:
    """WorkOutcome is how handle ended and what to do with the message."""

    status: str
    #: True: ack the message (it is finished); False: nak it.
    ack: bool
    key: str = ""
    #: The start's decision ("" when nothing was started).
    decision: str = ""
    #: The row as last seen.
    row: Optional[Row] = None
    #: How the call went when handle made one (status DONE).
    outcome: Optional[Outcome] = None
    #: Why the row did not succeed, or why the item comes back.
    error: Optional[BaseException] = None
    #: The nak delay handle suggests, in seconds (0 for an ack).
    delay: float = 0.0
    #: True: terminate the message (nats-py ``msg.term()``) rather than ack
    #: it: it is not a work item of this tenant's ledger (INVALID, FOREIGN,
    #: FORGED) and must never come back. ack is True as well, for a
    #: runtime that only acks.
    term: bool = False

    @property
    def nak(self) -> bool:
        return not self.ack


class Worker:
    """Worker handles work items with client (a tenant token) and one
    handler per tool name. It is safe for concurrent use: handle runs the
    handler on the calling thread (in a helper thread under call_timeout).

    ``call_timeout`` (seconds) bounds a handler: one that runs past it is
    reported as a timeout — the row becomes unknown and the resolver
    settles it from the vendor — and its late answer is ignored, as
    Client.do's caller-bounded calls. ``nak_delay`` is the delay a nak
    suggests; ``max_delay`` caps the delay of a nak that waits out a lease
    (IN_FLIGHT)."""

    def __init__(
        self,
        client: Client,
        handlers: Optional[Mapping[str, WorkFunc]] = None,
        *,
        call_timeout: Optional[float] = None,
        nak_delay: float = DEFAULT_NAK_DELAY,
        max_delay: float = DEFAULT_MAX_DELAY,
        tenant: str = "",
    ) -> None:
        if call_timeout is not None and call_timeout <= 0:
            raise ValueError("worker: call_timeout must be positive")
        if nak_delay < 0:
            raise ValueError("worker: negative nak_delay")
        if not max_delay > 0:
            raise ValueError("worker: max_delay must be positive")
        self._client = client
        self._tenant = tenant
        self._handlers: Dict[str, WorkFunc] = {}
        self._lock = threading.Lock()
        self._call_timeout = call_timeout
        self._nak_delay = float(nak_delay)
        self._max_delay = float(max_delay)
        for tool, fn in (handlers or {}).items():
            self.register(tool, fn)

    def register(self, tool: str, handler: WorkFunc) -> None:
        """register sets the handler of the tool named tool (replacing one)."""
        if not isinstance(tool, str) or not tool:
            raise ValueError("worker: a handler needs a tool name")
        if not callable(handler):
            raise ValueError(f"worker: the handler of {tool} is not callable")
        with self._lock:
            self._handlers[tool] = handler

    def handle(
        self, item: Union[WorkItem, Mapping[str, Any], bytes, str], *, traceparent: Optional[str] = None
    ) -> WorkOutcome:
        """handle starts, calls and reports one work item: the message's
        data (bytes, str), its decoded JSON, or a WorkItem. traceparent
        (the message's header, say) is sent with every request; without
        one, the item's own (the trace of the claim that queued it).

        Handling one item twice, or two workers handling it at once, makes
        one call: only one start proceeds (the other naks until the lease
        ends; see the module's doc). An exception of the handler that
        is not an Exception (KeyboardInterrupt) is reported as a network
        error and re-raised, as in Client.do."""
        try:
            w = item if isinstance(item, WorkItem) else WorkItem.from_json(dict(item) if isinstance(item, Mapping) else item)
        except (ProtocolError, UnicodeDecodeError, TypeError, ValueError) as e:
            self._client._log.error("not a work item; terminate it: %s", e)
            return WorkOutcome(WorkStatus.INVALID, True, error=e, term=True)
        if self._tenant and w.tenant != self._tenant:
            self._client._log.error("work item of another tenant; terminate it, nothing called: item_tenant=%s key=%s", w.tenant, w.key)
            return WorkOutcome(WorkStatus.FOREIGN, True, w.key, term=True)
        tp = traceparent if valid_traceparent(traceparent) else (w.traceparent if valid_traceparent(w.traceparent) else None)
        tok = _CALL_TRACEPARENT.set(tp) if tp else None
        try:
            return self._handle(w)
        finally:
            if tok is not None:
                _CALL_TRACEPARENT.reset(tok)

    def _handle(self, w: WorkItem) -> WorkOutcome:
        # The ledger's row, not the message, says what to call: read it
        # before the start, so a forged item takes no lease.
        try:
            row = self._client.get(w.key)
        except NotFound as e:
            self._client._log.error("work item names no row of this tenant; terminate it: key=%s", w.key)
            return WorkOutcome(WorkStatus.FOREIGN, True, w.key, error=e, term=True)
        except (Unauthorized, Forbidden) as e:
            self._client._log.error("worker may not read the key: key=%s err=%s", w.key, e)
            return WorkOutcome(WorkStatus.REFUSED, False, w.key, error=e, delay=self._nak_delay)
        except InvalidInput as e:
            return WorkOutcome(WorkStatus.INVALID, True, w.key, error=e, term=True)
        except (TransportError, ProtocolError, APIError) as e:
            return WorkOutcome(WorkStatus.RETRY, False, w.key, error=e, delay=self._nak_delay)
        field_ = _mismatch(w, row)
        if field_:
            self._client._log.error("work item disagrees with its row in the ledger; terminate it, nothing called: key=%s field=%s", w.key, field_)
            return WorkOutcome(WorkStatus.FORGED, True, w.key, row=row, term=True)
        with self._lock:
            handler = self._handlers.get(row.tool)
        if handler is None:
            self._client._log.warning("no handler for the work item's tool: tool=%s key=%s", row.tool, w.key)
            return WorkOutcome(WorkStatus.NO_HANDLER, False, w.key, delay=self._nak_delay)
        try:
            resp = self._client.start(w.key)
        except NotQueued as e:
            return WorkOutcome(WorkStatus.NOT_QUEUED, True, w.key, error=e)
        except (Unauthorized, Forbidden, NotFound) as e:
            self._client._log.error("worker may not start the key: key=%s err=%s", w.key, e)
            return WorkOutcome(WorkStatus.REFUSED, False, w.key, error=e, delay=self._nak_delay)
        except InvalidInput as e:
            return WorkOutcome(WorkStatus.INVALID, True, w.key, error=e)
        except (TransportError, ProtocolError) as e:
            return WorkOutcome(WorkStatus.RETRY, False, w.key, error=e, delay=self._nak_delay)
        except APIError as e:
            # A 5xx after the retries, or a code this client does not know:
            # nothing was called, so the item may come back.
            return WorkOutcome(WorkStatus.RETRY, False, w.key, error=e, delay=self._nak_delay)
        return self._decided(w, handler, resp)

    def _decided(self, w: WorkItem, handler: WorkFunc, resp: ClaimResponse) -> WorkOutcome:
        row = resp.row
        d = resp.decision
        if d in (Decision.PROCEED, Decision.RETRY_SAME_KEY) and row is not None:
            if _mismatch(w, row):
                # The row changed between the read and the start: the item
                # comes back under the row's lease and is checked again.
                return WorkOutcome(WorkStatus.RETRY, False, w.key, d, row, delay=self._nak_delay)
            return self._call(_item_of(row, w), handler, resp)
        if d in (Decision.REPLAY, Decision.STOP):
            return WorkOutcome(WorkStatus.SETTLED, True, w.key, d, row)
        if d == Decision.WAIT and row is not None:
            if row.attempt == 0:
                # The kill switch holds the tool before any call: later.
                return WorkOutcome(WorkStatus.FROZEN, False, w.key, d, row, delay=self._nak_delay)
            left = _seconds_until(row.pending_until)
            if left is not None and left > 0:
                # A lease runs: another worker's call, or this item's own
                # start whose answer was lost. An ack would drop the call;
                # after the lease start answers retry_same_key (the same
                # key: the vendor dedupes) or the row is the resolver's.
                delay = min(max(left + LEASE_MARGIN, 1.0), self._max_delay)
                return WorkOutcome(WorkStatus.IN_FLIGHT, False, w.key, d, row, delay=delay)
            # The lease is over and start may not retry: the resolver's row.
            return WorkOutcome(WorkStatus.RESOLVER, True, w.key, d, row)
        # A decision this client does not know: nothing was called.
        err = ProtocolError(f"start answered {d!r}, which this worker does not act on", resp.http_status)
        return WorkOutcome(WorkStatus.RETRY, False, w.key, d, row, error=err, delay=self._nak_delay)

    def _call(self, w: WorkItem, handler: WorkFunc, resp: ClaimResponse) -> WorkOutcome:
        assert resp.row is not None
        out = Outcome(decision=resp.decision, key=resp.row.key, local_id=resp.row.metadata_local_id, row=resp.row)

        def call(key: str, local_id: str) -> Result:
            return self._bounded(handler, key, local_id, w)

        try:
            # Client.do's own attempt: one call, classified and reported the same way.
            done = self._client._attempt(out, call)
        except ReportFailed as e:
            # The call was made; its lease keeps a redelivered item from a
            # second call, and the resolver settles the row after it.
            return WorkOutcome(WorkStatus.DONE, True, w.key, resp.decision, out.row, out, e)
        except Stopped as e:
            return WorkOutcome(WorkStatus.DONE, True, w.key, resp.decision, out.row, out, e)
        except Unsettled as e:
            if out.row is not None and out.row.status == Status.PENDING:
                # The vendor should be retried (a 429, a 409 without a
                # receipt): the ledger ended the lease, so the item's next
                # start answers retry_same_key.
                return WorkOutcome(WorkStatus.DONE, False, w.key, resp.decision, out.row, out, e, delay=self._nak_delay)
            return WorkOutcome(WorkStatus.DONE, True, w.key, resp.decision, out.row, out, e)
        return WorkOutcome(WorkStatus.DONE, True, w.key, resp.decision, done.row, done)

    def _bounded(self, handler: WorkFunc, key: str, local_id: str, w: WorkItem) -> Result:
        """_bounded runs the handler, under call_timeout when there is one."""
        if self._call_timeout is None:
            return handler(key, local_id, w)
        box: Dict[str, Any] = {}
        finished = threading.Event()
        ctx = contextvars.copy_context()  # the caller's trace context goes along

        def run() -> None:  # owner: this call; abandoned (its answer ignored) after the timeout
            try:
                box["result"] = ctx.run(handler, key, local_id, w)
            except BaseException as e:  # handed to the waiting thread
                box["error"] = e
            finally:
                finished.set()

        threading.Thread(target=run, name=f"reconciler-work-{key[:16]}", daemon=True).start()
        if not finished.wait(self._call_timeout):
            raise TimeoutError(f"the handler of {w.tool} ran past {self._call_timeout:g} s")
        if "error" in box:
            raise box["error"]
        return box["result"]  # type: ignore[no-any-return]



def _mismatch(w: WorkItem, row: Row) -> str:
    """_mismatch names the first field in which a work item disagrees with
    the row it names ("" when it agrees): a message the relay made from the
    row agrees in all of them. The intent is not compared (the row keeps
    only its RFC 8785 fingerprint): build the vendor call from the request."""
    for name, got, want in (
        ("key", w.key, row.key), ("tenant", w.tenant, row.tenant), ("tool", w.tool, row.tool),
        ("run_id", w.run_id, row.run_id), ("tool_call_id", w.tool_call_id, row.tool_call_id),
        ("vendor", w.vendor, row.vendor), ("tool_class", w.tool_class, row.tool_class),
        ("metadata_local_id", w.metadata_local_id, row.metadata_local_id),
        ("request", w.request, row.request), ("expect", w.expect, row.expect),
    ):
        if got != want:
            return name
    return ""


def _item_of(row: Row, w: WorkItem) -> WorkItem:
    """_item_of is the work item a handler gets: the row's, as start
    returned it (the request to send is the ledger's, never the message's),
    with the message's intent and trace context."""
    return WorkItem(
        key=row.key, tenant=row.tenant, run_id=row.run_id, tool=row.tool, vendor=row.vendor,
        tool_class=row.tool_class, metadata_local_id=row.metadata_local_id, tool_call_id=row.tool_call_id,
        status=w.status, at=w.at, intent=w.intent, request=row.request, expect=row.expect,
        replay_window_until=row.replay_window_until or w.replay_window_until, traceparent=w.traceparent, raw=w.raw,
    )


_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|z|[+-]\d\d:\d\d)$")


def _seconds_until(ts: str) -> Optional[float]:
    """_seconds_until is how far the RFC 3339 time ts (the server's, with up
    to nanoseconds) lies ahead of this machine's clock; None when ts is not
    one (a row without a lease)."""
    m = _RFC3339.match(ts or "")
    if m is None:
        return None
    frac = (m.group(2) or "")[:6].ljust(6, "0")
    zone = "+00:00" if m.group(3) in ("Z", "z") else m.group(3)
    try:
        at = datetime.fromisoformat(f"{m.group(1)}.{frac}{zone}")
    except ValueError:
        return None
    return at.timestamp() - time.time()
