// The double-email story every framework's guarded tool is tested with
// (issue 28, the seed's incident): an agent's email.send times out after
// the email API sent the message; the model re-emits the call with a new
// idempotency_key of its own invention and a changed requested_at; then
// the run is resumed from scratch with the same run id. One email, one key
// (the ledger's, never the model's), and the resumed run reads the stored
// receipt without a call — or the story's assertions fail, which is what
// they do with the guard's scrubbing turned off (the negative control).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { type Client, type GuardCall, type ToolEntry, type ToolView, resultFromResponse } from "@reconciler/client";
import { TENANT, TOKEN, ADMIN_TOKEN, type Reconciler } from "./harness.js";
import { type Mailer, startMailer } from "./mailer.js";

/**
 * mailerConfig gives an email vendor a replay window (a Standard Webhooks
 * sender's), so an unknown email is retried with its key.
 */
export const mailerConfig = (vendor: string) => `tenants:
  - id: ${TENANT}
    tokens: ["${TOKEN}"]
admin_tokens: ["${ADMIN_TOKEN}"]
standard:
  endpoints:
    - name: ${vendor}
      tenant: ${TENANT}
      secrets: ["whsec_${Buffer.from("mailer-webhook-secret-0123456789").toString("base64")}"]
      local_id_path: data.metadata_local_id
      vendor: ${vendor}
      replay_window: 24h
`;

/** MAILER_CONFIG is the config of the story's vendor, "mailer". */
export const MAILER_CONFIG = mailerConfig("mailer");

/** EMAIL_TOOL is the registry entry of email.send: the message is the intent, the key goes in the body. */
export const EMAIL_TOOL: ToolEntry = {
  vendor: "mailer",
  class: "write_idempotent",
  side_effect: "email",
  key_placement: { body_field: "idempotency_key" },
  intent_fields: ["to", "subject", "text"],
  autonomy: "autonomous",
  checklist: {
    side_effect_documented: true,
    key_born_in_runtime: true,
    ledger_or_unique_field: true,
    timeout_leaves_unknown: true,
    error_classes_mapped: true,
    duplicate_delivery_test: true,
    checked_by: "tests@example.com",
  },
};

/** EMAIL_SCHEMA is the tool's input as its author wrote it: with a key field and a timestamp, as models like them. */
export const EMAIL_SCHEMA = {
  type: "object",
  properties: {
    to: { type: "string" },
    subject: { type: "string" },
    text: { type: "string" },
    requested_at: { type: "string", description: "when the user asked (ISO 8601)" },
    idempotency_key: { type: "string", description: "a unique id for this email" },
  },
  required: ["to", "subject", "text", "requested_at", "idempotency_key"],
  additionalProperties: false,
} as const;

export type EmailArgs = { to: string; subject: string; text: string; requested_at?: string; idempotency_key?: string };

/** sendEmail is the developer's call: the vendor's fields of the arguments, the key the guard put in them. */
export function sendEmail(mailer: Mailer): GuardCall<EmailArgs> {
  return async ({ to, subject, text, idempotency_key }, { localId, signal }) => {
    const resp = await fetch(`${mailer.url}/emails`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ from: "ops@example.com", to, subject, text, idempotency_key, metadata_local_id: localId }),
      signal,
    });
    const body = (await resp.json().catch(() => ({}))) as { id?: string };
    return { ...resultFromResponse(resp, body.id), output: { id: body.id } };
  };
}

/** ModelStep is what the scripted model does next: call the tool, or answer. */
export type ModelStep = { call: EmailArgs; id: string } | { text: string };

/**
 * EmailModel is the model of the incident: asked to email Bob, it calls
 * email_send with an idempotency_key and requested_at of its own; told the
 * outcome is unknown, it re-emits the call anyway — a new key, a new
 * timestamp — as models do; told it is done, it answers.
 */
export class EmailModel {
  /** keys are the idempotency_keys the model invented, in order. */
  readonly keys: string[] = [];
  #n = 0;

