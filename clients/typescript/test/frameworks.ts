// The three frameworks driven through one agent run each, with the
// framework's own mock or fake model playing the story's EmailModel: the AI
// SDK's generateText with ai/test's MockLanguageModelV3; the Agents SDK's
// run() with a Model of its own interface (the SDK ships no fake model; a
// custom Model is how it takes other providers); LangChain's tool-calling
// loop (bindTools, invoke, run each tool call, feed back its ToolMessage)
// with @langchain/core's FakeStreamingChatModel for each turn. A driver
// builds the tool with the adapter from the run's spec, or with `build`
// (an example's own tool). Tracing of the Agents SDK is off: nothing leaves
// the machine.
import { guardedTool as aiTool } from "@reconciler/client/ai";
import { guardedTool as langchainTool } from "@reconciler/client/langchain";
import { guardedTool as agentsTool } from "@reconciler/client/openai-agents";
import { AIMessage, AIMessageChunk, type BaseMessage, HumanMessage, type ToolMessage } from "@langchain/core/messages";
import { FakeStreamingChatModel } from "@langchain/core/utils/testing";
import { Agent, type Model, type ModelRequest, type ModelResponse, Usage, run, setTracingDisabled } from "@openai/agents";
import { type Tool, generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";
import { type Driver, EMAIL_SCHEMA, type EmailArgs, type EmailModel, type RunSpec } from "./story.js";

setTracingDisabled(true);

const PROMPT = "Email Bob that his refund is on its way.";

/** emailZod is EMAIL_SCHEMA as zod: the schema as its author wrote it, key field and all. */
const emailZod = () =>
  z.object({
    to: z.string(),
    subject: z.string(),
    text: z.string(),
    requested_at: z.string().describe("when the user asked (ISO 8601)"),
    idempotency_key: z.string().describe("a unique id for this email"),
  });

const description = "Send an email.";

// --- The Vercel AI SDK ---------------------------------------------------

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 10, text: 10, reasoning: undefined },
};

/** aiToolResults are the tool results in the prompt the SDK sends the model, in order. */
function aiToolResults(prompt: readonly { role: string; content: unknown }[]): string[] {
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

/** aiModel is ai/test's mock model answering as the EmailModel does; it records the tool schemas it is shown. */
function aiModel(model: EmailModel, schemas: unknown[]) {
  return new MockLanguageModelV3({
    doGenerate: async (options) => {
      for (const t of options.tools ?? []) if (t.type === "function") schemas.push(t.inputSchema);
      const step = model.next(aiToolResults(options.prompt));
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
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function aiDriver(build?: (spec: RunSpec) => Promise<Tool<any, string>>): Driver {
  return {
    name: "ai",
    async run(spec) {
      const { client, runId, tool, call, scrub, model } = spec;
      const sendEmail = build ? await build(spec) : aiTool<EmailArgs>({ client, runId, tool, call, scrub, description, inputSchema: emailZod() });
      const schemas: unknown[] = [];
      const r = await generateText({ model: aiModel(model, schemas), tools: { email_send: sendEmail }, stopWhen: stepCountIs(6), prompt: PROMPT });
      return { results: r.steps.flatMap((s) => s.toolResults.map((tr) => String(tr.output))), schemas };
    },
  };
}

// --- The OpenAI Agents SDK -----------------------------------------------

/** agentsToolResults are the function call outputs in the run's input items, in order. */
function agentsToolResults(input: ModelRequest["input"]): string[] {
  if (typeof input === "string") return [];
  const out: string[] = [];
  for (const item of input as { type?: string; output?: unknown }[]) {
    if (item.type !== "function_call_result") continue;
    const o = item.output as { type?: string; text?: string } | string;
    out.push(typeof o === "string" ? o : (o.text ?? JSON.stringify(o)));
  }
  return out;
}

/** ScriptedModel is an Agents SDK Model whose answers are the EmailModel's; it records the tool schemas it is shown. */
class ScriptedModel implements Model {
  readonly schemas: unknown[] = [];
  #n = 0;
  constructor(private readonly model: EmailModel) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    for (const t of request.tools) if (t.type === "function") this.schemas.push(t.parameters);
    const step = this.model.next(agentsToolResults(request.input));
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

export function agentsDriver(build?: (spec: RunSpec) => Promise<ReturnType<typeof agentsTool>>): Driver {
  return {
    name: "openai_agents",
    async run(spec) {
      const { client, runId, tool, call, scrub, model } = spec;
      const sendEmail = build ? await build(spec) : agentsTool<EmailArgs>({ client, runId, tool, call, scrub, description, parameters: emailZod() });
      const llm = new ScriptedModel(model);
      const agent = new Agent({ name: "ops", instructions: "You send the emails the user asks for.", model: llm, tools: [sendEmail] });
      const result = await run(agent, PROMPT, { maxTurns: 6 });
      const results: string[] = [];
      for (const item of result.newItems) if (item.type === "tool_call_output_item") results.push(String(item.output));
      return { results, schemas: llm.schemas };
    },
  };
}

// --- LangChain.js ----------------------------------------------------------

export function langchainDriver(build?: (spec: RunSpec) => Promise<ReturnType<typeof langchainTool>>): Driver {
  return {
    name: "langchain",
    async run(spec) {
      const { client, runId, tool, call, scrub, model } = spec;
      // A JSON Schema here (the other frameworks get zod).
      const sendEmail = build ? await build(spec) : langchainTool<EmailArgs>({ client, runId, tool, call, scrub, description, schema: structuredClone(EMAIL_SCHEMA) });
      const schemas: unknown[] = [];
      const results: string[] = [];
      const messages: BaseMessage[] = [new HumanMessage(PROMPT)];
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
}
