//! Caller authentication: bearer tokens, each scoped to projects and optionally envs.
//!
//! A request to `/v1/*` must carry `Authorization: Bearer <token>` naming one of the
//! configured tokens (401 `unauthenticated` otherwise), and the key it acts on must be
//! inside that token's scope (403 `forbidden` otherwise); an admin logout also needs the
//! token to hold the [`Role::Admin`] role (403 `forbidden` otherwise). All are decided
//! before the arbiter is called, so a refused request reads and writes nothing.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use http::HeaderMap;
use http::header::AUTHORIZATION;
use serde::Deserialize;
use subtle::{Choice, ConstantTimeEq};
use unique_core::Key;

/// The shortest token accepted: 16 bytes, so a token cannot be guessed by trying.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The callers the server accepts: bearer tokens with their scopes.
///
/// Built from the tokens file (`--auth-tokens`, see [`Tokens::from_file`]) or in code
/// with [`Tokens::add`]. Tokens are compared in constant time, against every configured
/// token, so neither a token's bytes nor which token matched leak through timing.
/// `Debug` shows the token names and scopes, never a token.
#[derive(Default)]
pub struct Tokens {
    entries: Vec<Entry>,
}

struct Entry {
    secret: Box<[u8]>,
    grant: Grant,
}

/// What one token may act on, and the roles it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    name: String,
    projects: Scope,
    envs: Scope,
    /// Few (one role exists): a list, searched in order.
    roles: Vec<Role>,
}

/// What a token may do beyond claiming, reading and releasing the keys of its scope: the
/// `roles` of a tokens-file entry. A role never widens the scope: it acts on the keys of
/// its token's projects and envs only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// `admin`: may log users out (`POST /v1/logout`), which tombstones a session and
    /// kicks its node. Give it to operator tools, not to the nodes' own tokens.
    Admin,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 1] = [Self::Admin];

    /// The name in a tokens file: `admin`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
        }
    }

    /// The role named `name` (exact, lower case), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|role| role.as_str() == name)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of names, or every name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    Any,
    Only(Vec<String>),
}

impl Scope {
    fn new(names: Vec<String>) -> Self {
        if names.iter().any(|n| n == "*") {
            Self::Any
        } else {
            Self::Only(names)
        }
    }

    fn contains(&self, name: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Only(names) => names.iter().any(|n| n == name),
        }
    }
}

impl Grant {
    /// A grant named `name` (for logs; never the token) on `projects` (`"*"`: every
    /// project) and, when `envs` is given, only those envs of them (`"*"`: every env).
    /// The grant holds no role; add them with [`with_role`](Self::with_role).
    pub fn new(name: impl Into<String>, projects: Vec<String>, envs: Option<Vec<String>>) -> Self {
        Self {
            name: name.into(),
            projects: Scope::new(projects),
            envs: envs.map_or(Scope::Any, Scope::new),
            roles: Vec::new(),
        }
    }

    /// The same grant, also holding `role` (adding one it holds changes nothing).
    #[must_use]
    pub fn with_role(mut self, role: Role) -> Self {
        if !self.roles.contains(&role) {
            self.roles.push(role);
        }
        self
    }

    /// Whether the grant holds `role`.
    pub fn has_role(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    /// The token's name, for logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this grant may act on `key`.
    pub fn permits(&self, key: &Key) -> bool {
        self.projects.contains(&key.project) && self.envs.contains(&key.env)
    }

    /// Whether this grant may act on the room leases and node registrations of
    /// `project`: the project is in its scope and the grant is not limited to some envs.
    /// Leases belong to a whole project (they have no env), so a token limited to `prod`
    /// cannot take a room that the project's other envs' nodes may hold.
    pub fn permits_project(&self, project: &str) -> bool {
        self.projects.contains(project) && self.envs == Scope::Any
    }
}

/// Why a request was not authenticated (the message of the 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unauthenticated {
    /// No `Authorization` header.
    Missing,
    /// An `Authorization` header that is not `Bearer <token>`.
    Malformed,
    /// A bearer token that is not configured.
    Unknown,
}

impl Unauthenticated {
    /// A lower-case message for the error body.
    pub fn message(self) -> &'static str {
        match self {
            Self::Missing => "missing bearer token",
            Self::Malformed => "authorization header is not a bearer token",
            Self::Unknown => "unknown bearer token",
        }
    }
}

