//! Log-storage errors as gRPC statuses (through `codes::grpc`, the one status helper): the
//! exact code travels in the `lakelog-code` metadata entry; `lakelog-outcome: unknown` marks
//! appends that may have committed; a fence and the slot's owner in their own entries.

use logstore::LogError;
use tonic::metadata::MetadataValue;

/// A log-storage error as a status: corruption under DATA_LOSS, anything else under its code's
/// gRPC code; what fenced it and who owns the slot, when known, in metadata; the error kept as
/// the status's source.
pub fn to_status(e: LogError) -> tonic::Status {
    let code = e.code();
    let grpc = match &e {
        LogError::Corrupt(_) => tonic::Code::DataLoss,
        _ => codes::grpc::code(code),
    };
    let a = append_error(&e);
    let mut status = codes::grpc::status_under(grpc, code, a.message, a.outcome_unknown);
    status.set_source(std::sync::Arc::new(e));
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
