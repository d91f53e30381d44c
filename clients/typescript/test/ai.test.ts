// @reconciler/client/ai driven by the real Vercel AI SDK: generateText with
// ai/test's MockLanguageModelV3 playing the model of the double-email story.
import { after, before, describe, test } from "node:test";
import { guardedTool } from "@reconciler/client/ai";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";
import { SKIP, type Reconciler, startReconciler } from "./harness.js";
import { type Driver, type EmailArgs, MAILER_CONFIG, registerEmailTool, storyCases } from "./story.js";

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 10, text: 10, reasoning: undefined },
};

/** toolResults are the tool results in the prompt the SDK sends the model, in order. */
function toolResults(prompt: readonly { role: string; content: unknown }[]): string[] {
  const out: string[] = [];
  for (const m of prompt) {
    if (m.role !== "tool" || !Array.isArray(m.content)) continue;
    for (const part of m.content as { type: string; output?: { type: string; value: unknown } }[]) {
      if (part.type !== "tool-result" || !part.output) continue;
      out.push(typeof part.output.value === "string" ? part.output.value : JSON.stringify(part.output.value));
    }
  }
  return out;
}

const aiSdk: Driver = {
  name: "ai",
  async run({ client, runId, tool, call, scrub, model }) {
    const schemas: unknown[] = [];
    const sendEmail = guardedTool<EmailArgs>({
      client,
      runId,
      tool,
      call,
      scrub,
      description: "Send an email.",
      inputSchema: z.object({
        to: z.string(),
        subject: z.string(),
        text: z.string(),
        requested_at: z.string().describe("when the user asked (ISO 8601)"),
        idempotency_key: z.string().describe("a unique id for this email"),
      }),
    });
    const llm = new MockLanguageModelV3({
      doGenerate: async (options) => {
        for (const t of options.tools ?? []) if (t.type === "function") schemas.push(t.inputSchema);
        const step = model.next(toolResults(options.prompt));
        if ("text" in step) {
          return { content: [{ type: "text", text: step.text }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
        }
        return {
          content: [{ type: "tool-call", toolCallId: step.id, toolName: "email_send", input: JSON.stringify(step.call) }],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage,
          warnings: [],
        };
      },
    });
    const r = await generateText({ model: llm, tools: { email_send: sendEmail }, stopWhen: stepCountIs(6), prompt: "Email Bob that his refund is on its way." });
    const results = r.steps.flatMap((s) => s.toolResults.map((tr) => String(tr.output)));
    return { results, schemas };
  },
};

describe("@reconciler/client/ai with the AI SDK's mock model", { skip: SKIP }, () => {
  let rc: Reconciler;
  before(async () => {
    rc = await startReconciler([], { config: MAILER_CONFIG });
    await registerEmailTool(rc);
  });
  after(async () => {
    await rc?.stop();
  });
  const cases = storyCases(() => aiSdk, () => rc);
  test("the double-email story: one email, the ledger's key, a resumed run replays", cases.guarded);
  test("negative control: with scrubbing off the same story sends two emails", cases.negativeControl);
});
