//! The table's key schema in one place: what [`DynamoStore::create_table_if_missing`]
//! creates, and what [`DynamoStore::check_reachable`] accepts.
//!
//! The store needs partition key `pk` (S, the user) and sort key `sk` (S, `#` and the
//! slot), so a user's slots are one partition that one `Query` lists (C10). A table
//! of the layout from before slots (partition key `pk` only) holds only default-slot
//! records; the startup check refuses it with the steps that move its items, rather
//! than letting every request fail on a key that does not match the schema.
//!
//! [`DynamoStore::create_table_if_missing`]: crate::DynamoStore::create_table_if_missing
//! [`DynamoStore::check_reachable`]: crate::DynamoStore::check_reachable

use aws_sdk_dynamodb::types::{
    AttributeDefinition, KeySchemaElement, KeyType, ScalarAttributeType, TableDescription,
};
use unique_core::Error;

use crate::codec::{PK, SK};

/// The key attributes, in the order a table definition lists them: `pk` as the
/// partition (`HASH`) key, then `sk` as the sort (`RANGE`) key.
const KEY: [(&str, KeyType); 2] = [(PK, KeyType::Hash), (SK, KeyType::Range)];

/// The key schema a new table gets.
pub(crate) fn key_schema() -> Result<Vec<KeySchemaElement>, Error> {
    KEY.iter()
        .map(|(name, kind)| {
            definition(
                KeySchemaElement::builder()
                    .attribute_name(*name)
                    .key_type(kind.clone())
                    .build(),
            )
        })
        .collect()
}

/// The attribute definitions a new table gets: both key attributes are strings.
pub(crate) fn attribute_definitions() -> Result<Vec<AttributeDefinition>, Error> {
    KEY.iter()
        .map(|(name, _)| {
            definition(
                AttributeDefinition::builder()
                    .attribute_name(*name)
                    .attribute_type(ScalarAttributeType::S)
                    .build(),
            )
        })
        .collect()
}

/// A table-definition part the SDK builder refused (a bug here, never user input).
fn definition<T>(built: Result<T, aws_sdk_dynamodb::error::BuildError>) -> Result<T, Error> {
    built.map_err(|e| Error::unavailable_with("dynamodb table definition is invalid", e))
}

/// Accepts a table whose key is exactly `pk` (HASH, S) and `sk` (RANGE, S).
///
/// # Errors
///
/// `Unavailable` naming the table: for the layout from before device slots
/// (partition key `pk` alone) with the steps that move it to the new one, and for
/// any other key schema with what was found.
pub(crate) fn check(table: &str, description: &TableDescription) -> Result<(), Error> {
    let found = key_of(description);
    if found == expected() {
        return Ok(());
    }
    if found == [(PK.to_owned(), KeyType::Hash, Some(ScalarAttributeType::S))] {
        return Err(Error::unavailable(format!(
            "dynamodb table {table} has the key schema from before device slots (partition \
             key pk only), and this version needs partition key pk (S) with sort key sk (S): \
             stop every server on it, create a new table (unique-server --create-table \
             --table NEW, or DynamoStore::create_table_if_missing), copy every item into it \
             adding sk = \"#\" and keeping pk and every other attribute as they are (the old \
             items are all default-slot records), then start the servers with --table NEW"
        )));
    }
    Err(Error::unavailable(format!(
        "dynamodb table {table} has key schema {}, and this version needs pk (HASH, S), \
         sk (RANGE, S): create a table with that key (unique-server --create-table --table \
         NEW) and point --table at it",
        describe(&found)
    )))
}

/// One key attribute as a table describes it: name, role, and type when defined.
type KeyPart = (String, KeyType, Option<ScalarAttributeType>);

fn expected() -> Vec<KeyPart> {
    KEY.iter()
        .map(|(name, kind)| {
            (
                (*name).to_owned(),
                kind.clone(),
                Some(ScalarAttributeType::S),
            )
        })
        .collect()
}

