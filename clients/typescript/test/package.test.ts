// What the package promises its users: no runtime dependency, ESM with type
// declarations, and a library that loads where there is no Node (no node:
// import, no Node global).
import assert from "node:assert/strict";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const pkgDir = resolve(fileURLToPath(import.meta.url), "../../..");
const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")) as Record<string, unknown>;

test("zero runtime dependencies", () => {
  for (const field of ["dependencies", "peerDependencies", "optionalDependencies", "bundleDependencies"]) {
    assert.equal(pkg[field], undefined, `package.json has ${field}`);
  }
});

test("ESM with declarations for every module", () => {
  assert.equal(pkg["type"], "module");
  assert.deepEqual(pkg["exports"], { ".": { types: "./dist/index.d.ts", default: "./dist/index.js" } });
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
    // Every import is relative: nothing from node_modules either.
    for (const m of code.matchAll(/\bfrom\s+["']([^"']+)["']/g)) assert.match(m[1]!, /^\.\//, `${f} imports ${m[1]}`);
  }
});
