//! Topic configs (ARCHITECTURE §11: topic configs map to stream properties): which Kafka
//! configs a topic has, how a value is checked, and DescribeConfigs, AlterConfigs and
//! IncrementalAlterConfigs over them. A topic has `cleanup.policy` (delete only, until key
//! compaction exists), `retention.ms`, `retention.bytes`, `max.message.bytes` and Lakelog's
//! `lake.table` (the topic's compacted segments are its Iceberg table's files) and
//! `lake.retention.ms` (how long the table keeps a day); a config
//! Lakelog has no meaning for is INVALID_CONFIG, except the replication ones, accepted and
//! ignored (object storage keeps the data durable). Broker configs are the writer's config
//! file: described, never altered.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, alter_configs_response,
    incremental_alter_configs_response,
};
use kafka_protocol::protocol::StrBytes;

use crate::{Broker, KafkaConfig, Refused, TopicSettings, code};
use kafka_protocol::messages::ApiKey;

use crate::api::{Admission, Ctx, Handler};
use crate::session::Session;

/// Kafka's resource types.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

/// Kafka's config sources and types (DescribeConfigs v1+, v3+).
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;
const BOOLEAN: i8 = 1;
const INT: i8 = 3;
const LONG: i8 = 5;
const LIST: i8 = 7;

/// IncrementalAlterConfigs' operations.
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

/// Configs that concern replicas: accepted, and meaningless here.
const IGNORED: &[&str] = &["min.insync.replicas", "unclean.leader.election.enable"];

/// A topic's configs as Kafka names them.
pub const TOPIC_CONFIGS: &[&str] = &[
    "cleanup.policy",
    "lake.retention.ms",
    "lake.table",
    "max.message.bytes",
    "retention.bytes",
    "retention.ms",
];

fn invalid(m: String) -> Refused {
    Refused::new(code::INVALID_CONFIG, m)
}

/// `s` with config `name` set to `value`, or reset to its default when `value` is `None`.
pub(crate) fn apply(
    mut s: TopicSettings,
    name: &str,
    value: Option<&str>,
    cfg: &KafkaConfig,
) -> Result<TopicSettings, Refused> {
    match (name, value) {
        ("retention.ms", None) => s.retention_ms = None,
        ("retention.ms", Some(v)) => match v.parse::<i64>() {
            Ok(-1) => s.retention_ms = None,
            Ok(ms) if ms > 0 => s.retention_ms = Some(ms),
            _ => return Err(invalid(format!("retention.ms `{v}`: a positive number or -1"))),
        },
        ("retention.bytes", None) => s.retention_bytes = None,
        ("retention.bytes", Some(v)) => match v.parse::<i64>() {
            Ok(-1) => s.retention_bytes = None,
            Ok(b) if b > 0 => s.retention_bytes = Some(b as u64),
            _ => return Err(invalid(format!("retention.bytes `{v}`: a positive number or -1"))),
        },
        ("max.message.bytes", None) => s.max_message_bytes = None,
        ("max.message.bytes", Some(v)) => match v.parse::<u64>() {
            Ok(b) if b > 0 && b <= cfg.max_batch_bytes as u64 => s.max_message_bytes = Some(b),
            _ => {
                return Err(invalid(format!(
                    "max.message.bytes `{v}`: from 1 to the writer's maximum entry size, {}",
                    cfg.max_batch_bytes
                )));
            }
        },
        ("lake.retention.ms", None) => s.lake_retention_ms = None,
        ("lake.retention.ms", Some(v)) => match v.parse::<i64>() {
            Ok(-1) => s.lake_retention_ms = None,
            Ok(ms) if ms > 0 => s.lake_retention_ms = Some(ms),
            _ => return Err(invalid(format!("lake.retention.ms `{v}`: a positive number or -1"))),
        },
        ("lake.table", None) => s.lake_table = false,
        ("lake.table", Some(v)) => match v {
            "true" => s.lake_table = true,
            "false" => s.lake_table = false,
            _ => return Err(invalid(format!("lake.table `{v}`: true or false"))),
        },
        ("cleanup.policy", None) | ("cleanup.policy", Some("delete")) => {}
        ("cleanup.policy", Some(v)) => {
            return Err(invalid(format!(
                "cleanup.policy `{v}`: only delete (no key compaction yet)"
            )));
        }
        (n, _) if IGNORED.contains(&n) => {}
        (n, _) => {
            return Err(invalid(format!(
                "config {n} is not supported (cleanup.policy=delete, lake.retention.ms, lake.table, max.message.bytes, retention.bytes, retention.ms are)"
            )));
        }
    }
    Ok(s)
}

