/**
 * `@reconciler/client/openai-agents`: a write tool for the OpenAI Agents
 * SDK for JavaScript (`@openai/agents`) whose every call goes through the
 * reconciler ledger. It is the SDK's own tool(): put it in an Agent's tools.
 *
 *     import { guardedTool } from "@reconciler/client/openai-agents";
 *     const sendEmail = guardedTool({
 *       client, runId,
 *       tool: await client.getTool("email.send"),
 *       description: "Send an email.",
 *       parameters: z.object({ to: z.string(), subject: z.string(), text: z.string() }),
 *       call: async (args, { vendorKey, localId, signal }) => resultFromResponse(await fetch(…), id),
 *     });
 *     const agent = new Agent({ name: "ops", tools: [sendEmail] });
 *
 * The model sees the schema without key-like properties and the tool under
 * `modelName` (default: the registry name with "." as "_"); the intent is
 * the registry's intent_fields; the model reads an answer in words, never
 * a stack trace.
 *
 * @packageDocumentation
 */
import { tool } from "@openai/agents";
import { type GuardOptions, GuardedTool, isZodObject, modelSchema, modelToolName } from "./guard.js";

/** GuardedToolOptions are the guard's options and the SDK's tool fields. */
export interface GuardedToolOptions<Args> extends GuardOptions<Args> {
  description: string;
  /**
   * parameters is a zod object or a JSON Schema object; key-like
   * properties are removed from what the model sees. A JSON Schema for a
   * strict tool needs additionalProperties false and every property required.
   */
  parameters: unknown;
  /** strict is the SDK's strict mode (default: true for zod, false for a JSON Schema). */
  strict?: boolean;
  /** modelName is the function name the model calls (default: the registry name with "." as "_"). */
  modelName?: string;
}

/** guardedTool returns an `@openai/agents` function tool whose execute runs under the ledger and answers the model with text. */
export function guardedTool<Args = Record<string, unknown>>(opts: GuardedToolOptions<Args>): ReturnType<typeof tool> {
  const g = new GuardedTool<Args>(opts);
  const strict = opts.strict ?? isZodObject(opts.parameters);
  const parameters = modelSchema(g, opts.parameters, { strict });
  // The SDK's option types differ between strict and non-strict tools and
  // between its versions; the fields below are common to all of them.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const options: any = {
    name: opts.modelName ?? modelToolName(opts.tool.name),
    description: opts.description,
    parameters,
    strict,
    execute: async (input: unknown, runContext?: { context?: unknown }, details?: { toolCall?: { callId?: string }; signal?: AbortSignal }) => {
      const answer = await g.run(input, { toolCallId: details?.toolCall?.callId, signal: details?.signal, context: runContext?.context });
      return answer.text;
    },
  };
  return tool(options);
}

export { GuardedTool, type GuardAnswer, type GuardCall, type GuardCallContext, type GuardOptions, type ToolView } from "./guard.js";
