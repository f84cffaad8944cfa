// Test support: the real unique-server (UNIQUE_SERVER_BIN, else the workspace's cargo build)
// on a free loopback port, and kick receivers on loopback.

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** The Rust workspace holding this package (dist/test/ is four levels below it). */
export const WORKSPACE = resolve(fileURLToPath(import.meta.url), "..", "..", "..", "..", "..");

export const ADMIN_TOKEN = "ts-client-test-token-admin-0123456789";
export const OTHER_TOKEN = "ts-client-test-token-other-0123456789";
export const SIGNING_KEY = "ts-client-test-signing-key-0123456789abcdef";
/** The project ADMIN_TOKEN covers; OTHER_TOKEN covers only "elsewhere". */
export const PROJECT = "ts";

/** The path of a workspace binary: the variable's value, or cargo's build of the package. */
export function binary(variable: string, pkg: string): string {
  const given = process.env[variable];
  if (given !== undefined && given !== "") {
    return given;
  }
  const build = spawnSync("cargo", ["build", "--quiet", "-p", pkg, "--bin", pkg], {
    cwd: WORKSPACE,
    stdio: ["ignore", "inherit", "inherit"],
  });
  if (build.status !== 0) {
    throw new Error(`${variable} is unset and \`cargo build -p ${pkg}\` failed (${build.error?.message ?? build.status})`);
  }
  const target = process.env["CARGO_TARGET_DIR"] ?? "target";
  return resolve(WORKSPACE, target, "debug", pkg);
}

/** One running unique-server and the files it was started with. */
export interface TestServer {
  url: string;
  keysPath: string;
  dir: string;
  stop(): void;
}

const children: ChildProcess[] = [];
process.on("exit", () => {
  for (const child of children) {
    child.kill("SIGKILL");
  }
});

/**
 * unique-server with the memory store, tokens (ADMIN_TOKEN: project "ts", admin role;
 * OTHER_TOKEN: project "elsewhere") and signed kicks, plus `extra` flags.
 */
export async function startServer(extra: string[] = []): Promise<TestServer> {
  const bin = binary("UNIQUE_SERVER_BIN", "unique-server");
  const dir = mkdtempSync(join(tmpdir(), "unique-ts-test-"));
  const tokens = join(dir, "tokens.json");
  const keysPath = join(dir, "kick.keys");
  writeFileSync(
    tokens,
    JSON.stringify({
      tokens: [
        { name: "admin", token: ADMIN_TOKEN, projects: [PROJECT], roles: ["admin"] },
        { name: "other", token: OTHER_TOKEN, projects: ["elsewhere"] },
      ],
    }),
    { mode: 0o600 },
  );
  writeFileSync(keysPath, `# test key\n${SIGNING_KEY}\n`, { mode: 0o600 });
  const child = spawn(
    bin,
    ["--listen", "127.0.0.1:0", "--store", "memory", "--auth-tokens", tokens, "--kick-signing-keys", keysPath, ...extra],
    { env: { ...process.env, RUST_LOG: "warn" }, stdio: ["ignore", "pipe", "inherit"] },
  );
  children.push(child);
  const announce = "unique-server listening on ";
  const line = await new Promise<string>((resolveLine, reject) => {
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
    lines.once("line", resolveLine);
    child.once("exit", (code) => reject(new Error(`unique-server exited (${code}) before it listened`)));
    child.once("error", (e) => reject(new Error(`cannot start ${bin}: ${e.message}`)));
  });
  if (!line.startsWith(announce)) {
    child.kill("SIGKILL");
    throw new Error(`unique-server did not start: ${line}`);
  }
  return { url: line.slice(announce.length).trim(), keysPath, dir, stop: () => child.kill("SIGTERM") };
}

/** An HTTP server on a free loopback port. */
export async function listen(handler: RequestListener): Promise<{ server: Server; url: string }> {
  const server = createServer(handler);
  await new Promise<void>((ready) => server.listen(0, "127.0.0.1", ready));
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}` };
}

/** Closes a server and every connection it holds. */
export async function close(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((done) => server.close(() => done()));
}

/** A fresh claim_id (UUIDv4), one per login. */
export function claimId(): string {
  return randomUUID();
}

/** A uid no other test uses. */
let nextUid = BigInt(Date.now()) * 1000n;
export function freshUid(): number {
  nextUid += 1n;
  return Number(nextUid % 9_000_000_000_000n) + 1;
}
