"""Write autonomy against the real binary (docs/architecture.md §11): the tool
registry, do() through the approval gate (granted, denied, timed out) and
through the outbox (QueuedError, wait_queued), the Worker that makes the
outbox's calls, and the traceparent header."""

from __future__ import annotations

import json
import threading
import time
import unittest
from datetime import datetime
from typing import Any, Dict, List, Optional, Tuple

from . import support
from .support import E429, HANG, FakeVendor
from reconciler_client import (
    ApprovalState,
    Autonomy,
    ClaimRequest,
    Client,
    Decision,
    Forbidden,
    NotFound,
    Outcome,
    QueuedError,
    Request,
    RequestRequired,
    Result,
    Row,
    Status,
    StopCode,
    Stopped,
    ToolMismatch,
    Unsettled,
    Worker,
    WorkItem,
    WorkStatus,
)

APPROVAL_TOOL = "py.approval.payment_intents.create"
OUTBOX_TOOL = "py.outbox.payment_intents.create"
CHECKED = {
    "side_effect_documented": True,
    "key_born_in_runtime": True,
    "ledger_or_unique_field": True,
    "timeout_leaves_unknown": True,
    "error_classes_mapped": True,
    "duplicate_delivery_test": True,
    "checked_by": "py-tests",
}


def entry(autonomy: str) -> Dict[str, Any]:
    return {
        "vendor": "stripe",
        "class": "write_idempotent",
        "side_effect": "charge",
        "key_placement": {"header": "Idempotency-Key"},
        "checklist": CHECKED,
        "autonomy": autonomy,
    }


def claim(tool: str, run_id: str, amount: int = 1050, request: bool = True) -> ClaimRequest:
    body = json.dumps({"amount": amount, "currency": "usd"})
    return ClaimRequest(
        run_id=run_id, tool=tool, vendor="stripe", tool_class="write_idempotent", tool_call_id="call_1",
        intent={"amount": amount, "currency": "usd"},
        request=Request(method="POST", path="/v1/payment_intents", content_type="application/json", body=body) if request else None,
    )


def work_item(row: Row, intent: Dict[str, Any]) -> Dict[str, Any]:
    """work_item is the message the relay publishes on RECON_WORK for row,
    built from the row (the API offers no read of the stream): the event
    JSON with status queued and its work object (ledger/work.go)."""
    assert row.request is not None
    work: Dict[str, Any] = {
        "vendor": row.vendor, "tool_class": row.tool_class, "metadata_local_id": row.metadata_local_id,
        "intent": intent, "request": row.request.to_json(),
    }
    if row.replay_window_until:
        work["replay_window_until"] = row.replay_window_until
    item: Dict[str, Any] = {
        "key": row.key, "tenant": row.tenant, "run_id": row.run_id, "tool": row.tool, "tool_call_id": row.tool_call_id,
        "status": "queued", "source": "runtime", "at": row.first_seen_at, "work": work,
    }
    if row.traceparent:
        item["traceparent"] = row.traceparent
    return item


def parse_time(ts: str) -> float:
    """parse_time reads the server's RFC 3339 time (up to nanoseconds)."""
    head, _, frac = ts.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + (float("0." + frac) if frac else 0.0)


class Background:
    """Background runs fn in a thread and keeps its answer or exception."""

    def __init__(self, fn: Any) -> None:
        self.value: Any = None
        self.error: Optional[BaseException] = None

        def run() -> None:  # owner: the test; joined by result()
            try:
                self.value = fn()
            except BaseException as e:  # handed to the test
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def result(self, timeout: float = 30) -> Tuple[Any, Optional[BaseException]]:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError("the background call did not end")
        return self.value, self.error


