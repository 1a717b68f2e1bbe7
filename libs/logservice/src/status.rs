//! The one place log-storage errors become gRPC statuses. The exact code travels in the
//! `lakelog-code` metadata entry; `lakelog-outcome: unknown` marks appends that may have
//! committed.

use logstore::{Code, LogError};
use tonic::metadata::MetadataValue;

/// The gRPC status code a Lakelog code travels under (the exact code goes in `lakelog-code`).
pub fn grpc_code(code: Code) -> tonic::Code {
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

/// A status carrying `code` in `lakelog-code`, and `lakelog-outcome: unknown` if `unknown`.
pub fn status(grpc: tonic::Code, code: Code, message: String, unknown: bool) -> tonic::Status {
    let mut status = tonic::Status::new(grpc, message);
    status.metadata_mut().insert(codes::CODE_KEY, MetadataValue::from_static(code.as_str()));
    if unknown {
        status
            .metadata_mut()
            .insert(codes::OUTCOME_KEY, MetadataValue::from_static(codes::OUTCOME_UNKNOWN));
    }
    status
}

pub fn to_status(e: LogError) -> tonic::Status {
    let code = e.code();
    let grpc = match &e {
        LogError::Corrupt(_) => tonic::Code::DataLoss,
        _ => grpc_code(code),
    };
    let a = append_error(&e);
    let mut status = status(grpc, code, a.message, a.outcome_unknown);
    // Fenced kinds, addresses and ids are ASCII; anything else is left out rather than mangled.
    let mut insert = |key: &'static str, value: &str| {
        if !value.is_empty()
            && let Ok(v) = MetadataValue::try_from(value)
        {
            status.metadata_mut().insert(key, v);
        }
    };
    insert("lakelog-fenced", &a.fenced);
    insert("lakelog-owner", &a.owner);
    insert("lakelog-owner-id", &a.owner_id);
    status
}

/// What an append's failure says, as an AppendStream answer carries it (and [`to_status`]
/// puts into a status).
pub fn append_error(e: &LogError) -> proto::log::v1::AppendError {
    let mut a = proto::log::v1::AppendError {
        code: e.code().as_str().to_owned(),
        message: e.to_string(),
        outcome_unknown: e.outcome_unknown(),
        ..Default::default()
    };
    if let LogError::Fenced { whole_log, .. } = e {
        a.fenced = if *whole_log { "log" } else { "slot" }.to_owned();
    }
    if let LogError::NotOwner { owner, owner_id, .. } = e {
        a.owner.clone_from(owner);
        a.owner_id.clone_from(owner_id);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_carries_its_code_and_unknown_outcomes_say_so() {
        let fenced = to_status(LogError::Fenced {
            log: logstore::LogId(1),
            held: 1,
            current: 2,
            whole_log: true,
        });
        assert_eq!(
            fenced.metadata().get("lakelog-fenced").and_then(|v| v.to_str().ok()),
            Some("log")
        );
        assert_eq!(fenced.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            fenced.metadata().get("lakelog-code").and_then(|v| v.to_str().ok()),
            Some("FENCED")
        );
        let unknown =
            to_status(LogError::Unavailable { message: "x".into(), outcome_unknown: true });
        assert_eq!(
            unknown.metadata().get("lakelog-outcome").and_then(|v| v.to_str().ok()),
            Some("unknown")
        );
        let known =
            to_status(LogError::Unavailable { message: "x".into(), outcome_unknown: false });
        assert!(known.metadata().get("lakelog-outcome").is_none());
        assert_eq!(to_status(LogError::Corrupt("crc".into())).code(), tonic::Code::DataLoss);
        let read_only = to_status(LogError::ReadOnly("Append".into()));
        assert_eq!(read_only.code(), tonic::Code::Unimplemented);
        assert_eq!(
            read_only.metadata().get("lakelog-code").and_then(|v| v.to_str().ok()),
            Some("READ_ONLY")
        );
        let not_owner = to_status(LogError::NotOwner {
            log: logstore::LogId(1),
            slot: "a".into(),
            owner_id: "w2".into(),
            owner: "http://127.0.0.1:9".into(),
        });
        assert_eq!(
            not_owner.metadata().get("lakelog-owner").and_then(|v| v.to_str().ok()),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(
            not_owner.metadata().get("lakelog-code").and_then(|v| v.to_str().ok()),
            Some("NOT_OWNER")
        );
    }
}
