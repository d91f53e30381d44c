// drill-runner.mjs is the TypeScript agent runtime of `reconciler drill
// --runtime typescript`: it drives the built client (dist/, what the
// package ships) exactly as an agent runtime would, on the harness's
// orders.
//
// It speaks the runner protocol of drill/doc.go (version 1): it greets with
// one JSON line on stdout, then reads one op per line on stdin and writes
// one answer per line on stdout; ops run at once, so answers come in any
// order, matched by `id`. Nothing else is written to stdout. At the end of
// stdin it exits. The harness sets its environment: RECONCILER_DRILL_URL
// (agent `a`'s API base URL is that + "/a"), RECONCILER_DRILL_TOKEN, and
// the client settings RECONCILER_DRILL_POLL_MS, _WAIT_MS, _RETRIES and
// _BACKOFF_MS. Build the client first: npm ci && npm run build.
//
// It announces the protocol steps await_approval and queued
// (CAPABILITIES): do is the client's own do(), which waits out an approval
// and throws a QueuedError on an outbox tool's claim, or with the op's
// wait_queued (waitQueued) waits for the worker's result; the runner only
// maps what it returns or throws onto the protocol.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import {
  ApiError,
  Client,
  EscalatedError,
  InvalidResponseError,
  NetworkError,
  QueuedError,
  ReportFailedError,
  StoppedError,
  UnknownDecisionError,
  UnsettledError,
  resultFromResponse,
  scrub,
} from "../dist/index.js";

const PROTOCOL = 1;
// The protocol steps beyond the base this runner implements (drill/doc.go).
const CAPABILITIES = ["await_approval", "queued"];
const env = process.env;
const clients = new Map();

