// Write autonomy against the real binary (docs/architecture.md §11): the tool
// registry, do() through the approval gate (granted, denied, aborted) and
// through the outbox (QueuedError, waitQueued), the Worker that makes the
// outbox's calls, and the traceparent header; then the same answers and the
// new routes' errors on a fake API.
import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { after, before, describe, test } from "node:test";
import {
  ApprovalDecidedError,
  ApprovalExpiredError,
  type ClaimRequest,
  Client,
  ForbiddenError,
  InvalidResponseError,
  NetworkError,
  NotFoundError,
  NotQueuedError,
  QueuedError,
  RequestRequiredError,
  type Row,
  StoppedError,
  type ToolEntry,
  ToolMismatchError,
  UnavailableError,
  UnregisteredToolError,
  UnsettledError,
  type WorkHandler,
  type WorkItem,
  type WorkStatus,
  Worker,
  validTraceparent,
} from "@reconciler/client";
import { chargeCall, startVendor } from "./fakevendor.js";
import { APPROVER_TOKEN, AUTONOMY_CONFIG, type Answer, type Reconciler, SKIP, TOKEN, fast, forward, json, serve, startReconciler } from "./harness.js";

const APPROVAL_TOOL = "ts.approval.payment_intents.create";
const OUTBOX_TOOL = "ts.outbox.payment_intents.create";

function entry(autonomy: "autonomous" | "approval" | "outbox"): ToolEntry {
  return {
    vendor: "stripe",
    class: "write_idempotent",
    side_effect: "charge",
    key_placement: { header: "Idempotency-Key" },
    checklist: {
      side_effect_documented: true,
      key_born_in_runtime: true,
      ledger_or_unique_field: true,
      timeout_leaves_unknown: true,
      error_classes_mapped: true,
      duplicate_delivery_test: true,
      checked_by: "ts-tests",
    },
    autonomy,
  };
}

let runs = 0;
const runId = () => `run_ts_auto_${process.pid}_${++runs}`;

function claim(tool: string, amount = 1050, withRequest = true): ClaimRequest {
  const c: ClaimRequest = { run_id: runId(), tool, tool_call_id: "call_1", vendor: "stripe", tool_class: "write_idempotent", intent: { amount, currency: "usd" } };
  if (withRequest) {
    c.request = { method: "POST", path: "/v1/payment_intents", content_type: "application/x-www-form-urlencoded", body: `amount=${amount}&currency=usd` };
  }
  return c;
}

/**
 * workItem is the message the relay publishes on RECON_WORK for row, built
 * from the row (the API offers no read of the stream): the event JSON with
 * status queued and its work object (ledger/work.go).
 */
function workItem(row: Row, intent: Record<string, unknown>): WorkItem {
  const item: WorkItem = {
    key: row.key,
    tenant: row.tenant,
    run_id: row.run_id,
    tool: row.tool,
    status: "queued",
    source: "runtime",
    at: row.first_seen_at,
    work: { vendor: row.vendor, tool_class: row.tool_class, metadata_local_id: row.metadata_local_id, intent, request: row.request ?? null },
  };
  if (row.tool_call_id) item.tool_call_id = row.tool_call_id;
  if (row.replay_window_until) item.work.replay_window_until = row.replay_window_until;
  if (row.traceparent) item.traceparent = row.traceparent;
  return item;
}

async function waitFor<T>(probe: () => Promise<T | undefined>, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) assert.fail("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function queuedRow(c: Client, cl: ClaimRequest): Promise<Row> {
  const err = await c.do(cl, () => assert.fail("called")).catch((e: unknown) => e);
  assert.ok(err instanceof QueuedError, String(err));
  return err.row;
}

