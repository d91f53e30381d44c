// @reconciler/client/openai-agents driven by the real OpenAI Agents SDK: an
// Agent run by run(), with a Model of the SDK's own interface (the SDK ships
// no fake model; a custom Model is how it takes other providers) playing
// the model of the double-email story. Tracing is off: nothing leaves the
// machine.
import { after, before, describe, test } from "node:test";
import { guardedTool } from "@reconciler/client/openai-agents";
import { Agent, type Model, type ModelRequest, type ModelResponse, Usage, run, setTracingDisabled } from "@openai/agents";
import { z } from "zod";
import { SKIP, type Reconciler, startReconciler } from "./harness.js";
import { type Driver, type EmailArgs, type EmailModel, MAILER_CONFIG, registerEmailTool, storyCases } from "./story.js";

setTracingDisabled(true);

/** toolResults are the function call outputs in the run's input items, in order. */
function toolResults(input: ModelRequest["input"]): string[] {
  if (typeof input === "string") return [];
  const out: string[] = [];
  for (const item of input as { type?: string; output?: unknown }[]) {
    if (item.type !== "function_call_result") continue;
    const o = item.output as { type?: string; text?: string } | string;
    out.push(typeof o === "string" ? o : (o.text ?? JSON.stringify(o)));
  }
  return out;
}

/** ScriptedModel is an Agents SDK Model whose answers are the story's EmailModel's. */
class ScriptedModel implements Model {
  readonly schemas: unknown[] = [];
  #n = 0;
  constructor(private readonly model: EmailModel) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    for (const t of request.tools) if (t.type === "function") this.schemas.push(t.parameters);
    const step = this.model.next(toolResults(request.input));
    const responseId = `resp_${++this.#n}`;
    if ("text" in step) {
      return {
        usage: new Usage(),
        responseId,
        output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: step.text }] }],
      };
    }
    return {
      usage: new Usage(),
      responseId,
      output: [{ type: "function_call", callId: step.id, name: "email_send", status: "completed", arguments: JSON.stringify(step.call) }],
    };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("the story does not stream");
  }
}

const agentsSdk: Driver = {
  name: "openai_agents",
  async run({ client, runId, tool, call, scrub, model }) {
    const sendEmail = guardedTool<EmailArgs>({
      client,
      runId,
      tool,
      call,
      scrub,
      description: "Send an email.",
      parameters: z.object({
        to: z.string(),
        subject: z.string(),
        text: z.string(),
        requested_at: z.string().describe("when the user asked (ISO 8601)"),
        idempotency_key: z.string().describe("a unique id for this email"),
      }),
    });
    const llm = new ScriptedModel(model);
    const agent = new Agent({ name: "ops", instructions: "You send the emails the user asks for.", model: llm, tools: [sendEmail] });
    const result = await run(agent, "Email Bob that his refund is on its way.", { maxTurns: 6 });
    const results: string[] = [];
    for (const item of result.newItems) {
      if (item.type === "tool_call_output_item") results.push(String(item.output));
    }
    return { results, schemas: llm.schemas };
  },
};

describe("@reconciler/client/openai-agents with a scripted Model", { skip: SKIP }, () => {
  let rc: Reconciler;
  before(async () => {
    rc = await startReconciler([], { config: MAILER_CONFIG });
    await registerEmailTool(rc);
  });
  after(async () => {
    await rc?.stop();
  });
  const cases = storyCases(() => agentsSdk, () => rc);
  test("the double-email story: one email, the ledger's key, a resumed run replays", cases.guarded);
  test("negative control: with scrubbing off the same story sends two emails", cases.negativeControl);
});
