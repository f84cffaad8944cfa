//! Relative links in the repository's Markdown resolve: every `[text](path)` names a file or
//! directory the repository holds, and every `#anchor` (in the same file or another Markdown
//! file) names one of its headings, so moving a section or a file cannot leave a link behind.

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

use super::{Dangling, slug};

/// Every dangling relative link in the Markdown files among `files` (paths relative to `root`).
pub(super) fn check(root: &Path, files: &[PathBuf]) -> Vec<Dangling> {
    let mut headings: HashMap<PathBuf, Option<BTreeSet<String>>> = HashMap::new();
    let mut anchors_of = |path: &Path| {
        headings
            .entry(path.to_path_buf())
            .or_insert_with(|| {
                let text = std::fs::read_to_string(root.join(path)).ok()?;
                Some(anchors(&text))
            })
            .clone()
    };
    let mut dangling = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md"))
    {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue;
        };
        for (line, target) in links(&text) {
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let linked = if path.is_empty() {
                file.clone()
            } else {
                let Some(joined) = normalise(&file.parent().unwrap_or(Path::new("")).join(path))
                else {
                    dangling.push(found(file, line, format!("{target} leaves the repository")));
                    continue;
                };
                // A bare name that is no file is a rustdoc intra-doc link (a crate's README is
                // its crate doc): `cargo xtask docs` checks those.
                let bare = !path.contains(['/', '.']);
                if bare && !root.join(&joined).exists() {
                    continue;
                }
                if !root.join(&joined).exists() {
                    dangling.push(found(file, line, format!("{target}: no such file")));
                    continue;
                }
                joined
            };
            let markdown = linked.extension().is_some_and(|e| e == "md");
            if anchor.is_empty() || !markdown {
                continue;
            }
            if !anchors_of(&linked).is_some_and(|a| a.contains(anchor)) {
                let what = format!(
                    "{target}: #{anchor} is not a heading of {}",
                    linked.display()
                );
                dangling.push(found(file, line, what));
            }
        }
    }
    dangling
}

fn found(file: &Path, line: usize, what: String) -> Dangling {
    Dangling {
        file: file.display().to_string(),
        line,
        what,
    }
}

/// The anchors a Markdown text makes (outside code blocks): its headings' slugs, a repeated
/// one numbered as GitHub numbers it (`x`, `x-1`, `x-2`), and HTML `<a id="...">` anchors.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut made = BTreeSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (_, line) in prose(text) {
        for (at, marker) in line.match_indices("<a id=\"") {
            let rest = &line[at + marker.len()..];
            made.insert(rest[..rest.find('"').unwrap_or(0)].to_owned());
        }
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        let base = slug(title.trim_start_matches('#').trim());
        let count = seen.entry(base.clone()).or_default();
        made.insert(match *count {
            0 => base,
            n => format!("{base}-{n}"),
        });
        *count += 1;
    }
    made
}

/// The lines outside fenced code blocks, numbered from 1.
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter_map(move |(index, line)| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return None;
        }
        (!fenced).then_some((index + 1, line))
    })
}

/// The relative targets of inline links, `[text](target)`, with their line numbers: not URLs
/// (`scheme:`), not inside code spans.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    for (number, line) in prose(text) {
        // Code spans hold examples, not links: drop every other backtick-delimited part.
        let outside: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        for (at, _) in outside.match_indices("](") {
            let rest = &outside[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = rest[..end].split_whitespace().next().unwrap_or_default();
            if target.is_empty() || target.contains(':') {
                continue;
            }
            links.push((number, target.to_owned()));
        }
    }
    links
}

/// `path` with `.` and `..` resolved, or `None` when it climbs out of the repository.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(part) => parts.push(part),
            _ => {}
        }
    }
    Some(parts.iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_outside_code_and_urls() {
        let text = "See [a](docs/a.md#x) and [b](https://e.org) `[c](d.md)`.\n```\n[e](f.md)\n```\n[g](#h)";
        assert_eq!(
            links(text),
            vec![(1, "docs/a.md#x".to_owned()), (5, "#h".to_owned())]
        );
    }

    #[test]
    fn paths_resolve_inside_the_repository_only() {
        assert_eq!(
            normalise(Path::new("docs/../README.md")),
            Some(PathBuf::from("README.md"))
        );
        assert_eq!(normalise(Path::new("docs/../../x")), None);
    }

    #[test]
    fn headings_outside_code_blocks_make_anchors() {
        let text =
            "# Title\n```sh\n# a comment\n```\n## The `x` part\n## Title\n<a id=\"here\"></a>";
        let made = anchors(text);
        for anchor in ["title", "the-x-part", "title-1", "here"] {
            assert!(made.contains(anchor), "{anchor} in {made:?}");
        }
        assert!(!made.contains("a-comment"));
    }
}