function write(line) {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

/** client is the agent's Client, made on first use. */
function client(agent) {
  let c = clients.get(agent);
  if (!c) {
    c = new Client({
      baseUrl: `${env.RECONCILER_DRILL_URL}/${agent}`,
      token: env.RECONCILER_DRILL_TOKEN,
      pollIntervalMs: Number(env.RECONCILER_DRILL_POLL_MS ?? 50),
      waitMs: Number(env.RECONCILER_DRILL_WAIT_MS ?? 2000),
      retries: Number(env.RECONCILER_DRILL_RETRIES ?? 2),
      backoffMs: Number(env.RECONCILER_DRILL_BACKOFF_MS ?? 20),
    });
    clients.set(agent, c);
  }
  return c;
}

/** receiptOf is the first non-empty string at one of paths (dotted) of the JSON answer. */
function receiptOf(doc, paths) {
  for (const path of paths ?? []) {
    let v = doc;
    for (const name of path.split(".")) v = v !== null && typeof v === "object" ? v[name] : undefined;
    if (typeof v === "string" && v) return v;
  }
  return undefined;
}

/**
 * vendorCall makes the call spec describes with key and localId, bounded by
 * its timeout and by signal. Every answer is a result, a refusal too; no
 * answer throws (a TimeoutError past the timeout).
 */
async function vendorCall(spec, key, localId, signal) {
  const form = new URLSearchParams(spec.form ?? {});
  if (spec.local_id_field) form.set(spec.local_id_field, localId);
  const headers = { "Content-Type": "application/x-www-form-urlencoded" };
  if (spec.key_header) headers[spec.key_header] = key;
  const ctl = new AbortController();
  const timer = setTimeout(
    () => ctl.abort(new DOMException("vendor call timed out", "TimeoutError")),
    spec.timeout_ms ?? 10000,
  );
  const onAbort = () => ctl.abort(signal.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const resp = await fetch(spec.url, { method: spec.method ?? "POST", headers, body: form, signal: ctl.signal });
    const text = await resp.text();
    let doc;
    try {
      doc = JSON.parse(text);
    } catch {
      doc = undefined;
    }
    return resultFromResponse(resp, receiptOf(doc, spec.receipt));
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
  }
}

function resultJSON(r) {
  const out = {};
  if (r?.httpStatus) out.http_status = r.httpStatus;
  if (r?.receiptId) out.receipt_id = r.receiptId;
  if (r?.headers && Object.keys(r.headers).length > 0) out.headers = r.headers;
  return out;
}

function outcomeJSON(o) {
  return {
    decision: o.decision,
    key: o.key,
    local_id: o.localId,
    row: o.row ?? null,
    called: o.called,
    result: resultJSON(o.result),
    kind: o.kind ?? "",
    replayed: o.replayed,
    waited: o.waited,
    awaited_approval: o.awaitedApproval ?? false,
    queued: o.queued ?? false,
  };
}

function claimJSON(resp) {
  return { decision: resp.decision, code: resp.code ?? "", row: resp.row ?? null, http_status: resp.httpStatus };
}

/**
 * awaitingApproval tells a do() that ended while a human had not decided:
 * the client throws a plain UnsettledError for it, whose outcome says it
 * awaited approval and called nothing (a call after the grant that did not
 * settle is an UnsettledError too, but called).
 */
function awaitingApproval(err) {
  return err?.constructor === UnsettledError && err.outcome?.awaitedApproval === true && !err.outcome.called;
}

/** errorJSON is err in the protocol's error classes. */
function errorJSON(err) {
  const e = { message: err instanceof Error ? err.message : String(err) };
  if (err instanceof QueuedError) return { ...e, class: "queued", key: err.key }; // before UnsettledError: it is one
  if (awaitingApproval(err)) return { ...e, class: "awaiting_approval", key: err.key };
  if (err instanceof EscalatedError) e.class = "escalated"; // before UnsettledError: it is one
  else if (err instanceof ReportFailedError) e.class = "report_failed";
  else if (err instanceof UnsettledError) e.class = "unsettled";
  else if (err instanceof StoppedError) Object.assign(e, { class: "stopped", code: err.code });
  else if (err instanceof UnknownDecisionError) Object.assign(e, { class: "unknown_decision", code: err.decision });
  else if (err instanceof ApiError) Object.assign(e, { class: "api", code: err.code, status: err.status });
  else if (err instanceof NetworkError) e.class = "transport";
  else if (err instanceof InvalidResponseError) e.class = "protocol";
  else {
    e.class = "error";
    if (err instanceof Error && err.stack) e.message = err.stack;
  }
  if (err instanceof UnsettledError) Object.assign(e, { key: err.key, row_status: err.status ?? "" });
  else if (err instanceof StoppedError) e.key = err.key;
  return e;
}

const ops = {
  async do(req) {
    try {
      const out = await client(req.agent).do(
        req.claim,
        ({ key, localId, signal }) => vendorCall(req.call, key, localId, signal),
        { waitQueued: req.wait_queued === true },
      );
      return { outcome: outcomeJSON(out) };
    } catch (err) {
      const a = { error: errorJSON(err) };
      if (err?.outcome) a.outcome = outcomeJSON(err.outcome);
      return a;
    }
  },
  async claim(req) {
    return { claim: claimJSON(await client(req.agent).claim(req.claim)) };
  },
  async call(req) {
    try {
      return { result: resultJSON(await vendorCall(req.call, req.key ?? "", req.local_id ?? "")) };
    } catch (err) {
      // No answer: a timeout, a broken connection.
      return { result: {}, error: { class: "transport", message: err instanceof Error ? err.message : String(err) } };
    }
  },
  async report(req) {
    return { row: await client(req.agent).report(req.key, req.outcome) };
  },
  async compensate(req) {
    return { claim: claimJSON(await client(req.agent).compensate(req.key, req.action)) };
  },
  async get(req) {
    return { row: await client(req.agent).get(req.key) };
  },
  async scrub(req) {
    return { args: scrub(req.args ?? {}) };
  },
};

async function serve(req) {
  let a;
  try {
    const op = Object.hasOwn(ops, req.op) ? ops[req.op] : undefined;
    a = op ? await op(req) : { error: { class: "unsupported", message: `op ${JSON.stringify(req.op)}` } };
  } catch (err) {
    a = { error: errorJSON(err) };
  }
  write({ id: req.id ?? 0, ...a });
}

const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
write({ protocol: PROTOCOL, runtime: "typescript", client: `${pkg.name} ${pkg.version}`, capabilities: CAPABILITIES });
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (line.trim()) void serve(JSON.parse(line));
});
// At the end of stdin the harness is done; an op still in flight (a drill
// that timed out) is abandoned.
lines.on("close", () => process.exit(0));
