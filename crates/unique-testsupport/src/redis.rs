//! A real `redis-server` for tests (filled in by the lease work).
