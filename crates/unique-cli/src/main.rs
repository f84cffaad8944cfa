//! The `unique` operator CLI: asks a unique server about itself, a user's sessions (and logs
//! them out), rooms' leases and nodes' registrations, mints caller tokens and kick signing keys
//! in the files the server reads, checks a node's kick receiver, and listens for kicks. See the README for every command and the exit statuses.

use std::future::Future;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, KeysCommand, TokensCommand};
use crate::exit::Failure;
use crate::server::Call;

mod check;
mod cli;
mod exit;
mod keys;
mod lease;
mod listen;
mod secret;
mod server;
mod status;
mod tokens;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("unique: {}", failure.message);
            failure.exit_code()
        }
    }
}

/// Runs the command; the exit status, or why it failed. Answers go to stdout, notes on what
/// was written to stderr (in text mode only), failures to stderr.
fn run(cli: &Cli) -> Result<u8, Failure> {
    match &cli.command {
        Command::Tokens(TokensCommand::New(args)) => {
            let minted = tokens::new(args)?;
            if cli.json {
                println!("{}", minted.json(args.file.as_deref()));
            } else {
                println!("{}", minted.text());
                if let Some(wrote) = minted.wrote() {
                    eprintln!("unique: {wrote}");
                }
            }
        }
        Command::Keys(KeysCommand::New(args)) => {
            let made = keys::new(args.file.as_deref())?;
            if cli.json {
                println!("{}", made.json(args.file.as_deref()));
            } else {
                println!("{}", made.text());
                eprintln!("unique: {}", made.note(args.file.as_deref()));
            }
        }
        Command::NodeCheck(args) => {
            let check = check::check(args, cli.timeout)?;
            let report = block_on(check.run())?;
            if cli.json {
                println!("{}", check::json(&report));
            } else {
                println!("{report}");
            }
            return Ok(check::status(&report));
        }
        Command::Status => {
            let (text, code) = block_on(status::status(cli))??;
            println!("{text}");
            return Ok(code);
        }
        Command::Lease(command) => println!("{}", block_on(lease::lease(cli, command))??),
        Command::Nodes(command) => println!("{}", block_on(lease::nodes(cli, command))??),
        Command::ListenKicks(args) => block_on(listen::listen(args))??,
        Command::Current(key) => call(cli, Call::Current(key))?,
        Command::Sessions(user) => call(cli, Call::Sessions(user))?,
        Command::Logout {
            key,
            reason,
            all: false,
        } => call(cli, Call::Logout(key, reason))?,
        Command::Logout {
            key,
            reason,
            all: true,
        } => call(cli, Call::LogoutAll(&key.user, reason))?,
        Command::Release { key, generation } => call(cli, Call::Release(key, *generation))?,
    }
    Ok(exit::OK)
}

/// Makes `call` and prints the answer.
fn call(cli: &Cli, call: Call<'_>) -> Result<(), Failure> {
    let answer = block_on(server::run(cli, call))??;
    println!("{answer}");
    Ok(())
}

/// Runs `future` on a runtime of this thread.
fn block_on<F: Future>(future: F) -> Result<F::Output, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(exit::INVALID, format!("cannot start a runtime: {e}")))?;
    Ok(runtime.block_on(future))
}
