// The generated types and the typed fetch client against the real unique-server: every
// operation once, every documented error status of the claim route read as its typed model,
// and real signed kicks from the server ending sessions held by the TypeScript receiver.

import assert from "node:assert/strict";
import type { IncomingMessage, ServerResponse } from "node:http";
import { after, before, test } from "node:test";

import {
  kickHandler,
  SessionTable,
  SigningKeys,
  uniqueClient,
  isRetryable,
  isSuperseded,
  type Schemas,
  type UniqueClient,
} from "../src/index.js";
import { ADMIN_TOKEN, claimId, close, freshUid, listen, OTHER_TOKEN, PROJECT, startServer, type TestServer } from "./support.js";

// A tight line and deadline, so 429 and 503 have honest causes: no claim may wait behind the
// one in progress on a key, and a claim whose kick hangs passes its 2 s deadline.
const FLAGS = ["--max-slots-per-user", "2", "--max-queued-claims", "0", "--claim-timeout", "2s", "--kick-timeout", "30s"];

let server: TestServer;
let client: UniqueClient;

before(async () => {
  server = await startServer(FLAGS);
  client = uniqueClient(server.url, { token: ADMIN_TOKEN });
});

after(() => server.stop());

function claimBody(uid: number, endpoint: string, id = claimId(), slot?: string): Schemas["ClaimRequest"] {
  return { project: PROJECT, env: "prod", uid, owner: { endpoint }, claim_id: id, ...(slot === undefined ? {} : { slot }) };
}

test("every operation once, through the typed client", async () => {
  const uid = freshUid();
  const key = { project: PROJECT, env: "prod", uid };
  const endpoint = "http://127.0.0.1:9/kick";
  const claimed = await client.POST("/v1/claim", { body: claimBody(uid, endpoint) });
  assert.equal(claimed.response.status, 200, JSON.stringify(claimed.error));
  const gen: number = claimed.data?.gen ?? 0;
  assert.ok(gen >= 1);
  assert.equal(claimed.data?.replayed, false);

  const current = await client.POST("/v1/current", { body: key });
  assert.equal(current.data?.gen, gen);
  assert.equal(current.data?.owner?.endpoint, endpoint);
  const batch = await client.POST("/v1/current/batch", { body: { keys: [key, { ...key, uid: freshUid() }] } });
  const views = batch.data?.views ?? [];
  assert.equal(views.length, 2);
  const first = views[0];
  assert.ok(first !== undefined && "exists" in first && first.exists && first.gen === gen);
  const sessions = await client.POST("/v1/sessions", { body: { ...key, limit: 10 } });
  assert.deepEqual(sessions.data?.sessions.map((s) => [s.slot, s.gen]), [["", gen]]);
  const released = await client.POST("/v1/release", { body: { ...key, gen } });
  assert.equal(released.data?.released, true);
  const again = await client.POST("/v1/claim", { body: claimBody(uid, endpoint) });
  // The logout's kick goes to a port nothing listens on: released, not confirmed.
  const logout = await client.POST("/v1/logout", { body: { ...key, reason: "account closed" } });
  assert.equal(logout.data?.released, true);
  assert.equal(logout.data?.gen, again.data?.gen);
  assert.equal(logout.data?.kick_detail, "connect-error");

  const lease = { project: PROJECT, room: `room-${uid}`, node: "node-a" };
  const ensured = await client.POST("/v1/lease/ensure", { body: { ...lease, ttl_ms: 60_000 } });
  const token = ensured.data?.token ?? "";
  assert.equal(ensured.data?.node, "node-a");
  assert.equal((await client.POST("/v1/lease/verify", { body: { ...lease, token } })).data?.valid, true);
  assert.equal((await client.POST("/v1/lease/lookup", { body: { project: PROJECT, room: lease.room } })).data?.lease?.token, token);
  assert.equal((await client.POST("/v1/lease/release", { body: { ...lease, token } })).data?.released, true);
  const node = { project: PROJECT, node: `node-${uid}` };
  const registered = await client.POST("/v1/nodes/register", { body: { ...node, addr: "127.0.0.1:9001", ttl_ms: 60_000 } });
  assert.equal(registered.data?.addr, "127.0.0.1:9001");
  assert.equal((await client.POST("/v1/nodes/lookup", { body: node })).data?.node?.addr, "127.0.0.1:9001");
  assert.equal((await client.POST("/v1/nodes/deregister", { body: node })).data?.removed, true);

  const health = await client.GET("/healthz", { parseAs: "text" });
  assert.equal(health.data, "ok");
  const ready = await client.GET("/readyz", { parseAs: "text" });
  assert.equal(ready.data, "ok");
  assert.equal((await client.HEAD("/healthz")).response.status, 200);
  assert.equal((await client.HEAD("/readyz")).response.status, 200);
});

