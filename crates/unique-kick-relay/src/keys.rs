//! Where the registrations live in the node registry: ids no caller of the lease routes can
//! write or read. The routes store every id as `<project>#<id>` with a non-empty project
//! that holds no `#`, so an id that starts with `#` is out of their reach.

/// The prefix of a server's registration: `#kick-server#<epoch>` → the server's URL.
pub const SERVER_PREFIX: &str = "#kick-server#";
/// The prefix of a stream's registration: `#kick-stream#<node>` → the holder's epoch.
pub const STREAM_PREFIX: &str = "#kick-stream#";

/// The registry id of the server whose epoch is `epoch`.
pub fn server_key(epoch: &str) -> String {
    format!("{SERVER_PREFIX}{epoch}")
}

/// The registry id of `node`'s stream.
pub fn stream_key(node: &str) -> String {
    format!("{STREAM_PREFIX}{node}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_lease_route_id_can_name_a_registration() {
        // What the lease routes store: a project of at least one character, no `#`.
        let scoped = unique_wire::lease::scoped_id("p", "#kick-stream#n1");
        assert!(!scoped.starts_with('#'));
        assert!(stream_key("n1").starts_with('#'));
        assert!(server_key("e").starts_with('#'));
    }
}
