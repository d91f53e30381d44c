// @reconciler/client/openai-agents driven by the real framework package with a scripted Model of the Agents SDK
// (test/frameworks.ts) through the double-email story (test/story.ts), and
// the same story with the guard's scrubbing off, which must fail.
import { after, before, describe, test } from "node:test";
import { agentsDriver } from "./frameworks.js";
import { SKIP, type Reconciler, startReconciler } from "./harness.js";
import { MAILER_CONFIG, registerEmailTool, storyCases } from "./story.js";

describe("@reconciler/client/openai-agents with a scripted Model of the Agents SDK", { skip: SKIP }, () => {
  let rc: Reconciler;
  before(async () => {
    rc = await startReconciler([], { config: MAILER_CONFIG });
    await registerEmailTool(rc);
  });
  after(async () => {
    await rc?.stop();
  });
  const cases = storyCases(() => agentsDriver(), () => rc);
  test("the double-email story: one email, the ledger's key, a resumed run replays", cases.guarded);
  test("negative control: with scrubbing off the same story sends two emails", cases.negativeControl);
});
