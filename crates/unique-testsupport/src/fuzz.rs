//! Property-based fuzzing of JSON request bodies: hostile strings, edge numbers, arbitrary
//! nested JSON, and mutations of a valid body (fields dropped, renamed, replaced, added).
//!
//! Each service's fuzz test describes its contract's words with a [`Vocabulary`] and keeps its
//! own oracle; the generators are the same for every service.

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Value, json};

/// 256 cases unless `PROPTEST_CASES` says otherwise. (`ProptestConfig::with_cases` would
/// override the variable, so the default, which reads it, is kept when it is set.)
pub fn config() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 256;
    }
    config
}

/// The words of one contract the generators favour, so wrong values land on real fields.
#[derive(Debug, Clone, Copy)]
pub struct Vocabulary {
    /// The contract's field names.
    pub fields: &'static [&'static str],
    /// Strings that mean something to the service under test (its session's project, say);
    /// must not be empty.
    pub strings: &'static [&'static str],
    /// Numbers that mean something to it, besides the edges of `i64`; must not be empty.
    pub numbers: &'static [i64],
    /// The longest string generated (past the service's body limit tests the limit).
    pub longest: usize,
}

impl Vocabulary {
    /// Strings a careless or hostile caller sends.
    pub fn weird_string(self) -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-z0-9-]{1,12}",
            2 => prop::sample::select(self.strings).prop_map(str::to_owned),
            1 => "\\PC{0,16}",
            1 => "[a-z]{0,4}[\\x00-\\x1f\\x7f\\x{80}-\\x{9f}][a-z]{0,4}",
            1 => "[a-z]{0,4}#[a-z]{0,4}",
            1 => Just(String::new()),
            1 => (60usize..200).prop_map(|n| "p".repeat(n)),
            1 => (0..self.longest).prop_map(|n| "x".repeat(n)),
        ]
    }

    /// Object keys: the contract's own field names or others.
    pub fn field_name(self) -> impl Strategy<Value = String> {
        prop_oneof![
            3 => prop::sample::select(self.fields).prop_map(str::to_owned),
            1 => "\\PC{0,8}",
            1 => "[A-Za-z_]{1,10}",
        ]
    }

    /// Numbers at and past the edges of `i64`, and the vocabulary's own.
    pub fn edge_number(self) -> impl Strategy<Value = Value> {
        prop_oneof![
            prop::sample::select(&[0, -1, 1, i64::MIN, i64::MAX][..]).prop_map(Value::from),
            prop::sample::select(self.numbers).prop_map(Value::from),
            Just(Value::from(u64::MAX)),
            Just(json!(1e300)),
            Just(json!(7.0)),
            Just(json!(-0.5)),
            any::<i64>().prop_map(Value::from),
        ]
    }

    /// Any JSON value, nested a few levels.
    pub fn json_value(self) -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            self.edge_number(),
            any::<f64>().prop_filter_map("finite", |f| {
                serde_json::Number::from_f64(f).map(Value::Number)
            }),
            self.weird_string().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(self.field_name(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    /// One change to a body.
    pub fn mutation(self) -> impl Strategy<Value = Mutation> {
        let value = prop_oneof![
            self.edge_number(),
            self.weird_string().prop_map(Value::String),
            self.json_value(),
        ];
        prop_oneof![
            any::<Index>().prop_map(Mutation::Drop),
            (any::<Index>(), self.field_name()).prop_map(|(i, n)| Mutation::Rename(i, n)),
            (any::<Index>(), value).prop_map(|(i, v)| Mutation::Replace(i, v)),
            (any::<Index>(), self.field_name(), self.json_value())
                .prop_map(|(i, n, v)| Mutation::Insert(i, n, v)),
        ]
    }
}

/// One change to a body; the indexes pick a field (or an object) among those present.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Drops a field.
    Drop(Index),
    /// Renames a field.
    Rename(Index, String),
    /// Gives a field another value (a wrong type, a bad string, an edge number, garbage).
    Replace(Index, Value),
    /// Adds a field to one of the objects (the root or a nested one).
    Insert(Index, String, Value),
}

/// Every object key in `value`, as a path of keys.
fn paths(value: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    if let Value::Object(map) = value {
        for (k, v) in map {
            prefix.push(k.clone());
            out.push(prefix.clone());
            paths(v, prefix, out);
            prefix.pop();
        }
    }
}

/// The object at `path` (the root for an empty path), when it is one.
fn object_at<'a>(value: &'a mut Value, path: &[String]) -> Option<&'a mut Map<String, Value>> {
    let mut at = value;
    for key in path {
        at = at.as_object_mut()?.get_mut(key)?;
    }
    at.as_object_mut()
}

/// `body` with `mutations` applied in order, at any depth.
///
/// # Panics
///
/// Never: every path `paths` collects names at least one key.
pub fn apply(mut body: Value, mutations: &[Mutation]) -> Value {
    for mutation in mutations {
        let mut fields = Vec::new();
        paths(&body, &mut Vec::new(), &mut fields);
        match mutation {
            Mutation::Drop(i) | Mutation::Rename(i, _) | Mutation::Replace(i, _) => {
                if fields.is_empty() {
                    continue;
                }
                let path = i.get(&fields);
                let (last, parent) = path.split_last().expect("paths are never empty");
                let Some(object) = object_at(&mut body, parent) else {
                    continue;
                };
                match mutation {
                    Mutation::Drop(_) => {
                        object.remove(last);
                    }
                    Mutation::Rename(_, name) => {
                        if let Some(v) = object.remove(last) {
                            object.insert(name.clone(), v);
                        }
                    }
                    Mutation::Replace(_, v) => {
                        object.insert(last.clone(), v.clone());
                    }
                    Mutation::Insert(..) => unreachable!("matched above"),
                }
            }
            Mutation::Insert(i, name, v) => {
                let mut objects = vec![Vec::new()];
                objects.extend(fields);
                let path = i.get(&objects).clone();
                if let Some(object) = object_at(&mut body, &path) {
                    object.insert(name.clone(), v.clone());
                }
            }
        }
    }
    body
}

/// One byte-level damage to a serialized body: cut short, one byte inserted, or one byte
/// replaced, at a position drawn over the body's length (one past the end included).
#[derive(Debug, Clone)]
pub struct Mangling {
    at: Index,
    byte: u8,
    how: u8,
}

/// Any [`Mangling`]: each of the three kinds equally often.
pub fn mangling() -> impl Strategy<Value = Mangling> {
    (any::<Index>(), any::<u8>(), 0u8..3).prop_map(|(at, byte, how)| Mangling { at, byte, how })
}

/// `body`'s JSON bytes with `mangling` applied.
///
/// # Panics
///
/// Never: a `Value` always serializes.
pub fn mangled(body: &Value, mangling: &Mangling) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(body).expect("a Value serializes");
    let i = mangling.at.index(bytes.len() + 1);
    match mangling.how {
        0 => bytes.truncate(i),
        1 => bytes.insert(i, mangling.byte),
        _ => {
            if let Some(b) = bytes.get_mut(i) {
                *b = mangling.byte;
            }
        }
    }
    bytes
}
