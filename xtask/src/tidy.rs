//! `cargo xtask tidy`: every clause or invariant id cited in the repository
//! names a heading of `docs/design.md`, every link into it names a heading
//! that exists, nothing cites a document the repository does not hold, the
//! backend guide matches the code it quotes and counts (`guide`), the crate
//! map in `docs/architecture.md` matches the workspace (`architecture`), and
//! every relative link in the Markdown resolves, anchors included (`links`).

mod links;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The design document every id and anchor must resolve in.
const DESIGN: &str = "docs/design.md";

/// Id families: a capital letter, then digits, then an optional lower-case
/// variant letter (`C3`, `I5a`, `S6`, `D9`, `N4`).
const ID_LETTERS: &[char] = &['C', 'I', 'S', 'D', 'N'];

/// Citations of documents that live outside the repository.
const FOREIGN_DOCUMENTS: &[&str] = &["SPEC §", "SPEC.md", "STORE.md", "SERVER.md", "CLIENT.md"];

/// One dangling citation.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Dangling {
    pub(crate) file: String,
    pub(crate) line: usize,
    pub(crate) what: String,
}

/// Checks the repository at `root`; the error lists every dangling citation.
pub(crate) fn check(root: &Path) -> Result<usize, Vec<Dangling>> {
    let design = std::fs::read_to_string(root.join(DESIGN)).map_err(|e| {
        vec![Dangling {
            file: DESIGN.to_owned(),
            line: 0,
            what: format!("cannot read it: {e}"),
        }]
    })?;
    let headings = Headings::of(&design);
    let mut dangling = Vec::new();
    // The checker's own source names dangling ids and foreign documents on purpose.
    let files: Vec<PathBuf> = tracked_files(root)
        .into_iter()
        .filter(|path| path != Path::new(file!()))
        .collect();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue; // not text
        };
        dangling.extend(check_text(&file.to_string_lossy(), &text, &headings));
    }
    // The backend guide quotes code and states the case count: both checked.
    dangling.extend(crate::guide::check(root));
    // The crate map names every member once and allows every dependency they have.
    dangling.extend(crate::architecture::check(root));
    // Relative links name files that exist, and headings that exist.
    dangling.extend(links::check(root, &files));
    if dangling.is_empty() {
        Ok(files.len())
    } else {
        Err(dangling)
    }
}

/// The ids and anchors the design document's headings define.
pub(crate) struct Headings {
    ids: BTreeSet<String>,
    anchors: BTreeSet<String>,
}

impl Headings {
    pub(crate) fn of(design: &str) -> Self {
        let mut ids = BTreeSet::new();
        let mut anchors = BTreeSet::new();
        for line in design.lines() {
            let Some(title) = line.strip_prefix('#') else {
                continue;
            };
            let title = title.trim_start_matches('#').trim();
            ids.extend(ids_in(title).into_iter().map(|(_, id)| id));
            anchors.insert(slug(title));
        }
        Self { ids, anchors }
    }
}

/// Every dangling citation in one file's text.
pub(crate) fn check_text(file: &str, text: &str, headings: &Headings) -> Vec<Dangling> {
    let mut dangling = Vec::new();
    let mut found = |line: usize, what: String| {
        dangling.push(Dangling {
            file: file.to_owned(),
            line,
            what,
        });
    };
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        for id in ids_in(line).into_iter().map(|(_, id)| id) {
            if !headings.ids.contains(&id) {
                found(number, format!("{id} is not a heading of {DESIGN}"));
            }
        }
        for foreign in FOREIGN_DOCUMENTS {
            if line.contains(foreign) {
                found(
                    number,
                    format!("cites {foreign:?}, which is not in the repository; cite {DESIGN}"),
                );
            }
        }
        for anchor in anchors_in(line) {
            if !headings.anchors.contains(&anchor) {
                found(number, format!("#{anchor} is not a heading of {DESIGN}"));
            }
        }
    }
    dangling
}

