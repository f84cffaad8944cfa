// The kick receiver, request by request (in process), and `unique node-check` against it.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { request as httpRequest } from "node:http";
import { test } from "node:test";

import { type Ack, type Kick, kickHandler, type KickTarget, SessionTable, SigningKeys, ReplacedWhileLoggingIn, checkExposure } from "../src/index.js";
import { binary, close, listen, SIGNING_KEY, startServer } from "./support.js";

const keys = new SigningKeys([SIGNING_KEY]);
const key = { project: "game", env: "prod", uid: 42n, slot: "" };

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One raw request: `chunked` sends the body without a Content-Length. */
function send(url: string, method: string, body: string, headers: Record<string, string> = {}, chunked = false): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}/kick`, { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on("error", reject);
    if (chunked) {
      req.setHeader("Transfer-Encoding", "chunked");
      for (let at = 0; at < body.length; at += 1000) {
        req.write(body.slice(at, at + 1000));
      }
    } else if (body !== "") {
      req.setHeader("Content-Length", Buffer.byteLength(body));
      req.write(body);
    }
    req.end();
  });
}

function signedKick(kick: Record<string, unknown>): [string, Record<string, string>] {
  const body = JSON.stringify(kick);
  return [body, { "Content-Type": "application/json", "Unique-Signature": keys.sign(body, Date.now() / 1000) }];
}

async function withReceiver(target: KickTarget, run: (url: string) => Promise<void>): Promise<void> {
  const { server, url } = await listen(kickHandler(target, { keys }));
  try {
    await run(url);
  } finally {
    await close(server);
  }
}

test("the request rules: POST only, 4 KiB by length and while reading, signatures first, payloads checked", async () => {
  const table = new SessionTable();
  await withReceiver(table, async (url) => {
    const get = await send(url, "GET", "");
    assert.equal(get.status, 405);
    assert.equal(get.headers["allow"], "POST");
    assert.equal(JSON.parse(get.body).error, "method_not_allowed");

    const big = "x".repeat(4097);
    assert.equal((await send(url, "POST", big, keysHeader(big))).status, 413);
    assert.equal((await send(url, "POST", big, keysHeader(big), true)).status, 413);

    // Exactly 4 KiB, with unknown fields, is a kick.
    const base = JSON.stringify({ project: "game", env: "prod", uid: 7, gen: 1, pad: "" });
    const exact = base.replace('"pad":""', `"pad":"${"p".repeat(4096 - base.length)}"`);
    assert.equal(Buffer.byteLength(exact), 4096);
    const ok = await send(url, "POST", exact, keysHeader(exact));
    assert.equal(ok.status, 200, ok.body);
    assert.deepEqual(JSON.parse(ok.body), { ack: "no-session" });

    const [body] = signedKick({ project: "game", env: "prod", uid: 7, gen: 1 });
    const unsigned = await send(url, "POST", body);
    assert.equal(unsigned.status, 401);
    assert.equal(JSON.parse(unsigned.body).error, "unauthenticated");
    const forged = await send(url, "POST", body, { "Unique-Signature": new SigningKeys(["a-forged-key-of-at-least-thirty-two-bytes"]).sign(body, Date.now() / 1000) });
    assert.equal(forged.status, 401);
    const stale = await send(url, "POST", body, { "Unique-Signature": keys.sign(body, Date.now() / 1000 - 301) });
    assert.equal(stale.status, 401);

    for (const bad of [
      "not json",
      "[]",
      JSON.stringify({ project: "game", env: "prod", uid: 7 }),
      JSON.stringify({ project: "game", env: "prod", uid: "7", gen: 1 }),
      JSON.stringify({ project: "game", env: "prod", uid: 7.5, gen: 1 }),
      JSON.stringify({ project: "game", env: "prod", uid: 0, gen: 1 }),
      JSON.stringify({ project: "ga#me", env: "prod", uid: 7, gen: 1 }),
      JSON.stringify({ project: "game", env: "prod", uid: 7, gen: 1, slot: 3 }),
      // '#' in a slot only as a pool's place: '#' and 0 to 999 without a leading zero.
      JSON.stringify({ project: "game", env: "prod", uid: 7, gen: 1, slot: "#1000" }),
      JSON.stringify({ project: "game", env: "prod", uid: 7, gen: 1, slot: "#01" }),
      JSON.stringify({ project: "game", env: "prod", uid: 7, gen: 1, slot: "#" }),
      JSON.stringify({ project: "game", env: "prod", uid: 7, gen: 1, slot: "a#1" }),
      '{"project":"game","env":"prod","uid":9223372036854775808,"gen":1}',
    ]) {
      const answer = await send(url, "POST", bad, keysHeader(bad));
      assert.equal(answer.status, 400, bad);
      assert.equal(JSON.parse(answer.body).error, "invalid_params", bad);
    }
    // A pool's places are kicked like any slot.
    for (const slot of ["#0", "#999"]) {
      const [place] = signedKick({ project: "game", env: "prod", uid: 7, gen: 1, slot });
      const answer = await send(url, "POST", place, keysHeader(place));
      assert.equal(answer.status, 200, `${slot}: ${answer.body}`);
    }
    // The largest uid is exact, not rounded to a float.
    const largest = '{"project":"game","env":"prod","uid":9223372036854775807,"gen":1}';
    assert.equal((await send(url, "POST", largest, keysHeader(largest))).status, 200);
  });
});

function keysHeader(body: string): Record<string, string> {
  return { "Unique-Signature": keys.sign(body, Date.now() / 1000) };
}

test("fencing: only an older session ends, with the first kick's reason and message", async () => {
  const table = new SessionTable();
  const session = await table.beginLogin(key).complete(5n);
  await withReceiver(table, async (url) => {
    const [same, sameHeaders] = signedKick({ project: "game", env: "prod", uid: 42, gen: 5 });
    assert.deepEqual(JSON.parse((await send(url, "POST", same, sameHeaders)).body), { ack: "not-older" });
    assert.equal(table.get(key), session);
    const [newer, newerHeaders] = signedKick({ project: "game", env: "prod", uid: 42, gen: 6, reason: "admin", message: "account closed" });
    assert.deepEqual(JSON.parse((await send(url, "POST", newer, newerHeaders)).body), { ack: "destroyed" });
    assert.deepEqual(await session.ended, { kind: "kicked", reason: "admin", message: "account closed", gen: 5n });
    assert.equal(table.get(key), undefined);
    assert.deepEqual(JSON.parse((await send(url, "POST", newer, newerHeaders)).body), { ack: "no-session" });
  });
});

test("single flight: racing kicks end the session once, every one answered 200", async () => {
  let ends = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const table = new SessionTable({
    onEnd: async () => {
      ends++;
      await gate;
    },
  });
  const session = await table.beginLogin(key).complete(1n);
  const kick: Kick = { ...key, gen: 2n, reason: "login-elsewhere", message: "" };
  const racing: Promise<Ack>[] = [1, 2, 3].map(() => table.handleKick(kick));
  release();
  assert.deepEqual(await Promise.all(racing), ["destroyed", "destroyed", "destroyed"]);
  assert.equal(ends, 1);
  assert.equal((await session.ended).gen, 1n);
});

test("an ending that does not finish in time is 503, and the session stays", async () => {
  const table = new SessionTable({ onEnd: () => new Promise(() => undefined), endTimeoutMs: 10 });
  await table.beginLogin(key).complete(1n);
  await withReceiver(table, async (url) => {
    const [body, headers] = signedKick({ project: "game", env: "prod", uid: 42, gen: 2 });
    const answer = await send(url, "POST", body, headers);
    assert.equal(answer.status, 503);
    assert.equal(JSON.parse(answer.body).error, "unavailable");
    assert.notEqual(table.get(key), undefined);
  });
});

test("early kicks: remembered only for a login in flight, bounded, and refuse that login", async () => {
  const table = new SessionTable({ maxEarlyKicks: 1 });
  // No login in flight: nothing is remembered, the next login is not refused.
  assert.equal(await table.handleKick({ ...key, gen: 9n, reason: "login-elsewhere", message: "" }), "no-session");
  const session = await table.beginLogin(key).complete(3n);
  assert.equal(session.gen, 3n);
  table.remove(session);

  const ticket = table.beginLogin(key);
  assert.equal(await table.handleKick({ ...key, gen: 5n, reason: "login-elsewhere", message: "" }), "no-session");
  // A second key's early kick is over the bound: counted, not remembered.
  const second = { ...key, uid: 43n };
  const secondTicket = table.beginLogin(second);
  await table.handleKick({ ...second, gen: 5n, reason: "login-elsewhere", message: "" });
  assert.equal(table.droppedEarlyKicks, 1);
  await assert.rejects(ticket.complete(4n), ReplacedWhileLoggingIn);
  assert.equal(table.get(key), undefined);
  assert.equal((await secondTicket.complete(4n)).gen, 4n);
  // A login that won a newer gen than the early kick is not refused.
  const later = table.beginLogin(key);
  await table.handleKick({ ...key, gen: 5n, reason: "login-elsewhere", message: "" });
  assert.equal((await later.complete(6n)).gen, 6n);
});

test("a same-node re-login ends the older session as replaced", async () => {
  const table = new SessionTable();
  const first = await table.beginLogin(key).complete(1n);
  const second = await table.beginLogin(key).complete(2n);
  assert.deepEqual(await first.ended, { kind: "replaced", reason: "login-elsewhere", message: "", gen: 1n });
  assert.equal(table.get(key), second);
});

test("exposure: unsigned kicks only on loopback or when declared trusted", () => {
  assert.doesNotThrow(() => checkExposure({}, "127.0.0.1"));
  assert.doesNotThrow(() => checkExposure({}, "::1"));
  assert.throws(() => checkExposure({}, "0.0.0.0"), /refusing to serve unsigned kicks/);
  assert.doesNotThrow(() => checkExposure({ keys }, "0.0.0.0"));
  assert.doesNotThrow(() => checkExposure({ insecureUnsigned: true }, "10.0.0.7"));
});

test("unique node-check passes the TypeScript receiver", async () => {
  const server = await startServer();
  const check = binary("UNIQUE_NODE_CHECK_BIN", "unique-node-check");
  const { server: receiver, url } = await listen(kickHandler(new SessionTable(), { keys: SigningKeys.load(server.keysPath) }));
  try {
    // Asynchronous: the receiver answers on this process's event loop while the check runs.
    const child = spawn(check, ["--url", `${url}/kick`, "--signing-keys", server.keysPath], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr.on("data", (c: Buffer) => (out += c.toString()));
    const code = await new Promise<number | null>((done) => child.on("exit", done));
    console.log(`unique-node-check:\n${out}`);
    assert.equal(code, 0, `unique-node-check failed:\n${out}`);
  } finally {
    await close(receiver);
    server.stop();
  }
});
