//! The kicker contract suite against `HttpKicker` with default options.

unique_kick_contract::kicker_contract_tests!(unique_kick_http::HttpKicker::new());