/// The table's key schema in its own order, each attribute with its defined type.
fn key_of(description: &TableDescription) -> Vec<KeyPart> {
    description
        .key_schema()
        .iter()
        .map(|element| {
            let name = element.attribute_name();
            let kind = description
                .attribute_definitions()
                .iter()
                .find(|definition| definition.attribute_name() == name)
                .map(|definition| definition.attribute_type().clone());
            (name.to_owned(), element.key_type().clone(), kind)
        })
        .collect()
}

/// `pk (HASH, S), sk (RANGE, N)`; `none` for a description without a key schema.
fn describe(key: &[KeyPart]) -> String {
    if key.is_empty() {
        return "none".to_owned();
    }
    key.iter()
        .map(|(name, kind, ty)| {
            let ty = ty
                .as_ref()
                .map_or("undefined type", ScalarAttributeType::as_str);
            format!("{name} ({}, {ty})", kind.as_str())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A description with `key` as its key schema, each attribute of the given type.
    fn table(key: &[(&str, KeyType, ScalarAttributeType)]) -> TableDescription {
        let mut description = TableDescription::builder();
        for (name, kind, ty) in key {
            description = description
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(*name)
                        .key_type(kind.clone())
                        .build()
                        .unwrap(),
                )
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(*name)
                        .attribute_type(ty.clone())
                        .build()
                        .unwrap(),
                );
        }
        description.build()
    }

    fn refusal(description: &TableDescription) -> String {
        let err = check("t", description).unwrap_err();
        assert!(err.is_unavailable(), "{err}");
        err.to_string()
    }

    #[test]
    fn the_created_table_is_the_checked_one() {
        let created = TableDescription::builder()
            .set_key_schema(Some(key_schema().unwrap()))
            .set_attribute_definitions(Some(attribute_definitions().unwrap()))
            .build();
        check("t", &created).unwrap();
        let names: Vec<_> = created
            .key_schema()
            .iter()
            .map(|k| (k.attribute_name(), k.key_type().clone()))
            .collect();
        assert_eq!(names, [("pk", KeyType::Hash), ("sk", KeyType::Range)]);
    }

    #[test]
    fn the_layout_before_slots_is_refused_with_how_to_move() {
        let message = refusal(&table(&[("pk", KeyType::Hash, ScalarAttributeType::S)]));
        for step in [
            "dynamodb table t",
            "before device slots",
            "stop every server",
            "--create-table",
            "sk = \"#\"",
            "keeping pk",
            "--table NEW",
        ] {
            assert!(message.contains(step), "{step:?} missing: {message}");
        }
    }

    #[test]
    fn any_other_key_schema_is_refused_naming_what_was_found() {
        use KeyType::{Hash, Range};
        use ScalarAttributeType::{N, S};
        let cases = [
            (
                vec![("pk", Hash, S), ("sk", Range, N)],
                "pk (HASH, S), sk (RANGE, N)",
            ),
            (vec![("pk", Hash, N)], "pk (HASH, N)"),
            (vec![("id", Hash, S)], "id (HASH, S)"),
            (
                vec![("sk", Hash, S), ("pk", Range, S)],
                "sk (HASH, S), pk (RANGE, S)",
            ),
            (
                vec![("pk", Hash, S), ("slot", Range, S)],
                "pk (HASH, S), slot (RANGE, S)",
            ),
            (vec![], "none"),
        ];
        for (key, found) in cases {
            let message = refusal(&table(&key));
            assert!(
                message.contains(&format!("key schema {found},")),
                "{message}"
            );
            assert!(message.contains("pk (HASH, S), sk (RANGE, S)"), "{message}");
            assert!(!message.contains("before device slots"), "{message}");
        }
    }

    #[test]
    fn a_key_attribute_without_a_definition_is_refused() {
        let description = TableDescription::builder()
            .set_key_schema(Some(key_schema().unwrap()))
            .attribute_definitions(attribute_definitions().unwrap()[0].clone())
            .build();
        let message = refusal(&description);
        assert!(message.contains("sk (RANGE, undefined type)"), "{message}");
    }
}
