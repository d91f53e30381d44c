// Answers that are not the API's, no answer at all, and what goes on the
// wire: each gives a typed error, never a silent success.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  AbortedError,
  ApiError,
  BodyTooLargeError,
  Client,
  CompensationFailedError,
  CompensationPendingError,
  FingerprintMismatchError,
  ForbiddenError,
  InternalError,
  InvalidInputError,
  InvalidResponseError,
  InvalidTransitionError,
  MethodNotAllowedError,
  NetworkError,
  NotFoundError,
  ReconcilerError,
  UnauthorizedError,
  UnavailableError,
} from "@reconciler/client";
import { type Answer, type Fake, chargeClaim, json, serve } from "./harness.js";

async function withFake(handler: (n: number) => Answer, fn: (api: Fake, c: Client) => Promise<void>, opts = {}) {
  let n = 0;
  const api = await serve(() => handler(++n));
  try {
    await fn(api, new Client({ baseUrl: api.url, token: "tok_test", retries: 2, backoffMs: 1, ...opts }));
  } finally {
    await api.close();
  }
}

describe("answers that are not the API's", () => {
  test("a 200 that is not JSON is an InvalidResponseError, after the retries", () =>
    withFake(
      () => ({ status: 200, body: "<html>hello</html>", headers: { "Content-Type": "text/html" } }),
      async (api, c) => {
        await assert.rejects(c.claim(chargeClaim()), (err) => {
          assert.ok(err instanceof InvalidResponseError);
          assert.ok(err instanceof ReconcilerError);
          assert.equal(err.status, 200);
          assert.match(err.message, /not JSON: <html>hello/);
          return true;
        });
        assert.equal(api.requests.length, 3);
      },
    ));

  test("JSON of another shape is an InvalidResponseError for every method", () =>
    withFake(
      () => json(200, { ok: true }),
      async (_api, c) => {
        await assert.rejects(c.claim(chargeClaim()), /answer without a decision/);
        await assert.rejects(c.compensate("k", "refund"), InvalidResponseError);
        await assert.rejects(c.report("k", { kind: "timeout" }), /answer without a row/);
        await assert.rejects(c.get("k"), InvalidResponseError);
        await assert.rejects(c.resolve("k", { tenant: "t", status: "succeeded", note: "n" }), InvalidResponseError);
        await assert.rejects(c.list(), /answer without rows/);
      },
    ));

  test("an empty 201 is not a proceed", () =>
    withFake(
      () => ({ status: 201, body: "" }),
      async (_api, c) => {
        await assert.rejects(c.claim(chargeClaim()), InvalidResponseError);
      },
      { retries: 0 },
    ));

  test("a 502 page from a proxy is an UnavailableError, retried", () =>
    withFake(
      () => ({ status: 502, body: "<html><body>502 Bad Gateway</body></html>", headers: { "Content-Type": "text/html" } }),
      async (api, c) => {
        await assert.rejects(c.get("k"), (err) => {
          assert.ok(err instanceof UnavailableError);
          assert.equal(err.status, 502);
          assert.equal(err.code, "bad_gateway");
          assert.match(err.message, /502 Bad Gateway/);
          assert.equal(err.retryable, true);
          return true;
        });
        assert.equal(api.requests.length, 3);
      },
    ));

  test("a 500 without the API's body is an ApiError with a code from its status, retried", () =>
    withFake(
      () => ({ status: 500, body: "oops", headers: { "Content-Type": "text/plain" } }),
      async (api, c) => {
        await assert.rejects(c.report("k", { kind: "timeout" }), (err) => {
          assert.ok(err instanceof ApiError);
          assert.ok(!(err instanceof InternalError), "only the API's own internal code is an InternalError");
          assert.equal(err.code, "internal_server_error");
          assert.equal(err.message, "oops");
          return true;
        });
        assert.equal(api.requests.length, 3);
      },
    ));

  test("an unknown status without a body gets http_<status>", () =>
    withFake(
      () => ({ status: 418, body: "" }),
      async (_api, c) => {
        await assert.rejects(c.get("k"), (err) => err instanceof ApiError && err.code === "http_418" && err.constructor === ApiError);
      },
    ));

  test("an answer larger than maxResponseBytes is refused, not cut", () =>
    withFake(
      () => json(200, { row: { key: "k", status: "pending", pad: "x".repeat(10_000) } }),
      async (_api, c) => {
        await assert.rejects(c.get("k"), /larger than 1000 bytes/);
      },
      { maxResponseBytes: 1000, retries: 0 },
    ));
});

