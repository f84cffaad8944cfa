//! A real DynamoDB-compatible server (dynalite) for tests (filled in by the DynamoDB work).