/// The settings `configs` ask for, over the defaults (CreateTopics, AlterConfigs).
pub(crate) fn settings(
    configs: &[(String, Option<String>)],
    cfg: &KafkaConfig,
) -> Result<TopicSettings, Refused> {
    configs.iter().try_fold(TopicSettings::default(), |s, (n, v)| apply(s, n, v.as_deref(), cfg))
}

/// One config of a topic as DescribeConfigs answers it: value, source, type.
fn topic_config(name: &str, s: &TopicSettings, cfg: &KafkaConfig) -> (String, i8, i8) {
    let set_or = |v: Option<String>, default: String, ty: i8| match v {
        Some(v) => (v, DYNAMIC_TOPIC_CONFIG, ty),
        None => (default, DEFAULT_CONFIG, ty),
    };
    match name {
        "retention.ms" => set_or(s.retention_ms.map(|v| v.to_string()), "-1".into(), LONG),
        "retention.bytes" => set_or(s.retention_bytes.map(|v| v.to_string()), "-1".into(), LONG),
        "max.message.bytes" => {
            set_or(s.max_message_bytes.map(|v| v.to_string()), cfg.max_batch_bytes.to_string(), INT)
        }
        "lake.retention.ms" => {
            set_or(s.lake_retention_ms.map(|v| v.to_string()), "-1".into(), LONG)
        }
        "lake.table" if s.lake_table => ("true".into(), DYNAMIC_TOPIC_CONFIG, BOOLEAN),
        "lake.table" => ("false".into(), DEFAULT_CONFIG, BOOLEAN),
        _ => ("delete".into(), DEFAULT_CONFIG, LIST),
    }
}

fn entry(
    name: &str,
    value: String,
    source: i8,
    ty: i8,
    version: i16,
) -> DescribeConfigsResourceResult {
    let mut e = DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(name.to_owned()))
        .with_value(Some(StrBytes::from_string(value)))
        .with_config_source(source);
    if version >= 3 {
        e.config_type = ty;
    }
    e
}

/// The configs asked for among `known`: all when `keys` is null or empty, as in Kafka.
fn wanted<'a>(known: &[&'a str], keys: &Option<Vec<StrBytes>>) -> Vec<&'a str> {
    let keys = keys.as_ref().filter(|ks| !ks.is_empty());
    known
        .iter()
        .copied()
        .filter(|k| keys.is_none_or(|ks| ks.iter().any(|x| x.as_str() == *k)))
        .collect()
}

pub(crate) async fn describe(
    req: DescribeConfigsRequest,
    version: i16,
    broker: &dyn Broker,
    cfg: &KafkaConfig,
) -> DescribeConfigsResponse {
    let mut results = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let mut out = DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        let configs: Result<Vec<DescribeConfigsResourceResult>, Refused> = match r.resource_type {
            TOPIC => broker.topic_settings(&r.resource_name).await.map(|s| {
                wanted(TOPIC_CONFIGS, &r.configuration_keys)
                    .into_iter()
                    .map(|k| {
                        let (value, source, ty) = topic_config(k, &s, cfg);
                        entry(k, value, source, ty, version)
                    })
                    .collect()
            }),
            BROKER if r.resource_name.is_empty() || r.resource_name.parse::<i32>().is_ok() => {
                let known = ["auto.create.topics.enable", "message.max.bytes", "num.partitions"];
                Ok(wanted(&known, &r.configuration_keys)
                    .into_iter()
                    .map(|k| {
                        let (value, ty) = match k {
                            "auto.create.topics.enable" => {
                                (cfg.auto_create_topics.to_string(), BOOLEAN)
                            }
                            "message.max.bytes" => (cfg.max_batch_bytes.to_string(), INT),
                            _ => (cfg.default_partitions.to_string(), INT),
                        };
                        let mut e = entry(k, value, STATIC_BROKER_CONFIG, ty, version);
                        e.read_only = true;
                        e
                    })
                    .collect())
            }
            BROKER => Err(Refused::new(
                code::INVALID_REQUEST,
                format!("broker `{}`: a broker id", r.resource_name),
            )),
            t => Err(Refused::new(
                code::INVALID_REQUEST,
                format!("resource type {t}: topics (2) and brokers (4) have configs here"),
            )),
        };
        match configs {
            Ok(c) => out.configs = c,
            Err(e) => {
                out.error_code = e.code;
                out.error_message = Some(StrBytes::from_string(e.message));
            }
        }
        results.push(out);
    }
    DescribeConfigsResponse::default().with_results(results)
}

