// What the package promises its users: no runtime dependency (the agent
// frameworks are optional peers, imported only by their subpath adapters),
// ESM with type declarations, and a library that loads where there is no
// Node (no node: import, no Node global).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const pkgDir = resolve(fileURLToPath(import.meta.url), "../../..");
const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")) as Record<string, unknown>;

/** ADAPTERS are the subpath exports and the one framework each may import. */
const ADAPTERS: Record<string, { file: string; imports: RegExp }> = {
  "./ai": { file: "ai.js", imports: /^ai$/ },
  "./openai-agents": { file: "openai-agents.js", imports: /^@openai\/agents$/ },
  "./langchain": { file: "langchain.js", imports: /^@langchain\/core\/tools$/ },
};

test("zero runtime dependencies: the frameworks are optional peers", () => {
  for (const field of ["dependencies", "optionalDependencies", "bundleDependencies"]) {
    assert.equal(pkg[field], undefined, `package.json has ${field}`);
  }
  const peers = pkg["peerDependencies"] as Record<string, string>;
  assert.deepEqual(Object.keys(peers).sort(), ["@langchain/core", "@openai/agents", "ai"]);
  const meta = pkg["peerDependenciesMeta"] as Record<string, { optional?: boolean }>;
  for (const name of Object.keys(peers)) assert.equal(meta[name]?.optional, true, `${name} is an optional peer`);
  // Each is pinned for the tests, as the tests are what says the adapter works with it.
  const dev = pkg["devDependencies"] as Record<string, string>;
  for (const name of Object.keys(peers)) assert.match(dev[name] ?? "", /^\d+\.\d+\.\d+$/, `${name} is pinned in devDependencies`);
});

test("ESM with declarations for every module", () => {
  assert.equal(pkg["type"], "module");
  const exports: Record<string, unknown> = { ".": { types: "./dist/index.d.ts", default: "./dist/index.js" } };
  for (const [path, a] of Object.entries(ADAPTERS)) {
    exports[path] = { types: `./dist/${a.file.replace(/\.js$/, ".d.ts")}`, default: `./dist/${a.file}` };
  }
  assert.deepEqual(pkg["exports"], exports);
  const js = readdirSync(join(pkgDir, "dist"), { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".js"));
  assert.ok(js.includes("index.js"));
  for (const f of js) assert.ok(existsSync(join(pkgDir, "dist", f.replace(/\.js$/, ".d.ts"))), `${f} has no .d.ts`);
});

test("the library uses no node: module and no Node global", () => {
  const dist = join(pkgDir, "dist");
  for (const f of readdirSync(dist, { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".js"))) {
    // Comments may name what the code must not use.
    const code = readFileSync(join(dist, f), "utf8").replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
    assert.doesNotMatch(code, /\bfrom\s+["']node:|\bimport\(\s*["']node:|\brequire\(/, f);
    assert.doesNotMatch(code, /\b(process|Buffer|__dirname|global)\./, f);
    // Every import is relative: nothing from node_modules either, but an
    // adapter's own framework; and only an adapter imports an adapter.
    const adapter = Object.values(ADAPTERS).find((a) => a.file === f);
    for (const m of code.matchAll(/\b(?:from|import)\s*\(?\s*["']([^"']+)["']/g)) {
      const spec = m[1]!;
      if (adapter && adapter.imports.test(spec)) continue;
      assert.match(spec, /^\.\//, `${f} imports ${spec}`);
      if (!adapter) assert.ok(!Object.values(ADAPTERS).some((a) => spec === `./${a.file}`), `${f} imports the adapter ${spec}`);
    }
  }
});

test("the core import loads with no framework installed; an adapter needs its framework", () => {
  // A copy of dist/ where no node_modules is within reach.
  const dir = mkdtempSync(join(tmpdir(), "reconciler-ts-nodeps-"));
  try {
    cpSync(join(pkgDir, "dist"), join(dir, "dist"), { recursive: true });
    writeFileSync(join(dir, "package.json"), JSON.stringify({ type: "module" }));
    const load = (file: string) =>
      spawnSync(process.execPath, ["--input-type=module", "-e", `await import(${JSON.stringify(join(dir, "dist", file))})`], { cwd: dir, encoding: "utf8" });
    const core = load("index.js");
    assert.equal(core.status, 0, core.stderr);
    const ai = load("ai.js");
    assert.notEqual(ai.status, 0);
    assert.match(ai.stderr, /Cannot find package 'ai'/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
