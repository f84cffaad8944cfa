//! Part of `cargo xtask tidy`: the crate map stays true. `docs/architecture.md` holds one
//! table with the header `| crate | owns | may depend on |`; every workspace member has
//! exactly one row, every row names a workspace member, every normal or build dependency
//! of a member on another member is one its row allows, and the rows allow no cycle.
//! Dev-dependencies are not checked (the document says why).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use crate::tidy::Dangling;

/// The map.
pub(crate) const MAP: &str = "docs/architecture.md";

/// The header of the map's table, cell by cell.
const HEADER: [&str; 3] = ["crate", "owns", "may depend on"];

/// What a "may depend on" cell says when the crate may depend on no workspace crate.
const NOTHING: &str = "—";

/// One row of the map: the line it is on and the crates it allows.
#[derive(Debug)]
struct Row {
    line: usize,
    allowed: BTreeSet<String>,
}

/// The workspace as `cargo metadata` shows it: each member's normal and build
/// dependencies on other members.
type Members = BTreeMap<String, BTreeSet<String>>;

/// Every way the map and the workspace disagree.
pub(crate) fn check(root: &Path) -> Vec<Dangling> {
    let Ok(map) = std::fs::read_to_string(root.join(MAP)) else {
        return vec![at(0, format!("cannot read {MAP}"))];
    };
    let metadata = match crate::contract::metadata(Some(&root.join("Cargo.toml"))) {
        Ok(metadata) => metadata,
        Err(e) => return vec![at(0, e)],
    };
    check_map(&map, &members(&metadata))
}

fn at(line: usize, what: String) -> Dangling {
    Dangling {
        file: MAP.to_owned(),
        line,
        what,
    }
}

/// The workspace members of `metadata` (`cargo metadata --no-deps`) and their normal and
/// build dependencies on each other, optional ones and target-specific ones included.
fn members(metadata: &Value) -> Members {
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    let names: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    packages
        .iter()
        .filter_map(|package| {
            let name = package["name"].as_str()?.to_owned();
            let deps = package["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|dep| dep["kind"].as_str() != Some("dev"))
                .filter_map(|dep| dep["name"].as_str())
                .filter(|dep| names.contains(*dep) && *dep != name)
                .map(str::to_owned)
                .collect();
            Some((name, deps))
        })
        .collect()
}

/// Checks the map's text against the workspace.
fn check_map(map: &str, members: &Members) -> Vec<Dangling> {
    let rows = match rows(map) {
        Ok(rows) => rows,
        Err(problems) => return problems,
    };
    let mut problems = Vec::new();
    for (name, row) in &rows {
        if !members.contains_key(name) {
            problems.push(at(
                row.line,
                format!("the map names `{name}`, which is not a workspace member"),
            ));
        }
        for allowed in &row.allowed {
            if !members.contains_key(allowed) {
                problems.push(at(
                    row.line,
                    format!("`{name}` may depend on `{allowed}`, which is not a workspace member"),
                ));
            }
        }
    }
    for (name, deps) in members {
        let Some(row) = rows.get(name) else {
            problems.push(at(
                0,
                format!("workspace member `{name}` has no row in the map's table"),
            ));
            continue;
        };
        for dep in deps.difference(&row.allowed) {
            problems.push(at(
                row.line,
                format!(
                    "`{name}` depends on `{dep}` (a normal or build dependency), which its row \
                     does not allow: add it to the row's \"may depend on\" if the layering \
                     allows it, else remove the dependency"
                ),
            ));
        }
    }
    if let Some(cycle) = cycle(&rows) {
        problems.push(at(
            rows[&cycle[0]].line,
            format!("the map allows a cycle: {}", cycle.join(" -> ")),
        ));
    }
    problems
}

/// The rows of the map's table, by crate name.
fn rows(map: &str) -> Result<BTreeMap<String, Row>, Vec<Dangling>> {
    let mut lines = map.lines().enumerate().map(|(i, line)| (i + 1, line));
    if lines
        .find(|(_, line)| cells(line).is_some_and(|c| c == HEADER))
        .is_none()
    {
        return Err(vec![at(
            0,
            format!("no table with the header | {} |", HEADER.join(" | ")),
        )]);
    }
    let mut rows = BTreeMap::new();
    let mut problems = Vec::new();
    // The delimiter row (`|---|---|---|`), then the rows, up to the first line that is not one.
    for (line, text) in lines
        .skip(1)
        .take_while(|(_, text)| text.trim_start().starts_with('|'))
    {
        let cells = cells(text).unwrap_or_default();
        let (Some(first), Some(last)) = (cells.first(), cells.last()) else {
            continue;
        };
        if cells.len() < HEADER.len() {
            problems.push(at(line, format!("a row of {} cells, not 3", cells.len())));
            continue;
        }
        let Some(name) = crate_name(first) else {
            problems.push(at(
                line,
                format!("the crate cell {first:?} is not one backticked name"),
            ));
            continue;
        };
        match allowed(last) {
            Ok(allowed) => {
                if let Some(earlier) = rows.insert(name.clone(), Row { line, allowed }) {
                    problems.push(at(
                        line,
                        format!(
                            "`{name}` has a second row (the first is line {})",
                            earlier.line
                        ),
                    ));
                }
            }
            Err(what) => problems.push(at(line, what)),
        }
    }
    if problems.is_empty() {
        Ok(rows)
    } else {
        Err(problems)
    }
}

/// A table line's cells, trimmed; `None` for a line that is not a table row.
fn cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(inner.split('|').map(str::trim).collect())
}

