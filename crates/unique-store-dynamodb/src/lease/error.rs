//! Lease errors from the crate's store errors, and the classification of `DeleteItem`'s.

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use unique_lease::LeaseError;

use crate::error::{Kind, ServiceKind};

pub(super) fn unavailable(reason: String) -> LeaseError {
    LeaseError::Unavailable {
        reason,
        source: None,
    }
}

/// The crate's store errors (C8, one mapping in `error.rs`) as lease errors: a throttle
/// is `Unavailable` (retry after a backoff), bad settings `InvalidParams`, everything
/// else what it was.
pub(super) fn lease_error(e: unique_core::Error) -> LeaseError {
    match e {
        unique_core::Error::InvalidParams(reason) => LeaseError::InvalidParams(reason),
        unique_core::Error::Throttled => unavailable("dynamodb throttled the request".to_owned()),
        unique_core::Error::Unavailable { reason, source } => {
            LeaseError::Unavailable { reason, source }
        }
        // Session outcomes, which no lease request produces.
        other => LeaseError::backend_with("dynamodb request failed", other),
    }
}

/// `DeleteItem` (unregistering a node) is classified as the other operations are: the
/// modelled errors by kind, anything else as a plain service error (`Unavailable`, as a
/// throttle is for a lease caller).
impl ServiceKind for DeleteItemError {
    fn kind(&self) -> Kind {
        match self {
            Self::ConditionalCheckFailedException(_) => Kind::ConditionFailed,
            Self::ProvisionedThroughputExceededException(_)
            | Self::RequestLimitExceeded(_)
            | Self::ThrottlingException(_) => Kind::Throttled,
            Self::ResourceNotFoundException(_) => Kind::NotFound,
            _ => Kind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::error::{ErrorMetadata, SdkError};
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
        ResourceNotFoundException,
    };

    use super::*;
    use crate::error;

    #[test]
    fn store_errors_map_to_lease_errors() {
        let invalid = lease_error(unique_core::Error::invalid("bad region"));
        assert!(invalid.is_invalid_params());
        assert_eq!(invalid.to_string(), "invalid params: bad region");

        let throttled = lease_error(unique_core::Error::Throttled);
        assert!(throttled.is_unavailable() && throttled.is_retryable());
        assert_eq!(
            throttled.to_string(),
            "unavailable: dynamodb throttled the request"
        );

        let down = lease_error(unique_core::Error::unavailable_with(
            "dynamodb GetItem timed out",
            std::io::Error::other("x"),
        ));
        assert!(down.is_unavailable());
        assert_eq!(down.to_string(), "unavailable: dynamodb GetItem timed out");
        assert!(std::error::Error::source(&down).is_some());

        let other = lease_error(unique_core::Error::Superseded {
            generation: 1,
            current: 2,
        });
        assert!(matches!(other, LeaseError::Backend { .. }), "{other:?}");
    }

    #[test]
    fn delete_item_errors_are_classified() {
        type Sdk = SdkError<DeleteItemError, ()>;
        let service = |e| -> Sdk { SdkError::service_error(e, ()) };
        let throttled = service(DeleteItemError::ProvisionedThroughputExceededException(
            ProvisionedThroughputExceededException::builder().build(),
        ));
        assert_eq!(error::service_kind(&throttled), Some(Kind::Throttled));
        assert!(lease_error(error::classify("DeleteItem", throttled)).is_unavailable());
        let missing = service(DeleteItemError::ResourceNotFoundException(
            ResourceNotFoundException::builder().build(),
        ));
        assert_eq!(error::service_kind(&missing), Some(Kind::NotFound));
        let failed = service(DeleteItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder().build(),
        ));
        assert_eq!(error::service_kind(&failed), Some(Kind::ConditionFailed));
        let other = service(DeleteItemError::generic(
            ErrorMetadata::builder()
                .code("AccessDeniedException")
                .build(),
        ));
        assert_eq!(error::service_kind(&other), Some(Kind::Other));
        let mapped = lease_error(error::classify("DeleteItem", other));
        assert_eq!(
            mapped.to_string(),
            "unavailable: dynamodb DeleteItem failed: AccessDeniedException"
        );
    }
}
