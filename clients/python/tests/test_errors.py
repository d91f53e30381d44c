"""Bad answers give typed errors, never a silent success: an API fake that
answers non-JSON, a proxy's 5xx page, a refused connection; and the retries
that make a lost claim or report harmless, through a proxy in front of the
real binary."""

from __future__ import annotations

import json
import socket
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

from . import support
from .support import DROP_AFTER, DROP_BEFORE, FakeVendor, Seen, answer
from reconciler_client import (
    APIError,
    ApprovalDecided,
    ApprovalExpired,
    Client,
    Decision,
    Internal,
    InvalidInput,
    MethodNotAllowed,
    NotFound,
    NotQueued,
    OutcomeReport,
    ProtocolError,
    QueuedError,
    ReconcilerError,
    ReportFailed,
    RequestRequired,
    Status,
    Stopped,
    ToolMismatch,
    TransportError,
    UnknownDecision,
    Unavailable,
    UnregisteredTool,
    Unsettled,
    Worker,
    WorkStatus,
)
from .test_client import charge

ROW = {"tenant": "default", "key": "k1", "metadata_local_id": "rl_1", "run_id": "r", "tool": "t", "vendor": "stripe",
       "tool_class": "write_idempotent", "status": "pending", "attempt": 1}


class FakeAPI(support.HTTPFake):
    """FakeAPI answers every request with one canned answer; with later
    answers, the first request gets the first, and so on, the last repeated.
    With get, a GET is answered with it instead (a Worker reads the row
    before it starts the key)."""

    def __init__(self, status: int, body: bytes, content_type: str = "application/json", delay: float = 0,
                 headers: Optional[Dict[str, str]] = None, later: Sequence[Tuple[int, bytes]] = (),
                 get: Optional[Tuple[int, bytes]] = None) -> None:
        self.answers = [(status, body)] + list(later)
        self.get = get
        self.content_type, self.delay, self.headers = content_type, delay, headers
        self.lock = threading.Lock()
        self.sends = 0
        super().__init__()

    def handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        if self.get is not None and h.command == "GET":
            support.reply(h, self.get[0], self.get[1], None, "application/json")
            return
        with self.lock:
            status, data = self.answers[min(self.sends, len(self.answers) - 1)]
            self.sends += 1
        if self.delay:
            time.sleep(self.delay)
        try:
            support.reply(h, status, data, self.headers, self.content_type)
        except OSError:
            pass


def refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "http://127.0.0.1:%d" % s.getsockname()[1]  # closed when the block ends: nobody listens


def api_error(code: str, message: str = "m") -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


