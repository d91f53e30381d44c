// The checked-in src/generated/openapi.ts is what `npm run gen` makes of
// api/openapi.yaml now: a route or field added to the document without
// regenerating fails here (run `npm run gen` in clients/typescript).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const pkgDir = resolve(fileURLToPath(import.meta.url), "../../..");

test("src/generated/openapi.ts matches api/openapi.yaml", () => {
  const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")) as { scripts: Record<string, string> };
  // The gen script's own command and flags, with a temporary output.
  const [cmd, ...args] = pkg.scripts["gen"]!.split(/\s+/);
  const out = args.indexOf("-o");
  assert.equal(cmd, "openapi-typescript");
  assert.ok(out >= 0, "npm run gen names its output with -o");
  const checkedIn = join(pkgDir, args[out + 1]!);
  const dir = mkdtempSync(join(tmpdir(), "reconciler-ts-gen-"));
  try {
    args[out + 1] = join(dir, "openapi.ts");
    const r = spawnSync(join(pkgDir, "node_modules", ".bin", "openapi-typescript"), args, { cwd: pkgDir, encoding: "utf8" });
    assert.equal(r.status, 0, `openapi-typescript failed:\n${r.stderr}`);
    const fresh = readFileSync(args[out + 1]!, "utf8");
    assert.ok(
      fresh === readFileSync(checkedIn, "utf8"),
      "src/generated/openapi.ts is stale: api/openapi.yaml changed; run `npm run gen` in clients/typescript and commit the result",
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