describe("write autonomy against the real binary", { skip: SKIP }, () => {
  let rc: Reconciler;
  let c: Client;
  let approver: Client;
  before(async () => {
    // Tracing on (spans to the server's stdout, which nobody reads), so a
    // claim's traceparent header shows in the row it inserts.
    rc = await startReconciler([], { config: AUTONOMY_CONFIG, env: { OTEL_TRACES_EXPORTER: "console", OTEL_SERVICE_NAME: "reconciler-ts-test" } });
    c = rc.client();
    approver = new Client({ baseUrl: rc.url, token: APPROVER_TOKEN, ...fast });
    await c.putTool(APPROVAL_TOOL, entry("approval"));
    await c.putTool(OUTBOX_TOOL, entry("outbox"));
  });
  after(async () => {
    await rc?.stop();
  });

  /** awaitingKey is the key of cl once its claim awaits approval, and its approval's id from the approver's list. */
  async function openRequest(cl: ClaimRequest): Promise<{ key: string; id: string }> {
    return waitFor(async () => {
      const row = (await c.list({ run_id: cl.run_id })).rows.find((r) => r.approval);
      if (!row) return undefined;
      const view = (await approver.listApprovals()).approvals.find((v) => v.row.key === row.key);
      return view && { key: row.key, id: view.approval.id };
    });
  }

  test("the registry: put, an equal put, get, list, a mismatched claim, delete", async () => {
    const name = `ts.registry.${process.pid}`;
    const first = await c.putTool(name, entry("autonomous"));
    assert.deepEqual([first.created, first.changed, first.tool.version, first.tool.class], [true, true, 1, "write_idempotent"]);
    const again = await c.putTool(name, entry("autonomous"));
    assert.deepEqual([again.created, again.changed, again.tool.version], [false, false, 1], "an equal entry changes nothing");
    assert.equal((await c.putTool(name, entry("approval"))).tool.version, 2);
    assert.equal((await c.getTool(name)).autonomy, "approval");
    assert.ok((await c.listTools()).some((t) => t.name === name));
    const mismatched = { ...claim(name), vendor: "paypal" };
    await assert.rejects(c.do(mismatched, () => assert.fail("called")), (e: unknown) => e instanceof ToolMismatchError && e.status === 422);
    await c.deleteTool(name);
    await assert.rejects(c.getTool(name), NotFoundError);
    await assert.rejects(c.deleteTool(name), NotFoundError);
  });

  test("await_approval, granted while do() waits: exactly one call", async () => {
    const v = await startVendor();
    try {
      const cl = claim(APPROVAL_TOOL);
      const done = c.do(cl, chargeCall(v));
      done.catch(() => {});
      const { key, id } = await openRequest(cl);
      assert.equal(v.posts.length, 0, "nothing is called before the grant");
      await assert.rejects(c.approve(id, { actor: "self" }), ForbiddenError, "the token that made the claim cannot approve it");
      const view = await approver.approve(id, { actor: "alice", note: "ok" });
      assert.deepEqual([view.approval.state, view.approval.actor], ["granted", "alice"]);
      const out = await done;
      assert.deepEqual([out.decision, out.called, out.awaitedApproval, out.waited, out.key, out.row?.status], ["proceed", true, true, true, key, "succeeded"]);
      assert.deepEqual(v.posts.map((p) => p.key), [key], "one call, with the ledger's key");
      const again = await c.do(cl, () => assert.fail("called"));
      assert.deepEqual([again.decision, again.replayed, again.receiptId], ["replay", true, "pi_fake_1"]);
      // A resent approval (its first answer lost) is this call's success.
      assert.equal((await approver.approve(id, { actor: "alice", note: "ok" })).approval.state, "granted");
    } finally {
      await v.close();
    }
  });

  test("await_approval, denied: a StoppedError approval_denied and no call", async () => {
    const cl = claim(APPROVAL_TOOL, 2000);
    const done = c.do(cl, () => assert.fail("called")).catch((e: unknown) => e);
    const { id } = await openRequest(cl);
    await approver.deny(id, { actor: "bob", note: "too much" });
    const err = await done;
    assert.ok(err instanceof StoppedError, String(err));
    assert.deepEqual([err.code, err.row?.status, err.outcome?.called, err.outcome?.awaitedApproval], ["approval_denied", "failed_poison", false, true]);
    await assert.rejects(c.do(cl, () => assert.fail("called")), (e: unknown) => e instanceof StoppedError && e.code === "approval_denied");
  });

  test("await_approval, the signal aborts first: an UnsettledError, the request stays open", async () => {
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(), 400);
    const err = await c.do(claim(APPROVAL_TOOL, 3000), () => assert.fail("called"), { signal: ctl.signal }).catch((e: unknown) => e);
    assert.ok(err instanceof UnsettledError && !(err instanceof QueuedError), String(err));
    assert.equal(err.outcome?.awaitedApproval, true);
    const row = await c.get(err.key);
    assert.deepEqual([row.status, row.attempt, row.approval?.state], ["pending", 0, "requested"]);
  });

  test("queued: a QueuedError and no agent call; the worker calls once; waitQueued returns the replay", async () => {
    const v = await startVendor();
    try {
      const cl = claim(OUTBOX_TOOL);
      const err = await c.do(cl, () => assert.fail("called")).catch((e: unknown) => e);
      assert.ok(err instanceof QueuedError, String(err));
      assert.ok(err instanceof UnsettledError, "a queued key is not settled: park the run on it");
      assert.deepEqual([err.runId, err.row.attempt, err.row.autonomy, err.outcome?.called, err.outcome?.queued], [cl.run_id, 0, "outbox", false, true]);
      assert.equal(v.posts.length, 0, "the agent never calls an outbox tool");

      const waiting = c.do(cl, () => assert.fail("called"), { waitQueued: true });
      waiting.catch(() => {});
      const item = workItem(err.row, cl.intent);
      const seen: WorkItem[] = [];
      const charge = chargeCall(v);
      const worker = new Worker(rc.client(), { [OUTBOX_TOOL]: (ctx) => (seen.push(ctx.item), charge(ctx)) });
      // Two workers took the same item (a redelivery): one call. The other
      // start came while the call was in flight (a nak until the lease
      // ends) or after it settled (a replay, acked).
      const outs = await Promise.all([worker.handle(JSON.stringify(item)), worker.handle(new TextEncoder().encode(JSON.stringify(item)))]);
      outs.sort((a, b) => Number(a.status !== "done") - Number(b.status !== "done"));
      const [done, other] = outs;
      assert.deepEqual([done!.status, done!.ack], ["done", true], String(outs.map((o) => o.error)));
      assert.ok(
        (other!.status === "in_flight" && !other!.ack && other!.delayMs >= 1_000) || (other!.status === "settled" && other!.ack),
        `the other: ${other!.status} ack=${other!.ack} delayMs=${other!.delayMs}`,
      );
      assert.deepEqual([done!.decision, done!.outcome?.called, done!.row?.status], ["proceed", true, "succeeded"]);
      assert.deepEqual(v.posts.map((p) => [p.key, p.localId]), [[err.key, err.row.metadata_local_id]]);
      assert.deepEqual([seen[0]?.work.request?.body, seen[0]?.work.intent], [cl.request?.body, cl.intent]);

      const out = await waiting;
      assert.deepEqual([out.decision, out.replayed, out.called, out.queued, out.receiptId], ["replay", true, false, true, "pi_fake_1"]);
      const again = await worker.handle(item);
      assert.deepEqual([again.status, again.ack, again.decision], ["settled", true, "replay"]);
      assert.equal(v.objects(), 1);
    } finally {
      await v.close();
    }
  });

  test("waitQueued ends with a QueuedError when the signal aborts first", async () => {
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(), 300);
    const err = await c.do(claim(OUTBOX_TOOL, 4000), () => assert.fail("called"), { waitQueued: true, signal: ctl.signal }).catch((e: unknown) => e);
    assert.ok(err instanceof QueuedError, String(err));
  });

  test("an outbox claim without the request is a RequestRequiredError", async () => {
    await assert.rejects(c.do(claim(OUTBOX_TOOL, 1, false), () => assert.fail("called")), (e: unknown) => e instanceof RequestRequiredError && e.status === 422);
  });

  test("the worker skips what it must not call, and naks what it cannot start", async () => {
    const cl = claim(OUTBOX_TOOL, 5000);
    const item = workItem(await queuedRow(c, cl), cl.intent);
    const nobody = await new Worker(c).handle(item);
    assert.deepEqual([nobody.status, nobody.ack, nobody.decision], ["no_handler", false, ""]);
    assert.ok(nobody.delayMs > 0);
    assert.equal((await c.get(item.key)).attempt, 0, "a worker without the handler starts nothing");

    const autoClaim = claim("ts.autonomous.charge");
    const autonomous = await c.claim(autoClaim);
    const notQueued = await new Worker(c, { "ts.autonomous.charge": () => assert.fail("called") }).handle(workItem(autonomous.row!, autoClaim.intent));
    assert.deepEqual([notQueued.status, notQueued.ack], ["not_queued", true]);
    assert.ok(notQueued.error instanceof NotQueuedError);

    for (const bad of ["{not json", "", { key: "k" }, 42, "[]", "null"]) {
      const out = await new Worker(c).handle(bad);
      assert.deepEqual([out.status, out.ack, out.term], ["invalid", true, true]);
    }
  });

  test("the worker refuses foreign and forged items without calling the handler", async () => {
    const v = await startVendor();
    try {
      const cl = claim(OUTBOX_TOOL, 5100);
      const row = await queuedRow(c, cl);
      const item = workItem(row, cl.intent);
      const seen: WorkItem[] = [];
      const charge = chargeCall(v);
      const handler: WorkHandler = (call) => {
        seen.push(call.item);
        return charge(call);
      };
      const worker = new Worker(c, { [OUTBOX_TOOL]: handler }, { tenant: row.tenant });
      const cases: Array<[string, unknown, WorkStatus]> = [
        ["another tenant", { ...item, tenant: "globex" }, "foreign"],
        ["a key with no row", { ...item, key: `no-such-key-${Date.now()}` }, "foreign"],
        ["another request", { ...item, work: { ...item.work, request: { ...item.work.request!, body: "to=attacker@evil.example" } } }, "forged"],
        ["another tool call", { ...item, tool_call_id: "call_forged" }, "forged"],
        ["another local id", { ...item, work: { ...item.work, metadata_local_id: "rl_forged" } }, "forged"],
      ];
      for (const [name, forged, want] of cases) {
        const out = await worker.handle(JSON.stringify(forged));
        assert.deepEqual([out.status, out.ack, out.term], [want, true, true], name);
      }
      // Without the tenant option another tenant's item is still refused: its row is not the token's.
      const blind = await new Worker(c, { [OUTBOX_TOOL]: handler }).handle({ ...item, tenant: "globex" });
      assert.deepEqual([blind.status, blind.term], ["forged", true]);
      assert.deepEqual([seen.length, v.objects()], [0, 0], "no forged item reached the handler");
      assert.equal((await c.get(row.key)).attempt, 0, "no forged item took the row's lease");

      const done = await worker.handle(JSON.stringify(item));
      assert.deepEqual([done.status, done.ack, done.term], ["done", true, false], String(done.error));
      assert.deepEqual(seen.map((w) => w.work.request), [row.request], "the handler got the row's request");
    } finally {
      await v.close();
    }
  });

  test("a handler past callTimeoutMs is reported as a timeout: the row is unknown", async () => {
    const v = await startVendor("hang");
    try {
      const cl = claim(OUTBOX_TOOL, 6000);
      const item = workItem(await queuedRow(c, cl), cl.intent);
      const charge = chargeCall(v);
      const out = await new Worker(c, { [OUTBOX_TOOL]: charge }, { callTimeoutMs: 300 }).handle(item);
      assert.deepEqual([out.status, out.ack, out.outcome?.kind, out.row?.status], ["done", true, "timeout", "unknown"]);
      assert.ok(out.error instanceof UnsettledError);
      assert.equal(v.objects(), 1, "the vendor committed; the ledger knows it may have");
    } finally {
      await v.close();
    }
  });

  test("a start whose answer was lost: the worker naks until the lease ends and calls nothing", async () => {
    // The worker's first start was granted (attempt 1, the lease) but its
    // answer lost; the client's resend answers wait at attempt 1. An ack
    // would make no call at all: the worker naks until the lease ends,
    // after which start answers retry_same_key.
    const cl = claim(OUTBOX_TOOL, 7000);
    const item = workItem(await queuedRow(c, cl), cl.intent);
    const granted = await c.start(item.key);
    assert.deepEqual([granted.decision, granted.row?.attempt], ["proceed", 1]);
    const left = Date.parse(granted.row!.pending_until!) - Date.now();
    assert.ok(left > 60_000, `the server's lease (15 min by default): ${left} ms`);
    let calls = 0;
    for (const [name, maxDelayMs, want] of [["the lease's remainder", 3_600_000, left], ["capped at maxDelayMs", 30_000, 30_000]] as const) {
      const out = await new Worker(c, { [OUTBOX_TOOL]: () => (calls++, assert.fail("called")) }, { maxDelayMs }).handle(item);
      assert.deepEqual([out.status, out.ack, out.decision], ["in_flight", false, "wait"], `${name}: ${String(out.error)}`);
      assert.ok(Math.abs(out.delayMs - want) <= 5_000, `${name}: delay ${out.delayMs} ms, want about ${want} ms`);
    }
    assert.equal(calls, 0, "nothing is called while the lease runs");
    const row = await c.get(item.key);
    assert.deepEqual([row.status, row.attempt], ["pending", 1]);
  });

  test("a vendor 429: the worker naks, and the item's next start calls again with the same key", async () => {
    const v = await startVendor("429");
    try {
      const cl = claim(OUTBOX_TOOL, 8000);
      const item = workItem(await queuedRow(c, cl), cl.intent);
      const keys: string[] = [];
      const charge = chargeCall(v);
      const worker = new Worker(c, { [OUTBOX_TOOL]: (ctx) => (keys.push(ctx.key), charge(ctx)) }, { nakDelayMs: 7_000 });
      const first = await worker.handle(item);
      assert.deepEqual([first.status, first.ack, first.decision, first.row?.status, first.outcome?.result?.httpStatus, first.delayMs], ["done", false, "proceed", "pending", 429, 7_000]);
      assert.ok(first.error instanceof UnsettledError, String(first.error));

      // The item comes back: the lease ended with the 429, so start answers
      // retry_same_key and the worker calls with the same key.
      const again = await worker.handle(item);
      assert.deepEqual([again.status, again.ack, again.decision, again.row?.status], ["done", true, "retry_same_key", "succeeded"], String(again.error));
      assert.deepEqual(keys, [item.key, item.key]);
      assert.equal(v.objects(), 1);
    } finally {
      await v.close();
    }
  });

  test("traceparent: the client's, a function's, a do()'s; an invalid one is not sent", async () => {
    const tp = `00-${"ab".repeat(16)}-${"cd".repeat(8)}-01`;
    const proxy = await serve((req, body) => forward(rc.url, req, body));
    const v = await startVendor();
    try {
      const mk = (traceparent?: string | (() => string)) => new Client({ baseUrl: proxy.url, token: TOKEN, ...fast, ...(traceparent !== undefined && { traceparent }) });
      const cases: [string, Client, string | undefined, string | undefined][] = [
        ["a client's value", mk(tp), undefined, tp],
        ["a client's function", mk(() => tp), undefined, tp],
        ["a do()'s value wins", mk(`00-${"11".repeat(16)}-${"22".repeat(8)}-01`), tp, tp],
        ["upper-case hex is not sent", mk(`00-${"AB".repeat(16)}-${"cd".repeat(8)}-01`), undefined, undefined],
        ["an all-zero trace id is not sent", mk(`00-${"0".repeat(32)}-${"cd".repeat(8)}-01`), undefined, undefined],
        ["a function that throws sends none", mk(() => { throw new Error("no span"); }), undefined, undefined],
        ["none", mk(), undefined, undefined],
      ];
      let amount = 100;
      for (const [name, client, perCall, want] of cases) {
        const before = proxy.requests.length;
        const out = await client.do(claim("ts.traced", amount++), chargeCall(v), perCall ? { traceparent: perCall } : {});
        const sent = proxy.requests.slice(before);
        assert.ok(sent.length >= 2, `${name}: a claim and a report`);
        assert.deepEqual(sent.map((r) => r.headers["traceparent"]), sent.map(() => want), name);
        if (want) {
          // The server's claim span is a child of ours: the row keeps its trace.
          assert.equal((await c.get(out.key)).traceparent?.split("-")[1], want.split("-")[1], name);
        }
      }
    } finally {
      await proxy.close();
      await v.close();
    }
  });
});

