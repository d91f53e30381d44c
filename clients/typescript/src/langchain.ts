/**
 * `@reconciler/client/langchain`: a write tool for LangChain.js
 * (`@langchain/core/tools`) whose every call goes through the reconciler
 * ledger. It is LangChain's own tool(): bind it to a chat model, give it
 * to an agent, or invoke it with the model's tool call.
 *
 *     import { guardedTool } from "@reconciler/client/langchain";
 *     const sendEmail = guardedTool({
 *       client, runId,
 *       tool: await client.getTool("email.send"),
 *       description: "Send an email.",
 *       schema: z.object({ to: z.string(), subject: z.string(), text: z.string() }),
 *       call: async (args, { vendorKey, localId, signal }) => resultFromResponse(await fetch(…), id),
 *     });
 *     const model = chatModel.bindTools([sendEmail]);
 *
 * The model sees the schema without key-like properties and the tool under
 * `modelName` (default: the registry name with "." as "_"); the intent is
 * the registry's intent_fields; the model reads an answer in words, never
 * a stack trace.
 *
 * @packageDocumentation
 */
import { type DynamicStructuredTool, tool } from "@langchain/core/tools";
import { type GuardOptions, GuardedTool, modelSchema, modelToolName } from "./guard.js";

/** GuardedToolOptions are the guard's options and LangChain's tool fields. */
export interface GuardedToolOptions<Args> extends GuardOptions<Args> {
  description: string;
  /** schema is a zod object or a JSON Schema object; key-like properties are removed from what the model sees. */
  schema: unknown;
  /** modelName is the tool name the model calls (default: the registry name with "." as "_"). */
  modelName?: string;
}

/** guardedTool returns a LangChain structured tool whose function runs under the ledger and answers the model with text. */
export function guardedTool<Args = Record<string, unknown>>(opts: GuardedToolOptions<Args>): DynamicStructuredTool {
  const g = new GuardedTool<Args>(opts);
  const schema = modelSchema(g, opts.schema);
  const run = async (input: unknown, config?: { toolCall?: { id?: string }; signal?: AbortSignal }) => {
    const answer = await g.run(input, { toolCallId: config?.toolCall?.id, signal: config?.signal, context: config });
    return answer.text;
  };
  // tool()'s overloads follow the schema's type (zod 3, zod 4, JSON
  // Schema); the guard takes any of them.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return tool(run as any, { name: opts.modelName ?? modelToolName(opts.tool.name), description: opts.description, schema: schema as any }) as unknown as DynamicStructuredTool;
}

export { GuardedTool, type GuardAnswer, type GuardCall, type GuardCallContext, type GuardOptions, type ToolView } from "./guard.js";
