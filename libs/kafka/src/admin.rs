//! CreateTopics, DeleteTopics and CreatePartitions: topics are streams, so these are the
//! catalog's create, delete and grow. Replication does not apply (object storage keeps the
//! data durable): any replication factor is accepted and answered as 1; manual replica
//! assignments are refused. Of the topic configs, `retention.ms`, `retention.bytes` and
//! `cleanup.policy=delete` are kept; `compact` and configs Lakelog has no meaning for are
//! INVALID_CONFIG, except the replication ones, which are accepted and ignored.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::{Broker, KafkaConfig, Refused, TopicSettings, code};

/// Configs that concern replicas: accepted, and meaningless here.
const IGNORED: &[&str] = &["min.insync.replicas", "unclean.leader.election.enable"];

/// The settings a topic's configs ask for, or why they cannot be had.
fn settings(configs: &[(String, Option<String>)]) -> Result<TopicSettings, Refused> {
    let bad = |m: String| Err(Refused::new(code::INVALID_CONFIG, m));
    let mut s = TopicSettings::default();
    for (name, value) in configs {
        let v = value.as_deref().unwrap_or("");
        match name.as_str() {
            "retention.ms" => match v.parse::<i64>() {
                Ok(-1) => s.retention_ms = None,
                Ok(ms) if ms > 0 => s.retention_ms = Some(ms),
                _ => return bad(format!("retention.ms `{v}`: a positive number or -1")),
            },
            "retention.bytes" => match v.parse::<i64>() {
                Ok(-1) => s.retention_bytes = None,
                Ok(b) if b > 0 => s.retention_bytes = Some(b as u64),
                _ => return bad(format!("retention.bytes `{v}`: a positive number or -1")),
            },
            "cleanup.policy" if v == "delete" => {}
            "cleanup.policy" => {
                return bad(format!("cleanup.policy `{v}`: only delete (no key compaction yet)"));
            }
            n if IGNORED.contains(&n) => {}
            n => {
                return bad(format!(
                    "config {n} is not supported (retention.ms, retention.bytes, cleanup.policy=delete are)"
                ));
            }
        }
    }
    Ok(s)
}

pub(crate) async fn create_topics(
    req: CreateTopicsRequest,
    version: i16,
    broker: &dyn Broker,
    cfg: &KafkaConfig,
) -> CreateTopicsResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        let partitions = match t.num_partitions {
            -1 => Ok(cfg.default_partitions),
            n if n > 0 => Ok(n as u32),
            n => Err(Refused::new(code::INVALID_PARTITIONS, format!("{n} partitions"))),
        };
        let configs: Vec<(String, Option<String>)> = t
            .configs
            .iter()
            .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
            .collect();
        let r = match (partitions, settings(&configs)) {
            _ if !t.assignments.is_empty() => Err(Refused::new(
                code::INVALID_REPLICA_ASSIGNMENT,
                "replica assignments do not apply: brokers hold no replicas",
            )),
            _ if t.replication_factor == 0 || t.replication_factor < -1 => Err(Refused::new(
                code::INVALID_REPLICATION_FACTOR,
                format!("replication factor {}", t.replication_factor),
            )),
            (Err(e), _) | (_, Err(e)) => Err(e),
            (Ok(n), Ok(s)) => {
                broker.create_topic(&name, n, s, req.validate_only).await.map(|id| (id, n))
            }
        };
        let mut out = CreatableTopicResult::default().with_name(t.name);
        match r {
            // num_partitions and replication_factor exist from v5, the topic id from v7.
            Ok((id, n)) => {
                if version >= 5 {
                    out.num_partitions = n as i32;
                    out.replication_factor = 1;
                }
                if version >= 7 {
                    out.topic_id = id;
                }
            }
            Err(e) => {
                out.error_code = e.code;
                out.error_message = Some(StrBytes::from_string(e.message));
            }
        }
        topics.push(out);
    }
    CreateTopicsResponse::default().with_topics(topics)
}

pub(crate) async fn delete_topics(
    req: DeleteTopicsRequest,
    version: i16,
    broker: &dyn Broker,
) -> DeleteTopicsResponse {
    // v6 names topics in `topics` (by name or id); before, in `topic_names`.
    let names: Vec<Option<String>> = if version >= 6 {
        req.topics.iter().map(|t| t.name.as_ref().map(|n| n.0.to_string())).collect()
    } else {
        req.topic_names.iter().map(|n| Some(n.0.to_string())).collect()
    };
    let mut responses = Vec::with_capacity(names.len());
    for name in names {
        let mut out = DeletableTopicResult::default()
            .with_name(name.clone().map(|n| TopicName(StrBytes::from_string(n))));
        let r = match &name {
            Some(n) => broker.delete_topic(n).await,
            None => {
                Err(Refused::new(code::INVALID_REQUEST, "deleting by topic id is not supported"))
            }
        };
        match r {
            Ok(id) => out.topic_id = id,
            Err(e) => {
                out.error_code = e.code;
                out.error_message = Some(StrBytes::from_string(e.message));
            }
        }
        responses.push(out);
    }
    DeleteTopicsResponse::default().with_responses(responses)
}

pub(crate) async fn create_partitions(
    req: CreatePartitionsRequest,
    broker: &dyn Broker,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let r = match (t.count, &t.assignments) {
            (_, Some(a)) if !a.is_empty() => Err(Refused::new(
                code::INVALID_REPLICA_ASSIGNMENT,
                "replica assignments do not apply: brokers hold no replicas",
            )),
            (n, _) if n <= 0 => {
                Err(Refused::new(code::INVALID_PARTITIONS, format!("{n} partitions")))
            }
            (n, _) => broker.create_partitions(&t.name.0, n as u32, req.validate_only).await,
        };
        let mut out = CreatePartitionsTopicResult::default().with_name(t.name);
        if let Err(e) = r {
            out.error_code = e.code;
            out.error_message = Some(StrBytes::from_string(e.message));
        }
        results.push(out);
    }
    CreatePartitionsResponse::default().with_results(results)
}
