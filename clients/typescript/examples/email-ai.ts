// An email agent on the Vercel AI SDK whose email tool sends once, however
// often the model, the SDK or the network retries it: the tool is
// @reconciler/client/ai's guardedTool, the email goes through Resend.
//
//   npm i @reconciler/client ai zod
//   RECONCILER_TOKEN=… RESEND_API_KEY=… AI_GATEWAY_API_KEY=… node email-ai.js "Email bob@example.com that his refund is on its way"
//
// RECONCILER_URL (default http://127.0.0.1:8080), RESEND_URL (default
// https://api.resend.com), MODEL (default openai/gpt-4o-mini, through the AI
// Gateway) and RUN_ID (default: a new run; the same id resumes a run
// without sending again) are optional.
import { randomUUID } from "node:crypto";
import { Client, type ToolEntry, resultFromResponse } from "@reconciler/client";
import { guardedTool } from "@reconciler/client/ai";
import { generateText, stepCountIs } from "ai";
import { z } from "zod";

/** EMAIL_SEND is the registry entry (PUT /v1/tools/email.send): what the guard reads. */
export const EMAIL_SEND: ToolEntry = {
  vendor: "resend",
  class: "write_idempotent",
  side_effect: "email",
  key_placement: { header: "Idempotency-Key" }, // Resend keeps it 24 h
  intent_fields: ["to", "subject", "text"], // the email; never a timestamp or an id the model made up
  autonomy: "autonomous",
  checklist: {
    side_effect_documented: true,
    key_born_in_runtime: true,
    ledger_or_unique_field: true,
    timeout_leaves_unknown: true,
    error_classes_mapped: true,
    duplicate_delivery_test: true,
    checked_by: "you@example.com",
  },
};

export interface Resend {
  baseUrl: string;
  apiKey: string;
}

export async function emailTool(reconciler: Client, runId: string, resend: Resend) {
  // Registering is idempotent: an unchanged entry stays as it is.
  const { tool } = await reconciler.putTool("email.send", EMAIL_SEND);
  return guardedTool<{ to: string; subject: string; text: string }>({
    client: reconciler,
    runId,
    tool, // name, vendor, class, intent_fields, key_placement
    description: "Send an email. Calling it again with the same arguments never sends it twice.",
    inputSchema: z.object({ to: z.string(), subject: z.string(), text: z.string() }),
    // The vendor call: the key where Resend takes it, the local id where its webhook echoes it.
    call: async ({ to, subject, text }, { vendorKey, localId, signal }) => {
      const resp = await fetch(`${resend.baseUrl}/emails`, {
        method: "POST",
        headers: { Authorization: `Bearer ${resend.apiKey}`, "Idempotency-Key": vendorKey, "Content-Type": "application/json" },
        body: JSON.stringify({ from: "Ops <ops@example.com>", to, subject, text, tags: [{ name: "metadata_local_id", value: localId }] }),
        signal,
      });
      const body = (await resp.json().catch(() => ({}))) as { id?: string };
      // Any answer is a result, a refusal included; only no answer throws.
      return { ...resultFromResponse(resp, body.id), output: { id: body.id } };
    },
  });
}

async function main(prompt: string) {
  const env = process.env;
  const reconciler = new Client({
    baseUrl: env["RECONCILER_URL"] ?? "http://127.0.0.1:8080",
    token: env["RECONCILER_TOKEN"] ?? "",
    callTimeoutMs: 10_000, // a slower answer is a timeout: the ledger holds it as unknown, the model is told so
  });
  const runId = env["RUN_ID"] ?? `run_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const sendEmail = await emailTool(reconciler, runId, { baseUrl: env["RESEND_URL"] ?? "https://api.resend.com", apiKey: env["RESEND_API_KEY"] ?? "" });
  const { text } = await generateText({
    model: env["MODEL"] ?? "openai/gpt-4o-mini",
    tools: { email_send: sendEmail },
    stopWhen: stepCountIs(5),
    prompt,
  });
  console.log(`${runId}: ${text}`);
}

if (import.meta.url === `file://${process.argv[1]}`) await main(process.argv[2] ?? "Email bob@example.com that his refund is on its way.");
