//! The command line: global options, one subcommand per operator task.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use unique_core::{Key, UserKey};

use crate::exit;

/// The server address when neither `--server` nor `UNIQUE_SERVER` names one: the server's own
/// default listen address.
pub(crate) const DEFAULT_SERVER: &str = "http://127.0.0.1:7420";

/// The help heading of the options every subcommand takes.
const GLOBAL: &str = "Global options";

/// How long one call to the server may take when `--timeout` is not given.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Operator tool for a unique server: its status, sessions, admin logouts, leases and nodes,
/// caller tokens, kick signing keys, kick receiver checks, and a kick listener to try things.
#[derive(Debug, Parser)]
#[command(name = "unique", version, after_help = exit::TABLE)]
pub(crate) struct Cli {
    /// The server's base URL, http or https (with its path prefix if any).
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "UNIQUE_SERVER",
        default_value = DEFAULT_SERVER,
        value_name = "URL"
    )]
    pub(crate) server: String,

    /// Bearer token for a server with --auth-tokens; never printed (prefer the variable: a
    /// command line shows in ps).
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "UNIQUE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub(crate) token: Option<String>,

    /// Trust only the CAs in this PEM file for https (a private CA), not the web roots.
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "UNIQUE_CA_CERT",
        value_name = "PATH"
    )]
    pub(crate) ca_cert: Option<PathBuf>,

    /// How long one request may take: 10s, 500ms, 3 (seconds) [default: 10s; node-check 5s].
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        value_name = "DURATION",
        value_parser = duration
    )]
    pub(crate) timeout: Option<Duration>,

    /// Print the server's JSON answer instead of text.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub(crate) json: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// The key's gen and the owner of its online session, if any (POST /v1/current).
    Current(KeyArgs),
    /// The user's online sessions, one per slot (POST /v1/sessions).
    Sessions(UserArgs),
    /// Log the key's session out and kick its node (POST /v1/logout; admin role); with --all,
    /// every online session of the user (POST /v1/logout/all).
    Logout {
        #[command(flatten)]
        key: KeyArgs,
        /// Why, for the user: the kick carries it to the node as its message.
        #[arg(long)]
        reason: String,
        /// Every online session of the user: the default slot, named slots and pool places
        /// (give no --slot); one line per session.
        #[arg(long, conflicts_with = "slot")]
        all: bool,
    },
    /// Release the key's session at one gen, as its node does at logout (POST /v1/release).
    Release {
        #[command(flatten)]
        key: KeyArgs,
        /// The gen to release; a key at another gen is left as it is.
        #[arg(long = "gen", value_name = "GEN")]
        generation: i64,
    },
    /// Caller tokens for the server's --auth-tokens file.
    #[command(subcommand)]
    Tokens(TokensCommand),
    /// Kick signing keys for --kick-signing-keys and the nodes' receivers.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Check a node's kick receiver, or with --push a push node's kick stream, against the kick
    /// contract (as unique-node-check).
    NodeCheck(NodeCheckArgs),
    /// The server's version, caller authentication, kick signing key ids, features and limits
    /// (GET /v1/info), and whether its store is ready (GET /readyz; exit 1 when not).
    Status,
    /// A room's lease in the server's lease directory (POST /v1/lease/*; the token must cover
    /// the project with every env).
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// A node's registration in the server's node registry (POST /v1/nodes/lookup). There is
    /// no listing: a registry is looked up by node id, and not every lease backend can list.
    #[command(subcommand)]
    Nodes(NodesCommand),
    /// Receive kicks as a node with no session does (each answered 200) and print each
    /// accepted kick as one JSON line on stdout; its URL goes to stderr. Runs until Ctrl-C.
    ListenKicks(ListenKicksArgs),
}

