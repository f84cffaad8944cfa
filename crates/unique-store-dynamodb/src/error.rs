//! C8 in one place: every SDK failure becomes exactly one `unique_core::Error`,
//! except the failed condition of a conditional `UpdateItem`.
//!
//! A failed condition is not an error: [`update_failure`] reports it as
//! [`UpdateFailure::ConditionFailed`] (with the item when the server returned
//! it), which a claim answers as a lost race and a release as `false`.
//! Throttling is `Throttled`, and everything else — timeouts, dispatch
//! failures, unreadable responses, other service errors — is `Unavailable`
//! with the SDK error kept as its source. Nothing else is ever reported as a
//! failed condition.

use std::fmt::Debug;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemError;
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::operation::query::QueryError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use unique_core::Error;

use crate::codec;

/// What a service error means for the arbitration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `ConditionalCheckFailedException`.
    ConditionFailed,
    /// Throughput exceeded, throttling or the account's request limit.
    Throttled,
    /// The table (or index) does not exist.
    NotFound,
    /// The table already exists or is being created.
    InUse,
    /// Anything else.
    Other,
}

impl Kind {
    /// Classifies an error code, for errors the SDK did not model for this
    /// operation (they arrive as `Unhandled` with only their code).
    fn from_code(code: Option<&str>) -> Self {
        match code {
            Some("ConditionalCheckFailedException") => Self::ConditionFailed,
            Some(
                "ProvisionedThroughputExceededException"
                | "ThrottlingException"
                | "RequestLimitExceeded",
            ) => Self::Throttled,
            Some("ResourceNotFoundException") => Self::NotFound,
            Some("ResourceInUseException") => Self::InUse,
            _ => Self::Other,
        }
    }
}

/// The modelled errors of one operation, mapped to a [`Kind`].
pub(crate) trait ServiceKind: ProvideErrorMetadata {
    /// What this error means.
    fn kind(&self) -> Kind;
}

macro_rules! service_kind {
    ($ty:ty { $($variant:ident => $kind:ident),* $(,)? }) => {
        impl ServiceKind for $ty {
            fn kind(&self) -> Kind {
                match self {
                    $(Self::$variant(_) => Kind::$kind,)*
                    other => Kind::from_code(other.code()),
                }
            }
        }
    };
}

service_kind!(UpdateItemError {
    ConditionalCheckFailedException => ConditionFailed,
    ProvisionedThroughputExceededException => Throttled,
    RequestLimitExceeded => Throttled,
    ThrottlingException => Throttled,
    ResourceNotFoundException => NotFound,
});
service_kind!(GetItemError {
    ProvisionedThroughputExceededException => Throttled,
    RequestLimitExceeded => Throttled,
    ThrottlingException => Throttled,
    ResourceNotFoundException => NotFound,
});
service_kind!(BatchGetItemError {
    ProvisionedThroughputExceededException => Throttled,
    RequestLimitExceeded => Throttled,
    ThrottlingException => Throttled,
    ResourceNotFoundException => NotFound,
});
service_kind!(QueryError {
    ProvisionedThroughputExceededException => Throttled,
    RequestLimitExceeded => Throttled,
    ThrottlingException => Throttled,
    ResourceNotFoundException => NotFound,
});
service_kind!(DescribeTableError {
    ResourceNotFoundException => NotFound,
});
service_kind!(CreateTableError {
    ResourceInUseException => InUse,
});

/// The [`Kind`] of a service error; `None` for a failure that never reached
/// the service (timeout, dispatch, unreadable response, construction).
pub(crate) fn service_kind<E: ServiceKind, R>(err: &SdkError<E, R>) -> Option<Kind> {
    err.as_service_error().map(ServiceKind::kind)
}