/// The ids in `text` with their byte offsets: a letter of [`ID_LETTERS`] that
/// starts a word, digits, an optional `a`/`b`, and the end of the word.
fn ids_in(text: &str) -> Vec<(usize, String)> {
    let bytes = text.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut ids = Vec::new();
    for (start, &b) in bytes.iter().enumerate() {
        if !ID_LETTERS.contains(&char::from(b)) || (start > 0 && is_word(bytes[start - 1])) {
            continue;
        }
        let digits = bytes[start + 1..]
            .iter()
            .take_while(|d| d.is_ascii_digit())
            .count();
        if digits == 0 {
            continue;
        }
        let mut end = start + 1 + digits;
        if end < bytes.len() && matches!(bytes[end], b'a' | b'b') {
            end += 1;
        }
        if end < bytes.len() && is_word(bytes[end]) {
            continue;
        }
        ids.push((start, text[start..end].to_owned()));
    }
    ids
}

/// The anchors of links into the design document (`design.md#slug`).
fn anchors_in(line: &str) -> Vec<String> {
    line.match_indices("design.md#")
        .map(|(at, marker)| {
            line[at + marker.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect()
        })
        .collect()
}

/// A heading's anchor as GitHub makes it: lower case, spaces to `-`, other
/// punctuation dropped.
fn slug(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The repository's text sources that may cite the design: tracked files and
/// new files git does not ignore.
fn tracked_files(root: &Path) -> Vec<PathBuf> {
    let output = Command::new("git")
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .current_dir(root)
        .output()
        .expect("git ls-files runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(PathBuf::from)
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "rs" || ext == "md" || ext == "toml")
        })
        .filter(|path| root.join(path).is_file())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole tidy over this repository, so a plain `cargo test` sees a dangling citation,
    /// a guide that no longer matches the code or a crate map that no longer matches the
    /// workspace (it is a `cargo xtask ci` step too).
    #[test]
    fn tidy_workspace() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask lives in the workspace root");
        if let Err(dangling) = check(root) {
            let listed: Vec<String> = dangling
                .iter()
                .map(|d| format!("{}:{}: {}", d.file, d.line, d.what))
                .collect();
            panic!(
                "tidy found {} problems:\n{}",
                listed.len(),
                listed.join("\n")
            );
        }
    }

    const DESIGN_TEXT: &str = "# Design\n## Store capabilities\n### C3 three-form fenced claim\n\
                               ### I5a strict exclusion\n### S1 first login\n";

    fn problems(text: &str) -> Vec<String> {
        check_text("f.rs", text, &Headings::of(DESIGN_TEXT))
            .into_iter()
            .map(|d| d.what)
            .collect()
    }

    #[test]
    fn ids_resolve_against_headings() {
        assert!(problems("the fence (C3), exclusion (I5a) and smoke S1.").is_empty());
        assert_eq!(
            problems("see C4"),
            ["C4 is not a heading of docs/design.md"]
        );
        assert_eq!(
            problems("I5 is not I5a"),
            ["I5 is not a heading of docs/design.md"]
        );
        assert_eq!(problems("C1–C3"), ["C1 is not a heading of docs/design.md"]);
    }

    #[test]
    fn words_that_only_contain_an_id_are_not_ids() {
        assert!(problems("0xC1 MC3 C3x C3_ _C3 c3 x86 UTF8 AC1").is_empty());
    }

    #[test]
    fn foreign_documents_and_anchors() {
        assert_eq!(problems("(SPEC §6)").len(), 1);
        assert!(problems("[fence](../docs/design.md#c3-three-form-fenced-claim)").is_empty());
        assert!(problems("docs/design.md#store-capabilities").is_empty());
        assert_eq!(
            problems("docs/design.md#no-such-heading"),
            ["#no-such-heading is not a heading of docs/design.md"]
        );
    }

    #[test]
    fn slugs_follow_github() {
        assert_eq!(
            slug("C3 three-form fenced claim"),
            "c3-three-form-fenced-claim"
        );
        assert_eq!(slug("Test hooks, and suites!"), "test-hooks-and-suites");
    }
}
