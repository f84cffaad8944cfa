//! The directory's table: the bounded startup check, creation when missing, and the
//! key schema the directory accepts.

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TableDescription, TableStatus,
};
use unique_lease::LeaseError;

use super::DynamoDirectory;
use super::error::{lease_error, unavailable};
use crate::codec::PK;
use crate::error::{self, Kind};

/// How often [`DynamoDirectory::create_table_if_missing`] looks at a table being created.
const TABLE_POLL_INTERVAL: Duration = Duration::from_millis(100);

impl DynamoDirectory {
    /// A bounded startup check (one `DescribeTable`): the table exists, is `ACTIVE`, and has
    /// partition key `pk` (S) and no sort key.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the table is missing or not active, the request fails, or the
    /// server does not answer within `within`; `Backend` for a table of another key
    /// schema (the session store's table named as such), naming what was found.
    pub async fn check_reachable(&self, within: Duration) -> Result<(), LeaseError> {
        let check = async {
            let Some(table) = self.describe().await? else {
                return Err(unavailable(format!(
                    "dynamodb table {} does not exist",
                    self.table
                )));
            };
            match status(&table) {
                TableStatus::Active => check_schema(&self.table, &table),
                status => Err(unavailable(format!(
                    "dynamodb table {} is {}, not ACTIVE",
                    self.table,
                    status.as_str()
                ))),
            }
        };
        bounded(within, "DescribeTable", check).await
    }

    /// Creates the table when it is missing (partition key `pk` of type S, on-demand
    /// billing) and waits until it is `ACTIVE`, all within `within`. Returns whether this
    /// call created it. Safe to race. An existing table is left as it is:
    /// [`check_reachable`](Self::check_reachable) refuses one of another schema. DynamoDB's
    /// TTL is not enabled here; enable it on [`GC_AT`](super::GC_AT) to have expired node
    /// items deleted.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the table is not active within `within` or a request fails.
    pub async fn create_table_if_missing(&self, within: Duration) -> Result<bool, LeaseError> {
        let ensure = async {
            let mut created = false;
            loop {
                let table_status = self.describe().await?.as_ref().map(status);
                match table_status {
                    Some(TableStatus::Active) => return Ok(created),
                    Some(TableStatus::Creating | TableStatus::Updating) => {}
                    Some(status) => {
                        return Err(unavailable(format!(
                            "dynamodb table {} is {}",
                            self.table,
                            status.as_str()
                        )));
                    }
                    None => created = self.create_table().await?,
                }
                tokio::time::sleep(TABLE_POLL_INTERVAL).await;
            }
        };
        bounded(within, "CreateTable", ensure).await
    }

    async fn describe(&self) -> Result<Option<TableDescription>, LeaseError> {
        let result = self
            .client
            .describe_table()
            .table_name(&*self.table)
            .send()
            .await;
        match result {
            Ok(out) => Ok(Some(
                out.table
                    .unwrap_or_else(|| TableDescription::builder().build()),
            )),
            Err(e) if error::service_kind(&e) == Some(Kind::NotFound) => Ok(None),
            Err(e) => Err(lease_error(error::classify("DescribeTable", e))),
        }
    }

    /// Returns `false` when another caller created it first.
    async fn create_table(&self) -> Result<bool, LeaseError> {
        let definition = AttributeDefinition::builder()
            .attribute_name(PK)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(table_definition)?;
        let key = KeySchemaElement::builder()
            .attribute_name(PK)
            .key_type(KeyType::Hash)
            .build()
            .map_err(table_definition)?;
        let result = self
            .client
            .create_table()
            .table_name(&*self.table)
            .attribute_definitions(definition)
            .key_schema(key)
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if error::service_kind(&e) == Some(Kind::InUse) => Ok(false),
            Err(e) => Err(lease_error(error::classify("CreateTable", e))),
        }
    }
}

/// A table definition the SDK builder refused (a bug here, never user input).
fn table_definition(e: aws_sdk_dynamodb::error::BuildError) -> LeaseError {
    LeaseError::backend_with("dynamodb table definition is invalid", e)
}

/// A described table's status; a description without one is a table still being created.
fn status(table: &TableDescription) -> TableStatus {
    table
        .table_status()
        .cloned()
        .unwrap_or(TableStatus::Creating)
}

/// Accepts a table whose key is exactly `pk` (HASH, S).
fn check_schema(table: &str, description: &TableDescription) -> Result<(), LeaseError> {
    let found: Vec<String> = description
        .key_schema()
        .iter()
        .map(|element| {
            let name = element.attribute_name();
            let ty = description
                .attribute_definitions()
                .iter()
                .find(|d| d.attribute_name() == name)
                .map_or("undefined type", |d| d.attribute_type().as_str());
            format!("{name} ({}, {ty})", element.key_type().as_str())
        })
        .collect();
    if found == ["pk (HASH, S)"] {
        return Ok(());
    }
    let found_text = if found.is_empty() {
        "none".to_owned()
    } else {
        found.join(", ")
    };
    let hint = if found == ["pk (HASH, S)", "sk (RANGE, S)"] {
        " (the session store's layout: the lease directory needs a table of its own)"
    } else {
        ""
    };
    Err(LeaseError::backend(format!(
        "dynamodb table {table} has key schema {found_text}{hint}, and the lease directory \
         needs partition key pk (S) alone: create one with \
         DynamoDirectory::create_table_if_missing and point the directory at it"
    )))
}

/// Runs `work`, failing with `Unavailable` when it takes longer than `within`.
async fn bounded<T>(
    within: Duration,
    operation: &'static str,
    work: impl Future<Output = Result<T, LeaseError>>,
) -> Result<T, LeaseError> {
    tokio::time::timeout(within, work)
        .await
        .unwrap_or_else(|_| {
            Err(unavailable(format!(
                "dynamodb {operation} did not finish within {within:?}"
            )))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(key: &[(&str, KeyType)]) -> TableDescription {
        let mut description = TableDescription::builder();
        for (name, kind) in key {
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
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .unwrap(),
                );
        }
        description.build()
    }

    #[test]
    fn only_a_pk_table_is_accepted() {
        check_schema("t", &table(&[("pk", KeyType::Hash)])).unwrap();
        let sessions = check_schema(
            "t",
            &table(&[("pk", KeyType::Hash), ("sk", KeyType::Range)]),
        )
        .unwrap_err();
        assert_eq!(
            sessions.to_string(),
            "backend error: dynamodb table t has key schema pk (HASH, S), sk (RANGE, S) (the \
             session store's layout: the lease directory needs a table of its own), and the \
             lease directory needs partition key pk (S) alone: create one with \
             DynamoDirectory::create_table_if_missing and point the directory at it"
        );
        let other = check_schema("t", &table(&[("id", KeyType::Hash)])).unwrap_err();
        assert!(
            other
                .to_string()
                .contains("has key schema id (HASH, S), and the lease directory"),
            "{other}"
        );
        let none = check_schema("t", &TableDescription::builder().build()).unwrap_err();
        assert!(none.to_string().contains("has key schema none,"), "{none}");
    }
}
