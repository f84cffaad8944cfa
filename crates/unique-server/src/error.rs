//! The one error of startup.

use std::fmt;

/// Why the server did not start: a flag, a file, the store, the lease directory or the
/// address that cannot be used. `main` prints it after `unique-server: ` and exits 1.
///
/// Nothing branches on why startup failed, so this is one message rather than an enum of
/// causes. Each message names what is at fault and, where there is one, the flag that fixes
/// it; like every message of the server it never holds a secret (a token, a key, the
/// password of --database-url).
#[derive(Debug)]
pub(crate) struct StartupError(String);

impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartupError {}

/// The modules whose messages are also read at run time (the secret files, reread on SIGHUP)
/// or checked as text in their tests (the exposure table) keep `String` errors; `?` turns
/// them into a startup error unchanged.
impl From<String> for StartupError {
    fn from(message: String) -> Self {
        Self(message)
    }
}

impl From<&str> for StartupError {
    fn from(message: &str) -> Self {
        Self(message.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::StartupError;

    #[test]
    fn it_says_its_message_and_nothing_else() {
        let message = "cannot listen on 127.0.0.1:7420: Address already in use (os error 98)";
        assert_eq!(StartupError::from(message).to_string(), message);
        assert_eq!(StartupError::from(message.to_owned()).to_string(), message);
    }
}