class BadAnswersTest(unittest.TestCase):
    def test_typed_errors(self) -> None:
        big = json.dumps({"decision": "proceed", "row": dict(ROW, pad="x" * 2000)}).encode()
        cases: List[Tuple[str, int, bytes, str, Type[ReconcilerError], str, int]] = [
            # name, status, body, content type, want error, want code, want sends (retries=2)
            ("2xx that is not JSON", 200, b"hello", "text/plain", ProtocolError, "", 3),
            ("2xx that is not UTF-8", 200, b"\xff\xfe", "application/json", ProtocolError, "", 3),
            ("2xx without a decision", 201, b'{"row":null}', "application/json", ProtocolError, "", 1),
            ("2xx whose row has a field of the wrong type", 201, json.dumps({"decision": "proceed", "row": dict(ROW, attempt="one")}).encode(),
             "application/json", ProtocolError, "", 1),
            ("2xx larger than the client reads", 201, big, "application/json", ProtocolError, "", 3),
            ("2xx carrying an API error", 200, api_error("not_found"), "application/json", NotFound, "not_found", 1),
            ("proxy 502 page", 502, b"<html>bad gateway</html>", "text/html", Unavailable, "bad_gateway", 3),
            ("proxy 504 page", 504, b"<html>gateway timeout</html>", "text/html", Unavailable, "gateway_timeout", 3),
            ("proxy 500 page", 500, b"<html>oops</html>", "text/html", APIError, "internal_server_error", 3),
            ("empty 503", 503, b"", "text/plain", Unavailable, "service_unavailable", 3),
            ("API unavailable", 503, api_error("unavailable", "store unavailable"), "application/json", Unavailable, "unavailable", 3),
            ("API internal", 500, api_error("internal", "internal error"), "application/json", Internal, "internal", 3),
            ("429 without a body", 429, b"", "text/plain", APIError, "too_many_requests", 3),
            ("method not allowed", 405, api_error("method_not_allowed"), "application/json", MethodNotAllowed, "method_not_allowed", 1),
            ("a code this client does not know", 418, api_error("teapot"), "application/json", APIError, "teapot", 1),
            ("a redirect is not followed", 302, b"", "text/plain", APIError, "found", 1),
        ]
        for name, status, body, ctype, err_cls, code, sends in cases:
            with self.subTest(name):
                api = FakeAPI(status, body, ctype, headers={"Location": "http://127.0.0.1:1/elsewhere"} if status == 302 else None)
                self.addCleanup(api.close)
                c = Client(api.url, support.TOKEN, retries=2, backoff=0.01, max_response=1024)
                for op, fn in [("claim", lambda: c.claim(charge("r"))),
                               ("do", lambda: c.do(charge("r"), support.never_called(self)))]:
                    before = api.sends
                    with self.assertRaises(err_cls, msg=op) as cm:
                        fn()
                    e = cm.exception
                    self.assertEqual(type(e), err_cls, f"{op}: {e!r}")
                    if isinstance(e, APIError):
                        self.assertEqual((e.status, e.code), (status, code), op)
                    self.assertEqual(api.sends - before, sends, f"{op}: sends")
                    self.assertNotIn(support.TOKEN, str(e))

    def test_no_answer(self) -> None:
        hanging = FakeAPI(201, json.dumps({"decision": "proceed", "row": ROW}).encode(), delay=1.0)
        self.addCleanup(hanging.close)
        for name, url, timeout in [("connection refused", refused_url(), False), ("no answer in time", hanging.url, True)]:
            with self.subTest(name):
                c = Client(url, support.TOKEN, retries=1, backoff=0.01, timeout=0.2)
                for op, fn in [("claim", lambda: c.claim(charge("r"))), ("get", lambda: c.get("k")),
                               ("do", lambda: c.do(charge("r"), support.never_called(self)))]:
                    with self.assertRaises(TransportError, msg=op) as cm:
                        fn()
                    self.assertEqual(cm.exception.timeout, timeout, f"{op}: {cm.exception}")
                    self.assertIsNotNone(cm.exception.__cause__)

    def test_unknown_decision(self) -> None:
        # A newer server's decisions: nothing is called.
        for decision in ["something_else", "await_human"]:
            with self.subTest(decision):
                api = FakeAPI(202, json.dumps({"decision": decision, "row": ROW}).encode())
                self.addCleanup(api.close)
                c = Client(api.url, support.TOKEN)
                with self.assertRaises(UnknownDecision) as cm:
                    c.do(charge("r"), support.never_called(self))
                self.assertEqual(cm.exception.decision, decision)
                assert cm.exception.outcome is not None
                self.assertEqual((cm.exception.outcome.key, cm.exception.outcome.called), ("k1", False))
                self.assertEqual(c.claim(charge("r")).decision, decision, "claim itself passes the answer on")


class WaitLoopTest(unittest.TestCase):
    def test_wait_never_spins(self) -> None:
        # A wait answered at once (a server shutting down ends its long polls
        # so) or a long poll that fails: do() pauses poll_interval between
        # answers instead of spinning, and ends at its timeout.
        wait = json.dumps({"decision": "wait", "row": ROW}).encode()
        unavailable = api_error("unavailable", "store unavailable")
        for name, later in [("waits answered at once", []), ("long polls failing", [(503, unavailable)])]:
            with self.subTest(name):
                api = FakeAPI(409, wait, later=later)
                self.addCleanup(api.close)
                c = Client(api.url, support.TOKEN, retries=0, poll_interval=0.2)
                start = time.monotonic()
                with self.assertRaises(Unsettled) as cm:
                    c.do(charge("r"), support.never_called(self), timeout=1.0)
                self.assertEqual((cm.exception.key, cm.exception.status), ("k1", "pending"))
                self.assertLess(time.monotonic() - start, 2)
                self.assertTrue(3 <= api.sends <= 8, f"{api.sends} claims in 1 s")

    def test_wait_answer_without_a_row(self) -> None:
        api = FakeAPI(409, b'{"decision":"wait","row":null}')
        self.addCleanup(api.close)
        with self.assertRaises(ProtocolError):
            Client(api.url, support.TOKEN).do(charge("r"), support.never_called(self))


