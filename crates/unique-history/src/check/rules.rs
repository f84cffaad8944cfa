//! The rules judged on one key's operations: the real-time order (a, b, d), whose claim
//! a gen is (c), and which gens a claim_id gets (e).

use std::collections::HashMap;

use unique_core::Key;

use super::{Rule, Violation};
use crate::history::{Op, OpKind, Outcome};

/// Rules (a), (b) and (d): what an operation sees against everything answered before it
/// started.
pub(super) fn check_order(key: &Key, ops: &[&Op], violations: &mut Vec<Violation>) {
    // The operations that observed a gen, by end; indeterminate ones observed nothing.
    let mut sources: Vec<(&Op, i64)> = ops
        .iter()
        .filter_map(|op| op.outcome.observed(&op.kind).map(|g| (*op, g)))
        .collect();
    sources.sort_by_key(|(op, _)| op.end);
    let mut targets: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|op| matches!(op.outcome, Outcome::Claimed { .. } | Outcome::Read { .. }))
        .collect();
    targets.sort_by_key(|op| op.start);

    // The highest gen observed, and the highest gen released, among the operations finished
    // so far (with the operation that observed it, for the report).
    let mut highest: Option<(i64, &Op)> = None;
    let mut released: Option<(i64, &Op)> = None;
    let mut next = 0;
    for target in targets {
        while let Some(&(source, generation)) = sources.get(next) {
            if !source.finished_before(target) {
                break;
            }
            next += 1;
            if highest.is_none_or(|(g, _)| generation > g) {
                highest = Some((generation, source));
            }
            if matches!(source.outcome, Outcome::Released { .. })
                && released.is_none_or(|(g, _)| generation > g)
            {
                released = Some((generation, source));
            }
        }
        let mut report = |rule, earlier: &Op, message: String| {
            violations.push(Violation {
                rule,
                key: key.clone(),
                ops: vec![earlier.clone(), target.clone()],
                message,
            });
        };
        match &target.outcome {
            Outcome::Claimed {
                generation,
                replayed: false,
            } => {
                if let Some((seen, earlier)) = highest.filter(|(g, _)| generation <= g) {
                    report(
                        Rule::ClaimAbove,
                        earlier,
                        format!(
                            "a new claim got gen {generation}, but gen {seen} had been observed \
                             before it started"
                        ),
                    );
                }
            }
            Outcome::Claimed {
                generation,
                replayed: true,
            }
            | Outcome::Read { generation, .. } => {
                if let Some((seen, earlier)) = highest.filter(|(g, _)| generation < g) {
                    report(
                        Rule::NoGoingBack,
                        earlier,
                        format!(
                            "it saw gen {generation}, but gen {seen} had been observed before it \
                             started"
                        ),
                    );
                }
            }
            _ => {}
        }
        if let Outcome::Read {
            generation,
            holder: Some(holder),
        } = &target.outcome
            && let Some((gone, earlier)) = released.filter(|(g, _)| g == generation)
        {
            report(
                Rule::ReleasedIsTombstone,
                earlier,
                format!(
                    "gen {gone} was released before the read started, yet the read saw it held \
                     by {holder}"
                ),
            );
        }
    }
}