describe("each API error code is its own class", () => {
  const cases: [number, string, new (...a: never[]) => ApiError][] = [
    [404, "not_found", NotFoundError],
    [422, "fingerprint_mismatch", FingerprintMismatchError],
    [409, "invalid_transition", InvalidTransitionError],
    [409, "compensation_pending", CompensationPendingError],
    [422, "compensation_failed", CompensationFailedError],
    [400, "invalid_input", InvalidInputError],
    [400, "bad_json", InvalidInputError],
    [400, "bad_body", InvalidInputError],
    [413, "body_too_large", BodyTooLargeError],
    [401, "unauthorized", UnauthorizedError],
    [403, "forbidden", ForbiddenError],
    [405, "method_not_allowed", MethodNotAllowedError],
    [503, "unavailable", UnavailableError],
    [500, "internal", InternalError],
    [501, "not_implemented", ApiError],
  ];
  for (const [status, code, cls] of cases) {
    test(`${status} ${code}`, () =>
      withFake(
        () => json(status, { error: { code, message: `the ${code} message` } }),
        async (api, c) => {
          // Claims accept 409 and 423 as answers: an error body there is still an error.
          await assert.rejects(c.claim(chargeClaim()), (err) => {
            assert.ok(err instanceof cls, `${code}: ${String(err)}`);
            assert.ok(err instanceof ApiError);
            assert.equal(err.status, status);
            assert.equal(err.code, code);
            assert.equal(err.message, `the ${code} message`);
            return true;
          });
          const retried = status === 429 || status >= 500;
          assert.equal(api.requests.length, retried ? 3 : 1, "only 429 and 5xx are sent again");
        },
      ));
  }
});

describe("no answer", () => {
  test("connection refused is a NetworkError", async () => {
    const dead = await serve(() => json(200, {}));
    await dead.close();
    const c = new Client({ baseUrl: dead.url, token: "tok_test", retries: 1, backoffMs: 1 });
    await assert.rejects(c.claim(chargeClaim()), (err) => {
      assert.ok(err instanceof NetworkError);
      assert.equal(err.timedOut, false);
      assert.ok(err.cause instanceof TypeError, "fetch's error is the cause");
      return true;
    });
  });

  test("no answer within timeoutMs is a NetworkError that timed out", () =>
    withFake(
      () => "hang",
      async (api, c) => {
        const start = Date.now();
        await assert.rejects(c.get("k"), (err) => err instanceof NetworkError && err.timedOut);
        assert.ok(Date.now() - start < 2_000);
        assert.equal(api.requests.length, 2);
      },
      { timeoutMs: 150, retries: 1 },
    ));

  test("a long poll's timeout is its wait plus timeoutMs", () =>
    withFake(
      () => "hang",
      async (_api, c) => {
        const start = Date.now();
        await assert.rejects(c.claim(chargeClaim(), { waitMs: 300 }), (err) => err instanceof NetworkError && err.timedOut);
        assert.ok(Date.now() - start >= 400, `gave up after ${Date.now() - start} ms`);
      },
      { timeoutMs: 150, retries: 0 },
    ));

  test("a connection dropped before the answer is a NetworkError", () =>
    withFake(
      () => "destroy",
      async (api, c) => {
        await assert.rejects(c.get("k"), (err) => err instanceof NetworkError && !err.timedOut);
        assert.equal(api.requests.length, 3);
      },
    ));

  test("the caller's abort is an AbortedError with its reason, and stops the retries", () =>
    withFake(
      (n) => (n === 1 ? { status: 503, body: "" } : "hang"),
      async (api, c) => {
        const ctl = new AbortController();
        const reason = new Error("user went away");
        setTimeout(() => ctl.abort(reason), 100);
        await assert.rejects(c.get("k", { signal: ctl.signal }), (err) => err instanceof AbortedError && err.cause === reason);
        assert.equal(api.requests.length, 2);
        const aborted = AbortSignal.abort(reason);
        await assert.rejects(c.get("k", { signal: aborted }), AbortedError);
      },
      { backoffMs: 20 },
    ));
});

