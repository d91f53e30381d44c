// examples/charge-tool.ts, the READMEs' TypeScript example, run as a model
// loop would: a timeout the vendor committed, the model retrying with a key
// of its own invention, and a third call after the charge settled.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { chargeTool } from "../examples/charge-tool.js";
import { startVendor } from "./fakevendor.js";
import { type Reconciler, SKIP, startReconciler } from "./harness.js";

const pkgDir = resolve(fileURLToPath(import.meta.url), "../../..");

describe("the charge tool example", { skip: SKIP }, () => {
  let rc: Reconciler;
  before(async () => {
    rc = await startReconciler();
  });
  after(async () => {
    await rc?.stop();
  });

  test("one charge, whatever the model and the network do", async () => {
    const vendor = await startVendor("hang"); // commits the first charge, then never answers
    try {
      const charge = chargeTool(rc.client({ callTimeoutMs: 300 }), `run_example_${process.pid}`, { baseUrl: vendor.url, apiKey: "sk_test_123" });
      assert.equal(JSON.stringify(charge.parameters).includes("idempotency_key"), false, "the schema the model sees has no key field");

      const args = { amount: 1050, currency: "usd", customer: "cus_123" };
      const first = await charge.execute({ ...args, idempotency_key: "model-1" } as typeof args, { toolCallId: "call_1" });
      assert.deepEqual(first, { status: "unknown", advice: "not known yet; calling again with the same arguments is safe" });

      // The model retries with a fresh key of its own: the ledger's key is sent, the vendor replays.
      const second = await charge.execute({ ...args, idempotency_key: "model-2" } as typeof args, { toolCallId: "call_2" });
      assert.deepEqual(second, { status: "charged", paymentIntent: "pi_fake_1" });
      const third = await charge.execute(args, { toolCallId: "call_3" });
      assert.deepEqual(third, { status: "charged", paymentIntent: "pi_fake_1" });

      assert.equal(vendor.objects(), 1, "one PaymentIntent");
      assert.equal(vendor.posts.length, 2, "the third call replayed from the ledger");
      const [a, b] = vendor.posts;
      assert.equal(a?.key, b?.key);
      assert.match(a!.key, /^[0-9a-f]{64}$/, "the ledger's key, not the model's");
      assert.match(a!.localId, /^rl_/);
      assert.equal(b?.replayed, true);
    } finally {
      await vendor.close();
    }
  });

  test("a declined card is refused, and stays refused", async () => {
    const vendor = await startVendor("decline");
    try {
      const charge = chargeTool(rc.client(), `run_example_decline_${process.pid}`, { baseUrl: vendor.url, apiKey: "sk_test_123" });
      const args = { amount: 999, currency: "usd", customer: "cus_broke" };
      const want = { status: "refused", reason: "failed_poison", advice: "do not retry this charge" };
      assert.deepEqual(await charge.execute(args, { toolCallId: "call_1" }), want);
      assert.deepEqual(await charge.execute(args, { toolCallId: "call_2" }), want);
      assert.equal(vendor.posts.length, 1);
    } finally {
      await vendor.close();
    }
  });
});

test("the READMEs show examples/charge-tool.ts as it is", () => {
  const example = readFileSync(join(pkgDir, "examples", "charge-tool.ts"), "utf8").trim();
  for (const readme of [join(pkgDir, "..", "..", "README.md"), join(pkgDir, "README.md")]) {
    const text = readFileSync(readme, "utf8");
    const begin = text.indexOf("<!-- ts-example:begin -->");
    const end = text.indexOf("<!-- ts-example:end -->");
    assert.ok(begin >= 0 && end > begin, `${readme} has no ts-example block`);
    const block = text.slice(begin, end).replace("<!-- ts-example:begin -->", "").trim();
    assert.ok(block.startsWith("```ts\n") && block.endsWith("\n```"), `${readme}: the block is one ts code fence`);
    assert.equal(block.slice("```ts\n".length, -"\n```".length).trim(), example, `${readme}: the example differs from examples/charge-tool.ts`);
  }
});
