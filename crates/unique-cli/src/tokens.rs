//! `tokens new`: a fresh caller token and its tokens-file entry, optionally added to the file.
//!
//! The file's shape is the one `unique-arbiter-http`'s `Tokens::parse` reads:
//! `{"tokens":[{"name","token","projects","envs"?,"roles"?}]}`. An existing file is read
//! into that shape and written back with the new entry last; before anything is written the
//! whole new text goes through `Tokens::parse`, the server's own parser, so a file this
//! command writes is one the server accepts.

use std::path::Path;

use serde::{Deserialize, Serialize};
use unique_arbiter_http::{Role, Tokens};

use crate::cli::TokensNewArgs;
use crate::exit::Failure;
use crate::secret;

/// The tokens file.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    tokens: Vec<Entry>,
}

/// One entry of the tokens file, its fields in the documented order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    token: String,
    projects: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    envs: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    roles: Vec<String>,
}

/// What `tokens new` made and did.
#[derive(Debug)]
pub(crate) struct Minted {
    token: String,
    entry: Entry,
    /// What was done to the file, when one was named.
    wrote: Option<String>,
}

impl Minted {
    /// Two lines on stdout: the token, and the entry as one line of JSON.
    pub(crate) fn text(&self) -> String {
        format!(
            "token: {}\nentry: {}",
            self.token,
            serde_json::to_string(&self.entry).expect("an entry serialises")
        )
    }

    /// `{"token","entry"}`, and `"file"` when one was written.
    pub(crate) fn json(&self, file: Option<&Path>) -> String {
        let mut value = serde_json::json!({"token": self.token, "entry": self.entry});
        if let Some(file) = file {
            value["file"] = file.display().to_string().into();
        }
        value.to_string()
    }

    /// What was done to the file, for stderr.
    pub(crate) fn wrote(&self) -> Option<&str> {
        self.wrote.as_deref()
    }
}

/// Mints a token for `args`; with `args.file`, adds its entry to that file.
pub(crate) fn new(args: &TokensNewArgs) -> Result<Minted, Failure> {
    let name = args.name.trim();
    if name.is_empty() || name.chars().any(char::is_control) {
        return Err(Failure::file(
            "--name must not be empty or hold control characters",
        ));
    }
    if args.projects.iter().any(String::is_empty) || args.envs.iter().any(String::is_empty) {
        return Err(Failure::file("--project and --env must not be empty"));
    }
    let entry = Entry {
        name: name.to_owned(),
        token: secret::random_hex()?,
        projects: args.projects.clone(),
        envs: (!args.envs.is_empty()).then(|| args.envs.clone()),
        roles: if args.admin {
            vec![Role::Admin.as_str().to_owned()]
        } else {
            Vec::new()
        },
    };
    let wrote = if let Some(path) = &args.file {
        Some(add_to_file(path, &entry)?)
    } else {
        // The entry alone must be one the server accepts.
        check(&to_text(&TokensFile {
            tokens: vec![entry.clone()],
        }))?;
        None
    };
    Ok(Minted {
        token: entry.token.clone(),
        entry,
        wrote,
    })
}

/// Adds `entry` to the tokens file at `path` (creating it owner-only when missing); says
/// what it did.
fn add_to_file(path: &Path, entry: &Entry) -> Result<String, Failure> {
    let shown = path.display();
    let existing = secret::read_existing(path)?;
    let mut file = match &existing {
        None => TokensFile::default(),
        Some(found) => {
            // The server's parser first: its messages never quote a token, serde's might.
            Tokens::parse(&found.text).map_err(|e| {
                Failure::file(format!(
                    "refusing {shown}: it is not a usable tokens file: {e}"
                ))
            })?;
            serde_json::from_str(&found.text)
                .map_err(|_| Failure::file(format!("refusing {shown}: it is not a tokens file")))?
        }
    };
    if file.tokens.iter().any(|t| t.name == entry.name) {
        return Err(Failure::file(format!(
            "refusing to add a second token named {:?} to {shown}: names must be unique (a \
             rotation adds the new token under a new name, e.g. {:?})",
            entry.name,
            format!("{}-2", entry.name)
        )));
    }
    file.tokens.push(entry.clone());
    let text = to_text(&file);
    check(&text)?;
    secret::replace(path, &text, existing.as_ref().and_then(|e| e.mode))?;
    let count = file.tokens.len();
    Ok(match existing {
        None => format!(
            "created {shown} (owner-only) with token {:?}; start the server with \
             --auth-tokens {shown}",
            entry.name
        ),
        Some(_) => format!(
            "added token {:?} to {shown} ({count} tokens); send the server SIGHUP \
             (kill -HUP <pid>) to load it",
            entry.name
        ),
    })
}

fn to_text(file: &TokensFile) -> String {
    let mut text = serde_json::to_string_pretty(file).expect("a tokens file serialises");
    text.push('\n');
    text
}

/// The server's verdict on `text`.
fn check(text: &str) -> Result<(), Failure> {
    Tokens::parse(text)
        .map(drop)
        .map_err(|e| Failure::file(format!("the server would refuse this token: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(name: &str, file: Option<&Path>) -> TokensNewArgs {
        TokensNewArgs {
            name: name.into(),
            projects: vec!["game".into()],
            envs: vec!["prod".into(), "staging".into()],
            admin: true,
            file: file.map(Path::to_path_buf),
        }
    }

    #[test]
    fn an_entry_has_the_documented_fields_and_a_fresh_token() {
        let minted = new(&args("ops", None)).unwrap();
        let text = minted.text();
        let (token_line, entry_line) = text.split_once('\n').unwrap();
        let token = token_line.strip_prefix("token: ").unwrap();
        assert_eq!(token.len(), 64);
        let entry: serde_json::Value =
            serde_json::from_str(entry_line.strip_prefix("entry: ").unwrap()).unwrap();
        assert_eq!(
            entry,
            serde_json::json!({"name": "ops", "token": token, "projects": ["game"],
                               "envs": ["prod", "staging"], "roles": ["admin"]})
        );
        assert_ne!(new(&args("ops", None)).unwrap().token, token);
    }

    #[test]
    fn a_file_gains_entries_in_order_and_refuses_a_second_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let first = new(&args("ops", Some(&path))).unwrap();
        assert!(first.wrote().unwrap().starts_with("created "));
        let second = new(&TokensNewArgs {
            admin: false,
            envs: Vec::new(),
            ..args("game", Some(&path))
        })
        .unwrap();
        assert!(second.wrote().unwrap().contains("(2 tokens)"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(Tokens::parse(&text).unwrap().len(), 2);
        let file: TokensFile = serde_json::from_str(&text).unwrap();
        assert_eq!(file.tokens, [first.entry, second.entry]);

        let refused = new(&args("ops", Some(&path))).unwrap_err();
        assert!(
            refused.message.contains("second token named \"ops\""),
            "{refused:?}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }

    #[test]
    fn a_file_the_server_would_refuse_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let secret = "a-token-that-must-stay-secret-0123";
        let text = format!(r#"{{"tokens":[{{"name":"x","token":"{secret}","projects":"game"}}]}}"#);
        secret::replace(&path, &text, None).unwrap();
        let refused = new(&args("ops", Some(&path))).unwrap_err();
        assert!(
            refused.message.contains("not a usable tokens file"),
            "{refused:?}"
        );
        assert!(!refused.message.contains(secret), "{refused:?}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }
}
