// @reconciler/client/langchain driven by the real LangChain.js core: the
// tool-calling loop of LangChain's docs (bindTools, invoke, run each tool
// call, feed back its ToolMessage), with @langchain/core's
// FakeStreamingChatModel playing each turn of the double-email story's
// model. The tool is given a JSON Schema here (the other frameworks' tests
// give zod).
import { after, before, describe, test } from "node:test";
import { guardedTool } from "@reconciler/client/langchain";
import { AIMessage, AIMessageChunk, type BaseMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { FakeStreamingChatModel } from "@langchain/core/utils/testing";
import { SKIP, type Reconciler, startReconciler } from "./harness.js";
import { type Driver, EMAIL_SCHEMA, type EmailArgs, MAILER_CONFIG, registerEmailTool, storyCases } from "./story.js";

const langchain: Driver = {
  name: "langchain",
  async run({ client, runId, tool, call, scrub, model }) {
    const sendEmail = guardedTool<EmailArgs>({ client, runId, tool, call, scrub, description: "Send an email.", schema: structuredClone(EMAIL_SCHEMA) });
    const schemas: unknown[] = [];
    const results: string[] = [];
    const messages: BaseMessage[] = [new HumanMessage("Email Bob that his refund is on its way.")];
    for (let turn = 0; turn < 6; turn++) {
      // The model's turn: what it answers depends on the tool results it has read.
      const step = model.next(results);
      const fake =
        "text" in step
          ? new FakeStreamingChatModel({ responses: [new AIMessage(step.text)] })
          : new FakeStreamingChatModel({
              chunks: [new AIMessageChunk({ content: "", tool_calls: [{ id: step.id, name: "email_send", args: step.call, type: "tool_call" }] })],
            });
      const bound = fake.bindTools([sendEmail]);
      const shown = (bound as unknown as { config?: { tools?: { function?: { name: string; parameters: unknown } }[] } }).config?.tools ?? [];
      for (const t of shown) if (t.function?.name === "email_send") schemas.push(t.function.parameters);
      const ai = (await bound.invoke(messages)) as AIMessage;
      messages.push(ai);
      if (!ai.tool_calls?.length) break;
      for (const tc of ai.tool_calls) {
        // Given a tool call, a LangChain tool answers with a ToolMessage.
        const invoke = sendEmail.invoke.bind(sendEmail) as (call: unknown) => Promise<ToolMessage>;
        const msg = await invoke({ ...tc, type: "tool_call" });
        messages.push(msg);
        results.push(typeof msg.content === "string" ? msg.content : JSON.stringify(msg.content));
      }
    }
    return { results, schemas };
  },
};

describe("@reconciler/client/langchain with LangChain's fake chat model", { skip: SKIP }, () => {
  let rc: Reconciler;
  before(async () => {
    rc = await startReconciler([], { config: MAILER_CONFIG });
    await registerEmailTool(rc);
  });
  after(async () => {
    await rc?.stop();
  });
  const cases = storyCases(() => langchain, () => rc);
  test("the double-email story: one email, the ledger's key, a resumed run replays", cases.guarded);
  test("negative control: with scrubbing off the same story sends two emails", cases.negativeControl);
});
