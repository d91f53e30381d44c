// do() against the real binary and a fake vendor that really commits.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  type CallContext,
  Client,
  type CallResult,
  EscalatedError,
  ForbiddenError,
  InvalidResponseError,
  NotFoundError,
  ReportFailedError,
  StoppedError,
  UnknownDecisionError,
  UnsettledError,
} from "@reconciler/client";
import { chargeCall, startVendor } from "./fakevendor.js";
import { ADMIN_TOKEN, type Reconciler, SKIP, TENANT, chargeClaim, forward, json, serve, startReconciler } from "./harness.js";

describe("do() against the real binary", { skip: SKIP }, () => {
  let rc: Reconciler;
  before(async () => {
    rc = await startReconciler();
  });
  after(async () => {
    await rc?.stop();
  });

  test("proceed: one call with the ledger's key and local id, reported, succeeded", async () => {
    const v = await startVendor();
    try {
      const c = rc.client();
      const out = await c.do(chargeClaim(), chargeCall(v));
      assert.equal(out.decision, "proceed");
      assert.equal(out.called, true);
      assert.equal(out.replayed, false);
      assert.equal(out.waited, false);
      assert.equal(out.kind, "response");
      assert.equal(out.row?.status, "succeeded");
      assert.equal(out.receiptId, "pi_fake_1");
      assert.deepEqual(out.result, { httpStatus: 200, receiptId: "pi_fake_1" });
      assert.deepEqual(v.posts.map((p) => [p.key, p.localId, p.replayed]), [[out.key, out.localId, false]]);
      const row = await c.get(out.key);
      assert.equal(row.status, "succeeded");
      assert.equal(row.upstream_receipt_id, "pi_fake_1");
      assert.equal(row.last_http_status, 200);
    } finally {
      await v.close();
    }
  });

  test("retry_same_key after a timeout: the same key again, the vendor replays, one object", async () => {
    const v = await startVendor("hang");
    try {
      const c = rc.client({ callTimeoutMs: 300 });
      const claim = chargeClaim();
      const err = await c.do(claim, chargeCall(v)).then(
        () => assert.fail("do() succeeded on a hanging vendor"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof UnsettledError, String(err));
      assert.equal(err.status, "unknown");
      assert.equal(failureName(err.cause), "TimeoutError");
      // How do() ended travels with the error, as the Go SDK's Outcome and the Python client's .outcome.
      assert.equal(err.outcome?.decision, "proceed");
      assert.equal(err.outcome?.called, true);
      assert.equal(err.outcome?.kind, "timeout");
      assert.equal(err.outcome?.key, err.key);
      assert.match(err.outcome?.localId ?? "", /^rl_/);
      assert.equal(err.outcome?.row?.status, "unknown");
      const key = err.key;
      assert.equal((await c.get(key)).status, "unknown");

      // The harness retries the same intent: same key, so the vendor replays.
      const out = await c.do({ ...claim, tool_call_id: "call_2" }, chargeCall(v));
      assert.equal(out.decision, "retry_same_key");
      assert.equal(out.key, key);
      assert.equal(out.row?.status, "succeeded");
      assert.equal(out.row?.attempt, 2);
      assert.equal(out.row?.idempotent_replayed, true);
      assert.equal(out.result.headers?.["Idempotent-Replayed"], "true");
      assert.equal(v.objects(), 1);
      assert.deepEqual(v.posts.map((p) => [p.key, p.replayed]), [[key, false], [key, true]]);
    } finally {
      await v.close();
    }
  });

  test("timeout is reported as timeout, a reset connection as network_error", async () => {
    for (const [fault, kind] of [["hang", "timeout"], ["reset", "network_error"]] as const) {
      const v = await startVendor(fault);
      const proxy = await serve((req, body) => forward(rc.url, req, body));
      try {
        const c = rc.client({ baseUrl: proxy.url, callTimeoutMs: 300 });
        const err = await c.do(chargeClaim(), chargeCall(v)).catch((e: unknown) => e);
        assert.ok(err instanceof UnsettledError, `${fault}: ${String(err)}`);
        assert.equal(err.status, "unknown", fault);
        const reports = proxy.requests.filter((r) => r.url.endsWith("/outcome")).map((r) => JSON.parse(r.body) as unknown);
        assert.deepEqual(reports, [{ kind, attempt: 1 }], fault);
        assert.equal(v.objects(), 1, "the vendor committed before the fault");
      } finally {
        await v.close();
        await proxy.close();
      }
    }
  });

  test("replay: the stored receipt, no call", async () => {
    const v = await startVendor();
    try {
      const c = rc.client();
      const claim = chargeClaim();
      const first = await c.do(claim, chargeCall(v));
      let called = false;
      const out = await c.do(claim, () => {
        called = true;
        return {};
      });
      assert.equal(called, false);
      assert.equal(out.decision, "replay");
      assert.equal(out.replayed, true);
      assert.equal(out.called, false);
      assert.equal(out.key, first.key);
      assert.equal(out.receiptId, first.receiptId);
      assert.deepEqual(out.result, { httpStatus: 200, receiptId: first.receiptId });
      assert.equal(v.posts.length, 1);
    } finally {
      await v.close();
    }
  });

  test("wait → settle: do() long-polls while another attempt holds the lease, a human resolves it", async () => {
    // The proxy shows when do() has begun its long poll.
    const proxy = await serve((req, body) => forward(rc.url, req, body));
    const c = rc.client({ baseUrl: proxy.url });
    const claim = chargeClaim();
    const held = await c.claim(claim); // another runtime's attempt, in flight
    const key = held.row!.key;
    let called = false;
    const done = c.do(claim, () => {
      called = true;
      return {};
    });
    await waitFor(() => proxy.requests.some((r) => r.url === "/v1/claims?wait=30s"));
    const row = await rc.admin().resolve(key, { tenant: TENANT, status: "succeeded", receipt_id: "pi_other_runtime", note: "the other runtime's call" });
    assert.equal(row.status, "succeeded");
    const out = await done;
    assert.equal(called, false);
    assert.equal(out.decision, "replay");
    assert.equal(out.waited, true);
    assert.equal(out.replayed, true);
    assert.equal(out.receiptId, "pi_other_runtime");
    await proxy.close();
  });

  test("wait ends with an UnsettledError when the signal aborts", async () => {
    const c = rc.client();
    const claim = chargeClaim();
    await c.claim(claim);
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(new Error("run cancelled")), 200);
    const start = Date.now();
    const err = await c.do(claim, () => assert.fail("called"), { signal: ctl.signal }).catch((e: unknown) => e);
    assert.ok(err instanceof UnsettledError, String(err));
    assert.ok(!(err instanceof EscalatedError));
    assert.equal(err.status, "pending");
    assert.equal((err.cause as Error).message, "run cancelled");
    assert.ok(Date.now() - start < 5_000, "the abort ended the long poll");
  });

  test("stop: a declined charge stops with failed_poison, and the same intent stops without a call", async () => {
    const v = await startVendor("decline");
    try {
      const c = rc.client();
      const claim = chargeClaim();
      const err = await c.do(claim, chargeCall(v)).catch((e: unknown) => e);
      assert.ok(err instanceof StoppedError, String(err));
      assert.equal(err.code, "failed_poison");
      assert.equal(err.row?.status, "failed_poison");
      assert.equal(err.row?.upstream_receipt_id, "pi_fake_1");
      assert.match(String((err.cause as Error).message), /402/);
      assert.equal(err.outcome?.called, true);
      assert.equal(err.outcome?.kind, "response");
      assert.equal(err.outcome?.result.httpStatus, 402);
      assert.equal(err.outcome?.receiptId, "pi_fake_1");

      const again = await c.do(claim, () => assert.fail("called after a stop")).catch((e: unknown) => e);
      assert.ok(again instanceof StoppedError);
      assert.equal(again.code, "failed_poison");
      assert.equal(again.key, err.key);
      assert.equal(again.outcome?.decision, "stop");
      assert.equal(again.outcome?.called, false);
      assert.equal(v.posts.length, 1);
    } finally {
      await v.close();
    }
  });

  test("stop: tool_frozen throws a StoppedError without a row and without a call", async () => {
    const c = rc.client();
    const claim = { ...chargeClaim(), tool: "stripe.charges.create" };
    const path = `${rc.url}/v1/admin/freezes/${TENANT}/${claim.tool}`;
    const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };
    await fetch(path, { method: "PUT", headers: { ...auth, "Content-Type": "application/json" }, body: '{"note":"incident 7"}' });
    try {
      const err = await c.do(claim, () => assert.fail("called while frozen")).catch((e: unknown) => e);
      assert.ok(err instanceof StoppedError, String(err));
      assert.equal(err.code, "tool_frozen");
      assert.equal(err.row, null);
      assert.equal(err.key, "");
    } finally {
      await fetch(path, { method: "DELETE", headers: auth });
    }
  });

  test("vendor answers that settle nothing: 500 → unknown, 429 and 409 → pending", async () => {
    for (const [fault, status] of [["500", "unknown"], ["429", "pending"], ["409", "pending"]] as const) {
      const v = await startVendor(fault);
      try {
        const c = rc.client();
        const err = await c.do(chargeClaim(), chargeCall(v)).catch((e: unknown) => e);
        assert.ok(err instanceof UnsettledError, `${fault}: ${String(err)}`);
        assert.equal(err.status, status, fault);
        assert.match((err.cause as Error).message, new RegExp(fault));
        assert.equal((await c.get(err.key)).last_http_status, Number(fault));
      } finally {
        await v.close();
      }
    }
  });

  test("a call that returns neither status nor receipt is unknown, one with only a receipt a 200", async () => {
    const c = rc.client();
    const err = await c.do(chargeClaim(), () => ({})).catch((e: unknown) => e);
    assert.ok(err instanceof UnsettledError);
    assert.equal(err.status, "unknown");
    const out = await c.do(chargeClaim(), () => ({ receiptId: "msg_sdk_hides_status" }));
    assert.equal(out.row?.status, "succeeded");
    assert.equal(out.row?.last_http_status, 200);
    assert.equal(out.receiptId, "msg_sdk_hides_status");
  });

  test("a call that throws (vendor unreachable) is a network error: unknown, never a new key", async () => {
    const c = rc.client();
    const dead = await serve(() => json(200, {}));
    await dead.close();
    const claim = chargeClaim();
    const call = async ({ key, signal }: CallContext): Promise<CallResult> => {
      const resp = await fetch(`${dead.url}/v1/payment_intents`, { method: "POST", headers: { "Idempotency-Key": key }, signal });
      return { httpStatus: resp.status };
    };
    const err = await c.do(claim, call).catch((e: unknown) => e);
    assert.ok(err instanceof UnsettledError);
    assert.equal(err.status, "unknown");
    assert.ok(err.cause instanceof TypeError, "fetch's own error is the cause");
    const v = await startVendor();
    try {
      const out = await c.do(claim, chargeCall(v));
      assert.equal(out.key, err.key);
      assert.equal(out.decision, "retry_same_key");
    } finally {
      await v.close();
    }
  });

  test("a lost claim answer: the resend carries the call's Idempotency-Key and proceeds at once", async () => {
    // A proxy that forwards the first claim and drops the connection after
    // the service answered it: the row is inserted and leased.
    const keys: string[] = [];
    let reportKey = "";
    const proxy = await serve(async (req, body) => {
      const answer = await forward(rc.url, req, body);
      const key = String(req.headers["idempotency-key"] ?? "");
      if (req.method === "POST" && req.url === "/v1/claims") {
        keys.push(key);
        if (keys.length === 1) return "destroy";
      }
      if (req.url?.endsWith("/outcome")) reportKey = key;
      return answer;
    });
    const v = await startVendor();
    try {
      const c = rc.client({ baseUrl: proxy.url });
      const start = Date.now();
      const out = await c.do(chargeClaim(), chargeCall(v));
      assert.ok(Date.now() - start < 2_000, `do() took ${Date.now() - start} ms: a lost answer must not cost the lease`);
      assert.deepEqual([out.decision, out.row?.attempt, out.row?.status], ["proceed", 1, "succeeded"]);
      assert.equal(v.posts.length, 1, "the vendor is called once");
      assert.equal(keys.length, 2);
      assert.equal(keys[0], keys[1], "the resend carries the first send's Idempotency-Key");
      assert.ok(keys[0]!.length >= 16);
      assert.notEqual(reportKey, keys[0], "another call, another value");
    } finally {
      await v.close();
      await proxy.close();
    }
  });

  test("a lost report is resent with the same body and applied once", async () => {
    // A proxy in front of the API that forwards the first report and then
    // drops the connection, as a load balancer restart would.
    let reports = 0;
    const bodies: string[] = [];
    const proxy = await serve(async (req, body) => {
      const answer = await forward(rc.url, req, body);
      if (req.url?.endsWith("/outcome")) {
        bodies.push(body);
        if (++reports === 1) return "destroy";
      }
      return answer;
    });
    const v = await startVendor();
    try {
      const c = rc.client({ baseUrl: proxy.url });
      const out = await c.do(chargeClaim(), chargeCall(v));
      assert.equal(out.row?.status, "succeeded");
      assert.equal(reports, 2);
      assert.equal(bodies[0], bodies[1], "the resent report is the same body");
      assert.deepEqual(JSON.parse(bodies[0]!), { kind: "response", http_status: 200, receipt_id: "pi_fake_1", attempt: 1 });
      assert.equal(v.posts.length, 1);
    } finally {
      await v.close();
      await proxy.close();
    }
  });

  test("a report that never arrives is a ReportFailedError; the row stays pending for the resolver", async () => {
    const proxy = await serve(async (req, body) =>
      req.url?.endsWith("/outcome") ? json(503, { error: { code: "unavailable", message: "store down" } }) : forward(rc.url, req, body),
    );
    const v = await startVendor();
    try {
      const c = rc.client({ baseUrl: proxy.url, reportTimeoutMs: 2_000 });
      const err = await c.do(chargeClaim(), chargeCall(v)).catch((e: unknown) => e);
      assert.ok(err instanceof ReportFailedError, String(err));
      assert.ok(err instanceof UnsettledError);
      assert.equal(err.status, undefined);
      assert.equal((err.cause as { code?: string }).code, "unavailable");
      assert.equal(err.outcome?.called, true);
      assert.equal(err.outcome?.kind, "response");
      assert.equal(proxy.requests.filter((r) => r.url.endsWith("/outcome")).length, 3, "1 + retries sends");
      assert.equal((await rc.client().get(err.key)).status, "pending");
    } finally {
      await v.close();
      await proxy.close();
    }
  });

  test("claim errors reach the caller before any call", async () => {
    const c = rc.client();
    const claim = { ...chargeClaim(), key: `biz_do_${process.pid}` };
    await c.claim(claim);
    await assert.rejects(c.do({ ...claim, intent: { other: true } }, () => assert.fail("called")), (e) => e instanceof Error && e.name === "FingerprintMismatchError");
    await assert.rejects(rc.admin().do(chargeClaim(), () => assert.fail("called")), ForbiddenError);
  });
});

