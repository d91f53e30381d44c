import {
  Client,
  EscalatedError,
  StoppedError,
  UnsettledError,
  resultFromResponse,
  scrub,
  scrubSchema,
} from "@reconciler/client";

// The shape of the Vercel AI SDK's tool(): pass the same object to `tool`
// from "ai" (with `jsonSchema(parameters)`); here it stands alone.
export interface Tool<Args, Result> {
  description: string;
  parameters: Record<string, unknown>;
  execute(args: Args, options: { toolCallId: string; abortSignal?: AbortSignal }): Promise<Result>;
}
const tool = <Args, Result>(t: Tool<Args, Result>) => t;

export type ChargeArgs = { amount: number; currency: string; customer: string };

export function chargeTool(reconciler: Client, runId: string, stripe: { baseUrl: string; apiKey: string }) {
  return tool({
    description: "Charge a customer. Calling it again with the same arguments never charges twice.",
    // The model is not shown a field that would let it pick the write's identity.
    parameters: scrubSchema({
      type: "object",
      properties: {
        amount: { type: "integer", description: "minor units (cents)" },
        currency: { type: "string" },
        customer: { type: "string" },
        idempotency_key: { type: "string" },
      },
      required: ["amount", "currency", "customer", "idempotency_key"],
    }),
    execute: async (args: ChargeArgs, { toolCallId, abortSignal }) => {
      // A model may send one anyway: the ledger's key is the only one used.
      const { amount, currency, customer } = scrub(args);
      try {
        const out = await reconciler.do(
          {
            run_id: runId,
            tool: "stripe.payment_intents.create",
            tool_call_id: toolCallId,
            vendor: "stripe",
            tool_class: "write_idempotent",
            // Only what defines the side effect: never a timestamp or an id the model made up.
            intent: { amount, currency, customer },
            expect: { amount, currency },
          },
          async ({ key, localId, signal }) => {
            const resp = await fetch(`${stripe.baseUrl}/v1/payment_intents`, {
              method: "POST",
              headers: {
                Authorization: `Bearer ${stripe.apiKey}`,
                "Idempotency-Key": key,
                "Content-Type": "application/x-www-form-urlencoded",
              },
              body: new URLSearchParams({
                amount: String(amount),
                currency,
                customer,
                "metadata[metadata_local_id]": localId,
              }),
              signal,
            });
            const body = await resp.json().catch(() => ({}));
            // Any answer is a result, a decline included; only no answer throws.
            return resultFromResponse(resp, body.id ?? body.error?.payment_intent?.id);
          },
          { signal: abortSignal },
        );
        return { status: "charged", paymentIntent: out.receiptId };
      } catch (err) {
        if (err instanceof StoppedError) {
          return { status: "refused", reason: err.code, advice: "do not retry this charge" };
        }
        if (err instanceof EscalatedError) {
          return { status: "escalated", advice: "a human is checking this charge; stop the run here" };
        }
        if (err instanceof UnsettledError) {
          return { status: "unknown", advice: "not known yet; calling again with the same arguments is safe" };
        }
        throw err;
      }
    },
  });
}
