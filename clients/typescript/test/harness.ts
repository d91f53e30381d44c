// The real reconciler binary (RECONCILER_BIN, built by scripts/test.mjs or
// the Makefile) started per test file with its own data directory, HTTP on
// port 0 and an embedded NATS on a free port; and tiny node:http servers for
// the fakes (a vendor, an API that misbehaves, a proxy that loses answers).
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import { type AddressInfo, type Socket, createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, type ClaimRequest, type ClientOptions } from "@reconciler/client";

export const TOKEN = "tok_ts_tenant_5f0c9d7e3b1a";
export const ADMIN_TOKEN = "tok_ts_admin_8e2a6c4b0d9f";
export const APPROVER_TOKEN = "tok_ts_approver_3c7e1a9b5d2f";
export const TENANT = "default";

/**
 * AUTONOMY_CONFIG is a config for the tokens above with an approver token
 * for the tenant (a file-only setting).
 */
export const AUTONOMY_CONFIG = `tenants:
  - id: ${TENANT}
    tokens: ["${TOKEN}"]
    approver_tokens: ["${APPROVER_TOKEN}"]
admin_tokens: ["${ADMIN_TOKEN}"]
`;

/** StartOptions add a config file and environment variables to `reconciler serve`. */
export interface StartOptions {
  config?: string;
  env?: Record<string, string>;
}

/** SKIP is false when the binary is there, else why the tests against it skip. */
export const SKIP: false | string = process.env["RECONCILER_BIN"]
  ? false
  : "RECONCILER_BIN is not set (npm test builds it with go build; without Go these tests skip)";

export interface Reconciler {
  url: string;
  client(opts?: Partial<ClientOptions>): Client;
  admin(opts?: Partial<ClientOptions>): Client;
  stop(): Promise<void>;
}

/** fast are client options for tests: quick retries and polls. */
export const fast: Partial<ClientOptions> = { retries: 2, backoffMs: 5, pollIntervalMs: 50 };

/** startReconciler runs `reconciler serve` and resolves once it logs "listening". */
export async function startReconciler(args: string[] = [], opts: StartOptions = {}): Promise<Reconciler> {
  const bin = process.env["RECONCILER_BIN"];
  if (!bin) throw new Error(String(SKIP));
  const data = mkdtempSync(join(tmpdir(), "reconciler-ts-data-"));
  if (opts.config !== undefined) {
    const path = join(data, "reconciler.yaml");
    writeFileSync(path, opts.config);
    args = ["--config", path, ...args];
  }
  const natsPort = await freePort();
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith("RECONCILER_")) env[k] = v; // no config, store or token from the caller's shell
  }
  env["RECONCILER_TOKEN"] = TOKEN;
  env["RECONCILER_ADMIN_TOKEN"] = ADMIN_TOKEN;
  Object.assign(env, opts.env);
  const child = spawn(
    bin,
    ["serve", "--data", data, "--http", "127.0.0.1:0", "--nats-listen", `127.0.0.1:${natsPort}`, ...args],
    { env, stdio: ["ignore", "ignore", "pipe"] },
  );
  let log = "";
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`reconciler did not listen within 30 s:\n${log}`)), 30_000);
    let buf = "";
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (chunk: string) => {
      log += chunk;
      buf += chunk;
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          const rec = JSON.parse(line) as { msg?: string; http?: string };
          if (rec.msg === "listening" && rec.http) {
            clearTimeout(timer);
            resolve(`http://${rec.http}`);
          }
        } catch {
          // not a log record
        }
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`reconciler exited (${code}) before listening:\n${log}`));
    });
  });
  return {
    url,
    client: (opts = {}) => new Client({ baseUrl: url, token: TOKEN, ...fast, ...opts }),
    admin: (opts = {}) => new Client({ baseUrl: url, token: ADMIN_TOKEN, tenant: TENANT, ...fast, ...opts }),
    stop: async () => {
      await stopChild(child);
      rmSync(data, { recursive: true, force: true });
    },
  };
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

/** freePort asks the kernel for a port nobody listens on. */
export async function freePort(): Promise<number> {
  const srv = createNetServer();
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const { port } = srv.address() as AddressInfo;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

/** Answer is what a fake server sends: a status and a body, or nothing (hang, or destroy the connection). */
export type Answer = { status: number; body?: string; headers?: Record<string, string> } | "hang" | "destroy";

export interface Fake {
  url: string;
  /** requests are the requests received, in order. */
  requests: { method: string; url: string; headers: IncomingMessage["headers"]; body: string }[];
  close(): Promise<void>;
}

/** serve starts a node:http server answering each request with handler's answer. */
export async function serve(
  handler: (req: IncomingMessage, body: string) => Answer | Promise<Answer>,
): Promise<Fake> {
  const sockets = new Set<Socket>();
  const fake: Fake = { url: "", requests: [], close: async () => {} };
  const srv = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => (body += c));
    req.on("end", () => {
      fake.requests.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
      Promise.resolve(handler(req, body)).then(
        (a) => {
          if (a === "hang") return;
          if (a === "destroy") {
            req.socket.destroy();
            return;
          }
          res.writeHead(a.status, { "Content-Type": "application/json", ...a.headers });
          res.end(a.body ?? "");
        },
        (err: unknown) => {
          res.writeHead(599);
          res.end(String(err));
        },
      );
    });
  });
  srv.on("connection", (s: Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  fake.url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  fake.close = () =>
    new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy(); // a hanging answer must not hold the close
      srv.close(() => resolve());
    });
  return fake;
}

/** json is an answer with a JSON body. */
export function json(status: number, v: unknown, headers: Record<string, string> = {}): Answer {
  return { status, body: JSON.stringify(v), headers };
}

let runs = 0;

/** chargeClaim is the claim of a PaymentIntent in a run of its own (each test gets fresh keys). */
export function chargeClaim(amount = 1050, runId = `run_ts_${process.pid}_${++runs}`): ClaimRequest {
  return {
    run_id: runId,
    tool: "stripe.payment_intents.create",
    tool_call_id: "call_1",
    vendor: "stripe",
    tool_class: "write_idempotent",
    intent: { amount, currency: "usd", customer: "cus_123" },
  };
}

/** forward sends a request the fake received on to url and returns the answer. */
export async function forward(url: string, req: IncomingMessage, body: string): Promise<Answer> {
  const headers: Record<string, string> = {};
  for (const name of ["authorization", "content-type", "accept", "traceparent", "idempotency-key"]) {
    const v = req.headers[name];
    if (typeof v === "string") headers[name] = v;
  }
  const init: RequestInit = { method: req.method ?? "GET", headers };
  if (body !== "") init.body = body;
  const resp = await fetch(url + (req.url ?? ""), init);
  return { status: resp.status, body: await resp.text() };
}