/// Refuses a resource that is not a topic: broker configs live in the writer's config file.
fn topic_only(resource_type: i8) -> Result<(), Refused> {
    match resource_type {
        TOPIC => Ok(()),
        BROKER => Err(Refused::new(
            code::INVALID_REQUEST,
            "broker configs are set in each writer's config file, not altered over Kafka",
        )),
        t => Err(Refused::new(code::INVALID_REQUEST, format!("resource type {t} has no configs"))),
    }
}

/// AlterConfigs: a topic's configs replaced as a whole (the ones not named go back to their
/// defaults), as in Kafka.
pub(crate) async fn alter(
    req: AlterConfigsRequest,
    broker: &dyn Broker,
    cfg: &KafkaConfig,
) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let configs: Vec<(String, Option<String>)> = r
            .configs
            .iter()
            .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
            .collect();
        let done = match topic_only(r.resource_type).and_then(|()| settings(&configs, cfg)) {
            Ok(s) => broker.set_topic_settings(&r.resource_name, s, req.validate_only).await,
            Err(e) => Err(e),
        };
        let mut out = alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name);
        if let Err(e) = done {
            out.error_code = e.code;
            out.error_message = Some(StrBytes::from_string(e.message));
        }
        responses.push(out);
    }
    AlterConfigsResponse::default().with_responses(responses)
}

/// IncrementalAlterConfigs: SET and DELETE (back to the default) on a topic's current
/// configs; APPEND and SUBTRACT apply to list configs, and `cleanup.policy` can only be
/// `delete`, so only APPEND of `delete` is accepted (it changes nothing).
pub(crate) async fn incremental_alter(
    req: IncrementalAlterConfigsRequest,
    broker: &dyn Broker,
    cfg: &KafkaConfig,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let done = async {
            topic_only(r.resource_type)?;
            let mut s = broker.topic_settings(&r.resource_name).await?;
            for c in &r.configs {
                let value = c.value.as_ref().map(|v| v.as_str());
                s = match (c.config_operation, c.name.as_str(), value) {
                    (SET, n, v) => apply(s, n, v, cfg)?,
                    (DELETE, n, _) => apply(s, n, None, cfg)?,
                    (APPEND, "cleanup.policy", Some("delete")) => s,
                    (APPEND | SUBTRACT, n, _) => {
                        return Err(invalid(format!(
                            "config {n}: APPEND and SUBTRACT apply to lists; cleanup.policy can only be delete"
                        )));
                    }
                    (op, _, _) => {
                        return Err(Refused::new(
                            code::INVALID_REQUEST,
                            format!("config operation {op}: 0 (SET) to 3 (SUBTRACT)"),
                        ));
                    }
                };
            }
            broker.set_topic_settings(&r.resource_name, s, req.validate_only).await
        }
        .await;
        let mut out = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name);
        if let Err(e) = done {
            out.error_code = e.code;
            out.error_message = Some(StrBytes::from_string(e.message));
        }
        responses.push(out);
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_and_reset_to_defaults() {
        let cfg = KafkaConfig::default();
        let s = settings(
            &[
                ("retention.ms".into(), Some("60000".into())),
                ("max.message.bytes".into(), Some("1000".into())),
                ("min.insync.replicas".into(), Some("2".into())),
                ("lake.table".into(), Some("true".into())),
                ("lake.retention.ms".into(), Some("86400000".into())),
            ],
            &cfg,
        )
        .expect("valid");
        assert_eq!(
            (s.retention_ms, s.max_message_bytes, s.retention_bytes, s.lake_table),
            (Some(60000), Some(1000), None, true)
        );
        assert_eq!(topic_config("lake.table", &s, &cfg).0, "true");
        assert_eq!(s.lake_retention_ms, Some(86_400_000));
        assert_eq!(topic_config("lake.retention.ms", &s, &cfg).0, "86400000");
        assert!(!apply(s.clone(), "lake.table", None, &cfg).expect("reset").lake_table);
        let back = apply(s, "retention.ms", None, &cfg).expect("reset");
        assert_eq!(back.retention_ms, None);
        let too_big = (cfg.max_batch_bytes + 1).to_string();
        for (n, v) in [
            ("retention.ms", "0"),
            ("retention.bytes", "x"),
            ("max.message.bytes", too_big.as_str()),
            ("cleanup.policy", "compact"),
            ("segment.bytes", "1"),
            ("lake.table", "yes"),
            ("lake.retention.ms", "0"),
        ] {
            let r = apply(TopicSettings::default(), n, Some(v), &cfg);
            assert_eq!(r.map_err(|e| e.code), Err(code::INVALID_CONFIG), "{n}={v}");
        }
    }
}

