// The sessions a node holds, as a kick target: gen fencing (I6), one ending per session for
// racing kicks (single flight), and early kicks remembered only while a login of their key
// is in flight here, bounded as in the Rust and Go nodes.

import { type Key, type Kick, keyId, placeSlot, REASON_LOGIN_ELSEWHERE } from "./kick.js";

/** A user: the key of its sessions without a slot. */
export type UserKey = Omit<Key, "slot">;

/** The most places a pool may have (`#0` to `#999`). */
export const MAX_POOL_PLACES = 1000;

/** What a kick came to; the first three are answered 200, the others 503. */
export type Ack = "destroyed" | "no-session" | "not-older" | "timed-out" | "failed";

/** Anything that applies kicks: a SessionTable is one. */
export interface KickTarget {
  handleKick(kick: Kick): Promise<Ack>;
}

/** How a session ended. */
export interface Ending {
  /** "kicked" by the server, or "replaced" by a newer login of its key on this node. */
  kind: "kicked" | "replaced";
  /** The kick's reason (login-elsewhere, admin, ...). */
  reason: string;
  /** The kick's text for the user; "" when none. */
  message: string;
  /** The gen of the session that ended. */
  gen: bigint;
}

/** A login refused because a kick for a newer gen arrived while it was in flight. */
export class ReplacedWhileLoggingIn extends Error {
  constructor(readonly key: Key, readonly gen: bigint, readonly kick: { gen: bigint; reason: string; message: string }) {
    super(`a kick for gen ${kick.gen} came while the login of gen ${gen} was in flight`);
  }
}

/** One session held here. */
export class LocalSession {
  #resolve!: (ending: Ending) => void;
  /** Resolves once, when the session ended. */
  readonly ended: Promise<Ending>;
  /** The ending in progress, shared by every kick that races to end this session. */
  ending: Promise<Ack> | undefined;

  /**
   * @param pooled For a pooled login (SessionTable.beginPooledLogin): `{ evicted }`, whether it
   * took the place of the user's oldest online session. `key.slot` is then its place.
   */
  constructor(
    readonly key: Key,
    readonly gen: bigint,
    readonly pooled?: { evicted: boolean },
  ) {
    this.ended = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  /** @internal */
  settle(ending: Ending): void {
    this.#resolve(ending);
  }
}

/** SessionTable's options; every field has a default. */
export interface SessionTableOptions {
  /**
   * Ends a session locally (closes the user's connection); the kick is answered once it
   * resolves. Rejecting answers 503 and keeps the session.
   */
  onEnd?: (session: LocalSession, ending: Ending) => void | Promise<void>;
  /** How long onEnd may take before the kick is answered 503 (5 s). */
  endTimeoutMs?: number;
  /** How long an early kick refuses the login in flight (60 s). */
  earlyKickMemoryMs?: number;
  /** How many keys at most have an early kick remembered at once (4096). */
  maxEarlyKicks?: number;
  /** The clock, in milliseconds (Date.now). */
  now?: () => number;
}

interface Pending {
  logins: number;
  kick?: { gen: bigint; reason: string; message: string; at: number } | undefined;
}

/** A login announced before its claim is sent, so a kick that overtakes the answer counts. */
export class LoginTicket {
  #done = false;
  constructor(readonly table: SessionTable, readonly key: Key) {}

  /**
   * The claim was answered with `gen`: brings the session online, unless an early kick for a
   * newer gen came (ReplacedWhileLoggingIn). An older session of the key here ends first
   * ("replaced": the server skips the kick to the same endpoint).
   */
  async complete(gen: bigint): Promise<LocalSession> {
    this.#use();
    try {
      return await this.table.online(this.key, gen);
    } finally {
      // The early kick is read before the login stops counting as in flight.
      this.table.endLogin(this.key);
    }
  }

  /** The login failed: forgets it. */
  abandon(): void {
    this.#use();
    this.table.endLogin(this.key);
  }

  #use(): void {
    if (this.#done) {
      throw new Error("this login ticket is already used");
    }
    this.#done = true;
  }
}

