// Signed kicks: the Unique-Signature header (docs/nodes-in-any-language.md, "The signature
// recipe"), as the Rust crate unique-kick-signature and the Go module check it.

import { createHmac, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";

/** The header a signed kick carries: `t=<unix seconds>,v1=<hex of HMAC-SHA256(key, "<t>.<body>")>`. */
export const SIGNATURE_HEADER = "unique-signature";

/** How far a signature's timestamp may be from the receiver's clock, either way, in seconds. */
export const DEFAULT_SIGNATURE_WINDOW_SECONDS = 300;

/** The shortest key accepted, in bytes: SHA-256's output size. */
export const MIN_KEY_BYTES = 32;

/** The most `v1` entries tried; a header with more is malformed. */
const MAX_SIGNATURES = 8;

/** What a key id is the HMAC of. */
const KEY_ID_LABEL = "unique-kick-signature key id";

/** Why a kick's signature was refused (each answered 401). */
export type SignatureRefusal = "missing" | "malformed" | "bad" | "stale" | "future";

/** The message a refusal is answered with (lower-case fragments, as the Go receiver's). */
export const REFUSAL_MESSAGES: Record<SignatureRefusal, string> = {
  missing: "no unique-signature header",
  malformed: "malformed unique-signature header",
  bad: "no signature matches the body under any key",
  stale: "signature timestamp is older than the window",
  future: "signature timestamp is ahead of the clock by more than the window",
};

/**
 * One or more HMAC-SHA256 keys: `sign` uses the first, `verify` accepts a signature made with
 * any of them, so a key rotates without a refused kick (give receivers the new key after the
 * old one, make it first at the signer, then drop the old one).
 */
export class SigningKeys {
  readonly #keys: Buffer[];

  /** Keys from bytes, the first one signing; each at least 32 bytes. */
  constructor(keys: readonly (Buffer | string)[]) {
    if (keys.length === 0) {
      throw new Error("no signing key given");
    }
    this.#keys = keys.map((key, i) => {
      const bytes = typeof key === "string" ? Buffer.from(key, "utf8") : Buffer.from(key);
      if (bytes.length < MIN_KEY_BYTES) {
        throw new Error(`signing key ${i + 1} is shorter than ${MIN_KEY_BYTES} bytes`);
      }
      return bytes;
    });
  }

  /**
   * The key file format: one key per line (trimmed of surrounding whitespace), the first one
   * signing; blank lines and lines starting with `#` are skipped. Errors name the line, never
   * the key.
   */
  static parse(text: string): SigningKeys {
    const keys: string[] = [];
    text.split("\n").forEach((line, i) => {
      const key = line.trim();
      if (key === "" || key.startsWith("#")) {
        return;
      }
      if (Buffer.byteLength(key, "utf8") < MIN_KEY_BYTES) {
        throw new Error(`signing key on line ${i + 1} is shorter than ${MIN_KEY_BYTES} bytes`);
      }
      keys.push(key);
    });
    return new SigningKeys(keys);
  }

  /** The key file at `path` (the file the server's `--kick-signing-keys` names). */
  static load(path: string): SigningKeys {
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(readFileSync(path));
    } catch (e) {
      throw new Error(`cannot read signing keys from ${path}: ${(e as Error).message}`);
    }
    return SigningKeys.parse(text);
  }

  /** How many keys there are. */
  get length(): number {
    return this.#keys.length;
  }

  /** Every key's id, in order: the first 8 bytes of HMAC-SHA256(key, label) in hex. */
  keyIds(): string[] {
    return this.#keys.map((key) => tag(key, Buffer.from(KEY_ID_LABEL)).subarray(0, 8).toString("hex"));
  }

  /** Never shows a key. */
  toString(): string {
    return `SigningKeys{count: ${this.#keys.length}}`;
  }

  /** The header value for `body` sent at `nowSeconds`, under the first key. */
  sign(body: Buffer | string, nowSeconds: number): string {
    const timestamp = String(Math.max(0, Math.floor(nowSeconds)));
    const first = this.#keys[0] as Buffer;
    return `t=${timestamp},v1=${tag(first, signed(timestamp, body)).toString("hex")}`;
  }

  /**
   * Checks a header value (undefined when the request had none) against the exact body:
   * some `v1` must be the HMAC of `"<t>.<body>"` under one of the keys (constant-time
   * comparison), then `t` within `windowSeconds` of `nowSeconds` either way, the boundary
   * inside. Returns the refusal, or undefined when the signature holds.
   */
  verify(
    header: string | undefined,
    body: Buffer,
    nowSeconds: number,
    windowSeconds: number = DEFAULT_SIGNATURE_WINDOW_SECONDS,
  ): SignatureRefusal | undefined {
    if (header === undefined) {
      return "missing";
    }
    const parsed = parseSignature(header);
    if (parsed === undefined) {
      return "malformed";
    }
    const message = signed(parsed.timestamp, body);
    let genuine = false;
    for (const key of this.#keys) {
      const expected = tag(key, message);
      for (const candidate of parsed.tags) {
        // Every pair is compared, so the time taken does not tell which key matched.
        if (timingSafeEqual(expected, candidate)) {
          genuine = true;
        }
      }
    }
    if (!genuine) {
      return "bad";
    }
    const now = BigInt(Math.max(0, Math.floor(nowSeconds)));
    const window = BigInt(Math.floor(windowSeconds));
    if (parsed.seconds + window < now) {
      return "stale";
    }
    if (parsed.seconds > now + window) {
      return "future";
    }
    return undefined;
  }
}

interface ParsedSignature {
  timestamp: string;
  seconds: bigint;
  tags: Buffer[];
}

/** Reads `t=<digits>,v1=<64 hex>[,v1=…]`; entries of another scheme are ignored. */
function parseSignature(header: string): ParsedSignature | undefined {
  // A value that is not visible ASCII (a tab allowed) is malformed.
  if (!/^[\t\x20-\x7e]*$/.test(header)) {
    return undefined;
  }
  let timestamp: string | undefined;
  const tags: Buffer[] = [];
  for (const entry of header.split(",")) {
    const trimmed = entry.trim();
    const at = trimmed.indexOf("=");
    if (at < 0) {
      return undefined;
    }
    const name = trimmed.slice(0, at);
    const value = trimmed.slice(at + 1);
    if (name === "t") {
      if (timestamp !== undefined || !/^[0-9]{1,20}$/.test(value) || BigInt(value) > 0xffff_ffff_ffff_ffffn) {
        return undefined;
      }
      timestamp = value;
    } else if (name === "v1") {
      if (tags.length === MAX_SIGNATURES || !/^[0-9a-fA-F]{64}$/.test(value)) {
        return undefined;
      }
      tags.push(Buffer.from(value, "hex"));
    }
  }
  if (timestamp === undefined || tags.length === 0) {
    return undefined;
  }
  return { timestamp, seconds: BigInt(timestamp), tags };
}

function signed(timestamp: string, body: Buffer | string): Buffer {
  return Buffer.concat([Buffer.from(`${timestamp}.`), typeof body === "string" ? Buffer.from(body) : body]);
}

function tag(key: Buffer, message: Buffer): Buffer {
  return createHmac("sha256", key).update(message).digest();
}
