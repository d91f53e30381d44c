"""Every Client method against the real binary: its answer, and its typed
errors."""

from __future__ import annotations

import time
import unittest
import uuid
from typing import Any, Callable, Dict, Type

from . import support
from reconciler_client import (
    APIError,
    ClaimRequest,
    Client,
    CompensationFailed,
    CompensationPending,
    Decision,
    FingerprintMismatch,
    Forbidden,
    InvalidInput,
    InvalidTransition,
    NotFound,
    OutcomeReport,
    ResolveRequest,
    Status,
    Unauthorized,
)

STRIPE_TOOL = "stripe.payment_intents.create"


def charge(run_id: str, amount: int = 1050, **kw: Any) -> ClaimRequest:
    return ClaimRequest(run_id=run_id, tool=STRIPE_TOOL, vendor="stripe", tool_class="write_idempotent",
                        intent={"amount": amount, "currency": "usd", "customer": "cus_123"}, **kw)


class ClientTest(unittest.TestCase):
    srv: support.Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = support.server()

    def setUp(self) -> None:
        self.c = Client(self.srv.url, support.TOKEN, backoff=0.01)
        self.admin = Client(self.srv.url, support.ADMIN_TOKEN, tenant=support.TENANT, backoff=0.01)
        self.rid = support.run_id()

    def assertRaisesAPI(self, cls: Type[APIError], status: int, code: str, fn: Callable[[], Any]) -> APIError:
        with self.assertRaises(cls) as cm:
            fn()
        e = cm.exception
        self.assertEqual((e.status, e.code), (status, code), str(e))
        self.assertNotIn(support.TOKEN, str(e))
        return e

    def settled(self, amount: int = 1050, receipt: str = "pi_1") -> str:
        r = self.c.claim(charge(self.rid, amount))
        self.c.report(r.key, OutcomeReport(kind="response", http_status=200, receipt_id=receipt, attempt=r.row.attempt))
        return r.key

    def test_claim_decisions(self) -> None:
        first = self.c.claim(charge(self.rid, tool_call_id="call_1"))
        self.assertEqual((first.decision, first.http_status), (Decision.PROCEED, 201))
        row = first.row
        assert row is not None
        self.assertEqual(len(first.key), 64)
        self.assertEqual((row.status, row.attempt, row.run_id, row.tool, row.tool_call_id, row.tenant),
                         (Status.PENDING, 1, self.rid, STRIPE_TOOL, "call_1", support.TENANT))
        self.assertTrue(row.metadata_local_id.startswith("rl_"))
        self.assertTrue(row.pending_until and first.replay_window_until)
        self.assertEqual(row.raw["key"], first.key)

        again = self.c.claim(charge(self.rid))
        self.assertEqual((again.decision, again.http_status, again.key), (Decision.WAIT, 409, first.key))

        self.c.report(first.key, OutcomeReport(kind="timeout", attempt=1))
        retry = self.c.claim(charge(self.rid))
        self.assertEqual((retry.decision, retry.http_status, retry.row.attempt), (Decision.RETRY_SAME_KEY, 200, 2))

        self.c.report(first.key, OutcomeReport(kind="response", http_status=200, receipt_id="pi_1",
                                               headers={"Idempotent-Replayed": "true"}, attempt=2))
        replay = self.c.claim(charge(self.rid))
        self.assertEqual((replay.decision, replay.row.upstream_receipt_id, replay.row.idempotent_replayed),
                         (Decision.REPLAY, "pi_1", True))

    def test_claim_business_key(self) -> None:
        key = f"cart/{uuid.uuid4().hex}?#%"  # every character a path must escape
        r = self.c.claim(charge(self.rid, key=key))
        self.assertEqual((r.decision, r.key), (Decision.PROCEED, key))
        self.assertEqual(self.c.get(key).key, key)
        self.assertRaisesAPI(FingerprintMismatch, 422, "fingerprint_mismatch", lambda: self.c.claim(charge(self.rid, 999, key=key)))

    def test_claim_errors(self) -> None:
        bad_class = ClaimRequest(run_id=self.rid, tool="t", vendor="stripe", tool_class="nope", intent={})
        cases: Dict[str, Any] = {
            "invalid tool class": (InvalidInput, 400, "invalid_input", lambda: self.c.claim(bad_class)),
            "bad run id": (InvalidInput, 400, "invalid_input", lambda: self.c.claim(charge("no spaces allowed"))),
            "intent not an object": (InvalidInput, 400, "invalid_input",
                                     lambda: self.c.claim(ClaimRequest(self.rid, "t", "stripe", "write_ledger", [1]))),  # type: ignore[arg-type]
            "run id of the wrong type": (InvalidInput, 400, "bad_json", lambda: self.c.claim(charge(5))),  # type: ignore[arg-type]
            "unknown token": (Unauthorized, 401, "unauthorized",
                              lambda: Client(self.srv.url, "not-a-known-token-123").claim(charge(self.rid))),
            "admin token": (Forbidden, 403, "forbidden", lambda: self.admin.claim(charge(self.rid))),
            "wait past 30 s": (InvalidInput, 400, "invalid_input", lambda: self.c.claim_wait(charge(self.rid), 31)),
        }
        for name, (cls, status, code, fn) in cases.items():
            with self.subTest(name):
                self.assertRaisesAPI(cls, status, code, fn)
        with self.subTest("no intent: refused before sending"):
            self.assertRaisesAPI(InvalidInput, 0, "invalid_input",
                                 lambda: self.c.claim(ClaimRequest(self.rid, "t", "stripe", "write_ledger", None)))
        with self.subTest("an intent that is not JSON: refused before sending"):
            self.assertRaisesAPI(InvalidInput, 0, "invalid_input", lambda: self.c.claim(charge(self.rid, float("nan"))))  # type: ignore[arg-type]

    def test_claim_wait(self) -> None:
        first = self.c.claim(charge(self.rid))
        start = time.monotonic()
        r = self.c.claim_wait(charge(self.rid), 0.3)
        self.assertEqual((r.decision, r.key), (Decision.WAIT, first.key))
        self.assertGreaterEqual(time.monotonic() - start, 0.25, "the claim did not hold")

    def test_report(self) -> None:
        r = self.c.claim(charge(self.rid))
        row = self.c.report(r.key, OutcomeReport(kind="response", http_status=402, headers={"Stripe-Should-Retry": "false"}, attempt=1))
        self.assertEqual((row.status, row.last_http_status, row.vendor_should_retry), (Status.FAILED_POISON, 402, False))
        for name, (cls, status, code, fn) in {
            "no such key": (NotFound, 404, "not_found", lambda: self.c.report("no-such-key", OutcomeReport(kind="timeout"))),
            "unknown kind": (InvalidInput, 400, "invalid_input", lambda: self.c.report(r.key, OutcomeReport(kind="bogus"))),
            "admin token": (Forbidden, 403, "forbidden", lambda: self.admin.report(r.key, OutcomeReport(kind="timeout"))),
        }.items():
            with self.subTest(name):
                self.assertRaisesAPI(cls, status, code, fn)

    def test_get(self) -> None:
        key = self.settled()
        row = self.c.get(key)
        self.assertEqual((row.key, row.status, row.upstream_receipt_id, row.resolution.source), (key, Status.SUCCEEDED, "pi_1", "runtime"))
        self.assertTrue(row.succeeded_at)
        with self.subTest("an admin names the tenant"):
            self.assertEqual(self.admin.get(key).key, key)
        for name, (cls, status, code, fn) in {
            "no such key": (NotFound, 404, "not_found", lambda: self.c.get("no-such-key")),
            "admin without a tenant": (InvalidInput, 400, "invalid_input", lambda: Client(self.srv.url, support.ADMIN_TOKEN).get(key)),
            "another tenant": (Forbidden, 403, "forbidden", lambda: Client(self.srv.url, support.TOKEN, tenant="other").get(key)),
        }.items():
            with self.subTest(name):
                self.assertRaisesAPI(cls, status, code, fn)

    def test_list(self) -> None:
        keys = [self.settled(amount) for amount in (1, 2, 3)]
        open_key = self.c.claim(charge(self.rid, 4)).key
        page = self.c.list(run_id=self.rid, status=Status.SUCCEEDED)
        self.assertEqual([r.key for r in page.rows], keys[::-1], "newest first")
        self.assertEqual(page.next_cursor, "")
        with self.subTest("pages"):
            seen, cursor = [], ""
            while True:
                p = self.c.list(run_id=self.rid, limit=2, cursor=cursor)
                self.assertLessEqual(len(p.rows), 2)
                seen += [r.key for r in p.rows]
                if not p.next_cursor:
                    break
                cursor = p.next_cursor
            self.assertEqual(seen, [open_key] + keys[::-1])
        with self.subTest("an admin names the tenant"):
            self.assertEqual(len(self.admin.list(run_id=self.rid).rows), 4)
        with self.subTest("a run without rows"):
            self.assertEqual(self.c.list(run_id=support.run_id()).rows, [])
        for name, (cls, status, code, fn) in {
            "bad cursor": (InvalidInput, 400, "invalid_input", lambda: self.c.list(cursor="garbage")),
            "bad status": (InvalidInput, 400, "invalid_input", lambda: self.c.list(status="nope")),
            "limit too large": (InvalidInput, 400, "invalid_input", lambda: self.c.list(limit=501)),
        }.items():
            with self.subTest(name):
                self.assertRaisesAPI(cls, status, code, fn)

    def test_compensate(self) -> None:
        key = self.settled()
        r = self.c.compensate(key, "refund")
        self.assertEqual((r.decision, r.http_status, r.row.compensation_of, r.row.compensation_action),
                         (Decision.PROCEED, 201, key, "refund"))
        again = self.c.compensate(key, "refund")
        self.assertEqual((again.decision, again.http_status, again.key), (Decision.WAIT, 409, r.key))

        pending = self.c.claim(charge(self.rid, 7)).key
        failed = self.c.claim(charge(self.rid, 8))
        self.c.report(failed.key, OutcomeReport(kind="response", http_status=400, attempt=1))
        for name, (cls, status, code, fn) in {
            "original open": (CompensationPending, 409, "compensation_pending", lambda: self.c.compensate(pending, "refund")),
            "original failed": (CompensationFailed, 422, "compensation_failed", lambda: self.c.compensate(failed.key, "refund")),
            "no such key": (NotFound, 404, "not_found", lambda: self.c.compensate("no-such-key", "refund")),
            "bad action": (InvalidInput, 400, "invalid_input", lambda: self.c.compensate(key, "no spaces")),
        }.items():
            with self.subTest(name):
                self.assertRaisesAPI(cls, status, code, fn)

    def test_resolve(self) -> None:
        r = self.c.claim(charge(self.rid))
        self.c.report(r.key, OutcomeReport(kind="network_error", attempt=1))
        row = self.admin.resolve(r.key, ResolveRequest(tenant=support.TENANT, status=Status.SUCCEEDED, receipt_id="pi_7",
                                                       note="seen in the dashboard", actor="alice"))
        self.assertEqual((row.status, row.upstream_receipt_id, row.resolution.source, row.resolution.actor, row.resolution.note),
                         (Status.SUCCEEDED, "pi_7", "human", "alice", "seen in the dashboard"))
        done = ResolveRequest(tenant=support.TENANT, status=Status.FAILED_POISON, note="wrong")
        for name, (cls, status, code, fn) in {
            "settled row": (InvalidTransition, 409, "invalid_transition", lambda: self.admin.resolve(r.key, done)),
            "tenant token": (Forbidden, 403, "forbidden", lambda: self.c.resolve(r.key, done)),
            "no such key": (NotFound, 404, "not_found", lambda: self.admin.resolve("no-such-key", done)),
            "no note": (InvalidInput, 400, "invalid_input",
                        lambda: self.admin.resolve(r.key, ResolveRequest(tenant=support.TENANT, status=Status.SUCCEEDED, note=""))),
        }.items():
            with self.subTest(name):
                self.assertRaisesAPI(cls, status, code, fn)

    def test_new_rejects(self) -> None:
        cases: Dict[str, Dict[str, Any]] = {
            "no scheme": {"base_url": "127.0.0.1:8080"},
            "ftp": {"base_url": "ftp://h"},
            "empty token": {"token": ""},
            "token with space": {"token": "a b"},
            "wait past the api's limit": {"wait": 31},
            "no wait": {"wait": 0},
            "negative retries": {"retries": -1},
            "zero timeout": {"timeout": 0},
        }
        for name, kw in cases.items():
            with self.subTest(name), self.assertRaises(ValueError):
                args: Dict[str, Any] = {"base_url": "http://h", "token": "t"}
                args.update(kw)
                Client(args.pop("base_url"), args.pop("token"), **args)
        self.assertNotIn(support.TOKEN, repr(self.c))


if __name__ == "__main__":
    unittest.main()