class RetriesTest(unittest.TestCase):
    srv: support.Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = support.server()

    def setUp(self) -> None:
        self.rid = support.run_id()

    def proxied(self, rule: support.Rule, **kw: Any) -> Tuple[support.Proxy, Client]:
        p = support.Proxy(self.srv.url, rule)
        self.addCleanup(p.close)
        return p, Client(p.url, support.TOKEN, backoff=0.01, **kw)

    def vendor(self) -> FakeVendor:
        v = FakeVendor()
        self.addCleanup(v.close)
        return v

    def drop_first(self, n: int, suffix: str, action: Any) -> support.Rule:
        count = [0]
        lock = threading.Lock()

        def rule(s: Seen) -> Any:
            if s.method == "POST" and s.path.endswith(suffix):
                with lock:
                    count[0] += 1
                    if count[0] <= n:
                        return action
            return None

        return rule

    def test_lost_report_resent(self) -> None:
        for name, action in [("dropped before the api", DROP_BEFORE), ("dropped after the api applied it", DROP_AFTER),
                             ("a proxy's 502", answer(502, b"<html>bad gateway</html>", "text/html"))]:
            with self.subTest(name):
                self.rid = support.run_id()
                p, c = self.proxied(self.drop_first(2, "/outcome", action))
                v = self.vendor()
                out = c.do(charge(self.rid), support.vendor_call(v), timeout=10)
                assert out.row is not None
                self.assertEqual((out.row.status, out.receipt_id, v.object_count()), (Status.SUCCEEDED, "pi_1", 1))
                reports = p.count("POST", "/outcome")
                self.assertEqual(len(reports), 3)
                self.assertEqual(len({r.body for r in reports}), 1, "every resend has the same body")
                self.assertEqual(json.loads(reports[0].body),
                                 {"kind": "response", "http_status": 200, "receipt_id": "pi_1", "attempt": 1})

    def test_report_lost_for_good(self) -> None:
        p, c = self.proxied(self.drop_first(1000, "/outcome", DROP_BEFORE), retries=2, report_timeout=5)
        v = self.vendor()
        with self.assertRaises(ReportFailed) as cm:
            c.do(charge(self.rid), support.vendor_call(v), timeout=10)
        e = cm.exception
        self.assertIsInstance(e, Unsettled)
        self.assertIsInstance(e.__cause__, TransportError)
        assert e.outcome is not None
        self.assertTrue(e.outcome.called)
        self.assertEqual(len(p.count("POST", "/outcome")), 3)
        direct = Client(self.srv.url, support.TOKEN)
        self.assertEqual(direct.get(e.key).status, Status.PENDING, "the row stays pending for the resolver")

    def test_lost_claim_answer(self) -> None:
        # The first claim inserted the row but its answer was lost: the
        # resent claim finds the row in its lease and answers wait, never a
        # second proceed; do() waits instead of calling.
        p, c = self.proxied(self.drop_first(1, "/v1/claims", DROP_AFTER))
        resp = c.claim(charge(self.rid))
        self.assertEqual(resp.decision, Decision.WAIT)
        self.assertEqual(len(p.count("POST", "/v1/claims")), 2)

    def test_claim_retried_through_outage(self) -> None:
        p, c = self.proxied(self.drop_first(2, "/v1/claims", answer(503, {"error": {"code": "unavailable", "message": "store unavailable"}})))
        v = self.vendor()
        out = c.do(charge(self.rid), support.vendor_call(v), timeout=10)
        self.assertEqual((out.decision, v.object_count()), (Decision.PROCEED, 1))
        self.assertEqual(len(p.count("POST", "/v1/claims")), 3)

    def test_not_retried(self) -> None:
        p, c = self.proxied(lambda s: None)
        with self.assertRaises(NotFound):
            c.report("no-such-key", OutcomeReport(kind="timeout"))
        self.assertEqual(len(p.count("POST", "/outcome")), 1, "a 4xx is final")


if __name__ == "__main__":
    unittest.main()


ITEM = {"key": "k1", "tenant": "default", "run_id": "r", "tool": "t", "status": "queued", "source": "runtime",
        "at": "2025-01-01T00:00:00Z", "work": {"vendor": "stripe", "tool_class": "write_idempotent", "metadata_local_id": "rl_1",
                                               "intent": {"amount": 1}, "request": {"method": "POST", "path": "/v1/x"}}}


