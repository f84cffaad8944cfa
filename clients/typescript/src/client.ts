// The typed fetch client: openapi-fetch over the types openapi-typescript generates from
// docs/openapi.yaml (src/generated/api.ts, never edited by hand).

import createClient, { type Client } from "openapi-fetch";

import type { components, paths } from "./generated/api.js";
import type { LocalSession, SessionTable } from "./sessions.js";

export type { components, operations, paths } from "./generated/api.js";

/** The document's schemas by name: `Schemas["ClaimAnswer"]`, `Schemas["SupersededError"]`, ... */
export type Schemas = components["schemas"];

/** The body of every error answer (`error` is the code to decide by, never the status alone). */
export type ErrorBody = Schemas["Error"];

/** A typed client of every route of docs/openapi.yaml. */
export type UniqueClient = Client<paths>;

/** UniqueClient's options. */
export interface ClientOptions {
  /** A bearer token from the server's tokens file. */
  token?: string;
  /** The fetch to use (globalThis.fetch). */
  fetch?: typeof fetch;
}

/**
 * A client of the server at `baseUrl` (e.g. `http://127.0.0.1:7420`). Each call answers
 * `{ data, error, response }`: `data` typed by the route's 200, `error` by its documented
 * error answers; narrow an error by its `error` code (a 409 is `superseded`,
 * `too_many_slots` or `limit_reached`).
 */
export function uniqueClient(baseUrl: string, options: ClientOptions = {}): UniqueClient {
  const headers: Record<string, string> = {};
  if (options.token !== undefined) {
    headers["Authorization"] = `Bearer ${options.token}`;
  }
  return createClient<paths>({
    baseUrl,
    headers,
    ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
  });
}

/** Whether a claim's error means the login is over: never retry it (a new claim_id would kick the newer session). */
export function isSuperseded(error: { error: string } | undefined): error is Schemas["SupersededError"] {
  return error?.error === "superseded";
}

/** Whether a claim's error is worth a retry with the same claim_id (after a backoff). */
export function isRetryable(error: { error: string } | undefined): boolean {
  return error?.error === "throttled" || error?.error === "unavailable";
}

/** Whether a claim's error is a full `deny-new` pool (never to be read as superseded, not retryable). */
export function isLimitReached(error: { error: string } | undefined): error is Schemas["LimitReachedError"] {
  return error?.error === "limit_reached";
}

/** A claim refused by the server: its status and error body (decide by `body.error`). */
export class ClaimError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody | undefined,
  ) {
    super(`claim refused: ${status} ${body?.error ?? "(no error code)"}${body?.message === undefined ? "" : `: ${body.message}`}`);
  }
}

/**
 * A `deny-new` pooled claim found all `limit` places of the user's pool online (409
 * `limit_reached`): nothing was kicked or written. `sessions` are the places online (slot,
 * gen, login time; never owners).
 */
export class LimitReachedError extends ClaimError {
  readonly limit: number;
  readonly sessions: Schemas["PooledSession"][];

  constructor(body: Schemas["LimitReachedError"]) {
    super(409, body);
    this.limit = body.limit;
    this.sessions = body.sessions;
  }
}

/** A pooled claim's request: a claim without `slot`, with `pool`. */
export type PooledClaimRequest = Omit<Schemas["ClaimRequest"], "slot" | "pool"> & { pool: Schemas["PoolRequest"] };

/** A pooled login that went online: the session (on its place) and the server's answer. */
export interface PooledLogin {
  session: LocalSession;
  answer: Schemas["ClaimAnswer"] & { slot: string; evicted: boolean };
}

/**
 * One pooled login (docs/design.md "Pooled sessions"): announces it to `table` (every place
 * below `request.pool.limit` is expected, so an early kick is seen), sends the claim, and
 * brings the session online on the place the server chose (`session.key.slot`, `#0`, `#1`,
 * ...), which a release or an admin logout of it names. With `evict-oldest` at the limit the
 * oldest login is evicted (`answer.evicted`); its node gets a `login-elsewhere` kick with the
 * message "session limit k reached", or, when it is this table's session, it ends here as
 * "replaced" before this resolves.
 *
 * One attempt: on a ClaimError whose body `isRetryable`, retry with the same `claim_id` (a
 * claim that landed is then answered with its place, no second kick). Throws
 * LimitReachedError for a full `deny-new` pool, ClaimError for any other refusal,
 * ReplacedWhileLoggingIn when a kick for a newer gen of the place came while in flight.
 */
export async function loginPooled(client: UniqueClient, table: SessionTable, request: PooledClaimRequest): Promise<PooledLogin> {
  const ticket = table.beginPooledLogin({ project: request.project, env: request.env, uid: BigInt(request.uid) }, request.pool.limit ?? 0);
  let claimed;
  try {
    claimed = await client.POST("/v1/claim", { body: request });
  } catch (e) {
    ticket.abandon();
    throw e;
  }
  const { data, error, response } = claimed;
  if (data === undefined) {
    ticket.abandon();
    if (isLimitReached(error)) {
      throw new LimitReachedError(error);
    }
    throw new ClaimError(response.status, error);
  }
  const { slot, evicted } = data;
  if (slot === undefined || evicted === undefined) {
    ticket.abandon();
    // A server older than pools ignores the field and claims the default slot.
    throw new ClaimError(response.status, { error: "invalid_params", message: "the answer names no place: the server does not know pooled claims" });
  }
  const session = await ticket.complete(slot, BigInt(data.gen), evicted);
  return { session, answer: { ...data, slot, evicted } };
}
