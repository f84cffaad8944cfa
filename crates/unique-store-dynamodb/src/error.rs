//! C8 in one place: every SDK failure becomes exactly one `unique_core::Error`.
//!
//! A failed condition is `CasFailed` (with the record when the server returned
//! it), throttling is `Throttled`, and everything else — timeouts, dispatch
//! failures, unreadable responses, other service errors — is `Unavailable`
//! with the SDK error kept as its source. Nothing else is ever reported as
//! `CasFailed`.

use std::fmt::Debug;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::operation::get_item::GetItemError;
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

/// Maps a failed `operation` (its DynamoDB name, e.g. `UpdateItem`) to the core error.
pub(crate) fn classify<E, R>(operation: &'static str, err: SdkError<E, R>) -> Error
where
    E: ServiceKind + std::error::Error + Send + Sync + 'static,
    R: Debug + Send + Sync + 'static,
{
    let reason = match &err {
        SdkError::ServiceError(service) => match service.err().kind() {
            Kind::ConditionFailed => return Error::cas_failed(),
            Kind::Throttled => return Error::Throttled,
            Kind::NotFound | Kind::InUse | Kind::Other => format!(
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

/// Maps a failed claim `UpdateItem`. A failed condition that carries the item
/// (`ReturnValuesOnConditionCheckFailure = ALL_OLD`) becomes `CasFailed` with
/// that record, so the Arbiter's next attempt skips its read; without the item
/// (or with one that does not decode) the Arbiter reads.
pub(crate) fn claim_failed<R>(err: SdkError<UpdateItemError, R>) -> Error
where
    R: Debug + Send + Sync + 'static,
{
    if let Some(UpdateItemError::ConditionalCheckFailedException(failed)) = err.as_service_error()
        && let Some(item) = failed.item()
        && let Ok(state) = codec::owner_state(Some(item))
    {
        return Error::cas_failed_with(state);
    }
    classify("UpdateItem", err)
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

    #[test]
    fn condition_failure_without_item_is_cas_failed_without_state() {
        let e = service(UpdateItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder()
                .message("The conditional request failed")
                .build(),
        ));
        match claim_failed(e) {
            Error::CasFailed { current: None } => {}
            other => panic!("expected CasFailed without state, got {other:?}"),
        }
    }

    #[test]
    fn condition_failure_with_all_old_item_carries_the_record() {
        let e = service(UpdateItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder()
                .item(codec::GEN, AttributeValue::N("7".into()))
                .item(codec::OWNER, AttributeValue::S(String::new()))
                .build(),
        ));
        match claim_failed(e) {
            Error::CasFailed {
                current: Some(state),
            } => {
                assert!(state.exists);
                assert_eq!(state.generation, 7);
                assert_eq!(state.claim_id, None);
            }
            other => panic!("expected CasFailed with state, got {other:?}"),
        }
    }

    #[test]
    fn condition_failure_with_undecodable_item_falls_back_to_a_read() {
        let e = service(UpdateItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder()
                .item(codec::GEN, AttributeValue::S("x".into()))
                .build(),
        ));
        assert!(matches!(
            claim_failed(e),
            Error::CasFailed { current: None }
        ));
    }

    #[test]
    fn throughput_exceeded_is_throttled() {
        let e = service(UpdateItemError::ProvisionedThroughputExceededException(
            ProvisionedThroughputExceededException::builder().build(),
        ));
        assert!(claim_failed(e).is_throttled());
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
        assert!(claim_failed(e).is_throttled());
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
        assert!(claim_failed(e).is_throttled());
        let e = service(GetItemError::RequestLimitExceeded(
            RequestLimitExceeded::builder().build(),
        ));
        assert!(classify("GetItem", e).is_throttled());
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
        assert!(claim_failed(e).is_cas_failed());
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
            claim_failed(service(UpdateItemError::InternalServerError(
                InternalServerError::builder().message("boom").build(),
            ))),
            claim_failed(service(UpdateItemError::ResourceNotFoundException(
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
        let mapped = claim_failed(e);
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
        let mapped = claim_failed(e);
        assert!(mapped.is_unavailable());
        assert_eq!(
            mapped.to_string(),
            "unavailable: dynamodb UpdateItem response was unreadable"
        );
    }

    #[test]
    fn construction_failure_is_unavailable() {
        let e: Sdk<UpdateItemError> = SdkError::construction_failure(io_error());
        let mapped = claim_failed(e);
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