test("400, 401, 403, 409 superseded, 409 too_many_slots and 413 of the claim route, typed", async () => {
  const uid = freshUid();
  const endpoint = "http://127.0.0.1:9/kick";

  const invalid = await client.POST("/v1/claim", { body: { ...claimBody(uid, endpoint), uid: 0 } });
  assert.equal(invalid.response.status, 400);
  assert.equal(invalid.error?.error, "invalid_params");
  assert.match(invalid.error?.message ?? "", /uid/);

  const anonymous = await uniqueClient(server.url).POST("/v1/claim", { body: claimBody(uid, endpoint) });
  assert.equal(anonymous.response.status, 401);
  assert.equal(anonymous.error?.error, "unauthenticated");
  assert.equal(anonymous.response.headers.get("www-authenticate"), "Bearer");

  const outside = await uniqueClient(server.url, { token: OTHER_TOKEN }).POST("/v1/claim", { body: claimBody(uid, endpoint) });
  assert.equal(outside.response.status, 403);
  assert.equal(outside.error?.error, "forbidden");

  // Superseded: the first login's claim_id retried after a second login took the key.
  const firstId = claimId();
  const first = await client.POST("/v1/claim", { body: claimBody(uid, endpoint, firstId) });
  const second = await client.POST("/v1/claim", { body: claimBody(uid, endpoint) });
  const retry = await client.POST("/v1/claim", { body: claimBody(uid, endpoint, firstId) });
  assert.equal(retry.response.status, 409);
  const conflict = retry.error;
  assert.ok(isSuperseded(conflict), JSON.stringify(conflict));
  // The narrowed type has the gens: this only compiles because the model declares them.
  const superseded: Schemas["SupersededError"] = conflict;
  assert.equal(superseded.gen, first.data?.gen);
  assert.equal(superseded.current_gen, second.data?.gen);
  assert.equal(isRetryable(conflict), false);

  // Too many slots: the server allows two online slots a user.
  await client.POST("/v1/claim", { body: claimBody(uid, endpoint, claimId(), "phone") });
  const third = await client.POST("/v1/claim", { body: claimBody(uid, endpoint, claimId(), "tablet") });
  assert.equal(third.response.status, 409);
  const slots = third.error;
  assert.ok(slots !== undefined && slots.error === "too_many_slots", JSON.stringify(slots));
  const typed: Schemas["TooManySlotsError"] = slots;
  assert.equal(typed.limit, 2);

  const large = await client.POST("/v1/claim", { body: claimBody(uid, endpoint, "x".repeat(70_000)) });
  assert.equal(large.response.status, 413);
  assert.equal(large.error?.error, "too_large");
});

test("429 throttled and 503 unavailable of the claim route, typed", async () => {
  // The old session's receiver holds the kick until the claim that sent it has its answer:
  // that claim is in progress all along (a second claim on the key is 429), and it passes
  // its deadline while the kick hangs (503).
  let kicked!: () => void;
  const kickArrived = new Promise<void>((resolve) => (kicked = resolve));
  let finish!: () => void;
  const answered = new Promise<void>((resolve) => (finish = resolve));
  const { server: hanging, url } = await listen((_req: IncomingMessage, res: ServerResponse) => {
    kicked();
    void answered.then(() => res.writeHead(200, { "Content-Type": "application/json" }).end('{"ack":"destroyed"}'));
  });
  try {
    const uid = freshUid();
    const held = await client.POST("/v1/claim", { body: claimBody(uid, `${url}/kick`) });
    assert.equal(held.response.status, 200);
    const takeover = client.POST("/v1/claim", { body: claimBody(uid, "http://127.0.0.1:9/kick") });
    await kickArrived;
    const throttled = await client.POST("/v1/claim", { body: claimBody(uid, "http://127.0.0.1:9/kick") });
    assert.equal(throttled.response.status, 429);
    const busy: Schemas["ThrottledError"] | undefined = throttled.error?.error === "throttled" ? throttled.error : undefined;
    assert.equal(busy?.error, "throttled");
    assert.ok(isRetryable(busy));

    const late = await takeover;
    finish();
    assert.equal(late.response.status, 503);
    const unavailable: Schemas["UnavailableError"] | undefined = late.error?.error === "unavailable" ? late.error : undefined;
    assert.equal(unavailable?.error, "unavailable");
    assert.ok(isRetryable(unavailable));
  } finally {
    finish();
    await close(hanging);
  }
});

test("the server's signed kicks end sessions held by the TypeScript receiver", async () => {
  const table = new SessionTable();
  const { server: receiver, url } = await listen(kickHandler(table, { keys: SigningKeys.load(server.keysPath) }));
  try {
    const uid = freshUid();
    const key = { project: PROJECT, env: "prod", uid: BigInt(uid), slot: "" };
    const ticket = table.beginLogin(key);
    const claimed = await client.POST("/v1/claim", { body: claimBody(uid, `${url}/kick`) });
    const session = await ticket.complete(BigInt(claimed.data?.gen ?? 0));

    // A takeover from another node: the server kicks this receiver, signed, before it writes.
    const takeover = await client.POST("/v1/claim", { body: claimBody(uid, "http://127.0.0.1:9/kick") });
    assert.equal(takeover.data?.kicked, true, JSON.stringify(takeover.data));
    assert.deepEqual(await session.ended, { kind: "kicked", reason: "login-elsewhere", message: "", gen: session.gen });
    assert.equal(table.get(key), undefined);

    // An operator's logout of a session here: the kick carries the reason as its message.
    const ticket2 = table.beginLogin(key);
    const back = await client.POST("/v1/claim", { body: claimBody(uid, `${url}/kick`) });
    const session2 = await ticket2.complete(BigInt(back.data?.gen ?? 0));
    const logout = await client.POST("/v1/logout", { body: { project: PROJECT, env: "prod", uid, reason: "account closed" } });
    assert.equal(logout.data?.kicked, true, JSON.stringify(logout.data));
    assert.deepEqual(await session2.ended, { kind: "kicked", reason: "admin", message: "account closed", gen: session2.gen });
  } finally {
    await close(receiver);
  }
});