class AutonomyTest(unittest.TestCase):
    srv: support.Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = support.autonomy_server()
        c = Client(cls.srv.url, support.TOKEN)
        c.put_tool(APPROVAL_TOOL, entry(Autonomy.APPROVAL))
        c.put_tool(OUTBOX_TOOL, entry(Autonomy.OUTBOX))

    def setUp(self) -> None:
        self.c = Client(self.srv.url, support.TOKEN, backoff=0.01, poll_interval=0.05)
        self.approver = Client(self.srv.url, support.APPROVER_TOKEN, backoff=0.01)
        self.rid = support.run_id()

    def vendor(self, *faults: str) -> FakeVendor:
        v = FakeVendor(*faults, hang=1.0)
        self.addCleanup(v.close)
        return v

    def open_request(self, key: str) -> str:
        """open_request waits for key's approval request in the approver's list."""
        found: List[str] = []

        def listed() -> bool:
            for v in self.approver.list_approvals().approvals:
                if v.row.key == key:
                    found.append(v.approval.id)
                    return True
            return False

        support.poll(listed, what="the approval request")
        return found[0]

    def awaiting_key(self, cl: ClaimRequest) -> str:
        """awaiting_key is the key of cl once its claim awaits approval."""
        keys: List[str] = []

        def awaiting() -> bool:
            for r in self.c.list(run_id=cl.run_id).rows:
                if r.approval is not None:
                    keys.append(r.key)
                    return True
            return False

        support.poll(awaiting, what="the gated row")
        return keys[0]

    # The registry.

    def test_registry(self) -> None:
        name = "py.registry." + self.rid
        first = self.c.put_tool(name, entry(Autonomy.AUTONOMOUS))
        self.assertTrue(first.created and first.changed)
        self.assertEqual((first.tool.name, first.tool.vendor, first.tool.tool_class, first.tool.version), (name, "stripe", "write_idempotent", 1))
        self.assertEqual(first.tool.key_placement, {"header": "Idempotency-Key"})
        again = self.c.put_tool(name, entry(Autonomy.AUTONOMOUS))
        self.assertEqual((again.created, again.changed, again.tool.version), (False, False, 1), "an equal entry changes nothing")
        changed = self.c.put_tool(name, entry(Autonomy.APPROVAL))
        self.assertEqual((changed.changed, changed.tool.version, changed.tool.autonomy), (True, 2, Autonomy.APPROVAL))
        self.assertEqual(self.c.get_tool(name).version, 2)
        self.assertIn(name, [t.name for t in self.c.list_tools()])

        mismatched = ClaimRequest(run_id=self.rid, tool=name, vendor="paypal", tool_class="write_idempotent", intent={"amount": 1})
        with self.assertRaises(ToolMismatch) as cm:
            self.c.do(mismatched, support.never_called(self))
        self.assertEqual((cm.exception.status, cm.exception.code), (422, "tool_mismatch"))

        self.c.delete_tool(name)
        with self.assertRaises(NotFound):
            self.c.get_tool(name)
        with self.assertRaises(NotFound):
            self.c.delete_tool(name)

    # The approval gate.

    def test_approval_granted_calls_once(self) -> None:
        v = self.vendor()
        cl = claim(APPROVAL_TOOL, self.rid)
        bg = Background(lambda: self.c.do(cl, support.vendor_call(v), timeout=30))
        key = self.awaiting_key(cl)
        approval_id = self.open_request(key)
        self.assertEqual(v.object_count(), 0, "nothing is called before the grant")
        with self.assertRaises(Forbidden, msg="the token that made the claim cannot approve it"):
            self.c.approve(approval_id, "self")
        view = self.approver.approve(approval_id, "alice", "ok")
        self.assertEqual((view.approval.state, view.approval.actor), (ApprovalState.GRANTED, "alice"))

        out, err = bg.result()
        self.assertIsNone(err)
        assert isinstance(out, Outcome)
        self.assertEqual((out.decision, out.called, out.awaited_approval, out.waited, out.key), (Decision.PROCEED, True, True, True, key))
        self.assertEqual(out.row.status if out.row else "", Status.SUCCEEDED)
        self.assertEqual(v.keys(), [key], "exactly one call, with the ledger's key")

        again = self.c.do(cl, support.never_called(self))
        self.assertEqual((again.decision, again.replayed, again.receipt_id), (Decision.REPLAY, True, "pi_1"))
        # A resent approval (its first answer lost) is this call's success.
        self.assertEqual(self.approver.approve(approval_id, "alice", "ok").approval.state, ApprovalState.GRANTED)

    def test_approval_denied_stops_without_a_call(self) -> None:
        cl = claim(APPROVAL_TOOL, self.rid, amount=2000)
        bg = Background(lambda: self.c.do(cl, support.never_called(self), timeout=30))
        approval_id = self.open_request(self.awaiting_key(cl))
        self.approver.deny(approval_id, "bob", "too much")
        _, err = bg.result()
        self.assertIsInstance(err, Stopped)
        assert isinstance(err, Stopped) and err.outcome is not None and err.row is not None
        self.assertEqual((err.code, err.row.status, err.outcome.called, err.outcome.awaited_approval),
                         (StopCode.APPROVAL_DENIED, Status.FAILED_POISON, False, True))
        with self.assertRaises(Stopped) as cm:
            self.c.do(cl, support.never_called(self))
        self.assertEqual(cm.exception.code, StopCode.APPROVAL_DENIED)

    def test_approval_timeout_leaves_the_request_open(self) -> None:
        cl = claim(APPROVAL_TOOL, self.rid, amount=3000)
        with self.assertRaises(Unsettled) as cm:
            self.c.do(cl, support.never_called(self), timeout=0.5)
        e = cm.exception
        self.assertNotIsInstance(e, QueuedError)
        assert e.outcome is not None and e.outcome.row is not None
        self.assertTrue(e.outcome.awaited_approval)
        self.assertIn("awaited approval", str(e))
        row = self.c.get(e.key)
        self.assertEqual((row.status, row.attempt), (Status.PENDING, 0))
        assert row.approval is not None
        self.assertEqual(row.approval.state, ApprovalState.REQUESTED)

    # The outbox and its worker.

    def test_queued_worker_and_wait_queued(self) -> None:
        v = self.vendor()
        cl = claim(OUTBOX_TOOL, self.rid)
        with self.assertRaises(QueuedError) as cm:
            self.c.do(cl, support.never_called(self))
        q = cm.exception
        assert q.row is not None and q.outcome is not None
        self.assertIsInstance(q, Unsettled, "a queued key is not settled: park the run on it")
        self.assertEqual((q.run_id, q.row.attempt, q.row.autonomy, q.outcome.called, q.outcome.queued), (self.rid, 0, Autonomy.OUTBOX, False, True))
        self.assertEqual(v.object_count(), 0, "the agent never calls an outbox tool")

        waiting = Background(lambda: self.c.do(cl, support.never_called(self), timeout=30, wait_queued=True))
        item = work_item(q.row, dict(cl.intent or {}))
        seen: List[WorkItem] = []

        def charge(key: str, local_id: str, w: WorkItem) -> Result:
            seen.append(w)
            return support.vendor_call(v)(key, local_id)

        worker = Worker(Client(self.srv.url, support.TOKEN, backoff=0.01), {OUTBOX_TOOL: charge})
        # Two workers took the same item (a redelivery): one call. The other
        # start came while the call was in flight (a nak until the lease
        # ends) or after it settled (a replay, acked).
        outs = [Background(lambda: worker.handle(json.dumps(item).encode())) for _ in range(2)]
        results = [o.result()[0] for o in outs]
        results.sort(key=lambda r: r.status != WorkStatus.DONE)
        self.assertEqual(results[0].status, WorkStatus.DONE, [r.error for r in results])
        self.assertTrue(results[0].ack)
        other = results[1]
        self.assertIn((other.status, other.ack), [(WorkStatus.IN_FLIGHT, False), (WorkStatus.SETTLED, True)], other.error)
        if other.status == WorkStatus.IN_FLIGHT:
            self.assertGreaterEqual(other.delay, 1.0)
        done = results[0]
        assert done.outcome is not None and done.row is not None
        self.assertEqual((done.decision, done.outcome.called, done.row.status), (Decision.PROCEED, True, Status.SUCCEEDED))
        self.assertEqual(v.keys(), [q.key])
        self.assertEqual(v.posts[0][1]["metadata"], {"metadata_local_id": q.row.metadata_local_id})
        self.assertEqual((seen[0].request.body if seen[0].request else "", seen[0].intent), (cl.request.body if cl.request else "", cl.intent))

        out, err = waiting.result()
        self.assertIsNone(err)
        self.assertEqual((out.decision, out.replayed, out.called, out.queued, out.receipt_id), (Decision.REPLAY, True, False, True, "pi_1"))

        again = worker.handle(item)
        self.assertEqual((again.status, again.ack, again.decision), (WorkStatus.SETTLED, True, Decision.REPLAY))
        self.assertEqual(v.object_count(), 1)

    def test_wait_queued_times_out_with_queued_error(self) -> None:
        cl = claim(OUTBOX_TOOL, self.rid, amount=4000)
        with self.assertRaises(QueuedError) as cm:
            self.c.do(cl, support.never_called(self), timeout=0.4, wait_queued=True)
        self.assertIn("timed out", str(cm.exception))

    def test_queued_needs_the_request(self) -> None:
        with self.assertRaises(RequestRequired) as cm:
            self.c.do(claim(OUTBOX_TOOL, self.rid, request=False), support.never_called(self))
        self.assertEqual((cm.exception.status, cm.exception.code), (422, "request_required"))

    def test_worker_skips_and_naks(self) -> None:
        v = self.vendor()
        cl = claim(OUTBOX_TOOL, self.rid, amount=5000)
        with self.assertRaises(QueuedError) as cm:
            self.c.do(cl, support.never_called(self))
        assert cm.exception.row is not None
        item = work_item(cm.exception.row, dict(cl.intent or {}))

        nobody = Worker(self.c).handle(item)
        self.assertEqual((nobody.status, nobody.ack, nobody.decision), (WorkStatus.NO_HANDLER, False, ""))
        self.assertGreater(nobody.delay, 0)
        self.assertEqual(self.c.get(item["key"]).attempt, 0, "a worker without the handler starts nothing")

        auto_claim = claim("py.autonomous.charge", self.rid)  # not a registered tool: proceeds
        autonomous = self.c.claim(auto_claim)
        assert autonomous.row is not None
        not_queued = Worker(self.c, {autonomous.row.tool: support.vendor_call(v)}).handle(
            work_item(autonomous.row, dict(auto_claim.intent or {})))
        self.assertEqual((not_queued.status, not_queued.ack), (WorkStatus.NOT_QUEUED, True))

        for junk in (b"{not json", b"", {"key": "k"}, b"[]", b"null"):
            out = Worker(self.c).handle(junk)
            self.assertEqual((out.status, out.term), (WorkStatus.INVALID, True), junk)
        self.assertEqual(v.object_count(), 0)

    def test_worker_refuses_foreign_and_forged_items(self) -> None:
        v = self.vendor()
        cl = claim(OUTBOX_TOOL, self.rid, amount=5100)
        with self.assertRaises(QueuedError) as cm:
            self.c.do(cl, support.never_called(self))
        row = cm.exception.row
        assert row is not None and row.request is not None
        item = work_item(row, dict(cl.intent or {}))
        calls: List[WorkItem] = []

        def charge(key: str, local_id: str, w: WorkItem) -> Result:
            calls.append(w)
            return support.vendor_call(v)(key, local_id)

        worker = Worker(self.c, {OUTBOX_TOOL: charge}, tenant=row.tenant)
        forged_request = dict(item, work=dict(item["work"], request=dict(item["work"]["request"], body="to=attacker@evil.example")))
        cases = [
            ("another tenant", dict(item, tenant="globex"), WorkStatus.FOREIGN),
            ("a key with no row", dict(item, key="no-such-key-" + self.rid), WorkStatus.FOREIGN),
            ("another request", forged_request, WorkStatus.FORGED),
            ("another tool call", dict(item, tool_call_id="call_forged"), WorkStatus.FORGED),
            ("another local id", dict(item, work=dict(item["work"], metadata_local_id="rl_forged")), WorkStatus.FORGED),
        ]
        for name, forged, want in cases:
            out = worker.handle(json.dumps(forged).encode())
            self.assertEqual((out.status, out.ack, out.term), (want, True, True), name)
        # Without tenant=, another tenant's item is still refused: its row is not the token's.
        out = Worker(self.c, {OUTBOX_TOOL: charge}).handle(dict(item, tenant="globex"))
        self.assertEqual((out.status, out.term), (WorkStatus.FORGED, True))
        self.assertEqual((calls, v.object_count()), ([], 0), "no forged item reached the handler")
        self.assertEqual(self.c.get(row.key).attempt, 0, "no forged item took the row's lease")

        done = worker.handle(json.dumps(item).encode())
        self.assertEqual((done.status, done.ack, done.term), (WorkStatus.DONE, True, False), done.error)
        self.assertEqual([c.request for c in calls], [row.request], "the handler got the row's request")

    def test_worker_handler_timeout_leaves_the_row_unknown(self) -> None:
        v = self.vendor(HANG)
        cl = claim(OUTBOX_TOOL, self.rid, amount=6000)
        with self.assertRaises(QueuedError) as cm:
            self.c.do(cl, support.never_called(self))
        assert cm.exception.row is not None
        item = work_item(cm.exception.row, dict(cl.intent or {}))
        slow = support.vendor_call(v, timeout=5)
        worker = Worker(self.c, {OUTBOX_TOOL: lambda k, l, w: slow(k, l)}, call_timeout=0.3)
        done = worker.handle(item)
        self.assertEqual((done.status, done.ack), (WorkStatus.DONE, True))
        assert done.outcome is not None and done.row is not None
        self.assertEqual((done.outcome.kind, done.row.status), ("timeout", Status.UNKNOWN))
        self.assertIsInstance(done.error, Unsettled)
        self.assertEqual(v.object_count(), 1, "the vendor committed; the ledger knows it may have")

    def queued_item(self, amount: int) -> Tuple[ClaimRequest, Dict[str, Any]]:
        cl = claim(OUTBOX_TOOL, self.rid, amount=amount)
        with self.assertRaises(QueuedError) as cm:
            self.c.do(cl, support.never_called(self))
        assert cm.exception.row is not None
        return cl, work_item(cm.exception.row, dict(cl.intent or {}))

    def test_worker_naks_a_start_whose_answer_was_lost(self) -> None:
        # The worker's first start was granted (attempt 1, the lease) but
        # its answer lost; the client's resend answers wait at attempt 1.
        # An ack would make no call at all: the worker naks until the
        # lease ends, after which start answers retry_same_key.
        v = self.vendor()
        _, item = self.queued_item(7000)
        granted = self.c.start(item["key"])
        assert granted.row is not None
        self.assertEqual((granted.decision, granted.row.attempt), (Decision.PROCEED, 1))
        left = parse_time(granted.row.pending_until) - time.time()
        self.assertGreater(left, 60, "the server's lease (15 min by default)")

        calls: List[str] = []

        def charge(key: str, local_id: str, w: WorkItem) -> Result:
            calls.append(key)
            return support.vendor_call(v)(key, local_id)

        for name, max_delay, want in [("the lease's remainder", 3600.0, left), ("capped at max_delay", 30.0, 30.0)]:
            with self.subTest(name):
                out = Worker(self.c, {OUTBOX_TOOL: charge}, max_delay=max_delay).handle(item)
                self.assertEqual((out.status, out.ack, out.decision), (WorkStatus.IN_FLIGHT, False, Decision.WAIT), out.error)
                self.assertTrue(want - 5 <= out.delay <= want + 5, f"delay {out.delay:.1f} s, want about {want:.1f} s")
        self.assertEqual((calls, v.object_count()), ([], 0), "nothing is called while the lease runs")
        row = self.c.get(item["key"])
        self.assertEqual((row.status, row.attempt), (Status.PENDING, 1))

    def test_worker_naks_a_vendor_429_and_calls_again_with_the_same_key(self) -> None:
        v = self.vendor(E429)
        _, item = self.queued_item(8000)
        calls: List[str] = []

        def charge(key: str, local_id: str, w: WorkItem) -> Result:
            calls.append(key)
            return support.vendor_call(v)(key, local_id)

        worker = Worker(self.c, {OUTBOX_TOOL: charge})
        first = worker.handle(item)
        assert first.row is not None and first.outcome is not None
        self.assertEqual((first.status, first.ack, first.decision, first.row.status), (WorkStatus.DONE, False, Decision.PROCEED, Status.PENDING))
        self.assertEqual((first.outcome.result.http_status if first.outcome.result else 0, first.delay), (429, worker._nak_delay))
        self.assertIsInstance(first.error, Unsettled)

        # The item comes back: the lease ended with the 429, so start
        # answers retry_same_key and the worker calls with the same key.
        again = worker.handle(item)
        assert again.row is not None
        self.assertEqual((again.status, again.ack, again.decision, again.row.status), (WorkStatus.DONE, True, Decision.RETRY_SAME_KEY, Status.SUCCEEDED), again.error)
        self.assertEqual(calls, [item["key"], item["key"]])
        self.assertEqual(v.object_count(), 1)

    # Traceparent.

    def test_traceparent_reaches_the_server(self) -> None:
        tp = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
        proxy = support.Proxy(self.srv.url, lambda s: None)
        self.addCleanup(proxy.close)
        cases = [
            ("a client's value", Client(proxy.url, support.TOKEN, traceparent=tp), None, tp),
            ("a client's callable", Client(proxy.url, support.TOKEN, traceparent=lambda: tp), None, tp),
            ("a do()'s value wins", Client(proxy.url, support.TOKEN, traceparent="00-" + "11" * 16 + "-" + "22" * 8 + "-01"), tp, tp),
            ("an invalid value is not sent", Client(proxy.url, support.TOKEN, traceparent="00-" + "AB" * 16 + "-" + "cd" * 8 + "-01"), None, None),
            ("all-zero trace id", Client(proxy.url, support.TOKEN, traceparent="00-" + "0" * 32 + "-" + "cd" * 8 + "-01"), None, None),
            ("a callable that fails sends none", Client(proxy.url, support.TOKEN, traceparent=lambda: 1 // 0), None, None),
            ("none", Client(proxy.url, support.TOKEN), None, None),
        ]
        v = self.vendor()
        for i, (name, c, per_call, want) in enumerate(cases):
            with self.subTest(name):
                before = len(proxy.seen)
                out = c.do(claim("py.traced", self.rid, amount=100 + i), support.vendor_call(v), traceparent=per_call)
                sent = proxy.seen[before:]
                self.assertGreaterEqual(len(sent), 2, "a claim and a report")
                self.assertEqual([s.headers.get("traceparent") for s in sent], [want] * len(sent))
                assert out.row is not None
                if want:
                    # The server's claim span is a child of ours: the row keeps its trace.
                    self.assertEqual(self.c.get(out.key).traceparent.split("-")[1], want.split("-")[1])


if __name__ == "__main__":
    unittest.main()
