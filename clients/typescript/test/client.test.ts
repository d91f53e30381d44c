// Every Client method against the real binary: its success and its errors.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Client,
  CompensationFailedError,
  CompensationPendingError,
  FingerprintMismatchError,
  ForbiddenError,
  InvalidInputError,
  InvalidTransitionError,
  NotFoundError,
  UnauthorizedError,
} from "@reconciler/client";
import { ADMIN_TOKEN, type Reconciler, SKIP, TENANT, chargeClaim, fast, startReconciler } from "./harness.js";

describe("Client against the real binary", { skip: SKIP }, () => {
  let rc: Reconciler;
  before(async () => {
    rc = await startReconciler();
  });
  after(async () => {
    await rc?.stop();
  });

  test("claim: proceed, then wait while the lease is held, replay once it succeeded", async () => {
    const c = rc.client();
    const claim = chargeClaim();
    const first = await c.claim(claim);
    assert.equal(first.decision, "proceed");
    assert.equal(first.httpStatus, 201);
    assert.ok(first.row);
    assert.match(first.row.key, /^[0-9a-f]{64}$/);
    assert.match(first.row.metadata_local_id, /^rl_[0-9a-f]{32}$/);
    assert.equal(first.row.status, "pending");
    assert.equal(first.row.attempt, 1);
    assert.ok(first.replay_window_until, "a Stripe claim has a replay window");

    const again = await c.claim(claim);
    assert.equal(again.decision, "wait");
    assert.equal(again.httpStatus, 409);
    assert.equal(again.row?.key, first.row.key);

    await c.report(first.row.key, { kind: "response", http_status: 200, receipt_id: "pi_claim_1", attempt: 1 });
    const replay = await c.claim(claim);
    assert.equal(replay.decision, "replay");
    assert.equal(replay.httpStatus, 200);
    assert.equal(replay.row?.upstream_receipt_id, "pi_claim_1");
  });

  test("claim: retry_same_key after a timeout, with the same key and the next attempt", async () => {
    const c = rc.client();
    const claim = chargeClaim();
    const first = await c.claim(claim);
    const row = await c.report(first.row!.key, { kind: "timeout", attempt: 1 });
    assert.equal(row.status, "unknown");
    const retry = await c.claim({ ...claim, tool_call_id: "call_2" });
    assert.equal(retry.decision, "retry_same_key");
    assert.equal(retry.row?.key, first.row!.key);
    assert.equal(retry.row?.attempt, 2);
  });

  test("claim with waitMs holds an in-flight row, then answers wait", async () => {
    const c = rc.client();
    const claim = chargeClaim();
    await c.claim(claim);
    const start = Date.now();
    const resp = await c.claim(claim, { waitMs: 300 });
    assert.equal(resp.decision, "wait");
    assert.ok(Date.now() - start >= 250, `the long poll held ${Date.now() - start} ms`);
  });

  test("claim: a business key, with characters a path must escape", async () => {
    const c = rc.client();
    const key = `cart/42?x=1#frag%${process.pid}`;
    const resp = await c.claim({ ...chargeClaim(), key });
    assert.equal(resp.decision, "proceed");
    assert.equal(resp.row?.key, key);
    assert.equal((await c.get(key)).key, key);
    // fetch resolves "." and ".." (even as %2E) as dot segments: such a row
    // could be claimed but never reported, so the claim is refused unsent.
    for (const dots of [".", ".."]) {
      await assert.rejects(c.claim({ ...chargeClaim(), key: dots }), TypeError);
      await assert.rejects(c.get(dots), TypeError);
    }
    assert.equal((await c.claim({ ...chargeClaim(), key: "..." })).row?.key, "...");
    assert.equal((await c.get("...")).key, "...");
  });

  test("claim errors: fingerprint mismatch, bad input, bad token, admin token", async () => {
    const c = rc.client();
    const claim = { ...chargeClaim(), key: `biz_${process.pid}_fp` };
    await c.claim(claim);
    await assert.rejects(c.claim({ ...claim, intent: { amount: 1, currency: "usd" } }), (err) => {
      assert.ok(err instanceof FingerprintMismatchError);
      assert.equal(err.status, 422);
      assert.equal(err.code, "fingerprint_mismatch");
      return true;
    });
    await assert.rejects(c.claim({ ...chargeClaim(), run_id: "bad run id" }), (err) => {
      assert.ok(err instanceof InvalidInputError);
      assert.equal(err.status, 400);
      assert.equal(err.code, "invalid_input");
      assert.match(err.message, /run_id/);
      return true;
    });
    await assert.rejects(
      c.claim({ ...chargeClaim(), tool_class: "write_sometimes" as "write_ledger" }),
      (err) => err instanceof InvalidInputError && err.status === 400,
    );
    const stranger = new Client({ baseUrl: rc.url, token: "tok_nobody_knows_this", ...fast });
    await assert.rejects(stranger.claim(chargeClaim()), (err) => err instanceof UnauthorizedError && err.status === 401);
    await assert.rejects(rc.admin().claim(chargeClaim()), (err) => err instanceof ForbiddenError && err.status === 403);
    await assert.rejects(c.claim({ ...chargeClaim(), intent: undefined as unknown as Record<string, unknown> }), TypeError);
  });

  test("claim: stop/tool_frozen (423, no row) while the kill switch covers the tool", async () => {
    const c = rc.client();
    const claim = { ...chargeClaim(), tool: "stripe.refunds.create" };
    const path = `${rc.url}/v1/admin/freezes/${TENANT}/${claim.tool}`;
    const put = await fetch(path, {
      method: "PUT",
      headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" },
      body: JSON.stringify({ note: "ts client test" }),
    });
    assert.equal(put.status, 200);
    try {
      const resp = await c.claim(claim);
      assert.equal(resp.decision, "stop");
      assert.equal(resp.code, "tool_frozen");
      assert.equal(resp.httpStatus, 423);
      assert.equal(resp.row, null);
    } finally {
      await fetch(path, { method: "DELETE", headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } });
    }
    assert.equal((await c.claim(claim)).decision, "proceed");
  });

  test("report: the row after it; not found; a report the API refuses", async () => {
    const c = rc.client();
    const first = await c.claim(chargeClaim());
    const key = first.row!.key;
    const row = await c.report(key, {
      kind: "response",
      http_status: 200,
      receipt_id: "pi_report_1",
      headers: { "Idempotent-Replayed": "true" },
      attempt: 1,
    });
    assert.equal(row.status, "succeeded");
    assert.equal(row.upstream_receipt_id, "pi_report_1");
    assert.equal(row.idempotent_replayed, true);
    // The same report again is applied once: same answer.
    assert.equal((await c.report(key, { kind: "response", http_status: 200, receipt_id: "pi_report_1", attempt: 1 })).status, "succeeded");

    await assert.rejects(c.report("f".repeat(64), { kind: "timeout" }), (err) => err instanceof NotFoundError && err.status === 404);
    await assert.rejects(c.report(key, { kind: "timeout", http_status: 200 }), (err) => err instanceof InvalidInputError);
    await assert.rejects(
      c.report(key, { kind: "teleported" as "timeout" }),
      (err) => err instanceof InvalidInputError && err.status === 400,
    );
  });

  test("get: the row; not found; another tenant's key is not found either", async () => {
    const c = rc.client();
    const first = await c.claim(chargeClaim());
    const row = await c.get(first.row!.key);
    assert.equal(row.key, first.row!.key);
    assert.equal(row.tenant, TENANT);
    assert.equal(row.tool, "stripe.payment_intents.create");
    await assert.rejects(c.get("no-such-key"), (err) => err instanceof NotFoundError && err.code === "not_found");
    // An admin reads it with ?tenant=; without a tenant it may not.
    assert.equal((await rc.admin().get(first.row!.key)).key, first.row!.key);
    await assert.rejects(rc.admin({ tenant: "" }).get(first.row!.key), (err) => err instanceof InvalidInputError || err instanceof ForbiddenError);
  });

  test("list: filters, pages with a cursor; a bad cursor is refused", async () => {
    const c = rc.client();
    const runId = `run_list_${process.pid}`;
    const keys: string[] = [];
    for (const amount of [1, 2, 3]) keys.push((await c.claim(chargeClaim(amount, runId))).row!.key);
    const page1 = await c.list({ run_id: runId, limit: 2 });
    assert.equal(page1.rows.length, 2);
    assert.ok(page1.next_cursor);
    const page2 = await c.list({ run_id: runId, limit: 2, cursor: page1.next_cursor });
    assert.equal(page2.rows.length, 1);
    assert.equal(page2.next_cursor, undefined);
    assert.deepEqual([...page1.rows, ...page2.rows].map((r) => r.key).sort(), [...keys].sort());
    assert.equal((await c.list({ run_id: runId, status: "succeeded" })).rows.length, 0);
    assert.equal((await rc.admin().list({ run_id: runId })).rows.length, 3);

    await assert.rejects(c.list({ cursor: "made-up" }), (err) => err instanceof InvalidInputError && err.code === "invalid_input");
    await assert.rejects(c.list({ status: "sideways" as "pending" }), (err) => err instanceof InvalidInputError);
  });

  test("resolve (admin): closes a row; a tenant token may not; a settled row refuses another status", async () => {
    const c = rc.client();
    const first = await c.claim(chargeClaim());
    const key = first.row!.key;
    const row = await rc.admin().resolve(key, { tenant: TENANT, status: "succeeded", receipt_id: "pi_by_hand", note: "seen in the dashboard", actor: "alice" });
    assert.equal(row.status, "succeeded");
    assert.equal(row.upstream_receipt_id, "pi_by_hand");
    assert.equal(row.resolution?.source, "human");
    assert.equal(row.resolution?.actor, "alice");

    await assert.rejects(
      c.resolve(key, { tenant: TENANT, status: "succeeded", note: "n" }),
      (err) => err instanceof ForbiddenError && err.status === 403,
    );
    await assert.rejects(
      rc.admin().resolve(key, { tenant: TENANT, status: "failed_poison", note: "changed my mind" }),
      (err) => err instanceof InvalidTransitionError && err.status === 409,
    );
    await assert.rejects(
      rc.admin().resolve("no-such-key", { tenant: TENANT, status: "succeeded", note: "n" }),
      (err) => err instanceof NotFoundError,
    );
    await assert.rejects(
      rc.admin().resolve(key, { tenant: TENANT, status: "succeeded", note: "" }),
      (err) => err instanceof InvalidInputError,
    );
  });

  test("compensate: proceed on a succeeded row, the same row again; refused while open or failed", async () => {
    const c = rc.client();
    const first = await c.claim(chargeClaim());
    const key = first.row!.key;
    await assert.rejects(c.compensate(key, "refund"), (err) => err instanceof CompensationPendingError && err.status === 409);

    await c.report(key, { kind: "response", http_status: 200, receipt_id: "pi_comp", attempt: 1 });
    const comp = await c.compensate(key, "refund");
    assert.equal(comp.decision, "proceed");
    assert.equal(comp.httpStatus, 201);
    assert.equal(comp.row?.compensation_of, key);
    assert.equal(comp.row?.compensation_action, "refund");
    const again = await c.compensate(key, "refund");
    assert.equal(again.decision, "wait");
    assert.equal(again.httpStatus, 409);
    assert.equal(again.row?.key, comp.row?.key);

    const poisoned = await c.claim(chargeClaim());
    await c.report(poisoned.row!.key, { kind: "response", http_status: 400, attempt: 1 });
    await assert.rejects(c.compensate(poisoned.row!.key, "refund"), (err) => err instanceof CompensationFailedError && err.status === 422);
    await assert.rejects(c.compensate("no-such-key", "refund"), NotFoundError);
    await assert.rejects(c.compensate(key, "not an action"), InvalidInputError);
  });
});
