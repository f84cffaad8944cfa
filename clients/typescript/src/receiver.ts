// The kick receiver for Node's `http` (docs/design.md, "Kick receiver"; the same rules as the
// Rust and Go receivers).

import type { IncomingMessage, ServerResponse } from "node:http";
import { isIP } from "node:net";

import { decodeKick, KickError, MAX_KICK_BODY_BYTES } from "./kick.js";
import type { KickTarget } from "./sessions.js";
import { DEFAULT_SIGNATURE_WINDOW_SECONDS, REFUSAL_MESSAGES, SIGNATURE_HEADER, type SigningKeys } from "./signature.js";

/** KickReceiver's options. */
export interface ReceiverOptions {
  /** Verifies every kick's Unique-Signature (any key); absent accepts unsigned kicks. */
  keys?: SigningKeys;
  /** The signature window in seconds (300). */
  windowSeconds?: number;
  /** Every host that can reach the receiver is trusted: unsigned kicks off loopback too. */
  insecureUnsigned?: boolean;
  /** The clock signatures are judged by, in milliseconds (Date.now). */
  now?: () => number;
}

/** A request handler for `http.createServer`, or for the route of the node's owner endpoint. */
export type KickHandler = (request: IncomingMessage, response: ServerResponse) => void;

/**
 * The kick receiver. Answers: 200 `{"ack": ...}` once no session older than the kick remains
 * here; 401 `unauthenticated` for a missing, malformed, forged or out-of-window signature
 * (checked over the exact bytes before the body is read as a kick; nothing ended); 400
 * `invalid_params` for a malformed or incomplete payload or an invalid key (unknown fields
 * ignored); 405 with `Allow: POST` for another method; 413 `too_large` for a body over 4 KiB,
 * by Content-Length or while reading; 503 `unavailable` when the session's ending did not
 * finish.
 */
export function kickHandler(target: KickTarget, options: ReceiverOptions = {}): KickHandler {
  const window = options.windowSeconds ?? DEFAULT_SIGNATURE_WINDOW_SECONDS;
  const now = options.now ?? Date.now;
  return (request, response) => {
    if (request.method !== "POST") {
      response.setHeader("Allow", "POST");
      reply(response, 405, "method_not_allowed", "kicks are POST requests");
      request.resume();
      return;
    }
    const tooLarge = (): void => {
      // The rest of the body is not read: the connection closes after the answer.
      response.setHeader("Connection", "close");
      reply(response, 413, "too_large", `kick body over ${MAX_KICK_BODY_BYTES} bytes`);
    };
    const declared = request.headers["content-length"];
    if (declared !== undefined && Number(declared) > MAX_KICK_BODY_BYTES) {
      tooLarge();
      return;
    }
    const chunks: Buffer[] = [];
    let length = 0;
    let over = false;
    request.on("data", (chunk: Buffer) => {
      if (over) {
        return;
      }
      length += chunk.length;
      if (length > MAX_KICK_BODY_BYTES) {
        // Enforced while reading too: a chunked body declares no length.
        over = true;
        tooLarge();
        return;
      }
      chunks.push(chunk);
    });
    request.on("error", () => {
      if (!response.headersSent) {
        reply(response, 400, "invalid_params", "request body could not be read");
      }
    });
    request.on("end", () => {
      if (over) {
        return;
      }
      const body = Buffer.concat(chunks);
      if (options.keys !== undefined) {
        const refusal = options.keys.verify(firstHeader(request, SIGNATURE_HEADER), body, now() / 1000, window);
        if (refusal !== undefined) {
          reply(response, 401, "unauthenticated", REFUSAL_MESSAGES[refusal]);
          return;
        }
      }
      let kick;
      try {
        kick = decodeKick(body);
      } catch (e) {
        if (e instanceof KickError) {
          reply(response, 400, "invalid_params", e.message);
          return;
        }
        throw e;
      }
      target.handleKick(kick).then(
        (ack) => {
          switch (ack) {
            case "destroyed":
            case "no-session":
            case "not-older":
              response.writeHead(200, { "Content-Type": "application/json" });
              response.end(JSON.stringify({ ack }));
              return;
            case "timed-out":
              reply(response, 503, "unavailable", "destroy timed out");
              return;
            case "failed":
              reply(response, 503, "unavailable", "destroy failed");
              return;
          }
        },
        () => reply(response, 503, "unavailable", "destroy failed"),
      );
    });
  };
}

/**
 * Whether the receiver may listen on `address` (a server's `address().address`): yes when it
 * verifies signatures, when the address is loopback (0.0.0.0 and :: are not), or with
 * insecureUnsigned; otherwise any host that reaches it could log this node's users out.
 */
export function checkExposure(options: ReceiverOptions, address: string): void {
  if (options.keys !== undefined || options.insecureUnsigned === true) {
    return;
  }
  const loopback =
    (isIP(address) === 4 && address.startsWith("127.")) || address === "::1" || address.startsWith("::ffff:127.");
  if (!loopback) {
    throw new Error(
      `refusing to serve unsigned kicks on ${address}: any host that reaches it could log this node's users out; ` +
        "give the receiver the arbiter's signing keys (keys), or set insecureUnsigned if every host that can reach it is trusted",
    );
  }
}

/** The first value of a header sent one or more times. */
function firstHeader(request: IncomingMessage, name: string): string | undefined {
  return request.headersDistinct[name]?.[0];
}

function reply(response: ServerResponse, status: number, code: string, message: string): void {
  response.writeHead(status, { "Content-Type": "application/json" });
  response.end(JSON.stringify({ error: code, message }));
}