/// Maps a failed `operation` (its DynamoDB name, e.g. `UpdateItem`) to the
/// core error. A condition failure reaching here (an operation that has no
/// condition) is a fault like any other service error.
pub(crate) fn classify<E, R>(operation: &'static str, err: SdkError<E, R>) -> Error
where
    E: ServiceKind + std::error::Error + Send + Sync + 'static,
    R: Debug + Send + Sync + 'static,
{
    let reason = match &err {
        SdkError::ServiceError(service) => match service.err().kind() {
            Kind::Throttled => return Error::Throttled,
            Kind::ConditionFailed | Kind::NotFound | Kind::InUse | Kind::Other => format!(
                "dynamodb {operation} failed: {}",
                service.err().code().unwrap_or("unknown service error")
            ),
        },
        SdkError::TimeoutError(_) => format!("dynamodb {operation} timed out"),
        SdkError::DispatchFailure(_) => format!("dynamodb {operation} could not be sent"),
        SdkError::ResponseError(_) => format!("dynamodb {operation} response was unreadable"),
        SdkError::ConstructionFailure(_) => {
            format!("dynamodb {operation} request could not be built")
        }
        _ => format!("dynamodb {operation} failed"),
    };
    Error::unavailable_with(reason, err)
}

/// How a conditional `UpdateItem` failed.
#[derive(Debug)]
pub(crate) enum UpdateFailure {
    /// `ConditionalCheckFailedException`: the condition did not hold and
    /// nothing was written. Carries the item as it stood when the request
    /// asked for it (`ReturnValuesOnConditionCheckFailure = ALL_OLD`) and the
    /// server returned it.
    ConditionFailed(Option<codec::Item>),
    /// Any other failure, classified as [`classify`] does.
    Error(Error),
}

/// Splits a failed conditional `UpdateItem` into its failed condition and
/// every other failure.
pub(crate) fn update_failure<R>(err: SdkError<UpdateItemError, R>) -> UpdateFailure
where
    R: Debug + Send + Sync + 'static,
{
    if service_kind(&err) != Some(Kind::ConditionFailed) {
        return UpdateFailure::Error(classify("UpdateItem", err));
    }
    UpdateFailure::ConditionFailed(match err.into_service_error() {
        UpdateItemError::ConditionalCheckFailedException(failed) => failed.item,
        // Recognised by its code only: the SDK did not parse an item.
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_dynamodb::types::AttributeValue;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, InternalServerError,
        ProvisionedThroughputExceededException, RequestLimitExceeded, ResourceInUseException,
        ResourceNotFoundException, ThrottlingException,
    };

    use super::*;

    /// The raw response is irrelevant to classification; `()` stands in for it.
    type Sdk<E> = SdkError<E, ()>;

    fn service<E>(e: E) -> Sdk<E> {
        SdkError::service_error(e, ())
    }

    fn io_error() -> std::io::Error {
        std::io::Error::other("connection reset")
    }

    /// The error of an `UpdateItem` failure that is not a failed condition.
    fn update_error(e: Sdk<UpdateItemError>) -> Error {
        match update_failure(e) {
            UpdateFailure::Error(e) => e,
            other @ UpdateFailure::ConditionFailed(_) => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn condition_failure_without_item_is_a_failed_condition_without_item() {
        let e = service(UpdateItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder()
                .message("The conditional request failed")
                .build(),
        ));
        match update_failure(e) {
            UpdateFailure::ConditionFailed(None) => {}
            other => panic!("expected a failed condition without item, got {other:?}"),
        }
    }

    #[test]
    fn condition_failure_with_all_old_item_carries_the_item() {
        let e = service(UpdateItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder()
                .item(codec::GEN, AttributeValue::N("7".into()))
                .item(codec::OWNER, AttributeValue::S(String::new()))
                .build(),
        ));
        match update_failure(e) {
            UpdateFailure::ConditionFailed(Some(item)) => {
                assert_eq!(item.len(), 2);
                assert_eq!(item[codec::GEN], AttributeValue::N("7".into()));
                assert_eq!(item[codec::OWNER], AttributeValue::S(String::new()));
            }
            other => panic!("expected a failed condition with item, got {other:?}"),
        }
    }

    #[test]
    fn a_condition_failure_outside_update_item_is_unavailable() {
        // An operation without a condition that still reports one is a fault.
        let e = service(GetItemError::generic(
            ErrorMetadata::builder()
                .code("ConditionalCheckFailedException")
                .build(),
        ));
        let mapped = classify("GetItem", e);
        assert!(mapped.is_unavailable());
        assert_eq!(
            mapped.to_string(),
            "unavailable: dynamodb GetItem failed: ConditionalCheckFailedException"
        );
    }

    #[test]
    fn throughput_exceeded_is_throttled() {
        let e = service(UpdateItemError::ProvisionedThroughputExceededException(
            ProvisionedThroughputExceededException::builder().build(),
        ));
        assert!(update_error(e).is_throttled());
        let e = service(GetItemError::ProvisionedThroughputExceededException(
            ProvisionedThroughputExceededException::builder().build(),
        ));
        assert!(classify("GetItem", e).is_throttled());
    }

    #[test]
    fn throttling_exception_is_throttled() {
        let e = service(UpdateItemError::ThrottlingException(
            ThrottlingException::builder().build(),
        ));
        assert!(update_error(e).is_throttled());
        let e = service(GetItemError::ThrottlingException(
            ThrottlingException::builder().build(),
        ));
        assert!(classify("GetItem", e).is_throttled());
    }

    #[test]
    fn request_limit_exceeded_is_throttled() {
        let e = service(UpdateItemError::RequestLimitExceeded(
            RequestLimitExceeded::builder().build(),
        ));
        assert!(update_error(e).is_throttled());
        let e = service(GetItemError::RequestLimitExceeded(
            RequestLimitExceeded::builder().build(),
        ));
        assert!(classify("GetItem", e).is_throttled());
    }

    #[test]
    fn a_listings_throttles_are_throttled_and_other_failures_unavailable() {
        for e in [
            QueryError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder().build(),
            ),
            QueryError::ThrottlingException(ThrottlingException::builder().build()),
            QueryError::RequestLimitExceeded(RequestLimitExceeded::builder().build()),
        ] {
            assert!(classify("Query", service(e)).is_throttled());
        }
        let missing = service(QueryError::ResourceNotFoundException(
            ResourceNotFoundException::builder().build(),
        ));
        assert_eq!(service_kind(&missing), Some(Kind::NotFound));
        let mapped = classify("Query", missing);
        assert!(mapped.is_unavailable());
        assert!(std::error::Error::source(&mapped).is_some());
        assert!(
            mapped
                .to_string()
                .starts_with("unavailable: dynamodb Query failed")
        );
    }

    #[test]
    fn unmodelled_codes_are_classified_by_code() {
        let generic = |code: &str| {
            service(DescribeTableError::generic(
                ErrorMetadata::builder().code(code).build(),
            ))
        };
        assert!(classify("DescribeTable", generic("ThrottlingException")).is_throttled());
        assert!(classify("DescribeTable", generic("RequestLimitExceeded")).is_throttled());
        assert!(
            classify(
                "DescribeTable",
                generic("ProvisionedThroughputExceededException")
            )
            .is_throttled()
        );
        // A condition failure is recognised by code too, never by message text.
        let e = service(UpdateItemError::generic(
            ErrorMetadata::builder()
                .code("ConditionalCheckFailedException")
                .build(),
        ));
        assert!(matches!(
            update_failure(e),
            UpdateFailure::ConditionFailed(None)
        ));
        let e = generic("AccessDeniedException");
        let mapped = classify("DescribeTable", e);
        assert!(mapped.is_unavailable());
        assert_eq!(
            mapped.to_string(),
            "unavailable: dynamodb DescribeTable failed: AccessDeniedException"
        );
    }

    #[test]
    fn other_service_errors_are_unavailable_with_source() {
        let cases: Vec<Error> = vec![
            update_error(service(UpdateItemError::InternalServerError(
                InternalServerError::builder().message("boom").build(),
            ))),
            update_error(service(UpdateItemError::ResourceNotFoundException(
                ResourceNotFoundException::builder().build(),
            ))),
            classify(
                "GetItem",
                service(GetItemError::ResourceNotFoundException(
                    ResourceNotFoundException::builder().build(),
                )),
            ),
            classify(
                "CreateTable",
                service(CreateTableError::ResourceInUseException(
                    ResourceInUseException::builder().build(),
                )),
            ),
        ];
        for e in cases {
            assert!(e.is_unavailable(), "{e:?}");
            assert!(std::error::Error::source(&e).is_some(), "{e:?}");
        }
    }

    #[test]
    fn timeout_is_unavailable() {
        let e: Sdk<UpdateItemError> = SdkError::timeout_error(io_error());
        let mapped = update_error(e);
        assert!(mapped.is_unavailable());
        assert_eq!(
            mapped.to_string(),
            "unavailable: dynamodb UpdateItem timed out"
        );
        assert!(std::error::Error::source(&mapped).is_some());
    }

    #[test]
    fn dispatch_failure_is_unavailable() {
        for connector in [
            ConnectorError::io(io_error().into()),
            ConnectorError::timeout(io_error().into()),
            ConnectorError::user(io_error().into()),
            ConnectorError::other(io_error().into(), None),
        ] {
            let e: Sdk<GetItemError> = SdkError::dispatch_failure(connector);
            let mapped = classify("GetItem", e);
            assert!(mapped.is_unavailable());
            assert_eq!(
                mapped.to_string(),
                "unavailable: dynamodb GetItem could not be sent"
            );
        }
    }

    #[test]
    fn response_error_is_unavailable() {
        let e: Sdk<UpdateItemError> = SdkError::response_error(io_error(), ());
        let mapped = update_error(e);
        assert!(mapped.is_unavailable());
        assert_eq!(
            mapped.to_string(),
            "unavailable: dynamodb UpdateItem response was unreadable"
        );
    }

    #[test]
    fn construction_failure_is_unavailable() {
        let e: Sdk<UpdateItemError> = SdkError::construction_failure(io_error());
        let mapped = update_error(e);
        assert!(mapped.is_unavailable());
        assert_eq!(
            mapped.to_string(),
            "unavailable: dynamodb UpdateItem request could not be built"
        );
    }

    #[test]
    fn service_kind_reports_not_found_and_in_use() {
        let e = service(DescribeTableError::ResourceNotFoundException(
            ResourceNotFoundException::builder().build(),
        ));
        assert_eq!(service_kind(&e), Some(Kind::NotFound));
        let e = service(CreateTableError::ResourceInUseException(
            ResourceInUseException::builder().build(),
        ));
        assert_eq!(service_kind(&e), Some(Kind::InUse));
        let e: Sdk<DescribeTableError> = SdkError::timeout_error(io_error());
        assert_eq!(service_kind(&e), None);
    }
}
