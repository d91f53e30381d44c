/**
 * `@reconciler/client/ai`: a write tool for the Vercel AI SDK (`ai` 5 or
 * later) whose every call goes through the reconciler ledger. It is `ai`'s
 * own tool(): give it to generateText/streamText/an Agent like any other.
 *
 *     import { guardedTool } from "@reconciler/client/ai";
 *     const sendEmail = guardedTool({
 *       client, runId,
 *       tool: await client.getTool("email.send"),      // name, vendor, class, intent_fields, key_placement
 *       description: "Send an email.",
 *       inputSchema: z.object({ to: z.string(), subject: z.string(), text: z.string() }),
 *       call: async (args, { vendorKey, localId, signal }) => resultFromResponse(await fetch(…), id),
 *     });
 *     await generateText({ model, tools: { email_send: sendEmail }, … });
 *
 * The model sees the schema without key-like properties; the intent is the
 * registry's intent_fields; the model reads an answer in words (`timeout:
 * outcome unknown — do not retry with new arguments`…), never a stack trace.
 *
 * @packageDocumentation
 */
import { jsonSchema, tool, type Tool } from "ai";
import { type GuardOptions, GuardedTool, isZodObject, modelSchema } from "./guard.js";

/** GuardedToolOptions are the guard's options and ai's tool fields. */
export interface GuardedToolOptions<Args> extends GuardOptions<Args> {
  description: string;
  /** inputSchema is a zod object or a JSON Schema object; key-like properties are removed from what the model sees. */
  inputSchema: unknown;
}

/** guardedTool returns an `ai` tool whose execute runs under the ledger and answers the model with text. */
export function guardedTool<Args = Record<string, unknown>>(opts: GuardedToolOptions<Args>): Tool<Args, string> {
  const g = new GuardedTool<Args>(opts);
  const schema = modelSchema(g, opts.inputSchema);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const inputSchema: any = isZodObject(schema) ? schema : jsonSchema(schema as Parameters<typeof jsonSchema>[0]);
  return tool<Args, string>({
    description: opts.description,
    inputSchema,
    execute: async (input, options) => {
      const o = options as { toolCallId?: string; abortSignal?: AbortSignal; experimental_context?: unknown };
      const answer = await g.run(input, { toolCallId: o.toolCallId, signal: o.abortSignal, context: o.experimental_context });
      return answer.text;
    },
  });
}

export { GuardedTool, type GuardAnswer, type GuardCall, type GuardCallContext, type GuardOptions, type ToolView } from "./guard.js";
