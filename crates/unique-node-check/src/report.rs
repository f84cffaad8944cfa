//! What a run found: one [`ClauseResult`] per clause, printed one line each.

use std::fmt;

use crate::clause::Clause;
use crate::send::Answer;

/// What one clause's requests got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClauseResult {
    clause: Clause,
    answers: Vec<(&'static str, Answer)>,
}

impl ClauseResult {
    pub(crate) fn new(clause: Clause, answers: Vec<(&'static str, Answer)>) -> Self {
        Self { clause, answers }
    }

    /// The clause.
    pub fn clause(&self) -> Clause {
        self.clause
    }

    /// Each request's answer, named by its variant (the name of a clause's only request is
    /// empty).
    pub fn answers(&self) -> &[(&'static str, Answer)] {
        &self.answers
    }

    /// Whether every answer has the status the clause expects.
    pub fn passed(&self) -> bool {
        let expected = self.clause.expected();
        !self.answers.is_empty()
            && self
                .answers
                .iter()
                .all(|(_, answer)| answer.status().is_some_and(|s| expected.accepts(s)))
    }
}

/// One line: `PASS` or `FAIL`, the clause, what was sent, what was expected and what came
/// back (for each variant, by name): the status, and for an answer the clause does not
/// accept the start of its body too.
impl fmt::Display for ClauseResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.passed() { "PASS" } else { "FAIL" };
        let expected = self.clause.expected();
        write!(
            f,
            "{verdict} {:<23} {}: expected {expected}, got ",
            self.clause.name(),
            self.clause.description(),
        )?;
        for (at, (variant, answer)) in self.answers.iter().enumerate() {
            if at > 0 {
                f.write_str("; ")?;
            }
            if !variant.is_empty() {
                write!(f, "{variant} ")?;
            }
            // The body only where it helps: an answer the clause does not accept.
            match answer.status() {
                Some(status) if expected.accepts(status) => write!(f, "{status}")?,
                _ => write!(f, "{answer}")?,
            }
        }
        Ok(())
    }
}

/// A whole run: every clause's result, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    results: Vec<ClauseResult>,
}

impl Report {
    pub(crate) fn new(results: Vec<ClauseResult>) -> Self {
        Self { results }
    }

    /// Every clause's result, in the order checked.
    pub fn results(&self) -> &[ClauseResult] {
        &self.results
    }

    /// Whether every clause passed.
    pub fn passed(&self) -> bool {
        self.results.iter().all(ClauseResult::passed)
    }

    /// The clauses that failed, in order.
    pub fn failed(&self) -> Vec<Clause> {
        self.results
            .iter()
            .filter(|result| !result.passed())
            .map(ClauseResult::clause)
            .collect()
    }
}

/// One line per clause, then a summary line: `all N clauses passed`, or
/// `M of N clauses failed: name, name`.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for result in &self.results {
            writeln!(f, "{result}")?;
        }
        let failed = self.failed();
        if failed.is_empty() {
            write!(f, "all {} clauses passed", self.results.len())
        } else {
            let names: Vec<&str> = failed.iter().map(|c| c.name()).collect();
            write!(
                f,
                "{} of {} clauses failed: {}",
                failed.len(),
                self.results.len(),
                names.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, body: &str) -> Answer {
        Answer::Status {
            status,
            body: body.into(),
        }
    }

    #[test]
    fn a_clause_passes_only_when_every_variant_does() {
        let ok = ClauseResult::new(
            Clause::OtherMethod,
            vec![("GET", status(405, "")), ("PUT", status(405, ""))],
        );
        assert!(ok.passed());
        let one_off = ClauseResult::new(
            Clause::OtherMethod,
            vec![("GET", status(405, "")), ("PUT", status(200, "{}"))],
        );
        assert!(!one_off.passed());
        let silent = ClauseResult::new(
            Clause::SignedKick,
            vec![("", Answer::NoAnswer("connect: refused".into()))],
        );
        assert!(!silent.passed());
        assert!(!ClauseResult::new(Clause::SignedKick, Vec::new()).passed());
    }

    #[test]
    fn lines_name_the_clause_the_expectation_and_each_answer() {
        let result = ClauseResult::new(
            Clause::OtherMethod,
            vec![
                ("GET", status(405, "")),
                ("PUT", status(200, r#"{"ack":"no-session"}"#)),
            ],
        );
        assert_eq!(
            result.to_string(),
            r#"FAIL other-method            a signed kick with another method: expected 405, got GET 405; PUT 200 {"ack":"no-session"}"#
        );
        let result = ClauseResult::new(
            Clause::SignedKick,
            vec![("", Answer::NoAnswer("connect: refused".into()))],
        );
        assert_eq!(
            result.to_string(),
            "FAIL signed-kick             a kick signed with the node's key: expected 2xx, got no answer (connect: refused)"
        );
    }

    #[test]
    fn the_summary_names_each_failed_clause() {
        let report = Report::new(vec![
            ClauseResult::new(Clause::SignedKick, vec![("", status(200, ""))]),
            ClauseResult::new(Clause::Unsigned, vec![("", status(200, ""))]),
            ClauseResult::new(Clause::Forged, vec![("", status(200, ""))]),
        ]);
        assert!(!report.passed());
        assert_eq!(report.failed(), [Clause::Unsigned, Clause::Forged]);
        let text = report.to_string();
        assert_eq!(text.lines().count(), 4);
        assert!(text.starts_with("PASS signed-kick "), "{text}");
        assert!(
            text.ends_with("2 of 3 clauses failed: unsigned, forged"),
            "{text}"
        );
    }
}