/// One room of one project: `--project --room`.
#[derive(Debug, Args)]
pub(crate) struct RoomArgs {
    /// The room's project.
    #[arg(long)]
    pub(crate) project: String,
    /// The room id.
    #[arg(long)]
    pub(crate) room: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum LeaseCommand {
    /// Grant the room's lease to --node, renew it if --node holds it, or report its holder
    /// (POST /v1/lease/ensure).
    Ensure {
        #[command(flatten)]
        room: RoomArgs,
        /// The node asking for the room.
        #[arg(long)]
        node: String,
        /// How long the lease lasts unless renewed: 30s, 500ms, 60 (seconds); at most 1h.
        #[arg(long, value_name = "DURATION", value_parser = duration)]
        ttl: Duration,
    },
    /// Whether --node still holds the room under --token (POST /v1/lease/verify).
    Verify {
        #[command(flatten)]
        room: RoomArgs,
        /// The holder.
        #[arg(long)]
        node: String,
        /// The lease token the holder was granted (`--token` is the caller's bearer token).
        #[arg(long, value_name = "TOKEN")]
        lease_token: String,
    },
    /// Give the room's lease back, by its token (POST /v1/lease/release).
    Release {
        #[command(flatten)]
        room: RoomArgs,
        /// The holder.
        #[arg(long)]
        node: String,
        /// The lease token the holder was granted (`--token` is the caller's bearer token).
        #[arg(long, value_name = "TOKEN")]
        lease_token: String,
    },
    /// The room's stored lease, expired or not, or none (POST /v1/lease/lookup).
    Lookup {
        #[command(flatten)]
        room: RoomArgs,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum NodesCommand {
    /// A node's registration while it is valid, or none (POST /v1/nodes/lookup).
    Lookup {
        /// The node's project.
        #[arg(long)]
        project: String,
        /// The node id.
        #[arg(long)]
        node: String,
    },
}

#[derive(Debug, Args)]
pub(crate) struct ListenKicksArgs {
    /// Address to listen on; advertise http://ADDRESS/kick (any path) as the owner endpoint.
    #[arg(long, default_value = "127.0.0.1:9001", value_name = "ADDRESS")]
    pub(crate) listen: std::net::SocketAddr,
    /// Verify every kick with this key file (the server's --kick-signing-keys); a kick
    /// without a valid signature is answered 401 and not printed.
    #[arg(long, value_name = "FILE", conflicts_with = "insecure_unsigned")]
    pub(crate) signing_keys: Option<PathBuf>,
    /// Take unsigned kicks on an address that is not loopback (refused otherwise; loopback
    /// takes them without it). Only where every host that can reach it is trusted.
    #[arg(long)]
    pub(crate) insecure_unsigned: bool,
}

/// One session's key: `--project --env --uid [--slot]`.
#[derive(Debug, Args)]
pub(crate) struct KeyArgs {
    #[command(flatten)]
    pub(crate) user: UserArgs,
    /// The device slot (omitted: the default slot).
    #[arg(long)]
    pub(crate) slot: Option<String>,
}

impl KeyArgs {
    pub(crate) fn key(&self) -> Key {
        self.user.user().key(self.slot.clone().unwrap_or_default())
    }
}

/// One user, every slot: `--project --env --uid`.
#[derive(Debug, Args)]
pub(crate) struct UserArgs {
    /// The key's project.
    #[arg(long)]
    pub(crate) project: String,
    /// The key's environment (prod, staging, ...).
    #[arg(long)]
    pub(crate) env: String,
    /// The user id (>= 1).
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) uid: i64,
}

impl UserArgs {
    pub(crate) fn user(&self) -> UserKey {
        UserKey::new(self.project.clone(), self.env.clone(), self.uid)
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum TokensCommand {
    /// Mint a caller token: print it and its entry; --file adds the entry to a tokens file.
    New(TokensNewArgs),
}

#[derive(Debug, Args)]
pub(crate) struct TokensNewArgs {
    /// The token's name, for the server's logs (unique in the file).
    #[arg(long)]
    pub(crate) name: String,
    /// A project the token may act on; repeat for more, "*" for every project.
    #[arg(long = "project", value_name = "PROJECT", required = true)]
    pub(crate) projects: Vec<String>,
    /// Only this env of the projects; repeat for more (omitted: every env).
    #[arg(long = "env", value_name = "ENV")]
    pub(crate) envs: Vec<String>,
    /// Give the token the admin role: it may log users out (inside its scope).
    #[arg(long)]
    pub(crate) admin: bool,
    /// Add the entry to this tokens file, the server's --auth-tokens (created 0600 if missing).
    #[arg(long, value_name = "PATH")]
    pub(crate) file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Make a kick signing key: print it, or append it to a key file with --file.
    New(KeysNewArgs),
}

#[derive(Debug, Args)]
pub(crate) struct KeysNewArgs {
    /// Append the key to this key file, where the first key keeps signing (created 0600 if
    /// missing).
    #[arg(long, value_name = "PATH")]
    pub(crate) file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct NodeCheckArgs {
    /// The receiver's URL (its owner endpoint, http only), e.g. http://127.0.0.1:9001/kick.
    #[arg(long, required_unless_present = "push", conflicts_with = "push")]
    pub(crate) url: Option<String>,
    /// Check a push node instead: listen on --listen as a server, wait for the node to open
    /// GET /v1/nodes/{node}/kicks, push the signature and payload clauses' kicks down it and
    /// check the status it acks each with (method and size clauses do not apply).
    #[arg(long, requires = "listen")]
    pub(crate) push: bool,
    /// With --push: where to listen (plain HTTP), e.g. 127.0.0.1:9002 (port 0: any free port;
    /// the address goes to stderr). Point the node's server URL at it.
    #[arg(long, value_name = "ADDR", requires = "push")]
    pub(crate) listen: Option<String>,
    /// With --push: take only this node's stream [default: any node's].
    #[arg(long, value_name = "ID", requires = "push")]
    pub(crate) node: Option<String>,
    /// With --push: how long to wait for the node's stream, e.g. 30 or 1m [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = duration, requires = "push")]
    pub(crate) wait: Option<Duration>,
    /// The key file the node verifies with (the first key signs, as the server's does).
    #[arg(long, value_name = "FILE")]
    pub(crate) signing_keys: PathBuf,
    /// The project of every kick [default: node-check].
    #[arg(long)]
    pub(crate) project: Option<String>,
    /// The env of every kick [default: node-check].
    #[arg(long)]
    pub(crate) env: Option<String>,
    /// The node's signature window, e.g. 300 (seconds) or 5m [default: 5m].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) window: Option<Duration>,
}

/// A duration: whole seconds (`300`, as `unique-node-check` takes them) or humantime
/// (`10s`, `500ms`, `5m`).
fn duration(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{e} (write whole seconds, or a duration such as 10s or 500ms)"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_read_seconds_and_humantime() {
        assert_eq!(duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("5m"), Ok(Duration::from_mins(5)));
        assert!(duration("soon").is_err());
    }

    #[test]
    fn keys_build_from_the_flags() {
        let cli = Cli::try_parse_from([
            "unique",
            "current",
            "--project",
            "game",
            "--env",
            "prod",
            "--uid",
            "42",
            "--slot",
            "mobile",
            "--json",
        ])
        .unwrap();
        let Command::Current(key) = cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!(key.key(), Key::new("game", "prod", 42).with_slot("mobile"));
        assert!(cli.json);
    }

    #[test]
    fn node_check_takes_a_url_or_push_with_listen() {
        let keys = ["--signing-keys", "k"];
        let parse = |args: &[&str]| {
            Cli::try_parse_from([&["unique", "node-check"][..], &keys, args].concat())
        };
        let cli = parse(&[
            "--push",
            "--listen",
            "127.0.0.1:0",
            "--node",
            "n1",
            "--wait",
            "5",
        ])
        .unwrap();
        let Command::NodeCheck(args) = cli.command else {
            panic!("{:?}", cli.command)
        };
        assert!(args.push && args.url.is_none());
        assert_eq!(args.listen.as_deref(), Some("127.0.0.1:0"));
        assert_eq!(args.node.as_deref(), Some("n1"));
        assert_eq!(args.wait, Some(Duration::from_secs(5)));
        assert!(parse(&["--url", "http://127.0.0.1:9/kick"]).is_ok());
        for wrong in [
            &[][..],
            &["--push"],
            &["--listen", "127.0.0.1:0"],
            &["--url", "http://127.0.0.1:9/kick", "--node", "n1"],
            &[
                "--url",
                "http://127.0.0.1:9/kick",
                "--push",
                "--listen",
                "127.0.0.1:0",
            ],
        ] {
            assert!(parse(wrong).is_err(), "{wrong:?}");
        }
    }

    #[test]
    fn logout_all_takes_a_user_and_no_slot() {
        let user = [
            "unique",
            "logout",
            "--project",
            "g",
            "--env",
            "p",
            "--uid",
            "1",
        ];
        let cli = Cli::try_parse_from([&user[..], &["--reason", "r", "--all"]].concat()).unwrap();
        let Command::Logout { all, key, .. } = cli.command else {
            panic!("{:?}", cli.command)
        };
        assert!(all && key.slot.is_none());
        let both = [&user[..], &["--reason", "r", "--all", "--slot", "#1"]].concat();
        let e = Cli::try_parse_from(both).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{e}");
    }
}