describe("write autonomy against a fake API", () => {
  const ROW = { tenant: "default", key: "k1", metadata_local_id: "rl_1", run_id: "r", tool: "t", vendor: "stripe", tool_class: "write_idempotent", status: "pending", attempt: 1 };
  const ITEM = { key: "k1", tenant: "default", run_id: "r", tool: "t", status: "queued", work: { vendor: "stripe", tool_class: "write_idempotent", metadata_local_id: "rl_1", intent: {}, request: null } };
  // A Worker reads the item's row (GET) before it starts the key: the fake answers it with ITEM's row.
  const withRow = (answer: Answer) => (req: IncomingMessage) => (req.method === "GET" ? json(200, { row: { ...ROW, attempt: 0 } }) : answer);
  const apiError = (status: number, code: string) => json(status, { error: { code, message: "m" } });

  test("an approval that expires while do() waits: a StoppedError approval_expired", async () => {
    let n = 0;
    const api = await serve(() => {
      n++;
      if (n === 1) return json(202, { decision: "await_approval", row: { ...ROW, attempt: 0 } });
      if (n === 2) return json(409, { decision: "wait", row: { ...ROW, attempt: 0 } });
      return json(200, { decision: "stop", code: "approval_expired", row: { ...ROW, attempt: 0, status: "failed_poison" } });
    });
    try {
      const err = await new Client({ baseUrl: api.url, token: "tok", pollIntervalMs: 10 }).do(claim("t"), () => assert.fail("called")).catch((e: unknown) => e);
      assert.ok(err instanceof StoppedError, String(err));
      assert.deepEqual([err.code, err.outcome?.awaitedApproval, err.outcome?.called], ["approval_expired", true, false]);
    } finally {
      await api.close();
    }
  });

  test("the same await_approval or queued answered at once is paced by pollIntervalMs", async () => {
    for (const [d, waitQueued, cls] of [["await_approval", false, UnsettledError], ["queued", true, QueuedError]] as const) {
      const api = await serve(() => json(202, { decision: d, row: { ...ROW, attempt: 0 } }));
      try {
        const ctl = new AbortController();
        setTimeout(() => ctl.abort(), 650);
        const c = new Client({ baseUrl: api.url, token: "tok", pollIntervalMs: 100, retries: 0 });
        const err = await c.do(claim("t"), () => assert.fail("called"), { signal: ctl.signal, waitQueued }).catch((e: unknown) => e);
        assert.ok(err instanceof cls, `${d}: ${String(err)}`);
        assert.ok(api.requests.length >= 4 && api.requests.length <= 9, `${d}: ${api.requests.length} requests in 650 ms`);
      } finally {
        await api.close();
      }
    }
  });

  test("queued without waitQueued: one claim; queued without a row: InvalidResponseError", async () => {
    const api = await serve(() => json(202, { decision: "queued", row: { ...ROW, attempt: 0 } }));
    const bare = await serve(() => json(202, { decision: "queued", row: null }));
    try {
      const err = await new Client({ baseUrl: api.url, token: "tok" }).do(claim("t"), () => assert.fail("called")).catch((e: unknown) => e);
      assert.ok(err instanceof QueuedError, String(err));
      assert.deepEqual([err.key, err.runId, api.requests.length], ["k1", "r", 1]);
      await assert.rejects(new Client({ baseUrl: bare.url, token: "tok" }).do(claim("t"), () => assert.fail("called")), InvalidResponseError);
    } finally {
      await api.close();
      await bare.close();
    }
  });

  test("start's typed errors, and what the worker makes of them", async () => {
    const refused = await serve(() => json(200, {}));
    const refusedUrl = refused.url;
    await refused.close(); // nobody listens there now
    const cases = [
      ["a 2xx that is not JSON", { status: 200, body: "<html>hi</html>" }, InvalidResponseError, "retry", false],
      ["a 503", apiError(503, "unavailable"), UnavailableError, "retry", false],
      ["connection refused", undefined, NetworkError, "retry", false],
      ["not queued", apiError(409, "not_queued"), NotQueuedError, "not_queued", true],
      ["no row", apiError(404, "not_found"), NotFoundError, "refused", false],
    ] as const;
    for (const [name, answer, cls, status, ack] of cases) {
      const api = answer === undefined ? undefined : await serve(withRow(answer));
      try {
        const client = new Client({ baseUrl: api?.url ?? refusedUrl, token: "tok", retries: 1, backoffMs: 5 });
        await assert.rejects(client.start("k1"), cls, name);
        const out = await new Worker(client, { t: () => assert.fail("called") }).handle(ITEM);
        assert.deepEqual([out.status, out.ack, out.key], [status, ack, "k1"], name);
        assert.ok(out.error instanceof cls, name);
      } finally {
        await api?.close();
      }
    }
  });

  test("the worker on a frozen tool, an attempt in flight, a settled key, a decision it does not know", async () => {
    // A lease ending ms from now, as the server writes it (nanoseconds).
    const lease = (ms: number) => new Date(Date.now() + ms).toISOString().replace("Z", "123456Z");
    const wait = (pending_until?: string) => json(409, { decision: "wait", row: pending_until === undefined ? ROW : { ...ROW, pending_until } });
    const cases = [
      // name, start's answer, want status, want ack, want delay range (ms)
      ["frozen: wait at attempt 0", json(409, { decision: "wait", row: { ...ROW, attempt: 0 } }), "frozen", false, [7_000, 7_000]],
      ["in flight: wait at attempt 1, the lease's remainder", wait(lease(10_000)), "in_flight", false, [8_000, 11_000]],
      ["in flight: a long lease, capped at maxDelayMs", wait(lease(3_600_000)), "in_flight", false, [30_000, 30_000]],
      // Made when its case runs: the cases before it take their time.
      ["in flight: a lease about to end, at least 1 s", () => wait(lease(200)), "in_flight", false, [1_000, 1_000]],
      ["the resolver's: wait at attempt 1, the lease over", wait(lease(-5_000)), "resolver", true, [0, 0]],
      ["the resolver's: wait at attempt 1 without a lease", wait(), "resolver", true, [0, 0]],
      ["settled", json(200, { decision: "replay", row: { ...ROW, status: "succeeded" } }), "settled", true, [0, 0]],
      ["unknown decision", json(200, { decision: "later", row: ROW }), "retry", false, [7_000, 7_000]],
    ] as const;
    for (const [name, answer, status, ack, [lo, hi]] of cases) {
      const api = await serve(withRow(typeof answer === "function" ? answer() : answer));
      try {
        const out = await new Worker(new Client({ baseUrl: api.url, token: "tok" }), { t: () => assert.fail("called") }, { nakDelayMs: 7_000 }).handle(ITEM);
        assert.deepEqual([out.status, out.ack], [status, ack], name);
        assert.ok(out.delayMs >= lo && out.delayMs <= hi, `${name}: delay ${out.delayMs} ms, want [${lo}, ${hi}]`);
      } finally {
        await api.close();
      }
    }
  });

  test("the registry's and the approvals' answers", async () => {
    const empty = await serve(() => ({ status: 204 }));
    try {
      const c = new Client({ baseUrl: empty.url, token: "tok" });
      assert.equal(await c.deleteTool("t"), undefined);
      await assert.rejects(c.getTool("t"), InvalidResponseError, "a GET's empty answer is not a tool");
      await assert.rejects(c.getTool(".."), TypeError);
    } finally {
      await empty.close();
    }
    for (const [code, cls] of [["tool_mismatch", ToolMismatchError], ["unregistered_tool", UnregisteredToolError], ["request_required", RequestRequiredError]] as const) {
      const api = await serve(() => apiError(422, code));
      try {
        await assert.rejects(new Client({ baseUrl: api.url, token: "tok" }).claim(claim("t")), cls);
      } finally {
        await api.close();
      }
    }
    const view = { approval: { id: "ap_1", state: "granted", reason: "x", requested_at: "t", expires_at: "t", actor: "carol" }, row: ROW };
    let n = 0;
    const decided = await serve(() => (++n === 1 ? apiError(409, "approval_decided") : json(200, view)));
    const expired = await serve(() => apiError(409, "approval_expired"));
    try {
      await assert.rejects(new Client({ baseUrl: decided.url, token: "tok" }).approve("ap_1", { actor: "alice" }), ApprovalDecidedError, "decided by someone else");
      await assert.rejects(new Client({ baseUrl: expired.url, token: "tok" }).deny("ap_1", { actor: "alice", note: "no" }), ApprovalExpiredError);
    } finally {
      await decided.close();
      await expired.close();
    }
  });

  test("validTraceparent", () => {
    const ok = `00-${"ab".repeat(16)}-${"cd".repeat(8)}-01`;
    assert.equal(validTraceparent(ok), true);
    assert.equal(validTraceparent(`01-${"ab".repeat(16)}-${"cd".repeat(8)}-01-future`), true, "a later version may add fields");
    for (const bad of [`${ok}-x`, `ff${ok.slice(2)}`, ok.toUpperCase(), ok.slice(0, 54), "", undefined, 7]) {
      assert.equal(validTraceparent(bad), false, String(bad));
    }
  });
});