/// `` `name` `` → `name`.
fn crate_name(cell: &str) -> Option<String> {
    let name = cell.strip_prefix('`')?.strip_suffix('`')?;
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    valid.then(|| name.to_owned())
}

/// A "may depend on" cell: [`NOTHING`], or backticked names separated by commas.
fn allowed(cell: &str) -> Result<BTreeSet<String>, String> {
    if cell == NOTHING {
        return Ok(BTreeSet::new());
    }
    let mut names = BTreeSet::new();
    for part in cell.split(',').map(str::trim) {
        let Some(name) = crate_name(part) else {
            return Err(format!(
                "the \"may depend on\" cell {cell:?} is not {NOTHING:?} or backticked crate \
                 names separated by commas"
            ));
        };
        names.insert(name);
    }
    Ok(names)
}

/// A cycle the rows allow, as the names along it (the first repeated at the end).
fn cycle(rows: &BTreeMap<String, Row>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        name: &str,
        rows: &BTreeMap<String, Row>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(name) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|n| n == name).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(name.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(name.to_owned(), Mark::Open);
        path.push(name.to_owned());
        for next in rows.get(name).map(|row| &row.allowed).into_iter().flatten() {
            if let Some(cycle) = visit(next, rows, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(name.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    rows.keys()
        .find_map(|name| visit(name, rows, &mut marks, &mut Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP_TEXT: &str = "# Architecture\n\n\
        | crate | owns | may depend on |\n\
        |---|---|---|\n\
        | `core` | the domain | — |\n\
        | `store` | a store | `core` |\n\
        | `server` | the binary | `core`, `store` |\n\
        \nprose after the table, with | a pipe |\n";

    fn workspace(members: &[(&str, &[&str])]) -> Members {
        members
            .iter()
            .map(|(name, deps)| {
                (
                    (*name).to_owned(),
                    deps.iter().map(|d| (*d).to_owned()).collect(),
                )
            })
            .collect()
    }

    fn problems(map: &str, members: &[(&str, &[&str])]) -> Vec<String> {
        check_map(map, &workspace(members))
            .into_iter()
            .map(|d| format!("{}: {}", d.line, d.what))
            .collect()
    }

    const TRUE: &[(&str, &[&str])] = &[("core", &[]), ("store", &["core"]), ("server", &["store"])];

    #[test]
    fn a_true_map_passes() {
        assert!(problems(MAP_TEXT, TRUE).is_empty());
    }

    #[test]
    fn a_member_without_a_row_fails() {
        let mut members = TRUE.to_vec();
        members.push(("cli", &["core"]));
        assert_eq!(
            problems(MAP_TEXT, &members),
            ["0: workspace member `cli` has no row in the map's table"]
        );
    }

    #[test]
    fn a_row_for_no_member_fails() {
        assert_eq!(
            problems(MAP_TEXT, &TRUE[..2]),
            ["7: the map names `server`, which is not a workspace member"]
        );
        let gone_dep = problems(MAP_TEXT, &[("store", &[]), ("server", &[])]);
        assert!(gone_dep.iter().any(|p| p.contains("`core`, which is not")));
    }

    #[test]
    fn a_dependency_the_row_does_not_allow_fails() {
        let problems = problems(
            MAP_TEXT,
            &[
                ("core", &[]),
                ("store", &["core", "server"]),
                ("server", &[]),
            ],
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("6: `store` depends on `server`"));
    }

    #[test]
    fn cells_must_stay_machine_readable() {
        let map = MAP_TEXT.replace("`core`, `store`", "core and store");
        assert!(problems(&map, TRUE)[0].contains("is not \"—\" or backticked crate names"));
        let map = MAP_TEXT.replace("| `store` | a store |", "| store | a store |");
        assert!(problems(&map, TRUE)[0].contains("not one backticked name"));
        let map = MAP_TEXT.replace("| `server` |", "| `store` |");
        assert!(
            problems(&map, TRUE)
                .iter()
                .any(|p| p.contains("`store` has a second row (the first is line 6)"))
        );
        assert_eq!(
            problems("no table here", TRUE),
            ["0: no table with the header | crate | owns | may depend on |"]
        );
    }

    #[test]
    fn the_rows_allow_no_cycle() {
        let map = MAP_TEXT.replace("| the domain | — |", "| the domain | `server` |");
        assert_eq!(
            problems(&map, TRUE),
            ["5: the map allows a cycle: core -> server -> core"]
        );
    }

    #[test]
    fn dev_dependencies_and_self_references_are_not_edges() {
        let metadata = serde_json::json!({"packages": [
            {"name": "a", "dependencies": [
                {"name": "b", "kind": null},
                {"name": "c", "kind": "dev"},
                {"name": "a", "kind": "dev"},
                {"name": "serde", "kind": null},
            ]},
            {"name": "b", "dependencies": [{"name": "a", "kind": "build"}]},
            {"name": "c", "dependencies": []},
        ]});
        let members = members(&metadata);
        assert_eq!(members["a"], BTreeSet::from(["b".to_owned()]));
        assert_eq!(members["b"], BTreeSet::from(["a".to_owned()]));
        assert!(members["c"].is_empty());
    }
}