/// A tokens file or token that cannot be used. Messages never contain a token.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TokensError(String);

impl Tokens {
    /// No tokens: every request is refused with 401.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `token` with `grant`.
    ///
    /// # Errors
    ///
    /// The token is shorter than [`MIN_TOKEN_BYTES`], has characters a bearer token
    /// cannot carry (only printable ASCII without spaces), or is already configured; the
    /// grant has no project.
    pub fn add(&mut self, token: &str, grant: Grant) -> Result<&mut Self, TokensError> {
        let name = &grant.name;
        if token.len() < MIN_TOKEN_BYTES {
            return Err(TokensError(format!(
                "token {name:?} is shorter than {MIN_TOKEN_BYTES} bytes"
            )));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokensError(format!(
                "token {name:?} must be printable ASCII without spaces"
            )));
        }
        if matches!(&grant.projects, Scope::Only(projects) if projects.is_empty()) {
            return Err(TokensError(format!("token {name:?} has no project")));
        }
        if self.lookup(token.as_bytes()).is_some() {
            return Err(TokensError(format!("token {name:?} is configured twice")));
        }
        self.entries.push(Entry {
            secret: token.as_bytes().into(),
            grant,
        });
        Ok(self)
    }

    /// Parses a tokens file:
    ///
    /// ```json
    /// {"tokens": [
    ///   {"name": "game-backend", "token": "…", "projects": ["game"], "envs": ["prod"]},
    ///   {"name": "ops", "token": "…", "projects": ["*"], "roles": ["admin"]}
    /// ]}
    /// ```
    ///
    /// `envs` may be omitted (every env of the projects); `"*"` means every project or
    /// env. `roles` may be omitted (no role); the one role is `"admin"` ([`Role::Admin`]:
    /// admin logouts, inside the token's scope). Unknown fields and unknown roles are
    /// refused, so a typo cannot widen or drop a scope or silently drop a role.
    ///
    /// # Errors
    ///
    /// Malformed JSON, no tokens, an unknown role (the message names the token, never the
    /// role as written), or any token refused by [`Tokens::add`].
    pub fn parse(text: &str) -> Result<Self, TokensError> {
        Self::parse_file(text, false)
    }

    /// As [`parse`](Tokens::parse), except that a file listing no token
    /// (`{"tokens": []}`) is the empty set, which authenticates nobody: every caller is then
    /// refused 401. What a reload reads, so that an operator can revoke the last token;
    /// a server that starts with no token is more likely a mistake, which `parse` refuses.
    ///
    /// # Errors
    ///
    /// As [`parse`](Tokens::parse), but for an empty list.
    pub fn parse_allowing_none(text: &str) -> Result<Self, TokensError> {
        Self::parse_file(text, true)
    }

    fn parse_file(text: &str, allow_none: bool) -> Result<Self, TokensError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            tokens: Vec<FileToken>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FileToken {
            name: String,
            token: String,
            projects: Vec<String>,
            #[serde(default)]
            envs: Option<Vec<String>>,
            #[serde(default)]
            roles: Vec<String>,
        }
        let file: File = serde_json::from_str(text).map_err(|e| {
            // serde quotes a mistyped value ("invalid type: string \"…\""), which could be
            // a token: only messages that name a field are passed on.
            let message = e.to_string();
            let detail = if message.starts_with("unknown field") || message.starts_with("missing field") {
                message
            } else {
                format!("expected {{\"tokens\": [{{\"name\", \"token\", \"projects\", \"envs\", \"roles\"}}]}} at line {} column {}", e.line(), e.column())
            };
            TokensError(format!("tokens file is not valid: {detail}"))
        })?;
        if file.tokens.is_empty() && !allow_none {
            return Err(TokensError("tokens file holds no token".to_owned()));
        }
        let mut tokens = Self::new();
        for t in file.tokens {
            let mut grant = Grant::new(t.name, t.projects, t.envs);
            for name in &t.roles {
                // Not echoed: a value pasted into the wrong field could be a token.
                let role = Role::from_name(name).ok_or_else(|| {
                    let known: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
                    TokensError(format!(
                        "token {:?} has an unknown role (known: {})",
                        grant.name,
                        known.join(", ")
                    ))
                })?;
                grant = grant.with_role(role);
            }
            tokens.add(&t.token, grant)?;
        }
        Ok(tokens)
    }

    /// Reads and parses the tokens file at `path` (see [`Tokens::parse`]).
    ///
    /// # Errors
    ///
    /// The file cannot be read, or [`Tokens::parse`] refuses it.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokensError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| TokensError(format!("cannot read {}: {e}", path.display())))?;
        Self::parse(&text)
    }

    /// How many tokens are configured.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The grant of the bearer token in `headers`.
    ///
    /// # Errors
    ///
    /// The header is missing, not a bearer token, or names no configured token.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<&Grant, Unauthenticated> {
        let value = headers.get(AUTHORIZATION).ok_or(Unauthenticated::Missing)?;
        let token = bearer(value.as_bytes()).ok_or(Unauthenticated::Malformed)?;
        self.lookup(token).ok_or(Unauthenticated::Unknown)
    }

    /// Compares `token` with every configured token in constant time; no early exit.
    fn lookup(&self, token: &[u8]) -> Option<&Grant> {
        let mut found: Option<&Grant> = None;
        for entry in &self.entries {
            let equal: Choice = entry.secret.ct_eq(token);
            if bool::from(equal) {
                found = Some(&entry.grant);
            }
        }
        found
    }
}