describe("do() on escalation (a resolver that pages within seconds)", { skip: SKIP }, () => {
  let rc: Reconciler;
  before(async () => {
    rc = await startReconciler(["--resolver-interval", "100ms", "--resolver-grace", "1s"]);
  });
  after(async () => {
    await rc?.stop();
  });

  test("a human paged while do() waits ends the wait with an EscalatedError", async () => {
    const proxy = await serve((req, body) => forward(rc.url, req, body));
    const c = rc.client({ baseUrl: proxy.url });
    // An email (no replay window): once its attempt is unknown, only a human
    // can close it, and the resolver pages one (within the 1 s grace after
    // the report: the claim's own grace must outlast the start of the wait,
    // or the resolver sees the attempt in flight and looks again a minute later).
    const claim = { ...chargeClaim(), tool: "email.send", vendor: "resend", tool_class: "write_ledger" as const, intent: { to: "ap@example.com", invoice_id: `in_${process.pid}` } };
    const held = await c.claim(claim);
    const done = c.do(claim, () => assert.fail("called")).catch((e: unknown) => e);
    await waitFor(() => proxy.requests.some((r) => r.url === "/v1/claims?wait=30s"));
    await c.report(held.row!.key, { kind: "network_error", attempt: 1 });
    const err = await done;
    await proxy.close();
    assert.ok(err instanceof EscalatedError, String(err));
    assert.ok(err instanceof UnsettledError);
    assert.equal(err.key, held.row!.key);
    assert.ok(err.row.paged_at);
    assert.equal(err.outcome?.called, false);
    // A later do() of the same intent ends at once, before any long poll.
    const start = Date.now();
    assert.ok((await rc.client().do(claim, () => assert.fail("called")).catch((e: unknown) => e)) instanceof EscalatedError);
    assert.ok(Date.now() - start < 1_000);
  });
});

