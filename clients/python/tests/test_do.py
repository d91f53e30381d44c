"""Client.do against the real binary and a fake vendor that really commits:
each decision, each outcome classification, and the waits."""

from __future__ import annotations

import threading
import time
import unittest
import uuid
from typing import Any, Callable, List, Optional, Tuple, Type

from . import support
from .support import DECLINE, E409, E429, E500, HANG, OK, RESET, FakeVendor
from reconciler_client import (
    ClaimRequest,
    Client,
    Decision,
    Escalated,
    FingerprintMismatch,
    Outcome,
    OutcomeKind,
    OutcomeReport,
    ResolveRequest,
    Result,
    Status,
    StopCode,
    Stopped,
    Unauthorized,
    Unsettled,
)
from .test_client import charge


class DoTest(unittest.TestCase):
    srv: support.Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = support.server()

    def setUp(self) -> None:
        self.c = Client(self.srv.url, support.TOKEN, backoff=0.01, poll_interval=0.05)
        self.admin = Client(self.srv.url, support.ADMIN_TOKEN, tenant=support.TENANT)
        self.rid = support.run_id()

    def vendor(self, *faults: str) -> FakeVendor:
        v = FakeVendor(*faults, hang=1.0)
        self.addCleanup(v.close)
        return v

    def do(self, call: Callable[[str, str], Result], claim: Optional[ClaimRequest] = None,
           timeout: Optional[float] = 10) -> Tuple[Outcome, Any]:
        """do runs Client.do and returns its outcome, also when it raised."""
        try:
            return self.c.do(claim or charge(self.rid), call, timeout=timeout), None
        except (Stopped, Unsettled) as e:
            assert e.outcome is not None
            return e.outcome, e

    def test_classifies(self) -> None:
        cases = [
            # name, fault, raise_errors, want row status, want kind, want error, want objects, want receipt
            ("2xx with receipt", OK, False, Status.SUCCEEDED, OutcomeKind.RESPONSE, None, 1, True),
            ("409 already exists with receipt", E409, False, Status.SUCCEEDED, OutcomeKind.RESPONSE, None, 1, True),
            ("500 no receipt", E500, False, Status.UNKNOWN, OutcomeKind.RESPONSE, Unsettled, 0, False),
            ("500 raised as urllib's HTTPError", E500, True, Status.UNKNOWN, OutcomeKind.RESPONSE, Unsettled, 0, False),
            ("429 stays pending", E429, False, Status.PENDING, OutcomeKind.RESPONSE, Unsettled, 0, False),
            ("declined, should-retry false", DECLINE, False, Status.FAILED_POISON, OutcomeKind.RESPONSE, Stopped, 1, True),
            ("declined, raised", DECLINE, True, Status.FAILED_POISON, OutcomeKind.RESPONSE, Stopped, 1, False),
            ("commit then timeout", HANG, False, Status.UNKNOWN, OutcomeKind.TIMEOUT, Unsettled, 1, False),
            ("commit then connection reset", RESET, False, Status.UNKNOWN, OutcomeKind.NETWORK_ERROR, Unsettled, 1, False),
        ]
        for name, fault, raise_errors, status, kind, err_cls, objects, receipt in cases:
            with self.subTest(name):
                self.rid = support.run_id()
                v = self.vendor(fault)
                out, err = self.do(support.vendor_call(v, timeout=0.3, raise_errors=raise_errors))
                if err_cls is None:
                    self.assertIsNone(err)
                else:
                    self.assertIsInstance(err, err_cls)
                self.assertTrue(out.called)
                assert out.row is not None
                self.assertEqual((out.row.status, out.kind, out.decision), (status, kind, Decision.PROCEED))
                self.assertEqual(v.object_count(), objects)
                self.assertEqual(bool(out.receipt_id), receipt, out.receipt_id)
                self.assertEqual(self.c.get(out.key).status, status, "the ledger's row")
                self.assertEqual(v.keys(), [out.key], "the vendor got the ledger's key, once")
                self.assertEqual(v.posts[0][1]["metadata"], {"metadata_local_id": out.local_id})
                if isinstance(err, Unsettled):
                    self.assertEqual(err.status, status)
                if isinstance(err, Stopped):
                    self.assertEqual((err.code, err.key), (StopCode.FAILED_POISON, out.key))
                if raise_errors:
                    self.assertIsNotNone(err.__cause__, "the vendor's HTTPError is the cause")

    def test_decisions(self) -> None:
        def declined(v: FakeVendor) -> None:
            _, err = self.do(support.vendor_call(v))
            self.assertIsInstance(err, Stopped)

        def timed_out(v: FakeVendor) -> None:
            _, err = self.do(support.vendor_call(v, timeout=0.3))
            self.assertIsInstance(err, Unsettled)
            self.assertEqual(err.status, Status.UNKNOWN)

        def succeeded(v: FakeVendor) -> None:
            self.assertEqual(self.do(support.vendor_call(v))[1], None)

        cases: List[Tuple[str, List[str], Optional[Callable[[FakeVendor], None]], str, Optional[Type[Exception]], str, int]] = [
            # name, faults, setup, want decision, want error, want stop code, want vendor calls in the do under test
            ("proceed calls once", [], None, Decision.PROCEED, None, "", 1),
            ("replay returns the receipt without calling", [], succeeded, Decision.REPLAY, None, "", 0),
            ("stop after failed_poison does not call", [DECLINE], declined, Decision.STOP, Stopped, StopCode.FAILED_POISON, 0),
            ("retry_same_key after a timeout calls with the same key", [HANG], timed_out, Decision.RETRY_SAME_KEY, None, "", 1),
        ]
        for name, faults, setup, decision, err_cls, code, calls in cases:
            with self.subTest(name):
                self.rid = support.run_id()
                v = self.vendor(*faults)
                if setup is not None:
                    setup(v)
                before = len(v.keys())
                out, err = self.do(support.vendor_call(v))
                if err_cls is None:
                    self.assertIsNone(err)
                else:
                    self.assertIsInstance(err, err_cls)
                self.assertEqual(out.decision, decision)
                if code:
                    self.assertEqual(err.code, code)  # type: ignore[union-attr]
                posts = v.keys()[before:]
                self.assertEqual(len(posts), calls)
                for k in posts:
                    self.assertEqual(k, out.key, "the vendor got the ledger's key")
                self.assertLessEqual(v.object_count(), 1)
                if decision == Decision.REPLAY:
                    self.assertTrue(out.replayed and not out.called)
                    self.assertEqual((out.receipt_id, out.result.receipt_id, out.result.http_status), ("pi_1", "pi_1", 200))

    def test_timeout_then_same_key(self) -> None:
        # The drill's core: the vendor commits and then hangs past the call's
        # timeout; the row is unknown; do() again (the harness retrying) gets
        # retry_same_key with the SAME key, the vendor replays, one object.
        v = self.vendor(HANG)
        call = support.vendor_call(v, timeout=0.3)
        first, err = self.do(call)
        self.assertIsInstance(err, Unsettled)
        self.assertEqual((err.status, first.kind), (Status.UNKNOWN, OutcomeKind.TIMEOUT))
        second, err = self.do(call)
        self.assertIsNone(err)
        assert second.row is not None
        self.assertEqual((second.decision, second.key, second.row.attempt), (Decision.RETRY_SAME_KEY, first.key, 2))
        self.assertEqual((second.row.status, second.row.upstream_receipt_id, second.row.idempotent_replayed),
                         (Status.SUCCEEDED, "pi_1", True))
        self.assertEqual(second.result.headers, {"Idempotent-Replayed": "true"})
        self.assertEqual(v.keys(), [first.key, first.key])
        self.assertEqual(v.object_count(), 1)

    def test_concurrent_same_intent(self) -> None:
        # Eight runtimes run one intent at once (one Client, many threads):
        # one proceeds, the others wait and replay; the vendor sees one call.
        v = self.vendor()
        outs: List[Outcome] = []
        errs: List[BaseException] = []
        lock = threading.Lock()

        def run() -> None:
            try:
                out = self.c.do(charge(self.rid), support.vendor_call(v), timeout=20)
                with lock:
                    outs.append(out)
            except BaseException as e:  # noqa: B902 - reported below
                with lock:
                    errs.append(e)

        threads = [threading.Thread(target=run) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(errs, [])
        self.assertEqual(len(outs), 8)
        self.assertEqual(sorted(o.decision for o in outs), [Decision.PROCEED] + [Decision.REPLAY] * 7)
        self.assertEqual({o.receipt_id for o in outs}, {"pi_1"})
        self.assertEqual((len(v.keys()), v.object_count()), (1, 1))

    def test_stop_tool_frozen(self) -> None:
        tool = "py.frozen." + uuid.uuid4().hex[:8]
        status, _ = self.srv.admin("PUT", f"/v1/admin/freezes/{support.TENANT}/{tool}", {"note": "python client test"})
        self.assertEqual(status, 200)
        self.addCleanup(self.srv.admin, "DELETE", f"/v1/admin/freezes/{support.TENANT}/{tool}")
        claim = ClaimRequest(run_id=self.rid, tool=tool, vendor="stripe", tool_class="write_idempotent", intent={"amount": 1})
        out, err = self.do(support.never_called(self), claim)
        self.assertIsInstance(err, Stopped)
        self.assertEqual((err.code, err.row, err.key, out.decision, out.called), (StopCode.TOOL_FROZEN, None, "", Decision.STOP, False))

    def test_fingerprint_mismatch_on_business_key_reuse(self) -> None:
        v = self.vendor()
        key = "cart-" + uuid.uuid4().hex
        self.assertIsNone(self.do(support.vendor_call(v), charge(self.rid, 1050, key=key))[1])
        with self.assertRaises(FingerprintMismatch) as cm:
            self.c.do(charge(self.rid, 2000, key=key), support.never_called(self))
        self.assertEqual((cm.exception.status, cm.exception.code), (422, "fingerprint_mismatch"))
        self.assertEqual(v.object_count(), 1)

    def test_call_errors(self) -> None:
        def not_a_result(key: str, local_id: str) -> Any:
            return {"id": "pi_1"}

        def broken(key: str, local_id: str) -> Result:
            raise ConnectionResetError("connection reset by peer")

        def timing_out(key: str, local_id: str) -> Result:
            raise TimeoutError("read timed out")

        for name, call, kind, cause in [
            ("a call returning no Result is unknown, never a success", not_a_result, OutcomeKind.NETWORK_ERROR, TypeError),
            ("a broken connection", broken, OutcomeKind.NETWORK_ERROR, ConnectionResetError),
            ("a timeout", timing_out, OutcomeKind.TIMEOUT, TimeoutError),
        ]:
            with self.subTest(name):
                self.rid = support.run_id()
                out, err = self.do(call)
                self.assertIsInstance(err, Unsettled)
                self.assertIsInstance(err.__cause__, cause)
                self.assertEqual((out.kind, err.status, self.c.get(out.key).status), (kind, Status.UNKNOWN, Status.UNKNOWN))

    def test_interrupt_in_call_reports_unknown(self) -> None:
        seen: List[str] = []

        def interrupted(key: str, local_id: str) -> Result:
            seen.append(key)
            raise KeyboardInterrupt

        with self.assertRaises(KeyboardInterrupt):
            self.c.do(charge(self.rid), interrupted)
        self.assertEqual(self.c.get(seen[0]).status, Status.UNKNOWN, "the row left its lease")

    def test_waits(self) -> None:
        # Another runtime holds the key; do() long-polls while a thread
        # settles the row, then acts on the new decision.
        def resolve(status: str) -> Callable[[str], None]:
            def f(key: str) -> None:
                self.admin.resolve(key, ResolveRequest(tenant=support.TENANT, status=status, receipt_id="pi_9", note="python test"))
            return f

        def report_timeout(key: str) -> None:
            self.c.report(key, OutcomeReport(kind="timeout", attempt=1))

        cases = [
            ("resolved succeeded: replay", resolve(Status.SUCCEEDED), Decision.REPLAY, None, 0),
            ("resolved failed_poison: stop", resolve(Status.FAILED_POISON), Decision.STOP, Stopped, 0),
            ("the other attempt timed out: retry with the same key", report_timeout, Decision.RETRY_SAME_KEY, None, 1),
        ]
        for name, settle, decision, err_cls, calls in cases:
            with self.subTest(name):
                self.rid = support.run_id()
                v = self.vendor()
                held = self.c.claim(charge(self.rid))
                self.assertEqual(held.decision, Decision.PROCEED)
                timer = threading.Timer(0.5, settle, args=(held.key,))
                timer.start()
                self.addCleanup(timer.cancel)
                start = time.monotonic()
                out, err = self.do(support.vendor_call(v), timeout=20)
                timer.join()
                self.assertGreaterEqual(time.monotonic() - start, 0.4)
                if err_cls is None:
                    self.assertIsNone(err)
                else:
                    self.assertIsInstance(err, err_cls)
                self.assertEqual((out.decision, out.waited, out.key, len(v.keys())), (decision, True, held.key, calls))
                if decision == Decision.REPLAY:
                    self.assertEqual((out.replayed, out.receipt_id), (True, "pi_9"))

    def test_wait_ends_at_timeout(self) -> None:
        held = self.c.claim(charge(self.rid))
        start = time.monotonic()
        out, err = self.do(support.never_called(self), timeout=0.8)
        took = time.monotonic() - start
        self.assertIsInstance(err, Unsettled)
        self.assertNotIsInstance(err, Escalated)
        self.assertEqual((err.key, err.status, out.called, out.decision), (held.key, Status.PENDING, False, Decision.WAIT))
        self.assertTrue(0.7 <= took < 5, took)

    def test_wait_ends_escalated(self) -> None:
        # A write_ledger row left unknown by a vendor with no lookup is paged
        # by the resolver (every 200 ms here): do() ends with Escalated.
        claim = ClaimRequest(run_id=self.rid, tool="acme.invoice.send", vendor="acme", tool_class="write_ledger",
                             intent={"invoice_id": "in_42", "to": "ap@example.com"})
        first = self.c.claim(claim)
        self.c.report(first.key, OutcomeReport(kind="network_error", attempt=1))
        out, err = self.do(support.never_called(self), claim, timeout=20)
        self.assertIsInstance(err, Escalated)
        self.assertEqual((err.key, err.status, out.called), (first.key, Status.UNKNOWN, False))
        self.assertTrue(self.c.get(first.key).paged_at)
        with self.subTest("the row already paged: at once"):
            start = time.monotonic()
            _, err = self.do(support.never_called(self), claim, timeout=20)
            self.assertIsInstance(err, Escalated)
            self.assertLess(time.monotonic() - start, 1)

    def test_wait_ends_on_revoked_token(self) -> None:
        # A proxy answers 401 to the long polls, as when the token is
        # revoked while the run waits: do() ends with Unauthorized at once.
        held = self.c.claim(charge(self.rid))
        proxy = support.Proxy(self.srv.url, lambda p: p.wait_query and support.answer(401, {"error": {"code": "unauthorized", "message": "unknown token"}}))
        self.addCleanup(proxy.close)
        c = Client(proxy.url, support.TOKEN, backoff=0.01, poll_interval=0.05)
        start = time.monotonic()
        with self.assertRaises(Unauthorized):
            c.do(charge(self.rid), support.never_called(self), timeout=10)
        self.assertLess(time.monotonic() - start, 5)
        self.assertEqual(self.c.get(held.key).status, Status.PENDING)


if __name__ == "__main__":
    unittest.main()