/// Rule (c): one claim_id per gen, and every claim_id a read sees was written by its claim.
pub(super) fn check_claim_ids(key: &Key, ops: &[&Op], violations: &mut Vec<Violation>) {
    // (gen, claim_id) facts: claims answered, and reads of a held record.
    let mut owner_of: HashMap<i64, (&str, &Op)> = HashMap::new();
    // The claims that may have written for each claim_id: every one not refused outright.
    let mut writers: HashMap<&str, Vec<&Op>> = HashMap::new();
    for op in ops {
        if let Some(claim_id) = op.kind.claim_id()
            && !matches!(op.outcome, Outcome::Failed(_))
        {
            writers.entry(claim_id).or_default().push(op);
        }
    }
    for op in ops {
        let fact = match (&op.kind, &op.outcome) {
            (
                OpKind::Claim { claim_id } | OpKind::Replay { claim_id },
                Outcome::Claimed { generation, .. },
            ) => Some((*generation, claim_id.as_str())),
            (
                OpKind::Read | OpKind::List,
                Outcome::Read {
                    generation,
                    holder: Some(holder),
                },
            ) => Some((*generation, holder.as_str())),
            _ => None,
        };
        let Some((generation, claim_id)) = fact else {
            continue;
        };
        match owner_of.get(&generation) {
            Some(&(first, earlier)) if first != claim_id => violations.push(Violation {
                rule: Rule::OneClaimPerGen,
                key: key.clone(),
                ops: vec![earlier.clone(), (*op).clone()],
                message: format!(
                    "gen {generation} was seen held by two claim_ids: {first} and {claim_id}"
                ),
            }),
            Some(_) => {}
            None => {
                owner_of.insert(generation, (claim_id, op));
            }
        }
        if matches!(op.kind, OpKind::Read | OpKind::List)
            && !written_by(claim_id, generation, op, &writers)
        {
            violations.push(Violation {
                rule: Rule::OneClaimPerGen,
                key: key.clone(),
                ops: vec![(*op).clone()],
                message: format!(
                    "the read saw gen {generation} held by {claim_id}, which no claim sent \
                     before the read ended could have written"
                ),
            });
        }
    }
}

/// Rule (e): every fact naming a claim_id names the same gen, within the window of gens the
/// record remembers its win for.
pub(super) fn check_gens_per_claim(key: &Key, ops: &[&Op], violations: &mut Vec<Violation>) {
    let mut gen_of: HashMap<&str, (i64, &Op)> = HashMap::new();
    for op in ops {
        let fact = match (&op.kind, &op.outcome) {
            (
                OpKind::Claim { claim_id } | OpKind::Replay { claim_id },
                Outcome::Claimed { generation, .. } | Outcome::Superseded { generation, .. },
            ) => Some((claim_id.as_str(), *generation)),
            (
                OpKind::Read | OpKind::List,
                Outcome::Read {
                    generation,
                    holder: Some(holder),
                },
            ) => Some((holder.as_str(), *generation)),
            _ => None,
        };
        let Some((claim_id, generation)) = fact else {
            continue;
        };
        match gen_of.get(claim_id) {
            Some(&(first, earlier)) if first != generation && remembered(first, generation) => {
                violations.push(Violation {
                    rule: Rule::OneGenPerClaim,
                    key: key.clone(),
                    ops: vec![earlier.clone(), (*op).clone()],
                    message: format!(
                        "claim_id {claim_id} was seen at two gens: {first} and {generation}"
                    ),
                });
            }
            Some(_) => {}
            None => {
                gen_of.insert(claim_id, (generation, op));
            }
        }
    }
}

/// Whether a win at gen `a` was still in the record's recent claims when a claim was
/// decided that wrote (or saw) gen `b`, or the other way round.
fn remembered(a: i64, b: i64) -> bool {
    let window = i64::try_from(unique_core::RECENT_CLAIMS).unwrap_or(i64::MAX);
    a.abs_diff(b) <= window.unsigned_abs()
}

/// Whether a claim with `claim_id` that started before `reader` ended may have written
/// `generation`: it did not answer, it answered that gen or a later one, or it was
/// superseded after winning that gen.
fn written_by(
    claim_id: &str,
    generation: i64,
    reader: &Op,
    writers: &HashMap<&str, Vec<&Op>>,
) -> bool {
    writers.get(claim_id).is_some_and(|claims| {
        claims.iter().any(|claim| {
            claim.start < reader.end
                && match claim.outcome {
                    Outcome::Indeterminate(_) => true,
                    Outcome::Claimed { generation: g, .. } => g >= generation,
                    // It won `g`, perhaps in this very request (a write whose answer the
                    // store lost, then a rival's), and was replaced since.
                    Outcome::Superseded { generation: g, .. } => g == generation,
                    _ => false,
                }
        })
    })
}