# ITEM_ROW is ITEM's row, as GET /v1/claims/k1 answers it.
ITEM_ROW = (200, json.dumps({"row": {"tenant": "default", "key": "k1", "metadata_local_id": "rl_1", "run_id": "r", "tool": "t",
                                     "vendor": "stripe", "tool_class": "write_idempotent", "status": "pending", "attempt": 0,
                                     "request": {"method": "POST", "path": "/v1/x"}}}).encode())


def soon(seconds: float) -> str:
    """soon is the RFC 3339 time seconds from now, with nanoseconds as the server writes it."""
    t = time.time() + seconds
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%09dZ" % int((t % 1) * 1e9)


def decision(d: str, http_status: int = 200, **row: Any) -> Tuple[int, bytes]:
    """decision is a claim answer of ROW with row's fields changed."""
    return http_status, json.dumps({"decision": d, "row": dict(ROW, **row)}).encode()


class AutonomyAnswersTest(unittest.TestCase):
    """do() and the Worker on an API fake: the approval gate's and the
    outbox's answers, and the typed errors of the new routes."""

    def test_approval_expired_while_waiting(self) -> None:
        stop = json.dumps({"decision": "stop", "code": "approval_expired", "row": dict(ROW, status="failed_poison", attempt=0)}).encode()
        api = FakeAPI(*decision("await_approval", 202, attempt=0), later=[decision("wait", 409, attempt=0), (200, stop)])
        self.addCleanup(api.close)
        c = Client(api.url, support.TOKEN, poll_interval=0.01)
        with self.assertRaises(Stopped) as cm:
            c.do(charge("r"), support.never_called(self), timeout=5)
        e = cm.exception
        assert e.outcome is not None
        self.assertEqual((e.code, e.outcome.awaited_approval, e.outcome.called), ("approval_expired", True, False))

    def test_held_answers_never_spin(self) -> None:
        # A server answering the same await_approval or queued at once:
        # do() pauses poll_interval between claims and ends at its timeout.
        for name, d, wait_queued, err_cls in [("await_approval again", "await_approval", False, Unsettled),
                                              ("queued, waiting for the worker", "queued", True, QueuedError)]:
            with self.subTest(name):
                api = FakeAPI(*decision(d, 202, attempt=0))
                self.addCleanup(api.close)
                c = Client(api.url, support.TOKEN, retries=0, poll_interval=0.2)
                with self.assertRaises(err_cls) as cm:
                    c.do(charge("r"), support.never_called(self), timeout=1.0, wait_queued=wait_queued)
                self.assertEqual(cm.exception.key, "k1")
                self.assertTrue(3 <= api.sends <= 8, f"{api.sends} claims in 1 s")

    def test_queued_without_waiting(self) -> None:
        api = FakeAPI(*decision("queued", 202, attempt=0))
        self.addCleanup(api.close)
        with self.assertRaises(QueuedError) as cm:
            Client(api.url, support.TOKEN).do(charge("r"), support.never_called(self))
        self.assertEqual((cm.exception.key, cm.exception.run_id, api.sends), ("k1", "r", 1))
        bare = FakeAPI(202, b'{"decision":"queued","row":null}')
        self.addCleanup(bare.close)
        with self.assertRaises(ProtocolError):
            Client(bare.url, support.TOKEN).do(charge("r"), support.never_called(self))

    def test_start_and_worker_on_bad_answers(self) -> None:
        cases: List[Tuple[str, str, Type[ReconcilerError], str, bool]] = [
            # name, url kind, want start error, want work status, want ack
            ("2xx that is not JSON", "html", ProtocolError, WorkStatus.RETRY, False),
            ("a 503", "503", Unavailable, WorkStatus.RETRY, False),
            ("connection refused", "refused", TransportError, WorkStatus.RETRY, False),
            ("not queued", "not_queued", NotQueued, WorkStatus.NOT_QUEUED, True),
            ("no row", "not_found", NotFound, WorkStatus.REFUSED, False),
        ]
        for name, kind, err_cls, status, ack in cases:
            with self.subTest(name):
                if kind == "refused":
                    url = refused_url()
                else:
                    api = {
                        "html": lambda: FakeAPI(200, b"<html>hi</html>", "text/html", get=ITEM_ROW),
                        "503": lambda: FakeAPI(503, api_error("unavailable"), get=ITEM_ROW),
                        "not_queued": lambda: FakeAPI(409, api_error("not_queued"), get=ITEM_ROW),
                        "not_found": lambda: FakeAPI(404, api_error("not_found"), get=ITEM_ROW),
                    }[kind]()
                    self.addCleanup(api.close)
                    url = api.url
                c = Client(url, support.TOKEN, retries=1, backoff=0.01)
                with self.assertRaises(err_cls):
                    c.start("k1")
                out = Worker(c, {"t": lambda k, l, w: self.fail("called")}).handle(ITEM)
                self.assertEqual((out.status, out.ack, out.key), (status, ack, "k1"))
                self.assertIsInstance(out.error, err_cls)

    def test_worker_frozen_and_unknown_decisions(self) -> None:
        # name, start's answer, want status, want ack, want delay (None: the nak delay; a range in s)
        cases: List[Tuple[str, Tuple[int, bytes], str, bool, Optional[Tuple[float, float]]]] = [
            ("frozen: wait at attempt 0", decision("wait", 409, attempt=0), WorkStatus.FROZEN, False, None),
            ("in flight: wait at attempt 1, the lease's remainder", decision("wait", 409, pending_until=soon(10)), WorkStatus.IN_FLIGHT, False, (8.0, 11.0)),
            ("in flight: a long lease, capped at max_delay", decision("wait", 409, pending_until=soon(3600)), WorkStatus.IN_FLIGHT, False, (30.0, 30.0)),
            ("in flight: a lease about to end, at least 1 s", decision("wait", 409, pending_until=soon(0.2)), WorkStatus.IN_FLIGHT, False, (1.0, 1.0)),
            ("the resolver's: wait at attempt 1, the lease over", decision("wait", 409, pending_until=soon(-5)), WorkStatus.RESOLVER, True, (0.0, 0.0)),
            ("the resolver's: wait at attempt 1 without a lease", decision("wait", 409), WorkStatus.RESOLVER, True, (0.0, 0.0)),
            ("settled", decision("replay", 200, status="succeeded"), WorkStatus.SETTLED, True, (0.0, 0.0)),
            ("a decision it does not know", decision("later", 200), WorkStatus.RETRY, False, None),
        ]
        for name, answer_, status, ack, delay in cases:
            with self.subTest(name):
                api = FakeAPI(*answer_, get=ITEM_ROW)
                self.addCleanup(api.close)
                out = Worker(Client(api.url, support.TOKEN), {"t": lambda k, l, w: self.fail("called")}, nak_delay=7).handle(ITEM)
                self.assertEqual((out.status, out.ack), (status, ack))
                lo, hi = delay or (7.0, 7.0)
                self.assertTrue(lo <= out.delay <= hi, f"delay {out.delay}, want [{lo}, {hi}]")

    def test_registry_and_approval_answers(self) -> None:
        empty = FakeAPI(204, b"")
        self.addCleanup(empty.close)
        c = Client(empty.url, support.TOKEN)
        self.assertIsNone(c.delete_tool("t"))
        with self.assertRaises(ProtocolError, msg="a GET's empty answer is not a tool"):
            c.get_tool("t")
        with self.assertRaises(InvalidInput):
            c.get_tool("..")
        for code, cls in [("tool_mismatch", ToolMismatch), ("unregistered_tool", UnregisteredTool), ("request_required", RequestRequired)]:
            api = FakeAPI(422, api_error(code))
            self.addCleanup(api.close)
            with self.assertRaises(cls):
                Client(api.url, support.TOKEN).claim(charge("r"))
        view = {"approval": {"id": "ap_1", "state": "granted", "reason": "x", "requested_at": "t", "expires_at": "t", "actor": "carol"},
                "row": ROW}
        decided = FakeAPI(409, api_error("approval_decided"), later=[(200, json.dumps(view).encode())])
        self.addCleanup(decided.close)
        with self.assertRaises(ApprovalDecided, msg="decided by someone else: a conflict"):
            Client(decided.url, support.TOKEN).approve("ap_1", "alice")
        expired = FakeAPI(409, api_error("approval_expired"))
        self.addCleanup(expired.close)
        with self.assertRaises(ApprovalExpired):
            Client(expired.url, support.TOKEN).deny("ap_1", "alice", "no")
