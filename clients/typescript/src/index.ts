// @unique-sessions/unique: the generated types, a typed fetch client and a kick receiver for
// Node's `http`. See README.md.

export * from "./client.js";
export * from "./kick.js";
export * from "./receiver.js";
export * from "./sessions.js";
export * from "./signature.js";
