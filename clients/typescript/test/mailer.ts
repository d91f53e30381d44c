// A fake email API that really sends: POST /emails with a JSON body
// {from, to, subject, text, idempotency_key, metadata_local_id | tags}. An
// Idempotency-Key header (as Resend takes it) or else a body
// idempotency_key (as Square takes its) is remembered: the
// same key with the same message answers the first answer again
// (Idempotent-Replayed: true, the same email id); the same key with another
// message is a 409 invalid_idempotent_request; a new key, or none, sends a
// new email. The queued faults: "late" sends the email and answers only
// after `lateMs` (a client that gives up first never learns it was sent).
import { type Answer, type Fake, json, serve } from "./harness.js";

export type MailFault = "none" | "late";

export interface MailPost {
  key: string | undefined;
  message: Record<string, unknown>;
  replayed: boolean;
}

export interface Mailer {
  url: string;
  /** posts are the POST /emails received, in order. */
  posts: MailPost[];
  /** sent is how many emails were sent: the side effects. */
  sent(): number;
  close(): Promise<void>;
}

export async function startMailer(opts: { lateMs?: number } = {}, ...faults: MailFault[]): Promise<Mailer> {
  const queue = [...faults];
  const lateMs = opts.lateMs ?? 800;
  const stored = new Map<string, { message: string; id: string }>();
  const posts: MailPost[] = [];
  let sent = 0;
  const fake: Fake = await serve(async (req, body): Promise<Answer> => {
    if (req.method !== "POST" || req.url !== "/emails") return json(404, { error: "no such route" });
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(body) as Record<string, unknown>;
    } catch {
      return json(422, { error: "validation_error", message: "body is not JSON" });
    }
    const { idempotency_key: rawKey, ...message } = parsed;
    const header = req.headers["idempotency-key"];
    const key = typeof header === "string" && header !== "" ? header : typeof rawKey === "string" && rawKey !== "" ? rawKey : undefined;
    const post: MailPost = { key, message, replayed: false };
    posts.push(post);
    if (typeof message["to"] !== "string" || typeof message["subject"] !== "string") {
      return json(422, { error: "validation_error", message: "to and subject are required" });
    }
    const canonical = JSON.stringify(Object.entries(message).sort(([a], [b]) => (a < b ? -1 : 1)));
    const seen = key === undefined ? undefined : stored.get(key);
    if (seen) {
      if (seen.message !== canonical) return json(409, { error: "invalid_idempotent_request", message: "the key was used with another message" });
      post.replayed = true;
      return json(200, { id: seen.id }, { "Idempotent-Replayed": "true" });
    }
    const id = `em_${++sent}`;
    if (key !== undefined) stored.set(key, { message: canonical, id });
    if ((queue.shift() ?? "none") === "late") await new Promise((r) => setTimeout(r, lateMs));
    return json(200, { id });
  });
  return { url: fake.url, posts, sent: () => sent, close: fake.close };
}