/// DescribeConfigs: DESCRIBE_CONFIGS on each resource.
#[derive(Debug)]
pub struct DescribeConfigs;

impl Handler for DescribeConfigs {
    const KEY: ApiKey = ApiKey::DescribeConfigs;
    const VERSIONS: (i16, i16) = (1, 4);
    type Request = DescribeConfigsRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::describe_configs(ctx.access(), &mut req);
        ctx.later(|ctx| async move {
            let mut resp = describe(req, ctx.reply.version, ctx.broker.as_ref(), &ctx.cfg).await;
            resp.results.extend(refused);
            resp
        })
    }
}

/// AlterConfigs: ALTER_CONFIGS on each resource.
#[derive(Debug)]
pub struct AlterConfigs;

impl Handler for AlterConfigs {
    const KEY: ApiKey = ApiKey::AlterConfigs;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = AlterConfigsRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::alter_configs(ctx.access(), &mut req);
        ctx.later(|ctx| async move {
            let mut resp = alter(req, ctx.broker.as_ref(), &ctx.cfg).await;
            resp.responses.extend(refused);
            resp
        })
    }
}

/// IncrementalAlterConfigs: ALTER_CONFIGS on each resource.
#[derive(Debug)]
pub struct IncrementalAlterConfigs;

impl Handler for IncrementalAlterConfigs {
    const KEY: ApiKey = ApiKey::IncrementalAlterConfigs;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = IncrementalAlterConfigsRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::incremental_alter_configs(ctx.access(), &mut req);
        ctx.later(|ctx| async move {
            let mut resp = incremental_alter(req, ctx.broker.as_ref(), &ctx.cfg).await;
            resp.responses.extend(refused);
            resp
        })
    }
}

/// What this area's APIs need of the connection's principal (the helpers are
/// [`crate::authz`]'s).
mod authorize {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    use security::acl::Operation;

    use crate::authz::{
        Access, CLUSTER_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, TOPIC_RESOURCE,
    };

    /// A config resource's refusal for `op`, none when allowed: a topic's right, or the
    /// cluster's for a broker.
    fn config_refusal(a: Access<'_>, op: Operation, resource_type: i8, name: &str) -> Option<i16> {
        let (allowed, code) = match resource_type {
            TOPIC_RESOURCE => (a.topic(op, name), TOPIC_AUTHORIZATION_FAILED),
            _ => (a.cluster(op), CLUSTER_AUTHORIZATION_FAILED),
        };
        (!allowed).then_some(code)
    }

    /// Takes the config resources `op` is not allowed on out of `resources` (each named by `key`)
    /// and answers each with `answer` and its refusal code: the config APIs' one split.
    fn refuse_configs<R, O>(
        a: Access<'_>,
        op: Operation,
        resources: &mut Vec<R>,
        key: fn(&R) -> (i8, &StrBytes),
        answer: fn(R, i16) -> O,
    ) -> Vec<O> {
        if !a.checks() {
            return Vec::new();
        }
        let (mut keep, mut refused) = (Vec::new(), Vec::new());
        for r in std::mem::take(resources) {
            let (resource_type, name) = key(&r);
            match config_refusal(a, op, resource_type, name) {
                None => keep.push(r),
                Some(code) => refused.push(answer(r, code)),
            }
        }
        *resources = keep;
        refused
    }

    pub fn describe_configs(
        a: Access<'_>,
        req: &mut DescribeConfigsRequest,
    ) -> Vec<describe_configs_response::DescribeConfigsResult> {
        refuse_configs(
            a,
            Operation::DescribeConfigs,
            &mut req.resources,
            |r| (r.resource_type, &r.resource_name),
            |r, code| {
                describe_configs_response::DescribeConfigsResult::default()
                    .with_error_code(code)
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name)
            },
        )
    }

    pub fn alter_configs(
        a: Access<'_>,
        req: &mut AlterConfigsRequest,
    ) -> Vec<alter_configs_response::AlterConfigsResourceResponse> {
        refuse_configs(
            a,
            Operation::AlterConfigs,
            &mut req.resources,
            |r| (r.resource_type, &r.resource_name),
            |r, code| {
                alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(code)
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name)
            },
        )
    }

    pub fn incremental_alter_configs(
        a: Access<'_>,
        req: &mut IncrementalAlterConfigsRequest,
    ) -> Vec<incremental_alter_configs_response::AlterConfigsResourceResponse> {
        refuse_configs(
            a,
            Operation::AlterConfigs,
            &mut req.resources,
            |r| (r.resource_type, &r.resource_name),
            |r, code| {
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(code)
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name)
            },
        )
    }
}