  next(results: readonly string[]): ModelStep {
    const last = results.at(-1);
    if (last !== undefined && !/^(timeout|network_error|vendor_error|in_progress)/.test(last)) return { text: `Done: ${last.split("\n")[0]}` };
    if (results.length >= 3) return { text: "I could not send it." };
    const key = `model-${randomUUID()}`;
    this.keys.push(key);
    return {
      id: `call_${++this.#n}_${key.slice(6, 14)}`,
      call: {
        to: "bob@example.com",
        subject: "Your refund",
        text: "Your refund of $10.50 is on its way.",
        requested_at: new Date(Date.now() + this.#n * 1000).toISOString(),
        idempotency_key: key,
      },
    };
  }
}

/** RunSpec is one agent run for a framework driver: the guard's options and the scripted model. */
export interface RunSpec {
  client: Client;
  /** mailer is the email API the run's tool sends to. */
  mailer: Mailer;
  runId: string;
  tool: ToolView;
  call: GuardCall<EmailArgs>;
  scrub: boolean;
  model: EmailModel;
}

/** RunResult is what the model read: the tool results in order, and the tool schemas it was shown. */
export interface RunResult {
  results: string[];
  schemas: unknown[];
}

/** Driver runs one agent run, from scratch, through a framework's real package. */
export interface Driver {
  name: string;
  run(spec: RunSpec): Promise<RunResult>;
}

let stories = 0;

/**
 * emailStory runs the story through driver against the real binary and
 * asserts its outcome; it throws an AssertionError when the guard let the
 * model's key through (the negative control expects exactly that).
 */
export async function emailStory(rc: Reconciler, driver: Driver, opts: { scrub: boolean }): Promise<void> {
  // The email API answers the first send 5 s late; the client gives up after
  // 1.5 s (wide margins: a loaded machine must not turn the replay's answer
  // into a second timeout).
  const mailer = await startMailer({ lateMs: 5_000 }, "late");
  try {
    const client = rc.client({ callTimeoutMs: 1_500 });
    const tool = await client.getTool("email.send");
    const runId = `run_${driver.name}_${opts.scrub ? "guarded" : "unscrubbed"}_${process.pid}_${++stories}`;
    const first = new EmailModel();
    const run1 = await driver.run({ client, mailer, runId, tool, call: sendEmail(mailer), scrub: opts.scrub, model: first });
    const postsAfterRun1 = mailer.posts.length;

    // The run is resumed from scratch: a new tool, a new model, the same run id.
    const again = new EmailModel();
    const run2 = await driver.run({ client, mailer, runId, tool, call: sendEmail(mailer), scrub: opts.scrub, model: again });

    // One side effect, under one key: the ledger's.
    assert.equal(mailer.sent(), 1, `one email is sent (the email API sent ${mailer.sent()}; keys ${JSON.stringify(mailer.posts.map((p) => p.key))})`);
    const keys = new Set(mailer.posts.map((p) => p.key));
    assert.equal(keys.size, 1, `every attempt carried the same key: ${JSON.stringify([...keys])}`);
    const [key] = keys;
    for (const k of [...first.keys, ...again.keys]) assert.notEqual(key, k, "the key is the ledger's, never the model's");
    const rows = (await client.list({ run_id: runId })).rows;
    assert.equal(rows.length, 1, "one row for the run");
    const row = rows[0]!;
    const vendorKey = (row as { vendor_key?: string }).vendor_key || row.key;
    assert.equal(key, vendorKey, "the key sent is the row's vendor key");
    assert.equal(row.status, "succeeded");
    assert.equal(row.upstream_receipt_id, "em_1");
    assert.equal(postsAfterRun1, 2, "the first run tried twice: the timeout, then the model's re-emitted call");

    // What the model read.
    assert.equal(run1.results.length, 2, `the first run's tool results: ${JSON.stringify(run1.results)}`);
    assert.match(run1.results[0]!, /^timeout: outcome unknown — do not retry with new arguments/);
    assert.doesNotMatch(run1.results[0]!, /\n\s+at /, "no stack trace");
    assert.match(run1.results[1]!, /^done: email\.send succeeded \(receipt em_1\)/);
    assert.equal(run2.results.length, 1, `the resumed run's tool results: ${JSON.stringify(run2.results)}`);
    assert.equal(mailer.posts.length, postsAfterRun1, "the resumed run called nothing");
    assert.match(run2.results[0]!, /^already_done: email\.send already succeeded earlier for these arguments \(receipt em_1\)/);

    // The schema the model saw has no key field.
    assert.ok(run1.schemas.length > 0, "the driver saw the schema the model got");
    for (const s of [...run1.schemas, ...run2.schemas]) {
      assert.doesNotMatch(JSON.stringify(s), /idempotency_key/i, "the model is shown no key field");
      assert.match(JSON.stringify(s), /"to"/);
    }
  } finally {
    await mailer.close();
  }
}

/** registerEmailTool registers email.send (as a user would, with the admin CLI or the API). */
export async function registerEmailTool(rc: Reconciler): Promise<void> {
  await rc.client().putTool("email.send", EMAIL_TOOL);
}

/**
 * storyCases are a framework's two tests: the story passes with the
 * guard, and fails — on the side effect — with its scrubbing off.
 */
export function storyCases(driver: () => Driver, rc: () => Reconciler) {
  return {
    guarded: () => emailStory(rc(), driver(), { scrub: true }),
    negativeControl: async () => {
      await assert.rejects(emailStory(rc(), driver(), { scrub: false }), (err: unknown) => {
        assert.ok(err instanceof assert.AssertionError, String(err));
        assert.match(err.message, /one email is sent \(the email API sent [2-9];/, "it fails on the double email");
        return true;
      });
    },
  };
}
