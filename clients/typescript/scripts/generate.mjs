// Generates src/generated/api.ts from docs/openapi.yaml with openapi-typescript, and fails on
// any warning it prints (its lint and bundling problems go to stderr): a document the
// generator reads with reservations is a bug in the document.

import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const document = process.argv[2] ?? join(root, "..", "..", "docs", "openapi.yaml");
const output = process.argv[3] ?? join(root, "src", "generated", "api.ts");
const cli = join(dirname(createRequire(import.meta.url).resolve("openapi-typescript/package.json")), "bin", "cli.js");

const run = spawnSync(process.execPath, [cli, document, "--output", output], {
  cwd: root,
  encoding: "utf8",
  env: { ...process.env, NO_COLOR: "1", FORCE_COLOR: "0" },
});
process.stdout.write(run.stdout ?? "");
process.stderr.write(run.stderr ?? "");
if (run.error !== undefined) {
  console.error(`generate: cannot run openapi-typescript: ${run.error.message}`);
  process.exit(1);
}
if (run.status !== 0) {
  console.error(`generate: openapi-typescript failed (exit ${run.status})`);
  process.exit(1);
}
if ((run.stderr ?? "").trim() !== "") {
  console.error("generate: openapi-typescript warned about the document (above); warnings fail the build");
  process.exit(1);
}