impl Tokens {
    /// What changed from `self` to `newer`, by token name: a token of `newer` that `self`
    /// lacks (another secret, or the same secret with another name or scope) is `added`, one
    /// of `self` that `newer` lacks is `removed`; a token whose secret or scope changed
    /// under the same name is both. For logging a reload; names only, never a secret.
    ///
    /// Not constant-time: it compares the operator's own files, not a caller's input.
    pub fn diff(&self, newer: &Tokens) -> TokensDiff {
        let missing_from = |from: &Tokens, of: &Tokens| -> Vec<String> {
            of.entries
                .iter()
                .filter(|entry| !from.entries.iter().any(|other| other == *entry))
                .map(|entry| entry.grant.name.clone())
                .collect()
        };
        TokensDiff {
            added: missing_from(self, newer),
            removed: missing_from(newer, self),
        }
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.secret == other.secret && self.grant == other.grant
    }
}

/// The names of the tokens one set has and another has not ([`Tokens::diff`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokensDiff {
    /// Names of the tokens only the newer set has, in its order.
    pub added: Vec<String>,
    /// Names of the tokens only the older set has, in its order.
    pub removed: Vec<String>,
}

impl TokensDiff {
    /// Whether the two sets hold the same tokens with the same names and scopes.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

/// The tokens a running service checks, replaceable while it serves: what
/// [`ArbiterService::with_tokens`](crate::ArbiterService::with_tokens) holds, so a server
/// can reload its tokens file without a restart.
///
/// Clones share the set. [`replace`](Self::replace) swaps the whole set at once: each
/// request is checked against the set in force when it arrived, all of the old set or all
/// of the new one, never a mix, and a request in flight keeps the set it started with.
/// Connections are not touched. `Debug` shows the current token names and scopes.
#[derive(Clone)]
pub struct SharedTokens {
    current: Arc<RwLock<Arc<Tokens>>>,
}

impl SharedTokens {
    /// A shared set holding `tokens`.
    pub fn new(tokens: Tokens) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(tokens))),
        }
    }

    /// The set in force now.
    pub fn get(&self) -> Arc<Tokens> {
        // A panic while holding the lock cannot leave a half-written set: the write is
        // one pointer swap. So a poisoned lock still holds a whole set.
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `tokens` in force for every request from now on; returns the set it replaced.
    pub fn replace(&self, tokens: Tokens) -> Arc<Tokens> {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *current, Arc::new(tokens))
    }
}

impl From<Tokens> for SharedTokens {
    fn from(tokens: Tokens) -> Self {
        Self::new(tokens)
    }
}

impl fmt::Debug for SharedTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SharedTokens").field(&*self.get()).finish()
    }
}

/// The token of an `Authorization: Bearer <token>` value (the scheme is case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = token.trim_ascii();
    (!token.is_empty()).then_some(token)
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| &e.grant))
            .finish()
    }
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