/**
 * A pooled login announced before its claim is sent: the server picks the place, so a login
 * is expected on every place below the pool's limit, and a kick that overtakes the answer
 * counts whichever place it names.
 */
export class PooledLoginTicket {
  #done = false;
  readonly #places: Key[];

  constructor(
    readonly table: SessionTable,
    readonly user: UserKey,
    limit: number,
  ) {
    const places = Math.max(0, Math.min(Math.floor(limit), MAX_POOL_PLACES));
    this.#places = Array.from({ length: places }, (_, i) => ({ ...user, slot: placeSlot(i) }));
    for (const place of this.#places) {
      table.expectLogin(place);
    }
  }

  /**
   * The claim was answered with the place `slot` at `gen`: brings the session online on the
   * place's key (so its release and an admin logout name the place), unless an early kick
   * for a newer gen of that place came (ReplacedWhileLoggingIn). An evicted session of that
   * place held here ends first ("replaced": the server skips the kick to the same endpoint).
   */
  async complete(slot: string, gen: bigint, evicted: boolean): Promise<LocalSession> {
    this.#use();
    const place: Key = { ...this.user, slot };
    const expected = this.#places.some((p) => p.slot === slot);
    for (const other of this.#places) {
      if (other.slot !== slot) {
        this.table.endLogin(other);
      }
    }
    if (!expected) {
      // A place not expected (the project's limit): admitted without an early kick.
      this.table.expectLogin(place);
    }
    try {
      return await this.table.online(place, gen, { evicted });
    } finally {
      this.table.endLogin(place);
    }
  }

  /** The login failed: forgets it. */
  abandon(): void {
    this.#use();
    for (const place of this.#places) {
      this.table.endLogin(place);
    }
  }

  #use(): void {
    if (this.#done) {
      throw new Error("this login ticket is already used");
    }
    this.#done = true;
  }
}

/** The sessions of one node; give it to a kick receiver as its target. */
export class SessionTable implements KickTarget {
  readonly #sessions = new Map<string, LocalSession>();
  readonly #pending = new Map<string, Pending>();
  readonly #options: Required<SessionTableOptions>;
  #remembered = 0;
  /** Early kicks not remembered because maxEarlyKicks keys already had one. */
  droppedEarlyKicks = 0;