describe("the requests", () => {
  test("headers, escaped keys, queries and bodies", async () => {
    const row = { key: "k", status: "pending" };
    const api = await serve((req) =>
      req.method === "GET" && req.url?.includes("/v1/claims?")
        ? json(200, { rows: [] })
        : req.method === "GET" || req.url?.endsWith("/outcome") || req.url?.endsWith("/resolve")
          ? json(200, { row })
          : json(200, { decision: "replay", row }),
    );
    try {
      const c = new Client({ baseUrl: `${api.url}/prefix/`, token: "tok_test" });
      await c.claim(chargeClaim(), { waitMs: 1500 });
      await c.report("a/b?c#d%e", { kind: "timeout" });
      await c.list({ status: "unknown", run_id: "run_1", limit: 5, cursor: "abc" });
      const admin = new Client({ baseUrl: api.url, token: "tok_admin", tenant: "acme" });
      await admin.get("k1");
      await admin.list();
      await admin.resolve("k1", { tenant: "acme", status: "succeeded", note: "n" });
      await c.compensate("k1", "refund");
      assert.deepEqual(
        api.requests.map((r) => `${r.method} ${r.url}`),
        [
          "POST /prefix/v1/claims?wait=1500ms",
          "POST /prefix/v1/claims/a%2Fb%3Fc%23d%25e/outcome",
          "GET /prefix/v1/claims?status=unknown&run_id=run_1&limit=5&cursor=abc",
          "GET /v1/claims/k1?tenant=acme",
          "GET /v1/claims?tenant=acme",
          "POST /v1/claims/k1/resolve",
          "POST /prefix/v1/claims/k1/compensations",
        ],
      );
      const [claim] = api.requests;
      assert.equal(claim?.headers["authorization"], "Bearer tok_test");
      assert.equal(claim?.headers["content-type"], "application/json");
      assert.equal(claim?.headers["accept"], "application/json");
      assert.deepEqual(JSON.parse(claim!.body), chargeClaim(1050, JSON.parse(claim!.body).run_id));
      assert.equal(api.requests[2]?.headers["content-type"], undefined, "a GET has no body");
      assert.deepEqual(JSON.parse(api.requests[6]!.body), { action: "refund" });
    } finally {
      await api.close();
    }
  });

  test("options.fetch replaces the global fetch", async () => {
    const seen: string[] = [];
    const c = new Client({
      baseUrl: "http://reconciler.invalid",
      token: "tok_test",
      fetch: async (input) => {
        seen.push(String(input));
        return new Response(JSON.stringify({ row: { key: "k", status: "succeeded" } }), { status: 200 });
      },
    });
    assert.equal((await c.get("k")).status, "succeeded");
    assert.deepEqual(seen, ["http://reconciler.invalid/v1/claims/k"]);
  });

  test("the constructor refuses what cannot work", () => {
    const ok = { baseUrl: "http://127.0.0.1:8080", token: "tok" };
    assert.throws(() => new Client({ ...ok, baseUrl: "127.0.0.1:8080" }), TypeError);
    assert.throws(() => new Client({ ...ok, baseUrl: "ftp://host" }), TypeError);
    assert.throws(() => new Client({ ...ok, baseUrl: "http://host/?q=1" }), TypeError);
    assert.throws(() => new Client({ ...ok, token: "" }), TypeError);
    assert.throws(() => new Client({ ...ok, token: "tok en" }), TypeError);
    assert.throws(() => new Client({ ...ok, waitMs: 31_000 }), RangeError);
    assert.throws(() => new Client({ ...ok, timeoutMs: 0 }), RangeError);
    assert.throws(() => new Client({ ...ok, retries: -1 }), RangeError);
    assert.throws(() => new Client({ ...ok, retries: 1.5 }), RangeError);
    assert.throws(() => new Client({ ...ok, callTimeoutMs: Number.NaN }), RangeError);
    assert.ok(new Client({ ...ok, baseUrl: "https://reconciler.example/api/" }));
  });
});
