//! The closed set of error codes every Lakelog API speaks (STYLE.md), with their wire names:
//! a server adapter sends a code in the `lakelog-code` gRPC metadata entry ([`CODE_KEY`]), and
//! the client parses it back, so both sides spell each code once, here.
//!
//! Depends on nothing (with the `grpc` feature, tonic, for [`grpc`]: the servers' statuses);
//! everything that answers or reads a Lakelog error depends on it.

/// gRPC metadata entry holding a failed call's [`Code`] (its [`Code::as_str`]).
pub const CODE_KEY: &str = "lakelog-code";
/// gRPC metadata entry set to [`OUTCOME_UNKNOWN`] when a failed append may have committed.
pub const OUTCOME_KEY: &str = "lakelog-outcome";
pub const OUTCOME_UNKNOWN: &str = "unknown";

/// An error's code: what a caller can do about it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Code {
    NotFound,
    AlreadyExists,
    /// The log, or the caller's slot of it, was fenced: nothing applied.
    Fenced,
    /// Another writer owns the log's slot: nothing applied; retry at the owner.
    NotOwner,
    OffsetOutOfRange,
    OffsetMismatch,
    InvalidArgument,
    /// Retryable: try again, here or elsewhere.
    Unavailable,
    ResourceExhausted,
    /// A mutating call sent to a read-only reader.
    ReadOnly,
    /// The caller proved no identity (or a revoked or unknown one) where one is required.
    Unauthenticated,
    /// The caller's principal may not do this (ACLs, docs/security.md).
    PermissionDenied,
    #[default]
    Internal,
}

impl Code {
    /// Every code.
    pub const ALL: [Code; 13] = [
        Code::NotFound,
        Code::AlreadyExists,
        Code::Fenced,
        Code::NotOwner,
        Code::OffsetOutOfRange,
        Code::OffsetMismatch,
        Code::InvalidArgument,
        Code::Unavailable,
        Code::ResourceExhausted,
        Code::ReadOnly,
        Code::Unauthenticated,
        Code::PermissionDenied,
        Code::Internal,
    ];

    /// The wire name (the `lakelog-code` metadata value; log.proto lists them).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::Fenced => "FENCED",
            Code::NotOwner => "NOT_OWNER",
            Code::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
            Code::OffsetMismatch => "OFFSET_MISMATCH",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::Unavailable => "UNAVAILABLE",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::ReadOnly => "READ_ONLY",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::Internal => "INTERNAL",
        }
    }

    /// The code a wire name stands for; `None` for a name this version does not know.
    pub fn parse(name: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// Whether a retry, here or at another server, may succeed with nothing applied by the
    /// failed call (routing moved, the server could not answer, or it was too busy: a retry
    /// after a back-off). Outcome-unknown appends and whole-log fences are the caller's to
    /// tell apart.
    pub fn is_retryable(self) -> bool {
        matches!(self, Code::NotOwner | Code::Fenced | Code::Unavailable | Code::ResourceExhausted)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_wire_name_and_names_are_distinct() {
        let mut names = std::collections::HashSet::new();
        for c in Code::ALL {
            assert_eq!(Code::parse(c.as_str()), Some(c));
            assert!(names.insert(c.as_str()), "{c} twice");
            assert_eq!(c, c.as_str());
        }
        assert_eq!(Code::parse("NO_SUCH_CODE"), None);
        assert_eq!(Code::parse("not_found"), None);
    }

    #[test]
    fn only_routing_availability_and_busy_codes_are_retryable() {
        let retryable: Vec<Code> = Code::ALL.into_iter().filter(|c| c.is_retryable()).collect();
        assert_eq!(
            retryable,
            [Code::Fenced, Code::NotOwner, Code::Unavailable, Code::ResourceExhausted]
        );
    }
}

/// The one place a Lakelog code becomes a gRPC status (with the `grpc` feature): every server
/// adapter (the log service, the catalog, auth, maintenance roles, the request guard) answers
/// through it, so a code travels the same way from each.
#[cfg(feature = "grpc")]
pub mod grpc {
    use std::sync::Arc;

    use tonic::metadata::MetadataValue;

    use super::{CODE_KEY, Code, OUTCOME_KEY, OUTCOME_UNKNOWN};

    /// The gRPC status code a Lakelog code travels under (the exact code goes in
    /// `lakelog-code`).
    pub fn code(code: Code) -> tonic::Code {
        match code {
            Code::NotFound => tonic::Code::NotFound,
            Code::AlreadyExists => tonic::Code::AlreadyExists,
            Code::Fenced | Code::NotOwner => tonic::Code::FailedPrecondition,
            Code::ReadOnly => tonic::Code::Unimplemented,
            Code::Unauthenticated => tonic::Code::Unauthenticated,
            Code::PermissionDenied => tonic::Code::PermissionDenied,
            Code::OffsetOutOfRange => tonic::Code::OutOfRange,
            Code::OffsetMismatch => tonic::Code::Aborted,
            Code::InvalidArgument => tonic::Code::InvalidArgument,
            Code::Unavailable => tonic::Code::Unavailable,
            Code::ResourceExhausted => tonic::Code::ResourceExhausted,
            Code::Internal => tonic::Code::Internal,
        }
    }

    /// A status of `code` (under its gRPC code) saying `message`.
    pub fn status(code: Code, message: impl Into<String>) -> tonic::Status {
        status_under(self::code(code), code, message.into(), false)
    }

    /// A status under gRPC code `grpc` carrying `code` in `lakelog-code`, and
    /// `lakelog-outcome: unknown` if `unknown` (an append that may have committed).
    pub fn status_under(
        grpc: tonic::Code,
        code: Code,
        message: String,
        unknown: bool,
    ) -> tonic::Status {
        let mut status = tonic::Status::new(grpc, message);
        status.metadata_mut().insert(CODE_KEY, MetadataValue::from_static(code.as_str()));
        if unknown {
            status.metadata_mut().insert(OUTCOME_KEY, MetadataValue::from_static(OUTCOME_UNKNOWN));
        }
        status
    }

    /// Error `e` as a status of `code`, its message `e`'s, `e` kept as the status's source.
    pub fn error<E>(code: Code, e: E, unknown: bool) -> tonic::Status
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let mut status = status_under(self::code(code), code, e.to_string(), unknown);
        status.set_source(Arc::new(e));
        status
    }
}

#[cfg(all(test, feature = "grpc"))]
mod grpc_tests {
    use super::{CODE_KEY, Code, OUTCOME_KEY};

    /// Every code travels in `lakelog-code` under its gRPC code; an error's source is kept.
    #[test]
    fn a_status_carries_its_code_and_an_error_its_source() {
        for code in Code::ALL {
            let s = super::grpc::status(code, "m");
            assert_eq!(s.code(), super::grpc::code(code));
            let sent = s.metadata().get(CODE_KEY).and_then(|v| v.to_str().ok());
            assert_eq!(sent.and_then(Code::parse), Some(code), "{code:?}");
            assert!(s.metadata().get(OUTCOME_KEY).is_none());
        }
        let e = super::grpc::error(Code::NotFound, std::io::Error::other("gone"), true);
        let source = std::error::Error::source(&e).map(|s| s.to_string());
        assert_eq!(source.as_deref(), Some("gone"));
        assert_eq!(e.message(), "gone");
        assert!(e.metadata().get(OUTCOME_KEY).is_some());
    }
}
