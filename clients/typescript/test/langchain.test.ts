// @reconciler/client/langchain driven by the real framework package with LangChain's fake chat model
// (test/frameworks.ts) through the double-email story (test/story.ts), and
// the same story with the guard's scrubbing off, which must fail.
import { after, before, describe, test } from "node:test";
import { langchainDriver } from "./frameworks.js";
import { SKIP, type Reconciler, startReconciler } from "./harness.js";
import { MAILER_CONFIG, registerEmailTool, storyCases } from "./story.js";

describe("@reconciler/client/langchain with LangChain's fake chat model", { skip: SKIP }, () => {
  let rc: Reconciler;
  before(async () => {
    rc = await startReconciler([], { config: MAILER_CONFIG });
    await registerEmailTool(rc);
  });
  after(async () => {
    await rc?.stop();
  });
  const cases = storyCases(() => langchainDriver(), () => rc);
  test("the double-email story: one email, the ledger's key, a resumed run replays", cases.guarded);
  test("negative control: with scrubbing off the same story sends two emails", cases.negativeControl);
});
