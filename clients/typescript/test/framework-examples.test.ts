// examples/email-{ai,openai-agents,langchain}.ts, each the tool a user
// copies, driven by its framework (test/frameworks.ts) through the
// double-email story against a fake Resend that takes the key in the
// Idempotency-Key header, as the examples' registry entry says.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import * as ai from "../examples/email-ai.js";
import * as langchain from "../examples/email-langchain.js";
import * as agents from "../examples/email-openai-agents.js";
import { agentsDriver, aiDriver, langchainDriver } from "./frameworks.js";
import { SKIP, type Reconciler, startReconciler } from "./harness.js";
import { type RunSpec, emailStory, mailerConfig } from "./story.js";

const resend = (spec: RunSpec) => ({ baseUrl: spec.mailer.url, apiKey: "re_test_123" });

describe("the framework examples", { skip: SKIP }, () => {
  let rc: Reconciler;
  before(async () => {
    rc = await startReconciler([], { config: mailerConfig("resend") });
    await rc.client().putTool("email.send", ai.EMAIL_SEND);
  });
  after(async () => {
    await rc?.stop();
  });

  test("examples/email-ai.ts", () => emailStory(rc, aiDriver((s) => ai.emailTool(s.client, s.runId, resend(s))), { scrub: true }));
  test("examples/email-openai-agents.ts", () => emailStory(rc, agentsDriver((s) => agents.emailTool(s.client, s.runId, resend(s))), { scrub: true }));
  test("examples/email-langchain.ts", () => emailStory(rc, langchainDriver((s) => langchain.emailTool(s.client, s.runId, resend(s))), { scrub: true }));
});

test("the README shows each framework example as it is", () => {
  const pkgDir = resolve(fileURLToPath(import.meta.url), "../../..");
  const readme = readFileSync(join(pkgDir, "README.md"), "utf8");
  for (const f of ["email-ai.ts", "email-openai-agents.ts", "email-langchain.ts"]) {
    const m = new RegExp(`<!-- example:${f.replace(/\./g, "\\.")}:begin -->\n\`\`\`ts\n([\\s\\S]*?)\n\`\`\`\n<!-- example:${f.replace(/\./g, "\\.")}:end -->`).exec(readme);
    assert.ok(m, `README.md has no block for examples/${f}`);
    assert.equal(m[1], readFileSync(join(pkgDir, "examples", f), "utf8").trim(), `README.md's block differs from examples/${f}`);
  }
});
