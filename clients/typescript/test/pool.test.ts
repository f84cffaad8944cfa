// Pooled logins against the real unique-server: a full deny-new pool refused with its places,
// a release freeing a place, and evict-oldest ending the oldest session with the server's
// signed kick (on another node) or as replaced (on the same node).

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  ClaimError,
  isSuperseded,
  kickHandler,
  LimitReachedError,
  loginPooled,
  SessionTable,
  SigningKeys,
  uniqueClient,
  type PooledClaimRequest,
  type UniqueClient,
} from "../src/index.js";
import { ADMIN_TOKEN, claimId, close, freshUid, listen, PROJECT, startServer, type TestServer } from "./support.js";

let server: TestServer;
let client: UniqueClient;

before(async () => {
  server = await startServer(["--kick-timeout", "30s"]);
  client = uniqueClient(server.url, { token: ADMIN_TOKEN });
});

after(() => server.stop());

/** A node: a session table behind a signed kick receiver on loopback. */
async function node(): Promise<{ table: SessionTable; endpoint: string; stop: () => Promise<void> }> {
  const table = new SessionTable();
  const { server: receiver, url } = await listen(kickHandler(table, { keys: SigningKeys.load(server.keysPath) }));
  return { table, endpoint: `${url}/kick`, stop: () => close(receiver) };
}

function pooled(uid: number, endpoint: string, policy: "deny-new" | "evict-oldest", limit = 3): PooledClaimRequest {
  return { project: PROJECT, env: "prod", uid, owner: { endpoint }, claim_id: claimId(), pool: { policy, limit } };
}

test("deny-new: the fourth login is LimitReachedError with the three places; a release frees one", async () => {
  const a = await node();
  try {
    const uid = freshUid();
    const logins = [];
    for (const want of ["#0", "#1", "#2"]) {
      const login = await loginPooled(client, a.table, pooled(uid, a.endpoint, "deny-new"));
      assert.equal(login.answer.slot, want);
      assert.equal(login.answer.evicted, false);
      assert.deepEqual(login.session.key, { project: PROJECT, env: "prod", uid: BigInt(uid), slot: want });
      assert.deepEqual(login.session.pooled, { evicted: false });
      logins.push(login);
    }

    const refused = await loginPooled(client, a.table, pooled(uid, a.endpoint, "deny-new")).then(
      () => assert.fail("the fourth login went online"),
      (e: unknown) => e,
    );
    assert.ok(refused instanceof LimitReachedError, String(refused));
    assert.ok(refused instanceof ClaimError);
    assert.equal(refused.status, 409);
    assert.equal(isSuperseded(refused.body), false);
    assert.equal(refused.limit, 3);
    assert.deepEqual(
      refused.sessions.map((s) => [s.slot, BigInt(s.gen)]),
      logins.map((l) => [l.session.key.slot, l.session.gen]),
    );
    assert.ok(refused.sessions.every((s) => typeof s.since === "number"));
    assert.equal(a.table.size, 3);

    // The release names the place; the next login takes it at the next gen.
    const second = logins[1]!.session;
    const released = await client.POST("/v1/release", {
      body: { project: PROJECT, env: "prod", uid, slot: second.key.slot, gen: Number(second.gen) },
    });
    assert.equal(released.data?.released, true, JSON.stringify(released.error));
    assert.ok(a.table.remove(second));
    const again = await loginPooled(client, a.table, pooled(uid, a.endpoint, "deny-new"));
    assert.equal(again.answer.slot, "#1");
    assert.equal(again.session.gen, second.gen + 1n);
    assert.equal(a.table.size, 3);
  } finally {
    await a.stop();
  }
});

test("evict-oldest: the fourth login evicts the oldest, whose node's session ends with the kick", async () => {
  const a = await node();
  const b = await node();
  try {
    const uid = freshUid();
    const held = [];
    for (let i = 0; i < 3; i++) {
      held.push((await loginPooled(client, a.table, pooled(uid, a.endpoint, "evict-oldest"))).session);
    }
    const oldest = held[0]!;
    let endedFirst = false;
    void oldest.ended.then(() => (endedFirst = true));

    const fourth = await loginPooled(client, b.table, pooled(uid, b.endpoint, "evict-oldest"));
    assert.equal(fourth.answer.slot, "#0");
    assert.equal(fourth.answer.evicted, true);
    assert.equal(fourth.answer.kicked, true, JSON.stringify(fourth.answer));
    assert.equal(BigInt(fourth.answer.prev_gen), oldest.gen);
    assert.deepEqual(fourth.session.pooled, { evicted: true });
    // Ended before A's receiver answered the kick, so before B's claim was answered.
    assert.ok(endedFirst, "the oldest session had not ended when the evicting login returned");
    assert.deepEqual(await oldest.ended, { kind: "kicked", reason: "login-elsewhere", message: "session limit 3 reached", gen: oldest.gen });
    assert.equal(a.table.size, 2);
    assert.equal(b.table.size, 1);

    // The oldest now is A's #1: a login on A itself evicts it without a kick (same endpoint),
    // and it ends here as replaced.
    const fifth = await loginPooled(client, a.table, pooled(uid, a.endpoint, "evict-oldest"));
    assert.equal(fifth.answer.slot, "#1");
    assert.equal(fifth.answer.kick_detail, "self-replace-skipped");
    assert.deepEqual(await held[1]!.ended, { kind: "replaced", reason: "login-elsewhere", message: "", gen: held[1]!.gen });
    assert.equal(a.table.size, 2);
  } finally {
    await a.stop();
    await b.stop();
  }
});

test("an admin logout of all of a user's sessions ends the default slot's and the places' sessions", async () => {
  const a = await node();
  try {
    const uid = freshUid();
    const key = { project: PROJECT, env: "prod", uid: BigInt(uid), slot: "" };
    const ticket = a.table.beginLogin(key);
    const claimed = await client.POST("/v1/claim", {
      body: { project: PROJECT, env: "prod", uid, owner: { endpoint: a.endpoint }, claim_id: claimId() },
    });
    const held = [await ticket.complete(BigInt(claimed.data?.gen ?? 0))];
    for (let i = 0; i < 2; i++) {
      held.push((await loginPooled(client, a.table, pooled(uid, a.endpoint, "evict-oldest"))).session);
    }

    const out = await client.POST("/v1/logout/all", { body: { project: PROJECT, env: "prod", uid, reason: "account closed" } });
    assert.equal(out.response.status, 200, JSON.stringify(out.error));
    assert.deepEqual(
      out.data?.sessions.map((s) => [s.slot, s.released, BigInt(s.gen), s.kicked, s.kick_detail]),
      held.map((s) => [s.key.slot, true, s.gen, true, null]),
    );
    for (const session of held) {
      assert.deepEqual(await session.ended, { kind: "kicked", reason: "admin", message: "account closed", gen: session.gen });
    }
    assert.equal(a.table.size, 0);
    const again = await client.POST("/v1/logout/all", { body: { project: PROJECT, env: "prod", uid } });
    assert.deepEqual(again.data?.sessions, []);
  } finally {
    await a.stop();
  }
});
