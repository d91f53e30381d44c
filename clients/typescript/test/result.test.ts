// resultFromResponse and failureKind: what do() reports for a vendor's answer or its absence.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { RESULT_HEADERS, failureKind, resultFromResponse } from "@reconciler/client";
import { serve } from "./harness.js";

describe("resultFromResponse", () => {
  test("status, receipt and the headers the classification reads", () => {
    const resp = new Response("{}", {
      status: 200,
      headers: { "idempotent-replayed": "true", "stripe-should-retry": "false", "request-id": "req_1" },
    });
    assert.deepEqual(resultFromResponse(resp, "pi_1"), {
      httpStatus: 200,
      receiptId: "pi_1",
      headers: { "Idempotent-Replayed": "true", "Stripe-Should-Retry": "false" },
    });
    assert.equal(resp.bodyUsed, false, "the body is the caller's");
    assert.deepEqual(resultFromResponse(new Response(null, { status: 500 })), { httpStatus: 500 });
    assert.deepEqual(RESULT_HEADERS, ["Idempotent-Replayed", "Stripe-Should-Retry"]);
  });
});

describe("failureKind", () => {
  test("a deadline is a timeout", async () => {
    const hang = await serve(() => "hang");
    try {
      const err = await fetch(hang.url, { signal: AbortSignal.timeout(50) }).catch((e: unknown) => e);
      assert.equal(failureKind(err), "timeout");
    } finally {
      await hang.close();
    }
    assert.equal(failureKind(new DOMException("t", "TimeoutError")), "timeout");
    assert.equal(failureKind(new TypeError("fetch failed", { cause: { code: "UND_ERR_HEADERS_TIMEOUT" } })), "timeout");
    assert.equal(failureKind(Object.assign(new Error("connect ETIMEDOUT"), { code: "ETIMEDOUT" })), "timeout");
  });

  test("an abort, a refused or reset connection, anything else is a network error", async () => {
    const ctl = new AbortController();
    ctl.abort();
    const dead = await serve(() => "destroy");
    try {
      assert.equal(failureKind(await fetch(dead.url, { signal: ctl.signal }).catch((e: unknown) => e)), "network_error");
      assert.equal(failureKind(await fetch(dead.url).catch((e: unknown) => e)), "network_error");
    } finally {
      await dead.close();
    }
    const refused = await fetch(dead.url).catch((e: unknown) => e);
    assert.ok(refused instanceof TypeError);
    assert.equal(failureKind(refused), "network_error");
    assert.equal(failureKind(new Error("boom")), "network_error");
    assert.equal(failureKind(undefined), "network_error");
    assert.equal(failureKind("a string"), "network_error");
  });
});