  constructor(options: SessionTableOptions = {}) {
    this.#options = {
      onEnd: options.onEnd ?? (() => undefined),
      endTimeoutMs: options.endTimeoutMs ?? 5000,
      earlyKickMemoryMs: options.earlyKickMemoryMs ?? 60_000,
      maxEarlyKicks: options.maxEarlyKicks ?? 4096,
      now: options.now ?? Date.now,
    };
  }

  /** Announces a login of `key`; call before sending its claim. */
  beginLogin(key: Key): LoginTicket {
    this.expectLogin(key);
    return new LoginTicket(this, key);
  }

  /**
   * Announces a pooled login of `user` (docs/design.md "Pooled sessions"); call before
   * sending its claim with `"pool": {"limit": limit, ...}`. With the project's limit (no
   * `limit` sent, 0 here) the places are unknown, and a kick overtaking the answer is not
   * seen: that session is left to the node's heartbeat (I5b).
   */
  beginPooledLogin(user: UserKey, limit: number): PooledLoginTicket {
    return new PooledLoginTicket(this, user, limit);
  }

  /** @internal */
  expectLogin(key: Key): void {
    const id = keyId(key);
    const pending = this.#pending.get(id) ?? { logins: 0 };
    pending.logins++;
    this.#pending.set(id, pending);
  }

  /** The session of `key` held here, if any. */
  get(key: Key): LocalSession | undefined {
    return this.#sessions.get(keyId(key));
  }

  /** How many sessions are held. */
  get size(): number {
    return this.#sessions.size;
  }

  /** Forgets a session without a kick (the node logged it out itself). */
  remove(session: LocalSession): boolean {
    const id = keyId(session.key);
    if (this.#sessions.get(id) !== session) {
      return false;
    }
    this.#sessions.delete(id);
    return true;
  }

  async handleKick(kick: Kick): Promise<Ack> {
    const id = keyId(kick);
    const session = this.#sessions.get(id);
    if (session === undefined) {
      this.#rememberEarlyKick(id, kick);
      return "no-session";
    }
    if (session.gen >= kick.gen) {
      return "not-older";
    }
    return this.#end(session, { kind: "kicked", reason: kick.reason, message: kick.message, gen: session.gen });
  }

  /** @internal */
  endLogin(key: Key): void {
    const id = keyId(key);
    const pending = this.#pending.get(id);
    if (pending === undefined) {
      return;
    }
    pending.logins--;
    if (pending.logins === 0) {
      if (pending.kick !== undefined) {
        this.#remembered--;
      }
      this.#pending.delete(id);
    }
  }

  /** @internal */
  async online(key: Key, gen: bigint, pooled?: { evicted: boolean }): Promise<LocalSession> {
    const id = keyId(key);
    const early = this.#pending.get(id)?.kick;
    if (early !== undefined && early.gen > gen && this.#options.now() - early.at < this.#options.earlyKickMemoryMs) {
      throw new ReplacedWhileLoggingIn(key, gen, early);
    }
    const older = this.#sessions.get(id);
    if (older !== undefined) {
      if (older.gen >= gen) {
        throw new ReplacedWhileLoggingIn(key, gen, { gen: older.gen, reason: REASON_LOGIN_ELSEWHERE, message: "" });
      }
      const ack = await this.#end(older, { kind: "replaced", reason: REASON_LOGIN_ELSEWHERE, message: "", gen: older.gen });
      if (ack !== "destroyed" && this.#sessions.get(id) === older) {
        throw new Error(`the older session of this key did not end (${ack})`);
      }
    }
    const session = new LocalSession(key, gen, pooled);
    this.#sessions.set(id, session);
    return session;
  }

  /** Ends `session` once: every caller racing to end it shares the first one's ending. */
  #end(session: LocalSession, ending: Ending): Promise<Ack> {
    if (session.ending === undefined) {
      session.ending = this.#run(session, ending).then((ack) => {
        if (ack === "destroyed") {
          this.remove(session);
          session.settle(ending);
        } else {
          // A failed ending may be tried again by the next kick.
          session.ending = undefined;
        }
        return ack;
      });
    }
    return session.ending;
  }

  async #run(session: LocalSession, ending: Ending): Promise<Ack> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<Ack>((resolve) => {
      timer = setTimeout(() => resolve("timed-out"), this.#options.endTimeoutMs);
    });
    try {
      const done = Promise.resolve()
        .then(() => this.#options.onEnd(session, ending))
        .then(
          (): Ack => "destroyed",
          (): Ack => "failed",
        );
      return await Promise.race([done, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Keeps a kick that found no session, only while a login of its key is in flight here. */
  #rememberEarlyKick(id: string, kick: Kick): void {
    const pending = this.#pending.get(id);
    if (pending === undefined) {
      return;
    }
    const now = this.#options.now();
    if (pending.kick !== undefined) {
      if (pending.kick.gen < kick.gen) {
        pending.kick = { gen: kick.gen, reason: kick.reason, message: kick.message, at: now };
      }
      return;
    }
    if (this.#remembered >= this.#options.maxEarlyKicks) {
      this.#sweep(now);
    }
    if (this.#remembered >= this.#options.maxEarlyKicks) {
      this.droppedEarlyKicks++;
      return;
    }
    pending.kick = { gen: kick.gen, reason: kick.reason, message: kick.message, at: now };
    this.#remembered++;
  }

  /** Forgets expired early kicks. */
  #sweep(now: number): void {
    for (const pending of this.#pending.values()) {
      if (pending.kick !== undefined && now - pending.kick.at >= this.#options.earlyKickMemoryMs) {
        pending.kick = undefined;
        this.#remembered--;
      }
    }
  }
}
