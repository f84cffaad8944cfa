//! Part of `cargo xtask tidy`: the backend guide stays true to the code. Every
//! code block of the guide whose first line names a file of the repository
//! (`// path` or `# path`) quotes that file verbatim, and the number of cases
//! the guide states (`**N cases**`) is the number of cases of the store
//! contract suite.

use std::path::Path;

use crate::tidy::Dangling;

/// The guide for backend authors.
pub(crate) const GUIDE: &str = "docs/backend-guide.md";

/// Where the store contract's cases live: one `pub async fn NAME(subject:
/// Subject)` each (the same rule as the suite's own `case_list` test).
const CASES_DIR: &str = "crates/unique-store-contract/src";

/// Every way the guide has drifted from the code.
pub(crate) fn check(root: &Path) -> Vec<Dangling> {
    let Ok(guide) = std::fs::read_to_string(root.join(GUIDE)) else {
        return vec![at(0, format!("cannot read {GUIDE}"))];
    };
    let mut problems = check_quotes(&guide, |path| std::fs::read_to_string(root.join(path)).ok());
    match count_cases(&root.join(CASES_DIR)) {
        Ok(cases) => problems.extend(check_count(&guide, cases)),
        Err(e) => problems.push(at(0, format!("cannot count the cases in {CASES_DIR}: {e}"))),
    }
    problems
}

fn at(line: usize, what: String) -> Dangling {
    Dangling {
        file: GUIDE.to_owned(),
        line,
        what,
    }
}

/// Each fenced block whose first line is `// path` or `# path` must be a
/// verbatim part of that file (read through `read`).
fn check_quotes(guide: &str, read: impl Fn(&str) -> Option<String>) -> Vec<Dangling> {
    let mut problems = Vec::new();
    let mut lines = guide.lines().enumerate();
    while let Some((_, line)) = lines.next() {
        if !line.starts_with("```") {
            continue;
        }
        let block: Vec<(usize, &str)> = lines
            .by_ref()
            .take_while(|(_, l)| !l.starts_with("```"))
            .collect();
        let Some(&(number, first)) = block.first() else {
            continue;
        };
        let Some(path) = first
            .strip_prefix("// ")
            .or_else(|| first.strip_prefix("# "))
            .filter(|p| p.contains('/') && !p.contains(' '))
        else {
            continue;
        };
        let quote: Vec<&str> = block[1..].iter().map(|(_, l)| *l).collect();
        let quote = quote.join("\n");
        match read(path) {
            None => problems.push(at(
                number + 1,
                format!("quotes {path}, which does not exist"),
            )),
            Some(text) if !text.contains(&quote) => problems.push(at(
                number + 1,
                format!("the quote of {path} no longer matches the file; copy it again"),
            )),
            Some(_) => {}
        }
    }
    problems
}

/// The guide must state the case count as `**N cases**`, and N must be `cases`.
fn check_count(guide: &str, cases: usize) -> Vec<Dangling> {
    for (index, line) in guide.lines().enumerate() {
        let Some((before, _)) = line.split_once(" cases**") else {
            continue;
        };
        let Some((_, stated)) = before.rsplit_once("**") else {
            continue;
        };
        return match stated.parse::<usize>() {
            Ok(n) if n == cases => Vec::new(),
            _ => vec![at(
                index + 1,
                format!("states **{stated} cases**, the store contract has {cases}"),
            )],
        };
    }
    vec![at(
        0,
        format!("states no case count; write **{cases} cases**"),
    )]
}

/// The cases of the store contract: `pub async fn NAME(subject: Subject)` in
/// the suite's sources.
fn count_cases(dir: &Path) -> std::io::Result<usize> {
    let mut cases = 0;
    for entry in std::fs::read_dir(dir)? {
        let text = std::fs::read_to_string(entry?.path())?;
        cases += text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("pub async fn "))
            .filter(|rest| rest.contains("(subject: Subject)"))
            .count();
    }
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotes(guide: &str) -> Vec<String> {
        check_quotes(guide, |path| {
            (path == "src/lib.rs").then(|| "fn a() {}\nfn b() {}\n".to_owned())
        })
        .into_iter()
        .map(|d| d.what)
        .collect()
    }

    #[test]
    fn quotes_must_match_their_file() {
        assert!(quotes("```rust\n// src/lib.rs\nfn b() {}\n```\n").is_empty());
        assert!(quotes("```rust\n// not a path\nfn z() {}\n```\n").is_empty());
        assert_eq!(
            quotes("text\n```rust\n// src/lib.rs\nfn z() {}\n```\n"),
            ["the quote of src/lib.rs no longer matches the file; copy it again"]
        );
        assert_eq!(
            quotes("```toml\n# src/gone.toml\n[x]\n```\n"),
            ["quotes src/gone.toml, which does not exist"]
        );
    }

    #[test]
    fn the_case_count_must_be_stated_and_true() {
        assert!(check_count("The suite has **54 cases**.", 54).is_empty());
        assert_eq!(
            check_count("The suite has **52 cases**.", 54)[0].what,
            "states **52 cases**, the store contract has 54"
        );
        assert_eq!(
            check_count("no number", 54)[0].what,
            "states no case count; write **54 cases**"
        );
    }
}