describe("do() against a fake API: what the real one does not answer", () => {
  test("an unknown decision is an UnknownDecisionError and nothing is called", async () => {
    const row = { tenant: "t", key: "k".repeat(64), metadata_local_id: "rl_1", status: "pending", attempt: 1 };
    const api = await serve(() => json(200, { decision: "await_human", row }));
    try {
      const c = new Client({ baseUrl: api.url, token: "tok" });
      const err = await c.do(chargeClaim(), () => assert.fail("called")).catch((e: unknown) => e);
      assert.ok(err instanceof UnknownDecisionError, String(err));
      assert.equal(err.decision, "await_human");
      assert.equal(err.key, row.key);
      assert.match(err.message, /await_human/);
      assert.equal(err.outcome?.decision, "await_human");
      assert.equal(err.outcome?.called, false);
      assert.equal(api.requests.length, 1);
    } finally {
      await api.close();
    }
  });

  test("a proceed without a row is an InvalidResponseError, not a call", async () => {
    const api = await serve(() => json(201, { decision: "proceed", row: null }));
    try {
      const c = new Client({ baseUrl: api.url, token: "tok" });
      await assert.rejects(c.do(chargeClaim(), () => assert.fail("called")), InvalidResponseError);
    } finally {
      await api.close();
    }
  });

  test("long polls that come back at once are paced by pollIntervalMs, and failed polls do not end the wait", async () => {
    // A server shutting down answers every ?wait= at once; a proxy in front
    // of it fails some polls. Neither may make do() spin or give up.
    const row = { tenant: "t", key: "k".repeat(64), metadata_local_id: "rl_1", status: "pending", attempt: 1 };
    let n = 0;
    const api = await serve(() => (++n % 3 === 0 ? { status: 502, body: "bad gateway" } : json(409, { decision: "wait", row })));
    try {
      const c = new Client({ baseUrl: api.url, token: "tok", pollIntervalMs: 100, retries: 0 });
      const ctl = new AbortController();
      setTimeout(() => ctl.abort(), 650);
      const err = await c.do(chargeClaim(), () => assert.fail("called"), { signal: ctl.signal }).catch((e: unknown) => e);
      assert.ok(err instanceof UnsettledError && !(err instanceof EscalatedError), String(err));
      assert.equal(err.status, "pending");
      // One claim, then one long poll per 100 ms pause: about 7, never hundreds.
      assert.ok(api.requests.length >= 4 && api.requests.length <= 9, `${api.requests.length} requests in 650 ms`);
    } finally {
      await api.close();
    }
  });

  test("a key gone while waiting (404) ends the wait with that error", async () => {
    let n = 0;
    const row = { tenant: "t", key: "k".repeat(64), metadata_local_id: "rl_1", status: "pending", attempt: 1 };
    const api = await serve(() => (++n === 1 ? json(409, { decision: "wait", row }) : json(404, { error: { code: "not_found", message: "gone" } })));
    try {
      const c = new Client({ baseUrl: api.url, token: "tok", pollIntervalMs: 10 });
      await assert.rejects(c.do(chargeClaim(), () => assert.fail("called")), NotFoundError);
      assert.equal(api.requests[1]?.url, "/v1/claims?wait=30s");
    } finally {
      await api.close();
    }
  });
});

function failureName(err: unknown): string {
  return err instanceof Error || err instanceof DOMException ? err.name : String(err);
}

async function waitFor(cond: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) assert.fail("condition not met in time");
    await sleep(10);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
