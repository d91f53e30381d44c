// GuardedTool, the framework-free core of the adapters: the schema the model
// sees, the claim it makes, and the words of every answer — against the real
// binary and the fake vendors, and, for the answers no fake makes happen (a
// frozen tool, a denial), from do()'s own errors.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Client,
  GuardedTool,
  type GuardAnswer,
  type GuardCall,
  type Row,
  StoppedError,
  type ToolEntry,
  type ToolView,
  UnavailableError,
  UnknownDecisionError,
  answerError,
  modelSchema,
  modelToolName,
  resultFromResponse,
} from "@reconciler/client";
import { z } from "zod";
import { type FakeVendor, startVendor } from "./fakevendor.js";
import { APPROVER_TOKEN, AUTONOMY_CONFIG, type Reconciler, SKIP, fast, freePort, json, serve, startReconciler } from "./harness.js";

const CHARGE: ToolView = {
  name: "stripe.payment_intents.create",
  vendor: "stripe",
  class: "write_idempotent",
  intent_fields: ["amount", "currency", "customer"],
  key_placement: { header: "Idempotency-Key" },
};

type ChargeArgs = { amount: number; currency: string; customer: string; note?: string };

/** charge is the developer's call: the key in the header the registry names, as the vendor takes it. */
function charge(v: FakeVendor, seen: { args: unknown[]; keys: string[] }): GuardCall<ChargeArgs> {
  return async (args, { vendorKey, localId, signal }) => {
    seen.args.push(args);
    seen.keys.push(vendorKey);
    const resp = await fetch(`${v.url}/v1/payment_intents`, {
      method: "POST",
      headers: { "Idempotency-Key": vendorKey, "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ amount: String(args.amount), currency: args.currency, "metadata[metadata_local_id]": localId }),
      signal,
    });
    const body = (await resp.json().catch(() => ({}))) as { id?: string; error?: { payment_intent?: { id?: string } } };
    return resultFromResponse(resp, body.id ?? body.error?.payment_intent?.id);
  };
}

let runs = 0;
const runId = () => `run_ts_guard_${process.pid}_${++runs}`;
const ARGS = { amount: 1050, currency: "usd", customer: "cus_123" };

describe("GuardedTool without a server", () => {
  test("the schema the model sees: no key-like property at any depth, nor the key placement's field", () => {
    const g = new GuardedTool({ client: new Client({ baseUrl: "http://127.0.0.1:1", token: "t" }), runId: "r", tool: { ...CHARGE, key_placement: { body_field: "client_ref" } }, call: () => ({}) });
    const shown = modelSchema(g, {
      type: "object",
      properties: {
        amount: { type: "integer" },
        client_ref: { type: "string" },
        "Idempotency-Key": { type: "string" },
        meta: { type: "object", properties: { request_id: { type: "string" }, why: { type: "string" } }, required: ["request_id"], additionalProperties: false },
      },
      required: ["amount", "client_ref"],
      additionalProperties: false,
    });
    assert.deepEqual(shown, {
      type: "object",
      properties: { amount: { type: "integer" }, meta: { type: "object", properties: { why: { type: "string" } }, required: [] } },
      required: ["amount"],
    });
    // A strict tool keeps additionalProperties false: a strict model sends only what is listed.
    const strict = modelSchema(g, { type: "object", properties: { a: { type: "string" }, idempotency_key: { type: "string" } }, required: ["a", "idempotency_key"], additionalProperties: false }, { strict: true });
    assert.deepEqual(strict, { type: "object", properties: { a: { type: "string" } }, required: ["a"], additionalProperties: false });
    // An object with nothing key-like is left as it was.
    const plain = { type: "object", properties: { a: { type: "string" } }, additionalProperties: false };
    assert.deepEqual(modelSchema(g, plain), plain);
  });

  test("a zod object loses its key-like properties; zod then drops one the model sends anyway", () => {
    const g = new GuardedTool({ client: new Client({ baseUrl: "http://127.0.0.1:1", token: "t" }), runId: "r", tool: CHARGE, call: () => ({}) });
    const shown = modelSchema(g, z.object({ amount: z.number(), idempotencyKey: z.string(), message_id: z.string().optional() }));
    assert.deepEqual(Object.keys(shown.shape), ["amount"]);
    assert.deepEqual(shown.parse({ amount: 1, idempotencyKey: "model" }), { amount: 1 });
    assert.throws(() => modelSchema(g, "not a schema"), /zod object or a JSON Schema object/);
  });

  test("bad tool views are refused when the tool is made, not when the model calls it", () => {
    const client = new Client({ baseUrl: "http://127.0.0.1:1", token: "t" });
    const make = (tool: Partial<ToolView>) => () => new GuardedTool({ client, runId: "r", tool: { ...CHARGE, ...tool } as ToolView, call: () => ({}) });
    assert.throws(make({ class: "read" }), /a read tool changes nothing/);
    assert.throws(make({ class: "write" as never }), /want write_idempotent/);
    assert.throws(make({ name: "" }), /tool.name is required/);
    assert.throws(make({ vendor: "" }), /tool.vendor is required/);
    assert.throws(make({ intent_fields: ["amount", "idempotency_key"] }), /intent field "idempotency_key" is key-like/);
    assert.throws(make({ intent_fields: ["to", "client_ref"], key_placement: { external_id_field: "client_ref" } }), /"client_ref" is key-like/);
  });

  test("the intent is the intent fields of the scrubbed arguments, or every scrubbed argument", () => {
    const client = new Client({ baseUrl: "http://127.0.0.1:1", token: "t" });
    const g = new GuardedTool({ client, runId: "r", tool: CHARGE, call: () => ({}) });
    assert.deepEqual(g.intent({ ...ARGS, note: "now", requested_at: "2026-01-01T00:00:00Z" }), ARGS);
    assert.deepEqual(g.intent({ amount: 5 }), { amount: 5 }, "a missing field is left out");
    const all = new GuardedTool({ client, runId: "r", tool: { ...CHARGE, intent_fields: undefined }, call: () => ({}) });
    assert.deepEqual(all.intent({ a: 1, b: 2 }), { a: 1, b: 2 });
    assert.equal(modelToolName("email.send"), "email_send");
    assert.equal(modelToolName("a/b c"), "a_b_c");
  });

  test("what the model is told for each stop, and for a decision this client does not know", () => {
    const row = { key: "k1", status: "failed_poison", last_http_status: 422 } as Row;
    const cases: [unknown, string][] = [
      [new StoppedError("failed_poison", "k1", row), "validation_failed: the vendor refused this request (HTTP 422); it will be refused again if retried unchanged — do not retry it."],
      [new StoppedError("failed_poison", "k1", { ...row, last_http_status: 402 }), "refused: the vendor refused this request (HTTP 402)"],
      [new StoppedError("tool_frozen", "", null), "frozen: an operator has switched email.send off; nothing was sent — do not retry."],
      [new StoppedError("approval_denied", "k1", row), "denied: a person denied this email.send call (key k1); nothing was sent — do not retry it."],
      [new StoppedError("approval_expired", "k1", row), "expired: nobody approved this email.send call in time (key k1); nothing was sent — do not retry it."],
      [new UnknownDecisionError("teleport", "k1"), 'error: the ledger answered "teleport", which this client does not know; nothing was sent — do not retry.'],
      [new UnavailableError(503, "unavailable", "down"), "error: the ledger is unavailable (unavailable); nothing was sent — try the same call again later."],
    ];
    for (const [err, want] of cases) {
      const a: GuardAnswer = answerError("email.send", err);
      assert.ok(a.text.startsWith(want), `${String(err)}: ${a.text}`);
      assert.equal(a.error, err);
    }
    // A programming error is the program's, not the model's.
    assert.throws(() => answerError("email.send", new TypeError("boom")), TypeError);
  });
});

describe("GuardedTool with a server that derives a vendor key", () => {
  test("row.vendor_key, when the claim answer has one, is the key placed and sent; the ledger key stays the row's", async () => {
    // A server with vendor profiles (a vendor whose keys are shorter than
    // the ledger's) answers every row with vendor_key.
    const key = "a".repeat(64);
    const row = (status: string) => ({ key, status, attempt: 1, metadata_local_id: "rl_0123", vendor_key: "vk_45chars_for_square" });
    const api = await serve((req) => (req.url?.endsWith("/outcome") ? json(200, { row: row("succeeded") }) : json(201, { decision: "proceed", row: row("pending") })));
    try {
      const seen: { args: unknown; ctx: unknown }[] = [];
      const g = new GuardedTool<{ amount: number; idempotency_key?: string }>({
        client: new Client({ baseUrl: api.url, token: "tok_test", retries: 0 }),
        runId: "run_1",
        tool: { ...CHARGE, vendor: "square", key_placement: { body_field: "idempotency_key" } },
        call: (args, ctx) => {
          seen.push({ args, ctx: { key: ctx.key, vendorKey: ctx.vendorKey, localId: ctx.localId } });
          return { httpStatus: 200, receiptId: "pay_1" };
        },
      });
      const a = await g.run({ amount: 100, idempotency_key: "model-1" });
      assert.equal(a.status, "done", a.text);
      assert.deepEqual(seen, [{ args: { amount: 100, idempotency_key: "vk_45chars_for_square" }, ctx: { key, vendorKey: "vk_45chars_for_square", localId: "rl_0123" } }]);
      const claim = JSON.parse(api.requests[0]!.body) as { intent: unknown; vendor: string };
      assert.deepEqual(claim.intent, { amount: 100 }, "neither key is in the intent");
    } finally {
      await api.close();
    }
  });
});

describe("GuardedTool against the real binary", { skip: SKIP }, () => {
  let rc: Reconciler;
  let approver: Client;
  before(async () => {
    rc = await startReconciler([], { config: AUTONOMY_CONFIG });
    approver = new Client({ baseUrl: rc.url, token: APPROVER_TOKEN, ...fast });
  });
  after(async () => {
    await rc?.stop();
  });

  const guard = (v: FakeVendor, seen = { args: [] as unknown[], keys: [] as string[] }, client = rc.client({ callTimeoutMs: 10_000 }), tool = CHARGE, id = runId()) =>
    new GuardedTool<ChargeArgs>({ client, runId: id, tool, call: charge(v, seen) });

  test("the key goes in the header from vendorKey; the model's key and the other fields never reach the intent", async () => {
    const v = await startVendor();
    try {
      const seen = { args: [] as unknown[], keys: [] as string[] };
      const g = guard(v, seen);
      const a = await g.run({ ...ARGS, note: "first", idempotency_key: "model-1" }, { toolCallId: "call_1" });
      assert.equal(a.status, "done", a.text);
      assert.equal(a.text, "done: stripe.payment_intents.create succeeded (receipt pi_fake_1).");
      const b = await g.run({ ...ARGS, note: "second", idempotency_key: "model-2" }, { toolCallId: "call_2" });
      assert.equal(b.status, "already_done", b.text);
      assert.equal(v.posts.length, 1);
      assert.equal(v.posts[0]!.key, a.outcome!.key, "the ledger's key (no vendor_key: the key itself)");
      assert.deepEqual(seen.args, [{ ...ARGS, note: "first" }], "the call got the scrubbed arguments, no key among them");
      assert.deepEqual((await rc.client().get(a.outcome!.key)).tool_call_id, "call_1");
    } finally {
      await v.close();
    }
  });

  test("a refusal, a lost connection, a vendor 5xx and a key in flight elsewhere, in words", async () => {
    const v = await startVendor("decline", "reset", "500");
    try {
      const refused = await guard(v).run(ARGS);
      assert.equal(refused.status, "refused");
      assert.match(refused.text, /^refused: the vendor refused this request \(HTTP 402\); .* — do not retry it\./);
      const reset = await guard(v).run(ARGS);
      assert.equal(reset.status, "network_error");
      assert.match(reset.text, /^network_error: outcome unknown — do not retry with new arguments\. /);
      const failed = await guard(v).run(ARGS);
      assert.equal(failed.status, "vendor_error");
      assert.match(failed.text, /^vendor_error: the vendor answered HTTP 500; outcome unknown — do not retry with new arguments\./);

      // Another runtime holds the key's lease: the guard waits up to its timeoutMs, then says so.
      const id = runId();
      const held = await rc.client().claim({ run_id: id, tool: CHARGE.name, vendor: "stripe", tool_class: "write_idempotent", intent: ARGS });
      assert.equal(held.decision, "proceed");
      const g = new GuardedTool<ChargeArgs>({ client: rc.client(), runId: id, tool: CHARGE, call: () => assert.fail("called"), timeoutMs: 2_000 });
      const busy = await g.run(ARGS);
      assert.equal(busy.status, "in_progress", busy.text);
      assert.match(busy.text, /^in_progress: the same stripe\.payment_intents\.create call is in flight or its outcome is not known yet \(status pending\)/);
      for (const a of [refused, reset, failed, busy]) assert.doesNotMatch(a.text, /\n\s+at |Error:/, "no stack trace, no error class");
    } finally {
      await v.close();
    }
  });

  test("an approval tool answers at once that it waits for a person; once approved the same call goes through", async () => {
    const v = await startVendor();
    try {
      const c = rc.client();
      const entry: ToolEntry = {
        vendor: "stripe",
        class: "write_idempotent",
        side_effect: "charge",
        key_placement: { header: "Idempotency-Key" },
        intent_fields: ["amount", "currency", "customer"],
        autonomy: "approval",
      };
      await c.putTool("ts.guard.approval.charge", entry);
      const tool = await c.getTool("ts.guard.approval.charge");
      const id = runId();
      const g = guard(v, undefined, c, tool, id);
      const start = Date.now();
      const first = await g.run(ARGS);
      assert.equal(first.status, "awaiting_approval", first.text);
      assert.match(first.text, /^awaiting_approval: this ts\.guard\.approval\.charge call waits for a person to approve it \(key [0-9a-f]{64}\); nothing was sent yet\./);
      assert.ok(Date.now() - start < 10_000, "it did not wait for the person (the tool would wait timeoutMs, 30 s)");
      assert.equal(v.posts.length, 0);
      const again = await g.run({ ...ARGS, idempotency_key: "model-9" });
      assert.equal(again.status, "awaiting_approval", again.text);
      assert.ok(Date.now() - start < 10_000, "a second call does not wait for the person either");
      const view = (await approver.listApprovals()).approvals.find((a) => a.row.key === first.outcome!.key);
      assert.ok(view, "the approval request is listed");
      await approver.approve(view.approval.id, { actor: "alice", note: "ok" });
      const done = await g.run(ARGS);
      assert.equal(done.status, "done", done.text);
      assert.equal(v.posts.length, 1);
    } finally {
      await v.close();
    }
  });

  test("an outbox tool answers that the write is queued; calling again does not queue it twice", async () => {
    const v = await startVendor();
    try {
      const c = rc.client();
      await c.putTool("ts.guard.outbox.charge", {
        vendor: "stripe",
        class: "write_idempotent",
        side_effect: "charge",
        key_placement: { header: "Idempotency-Key" },
        intent_fields: ["amount", "currency", "customer"],
        autonomy: "outbox",
        checklist: {
          side_effect_documented: true,
          key_born_in_runtime: true,
          ledger_or_unique_field: true,
          timeout_leaves_unknown: true,
          error_classes_mapped: true,
          duplicate_delivery_test: true,
          checked_by: "ts-tests",
        },
      });
      const tool = await c.getTool("ts.guard.outbox.charge");
      const g = new GuardedTool<ChargeArgs>({
        client: c,
        runId: runId(),
        tool,
        call: () => assert.fail("the agent never calls an outbox tool"),
        request: (a) => ({ method: "POST", path: "/v1/payment_intents", content_type: "application/x-www-form-urlencoded", body: `amount=${a.amount}&currency=${a.currency}` }),
      });
      const a = await g.run(ARGS);
      assert.equal(a.status, "queued", a.text);
      assert.match(a.text, /^queued: this ts\.guard\.outbox\.charge call is queued for the outbox worker \(key [0-9a-f]{64}\)/);
      const b = await g.run({ ...ARGS, idempotency_key: "model-2" });
      assert.equal(b.status, "queued");
      assert.equal(b.outcome?.key, a.outcome?.key);
      assert.equal(v.posts.length, 0);
    } finally {
      await v.close();
    }
  });

  test("a ledger that cannot be reached: nothing is sent, and the model is told so", async () => {
    const port = await freePort();
    const g = new GuardedTool<ChargeArgs>({
      client: new Client({ baseUrl: `http://127.0.0.1:${port}`, token: "tok", retries: 1, backoffMs: 5 }),
      runId: runId(),
      tool: CHARGE,
      call: () => assert.fail("called"),
    });
    const a = await g.run(ARGS);
    assert.equal(a.status, "error");
    assert.match(a.text, /^error: the ledger could not be reached \(NetworkError\); nothing was sent — try the same call again later\.$/);
    const bad = await g.run("not an object");
    assert.equal(bad.status, "validation_failed");
    assert.match(bad.text, /^validation_failed: the arguments must be a JSON object; nothing was sent/);
  });
});
