// npm test: builds the reconciler binary once (unless RECONCILER_BIN names
// one, as `make test-typescript` does) and runs the compiled tests with
// node:test. Without Go the tests that need the binary skip and say so.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const repo = resolve(pkg, "../..");
const env = { ...process.env };
let built;
if (!env.RECONCILER_BIN) {
  built = mkdtempSync(join(tmpdir(), "reconciler-ts-bin-"));
  const bin = join(built, "reconciler");
  console.error(`npm test: go build -o ${bin} ./cmd/reconciler`);
  const r = spawnSync("go", ["build", "-o", bin, "./cmd/reconciler"], { cwd: repo, stdio: "inherit" });
  if (r.status === 0) env.RECONCILER_BIN = bin;
  else {
    console.error(
      "npm test: go build failed (see above; the Makefile sets GOTOOLCHAIN=go1.27.3, `make test-typescript` builds the binary): the tests against the binary skip",
    );
  }
}
const dir = join(pkg, "build", "test");
const files = readdirSync(dir).filter((f) => f.endsWith(".test.js")).sort().map((f) => join(dir, f));
const r = spawnSync(process.execPath, ["--test", ...files], { stdio: "inherit", env });
if (built) rmSync(built, { recursive: true, force: true });
process.exit(r.status ?? 1);
