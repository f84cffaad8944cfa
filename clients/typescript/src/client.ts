// The typed fetch client: openapi-fetch over the types openapi-typescript generates from
// docs/openapi.yaml (src/generated/api.ts, never edited by hand).

import createClient, { type Client } from "openapi-fetch";

import type { components, paths } from "./generated/api.js";

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
 * error answers; narrow an error by its `error` code (a 409 is `superseded` or
 * `too_many_slots`).
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
