// A fake Stripe that really commits: POST /v1/payment_intents creates a
// PaymentIntent per Idempotency-Key and replays a repeated key's answer with
// Idempotent-Replayed: true, as Stripe does. The next new keys meet the
// queued faults: commit then hang, commit then reset the connection, a 500,
// a 429 or a 409 that commit nothing, a decline (402, Stripe-Should-Retry:
// false) that commits a failed PaymentIntent.
import { type CallContext, type CallResult, resultFromResponse } from "@reconciler/client";
import { type Answer, type Fake, json, serve } from "./harness.js";

export type Fault = "none" | "hang" | "reset" | "500" | "429" | "409" | "decline";

export interface Post {
  key: string;
  localId: string;
  amount: string;
  replayed: boolean;
}

export interface FakeVendor {
  url: string;
  /** posts are the writes received, in order. */
  posts: Post[];
  /** objects is how many PaymentIntents were committed. */
  objects(): number;
  inject(...faults: Fault[]): void;
  close(): Promise<void>;
}

export async function startVendor(...faults: Fault[]): Promise<FakeVendor> {
  const queue = [...faults];
  const stored = new Map<string, { status: number; body: unknown; headers: Record<string, string> }>();
  const posts: Post[] = [];
  let n = 0;
  const fake: Fake = await serve((req, body): Answer => {
    if (req.method !== "POST" || req.url !== "/v1/payment_intents") return json(404, { error: { message: "no such route" } });
    const key = req.headers["idempotency-key"];
    if (typeof key !== "string" || key === "") return json(400, { error: { message: "no Idempotency-Key" } });
    const form = new URLSearchParams(body);
    const post: Post = { key, localId: form.get("metadata[metadata_local_id]") ?? "", amount: form.get("amount") ?? "", replayed: false };
    posts.push(post);
    const seen = stored.get(key);
    if (seen) {
      post.replayed = true;
      return json(seen.status, seen.body, { ...seen.headers, "Idempotent-Replayed": "true" });
    }
    const pi = (status: string) => ({
      id: `pi_fake_${++n}`,
      object: "payment_intent",
      amount: Number(post.amount),
      currency: form.get("currency"),
      status,
      metadata: { metadata_local_id: post.localId },
    });
    const commit = (status: number, obj: unknown, headers: Record<string, string> = {}) => {
      stored.set(key, { status, body: obj, headers });
      return json(status, obj, headers);
    };
    switch (queue.shift() ?? "none") {
      case "none":
        return commit(200, pi("succeeded"));
      case "hang":
        commit(200, pi("succeeded"));
        return "hang";
      case "reset":
        commit(200, pi("succeeded"));
        return "destroy";
      case "500":
        return json(500, { error: { type: "api_error", message: "boom" } });
      case "429":
        return json(429, { error: { type: "rate_limit_error" } });
      case "409":
        return json(409, { error: { type: "idempotency_error", message: "a request with this key is in progress" } });
      case "decline": {
        const obj = pi("requires_payment_method");
        return commit(402, { error: { type: "card_error", code: "card_declined", payment_intent: obj } }, { "Stripe-Should-Retry": "false" });
      }
    }
  });
  return {
    url: fake.url,
    posts,
    objects: () => [...stored.values()].length,
    inject: (...f) => queue.push(...f),
    close: fake.close,
  };
}

/** chargeCall is a do() call that creates a PaymentIntent the way a runtime without an SDK would. */
export function chargeCall(vendor: FakeVendor, amount = 1050) {
  return async ({ key, localId, signal }: CallContext): Promise<CallResult> => {
    const resp = await fetch(`${vendor.url}/v1/payment_intents`, {
      method: "POST",
      headers: { "Idempotency-Key": key, "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ amount: String(amount), currency: "usd", "metadata[metadata_local_id]": localId }),
      signal,
    });
    const body = (await resp.json().catch(() => ({}))) as { id?: string; error?: { payment_intent?: { id?: string } } };
    return resultFromResponse(resp, body.id ?? body.error?.payment_intent?.id);
  };
}
