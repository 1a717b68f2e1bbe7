//! Topic configs (ARCHITECTURE §11: topic configs are stream configs): every config Kafka
//! 4.4 gives a topic, and Lakelog's `lake.table` and `lake.retention.ms`, one model with the
//! SDK's stream configs ([`streamconfig`]: names, types, ranges, defaults, what each does
//! here). DescribeConfigs lists them all, with their source, type and documentation;
//! AlterConfigs and IncrementalAlterConfigs set them; an unknown name or a value out of range
//! is INVALID_CONFIG, as in Kafka. A group's configs (a GROUP resource) are Kafka 4.4's group
//! configs ([`streamconfig::GROUP_DEFS`]), the same way. Broker configs are the writer's config
//! file: described, never altered.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ListConfigResourcesRequest,
    ListConfigResourcesResponse, alter_configs_response, incremental_alter_configs_request,
    incremental_alter_configs_response, list_config_resources_response,
};
use kafka_protocol::protocol::StrBytes;
use streamconfig::{Configs, DEFS, GROUP_DEFS, GroupConfig, StreamConfig, Table};

use crate::{Broker, KafkaConfig, Refused, code};
use kafka_protocol::messages::ApiKey;

use crate::api::{Admission, Ctx, Handler};
use crate::session::Session;

/// Kafka's resource types.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
pub(crate) const GROUP: i8 = 32;

/// Kafka's config sources and types (DescribeConfigs v1+, v3+).
pub(crate) const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const STATIC_BROKER_CONFIG: i8 = 4;
pub(crate) const DEFAULT_CONFIG: i8 = 5;
const GROUP_CONFIG: i8 = 8;
const BOOLEAN: i8 = 1;
const INT: i8 = 3;

/// IncrementalAlterConfigs' operations.
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

fn invalid(m: impl std::fmt::Display) -> Refused {
    Refused::new(code::INVALID_CONFIG, m.to_string())
}

/// `c` with config `name` set to `value`, or back to its default when `value` is `None`.
/// `max.message.bytes` is at most the writer's largest entry.
pub(crate) fn apply(
    c: &mut StreamConfig,
    name: &str,
    value: Option<&str>,
    cfg: &KafkaConfig,
) -> Result<(), Refused> {
    match value {
        None => c.reset(name).map_err(invalid),
        Some(v) => {
            c.set(name, v).map_err(invalid)?;
            match c.max_message_bytes() {
                Some(b) if name == "max.message.bytes" && b > cfg.max_batch_bytes as u64 => {
                    Err(invalid(format!(
                        "invalid value {v} for config max.message.bytes: at most the writer's largest entry, {} (writer.max_entry_size)",
                        cfg.max_batch_bytes
                    )))
                }
                _ => Ok(()),
            }
        }
    }
}

/// The configs `configs` ask for, over the defaults, checked alone and together (CreateTopics,
/// AlterConfigs).
pub(crate) fn config_of(
    configs: &[(String, Option<String>)],
    cfg: &KafkaConfig,
) -> Result<StreamConfig, Refused> {
    let mut c = StreamConfig::default();
    for (n, v) in configs {
        apply(&mut c, n, v.as_deref(), cfg)?;
    }
    c.check().map_err(invalid)?;
    Ok(c)
}

/// Every config of a topic: name, value, source, type and documentation, as DescribeConfigs
/// and CreateTopics (v5+) answer them. A `max.message.bytes` not set is the writer's largest
/// entry.
pub(crate) fn topic_configs(
    c: &StreamConfig,
    cfg: &KafkaConfig,
) -> impl Iterator<Item = (&'static str, String, i8, i8, &'static str)> {
    let writer_max = cfg.max_batch_bytes.to_string();
    DEFS.iter().map(move |d| {
        let (value, source) = match c.get(d.name) {
            Some(v) => (v.to_owned(), DYNAMIC_TOPIC_CONFIG),
            None if d.name == "max.message.bytes" => (writer_max.clone(), DEFAULT_CONFIG),
            None => (d.default.to_owned(), DEFAULT_CONFIG),
        };
        (d.name, value, source, d.ty.kafka_code(), d.doc)
    })
}

/// Every config of a group, as DescribeConfigs answers them. A consumer group's session
/// timeout and heartbeat interval not set are the writer's.
pub(crate) fn group_configs(
    c: &GroupConfig,
    cfg: &KafkaConfig,
) -> impl Iterator<Item = (&'static str, String, i8, i8, &'static str)> {
    let ms = |d: std::time::Duration| d.as_millis().to_string();
    let (session, heartbeat) =
        (ms(cfg.consumer_session_timeout), ms(cfg.consumer_heartbeat_interval));
    GROUP_DEFS.iter().map(move |d| {
        let (value, source) = match c.get(d.name) {
            Some(v) => (v.to_owned(), GROUP_CONFIG),
            None if d.name == "consumer.session.timeout.ms" => (session.clone(), DEFAULT_CONFIG),
            None if d.name == "consumer.heartbeat.interval.ms" => {
                (heartbeat.clone(), DEFAULT_CONFIG)
            }
            None => (d.default.to_owned(), DEFAULT_CONFIG),
        };
        (d.name, value, source, d.ty.kafka_code(), d.doc)
    })
}

/// The configs `configs` ask for of a group, over the defaults (AlterConfigs).
fn group_config_of(configs: &[(String, Option<String>)]) -> Result<GroupConfig, Refused> {
    let mut c = GroupConfig::default();
    for (n, v) in configs {
        set_or_reset(&mut c, n, v.as_deref())?;
    }
    c.check().map_err(invalid)?;
    Ok(c)
}

/// `c` with config `name` set to `value`, or back to its default when `value` is `None`.
fn set_or_reset<T: Table>(
    c: &mut Configs<T>,
    name: &str,
    value: Option<&str>,
) -> Result<(), Refused> {
    match value {
        None => c.reset(name),
        Some(v) => c.set(name, v),
    }
    .map_err(invalid)
}

/// The most groups with configs: every broker follows them all in memory.
pub const MAX_GROUP_CONFIGS: usize = 10_000;

/// A group's configs as stored.
#[derive(Clone, PartialEq, prost::Message)]
struct StoredGroupConfig {
    #[prost(btree_map = "string, string", tag = "1")]
    set: std::collections::BTreeMap<String, String>,
}

/// A group's configs, encoded to store.
pub fn encode_group_config(c: &GroupConfig) -> Vec<u8> {
    let set = c.iter().map(|(n, v)| (n.to_owned(), v.to_owned())).collect();
    prost::Message::encode_to_vec(&StoredGroupConfig { set })
}

/// A group's stored configs, each checked again (one this version does not know, or
/// refuses, is left out with a warning); `None` when they do not decode.
pub fn decode_group_config(group: &str, bytes: &[u8]) -> Option<GroupConfig> {
    let stored: StoredGroupConfig = prost::Message::decode(bytes).ok()?;
    let mut c = GroupConfig::default();
    for (n, v) in &stored.set {
        if let Err(e) = c.set(n, v) {
            tracing::warn!(group, error = %e, "a stored group config is left out");
        }
    }
    Some(c)
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
    // Null unless asked for (the codec's default is an empty string).
    e.documentation = None;
    e
}

/// Whether config `name` is asked for: all are when `keys` is null or empty, as in Kafka.
fn wanted(name: &str, keys: &Option<Vec<StrBytes>>) -> bool {
    keys.as_ref().filter(|ks| !ks.is_empty()).is_none_or(|ks| ks.iter().any(|k| k.as_str() == name))
}

/// A broker's configs: the writer's, read-only.
fn broker_configs(
    keys: &Option<Vec<StrBytes>>,
    version: i16,
    cfg: &KafkaConfig,
) -> Vec<DescribeConfigsResourceResult> {
    let known = [
        ("auto.create.topics.enable", cfg.auto_create_topics.to_string(), BOOLEAN),
        ("message.max.bytes", cfg.max_batch_bytes.to_string(), INT),
        ("num.partitions", cfg.default_partitions.to_string(), INT),
    ];
    known
        .into_iter()
        .filter(|(k, _, _)| wanted(k, keys))
        .map(|(k, value, ty)| {
            let mut e = entry(k, value, STATIC_BROKER_CONFIG, ty, version);
            e.read_only = true;
            e
        })
        .collect()
}

pub(crate) async fn describe(
    req: DescribeConfigsRequest,
    version: i16,
    broker: &dyn Broker,
    cfg: &KafkaConfig,
) -> DescribeConfigsResponse {
    let docs = version >= 3 && req.include_documentation;
    let mut results = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let mut out = DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        let keys = &r.configuration_keys;
        let listed =
            |all: &mut dyn Iterator<Item = (&'static str, String, i8, i8, &'static str)>| {
                all.filter(|(name, ..)| wanted(name, keys))
                    .map(|(name, value, source, ty, doc)| {
                        let mut e = entry(name, value, source, ty, version);
                        if docs {
                            e.documentation = Some(StrBytes::from_static_str(doc));
                        }
                        e
                    })
                    .collect()
            };
        let configs: Result<Vec<DescribeConfigsResourceResult>, Refused> = match r.resource_type {
            TOPIC => broker
                .topic_config(&r.resource_name)
                .await
                .map(|c| listed(&mut topic_configs(&c, cfg))),
            GROUP if r.resource_name.is_empty() => {
                Err(Refused::new(code::INVALID_REQUEST, "Group name must not be empty"))
            }
            GROUP => broker
                .group_config(&r.resource_name)
                .await
                .map(|c| listed(&mut group_configs(&c, cfg))),
            BROKER if r.resource_name.is_empty() || r.resource_name.parse::<i32>().is_ok() => {
                Ok(broker_configs(keys, version, cfg))
            }
            BROKER => Err(Refused::new(
                code::INVALID_REQUEST,
                format!("broker `{}`: a broker id", r.resource_name),
            )),
            t => Err(Refused::new(
                code::INVALID_REQUEST,
                format!(
                    "resource type {t}: topics (2), brokers (4) and groups (32) have configs here"
                ),
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

/// Refuses a resource that is neither a topic nor a group: broker configs live in the writer's
/// config file.
fn alterable(resource_type: i8, name: &str) -> Result<(), Refused> {
    match resource_type {
        GROUP if name.is_empty() => {
            Err(Refused::new(code::INVALID_REQUEST, "Group name must not be empty"))
        }
        TOPIC | GROUP => Ok(()),
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
        let name = &r.resource_name;
        let done = async {
            alterable(r.resource_type, name)?;
            if r.resource_type == GROUP {
                let c = group_config_of(&configs)?;
                return broker.set_group_config(name, c, req.validate_only).await;
            }
            let c = config_of(&configs, cfg)?;
            broker.set_topic_config(name, c, req.validate_only).await
        }
        .await;
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
/// configs; APPEND and SUBTRACT add items to and take them from a list config's value (its
/// default when not set), as in Kafka.
pub(crate) async fn incremental_alter(
    req: IncrementalAlterConfigsRequest,
    broker: &dyn Broker,
    cfg: &KafkaConfig,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let done = async {
            alterable(r.resource_type, &r.resource_name)?;
            if r.resource_type == GROUP {
                let mut c = broker.group_config(&r.resource_name).await?;
                apply_ops(&mut c, &r.configs, set_or_reset)?;
                return broker.set_group_config(&r.resource_name, c, req.validate_only).await;
            }
            let mut c = broker.topic_config(&r.resource_name).await?;
            apply_ops(&mut c, &r.configs, |c, n, v| apply(c, n, v, cfg))?;
            broker.set_topic_config(&r.resource_name, c, req.validate_only).await
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

/// IncrementalAlterConfigs' operations on `c`, each config set (or reset, for `None`) by
/// `set`; then the configs checked together.
fn apply_ops<T: Table>(
    c: &mut Configs<T>,
    ops: &[incremental_alter_configs_request::AlterableConfig],
    set: impl Fn(&mut Configs<T>, &str, Option<&str>) -> Result<(), Refused>,
) -> Result<(), Refused> {
    for op in ops {
        let value = op.value.as_ref().map(|v| v.as_str());
        let name = op.name.as_str();
        match op.config_operation {
            SET => set(c, name, value)?,
            DELETE => set(c, name, None)?,
            o @ (APPEND | SUBTRACT) => {
                let list = list_op(c, name, value.unwrap_or_default(), o == APPEND)?;
                set(c, name, Some(&list))?;
            }
            o => {
                return Err(Refused::new(
                    code::INVALID_REQUEST,
                    format!("config operation {o}: 0 (SET) to 3 (SUBTRACT)"),
                ));
            }
        }
    }
    c.check().map_err(invalid)
}

/// List config `name`'s value with the items of `items` added (`append`) or taken out.
fn list_op<T: Table>(
    c: &Configs<T>,
    name: &str,
    items: &str,
    append: bool,
) -> Result<String, Refused> {
    let def =
        Configs::<T>::def(name).ok_or_else(|| invalid(format!("unknown config name {name}")))?;
    if def.ty != streamconfig::Type::List {
        return Err(invalid(format!(
            "config {name} is not a list: APPEND and SUBTRACT apply to lists"
        )));
    }
    let current = c.value(name).map_or("", |(v, _)| v);
    let mut list: Vec<&str> = current.split(',').filter(|s| !s.is_empty()).collect();
    for item in items.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match (append, list.contains(&item)) {
            (true, false) => list.push(item),
            (false, true) => list.retain(|x| *x != item),
            _ => {}
        }
    }
    Ok(list.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_checked_bounded_by_the_writer_and_reset_to_defaults() {
        let cfg = KafkaConfig::default();
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, Option<String>)> {
            p.iter().map(|(n, v)| (n.to_string(), Some(v.to_string()))).collect()
        };
        let c = config_of(
            &pairs(&[
                ("retention.ms", "60000"),
                ("max.message.bytes", "1000"),
                ("min.insync.replicas", "2"),
                ("message.timestamp.type", "LogAppendTime"),
                ("cleanup.policy", "compact,delete"),
            ]),
            &cfg,
        )
        .expect("valid");
        assert_eq!((c.retention_ms(), c.max_message_bytes()), (Some(60000), Some(1000)));
        assert!(c.log_append_time() && c.cleanup().compact && c.cleanup().delete);
        let described: Vec<_> = topic_configs(&c, &cfg).collect();
        assert_eq!(described.len(), DEFS.len(), "every config is listed");
        let of = |n: &str| described.iter().find(|d| d.0 == n).cloned().expect(n);
        assert_eq!(
            (of("min.insync.replicas").1, of("min.insync.replicas").2),
            ("2".into(), DYNAMIC_TOPIC_CONFIG)
        );
        assert_eq!(
            (of("segment.bytes").1, of("segment.bytes").2),
            ("1073741824".into(), DEFAULT_CONFIG)
        );
        let unset = topic_configs(&StreamConfig::default(), &cfg)
            .find(|d| d.0 == "max.message.bytes")
            .expect("listed");
        assert_eq!(unset.1, cfg.max_batch_bytes.to_string(), "unset: the writer's largest entry");
        let mut back = c.clone();
        apply(&mut back, "retention.ms", None, &cfg).expect("reset");
        assert_eq!(back.retention_ms(), None);
        let too_big = (cfg.max_batch_bytes + 1).to_string();
        for (n, v) in [
            ("retention.ms", "-2"),
            ("retention.bytes", "x"),
            ("max.message.bytes", too_big.as_str()),
            ("cleanup.policy", "compacted"),
            ("segment.bytes", "1"),
            ("no.such.config", "1"),
            ("lake.table", "yes"),
        ] {
            let r = config_of(&pairs(&[(n, v)]), &cfg);
            assert_eq!(r.map_err(|e| e.code), Err(code::INVALID_CONFIG), "{n}={v}");
        }
    }

    #[test]
    fn append_and_subtract_change_a_lists_items_from_its_default() {
        let c = StreamConfig::default();
        assert_eq!(list_op(&c, "cleanup.policy", "compact", true).expect("list"), "delete,compact");
        assert_eq!(list_op(&c, "cleanup.policy", "delete", true).expect("list"), "delete");
        assert_eq!(list_op(&c, "cleanup.policy", "delete", false).expect("list"), "");
        let r = list_op(&c, "retention.ms", "1", true).map_err(|e| e.code);
        assert_eq!(r, Err(code::INVALID_CONFIG), "not a list");
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

/// ListConfigResources (KIP-1142): the resources of each type asked for (every type when none
/// is) that have configs: topics, brokers and the groups with configs set; there are no
/// client-metrics resources, nor broker loggers, here. DESCRIBE_CONFIGS on the cluster, as in
/// Kafka; a type it does not know is UNSUPPORTED_VERSION.
#[derive(Debug)]
pub struct ListConfigResources;

/// The types ListConfigResources v1 lists, as Kafka 4.4's: topics, brokers, broker loggers,
/// client metrics and groups.
const LISTED_TYPES: [i8; 5] = [TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP];
const BROKER_LOGGER: i8 = 8;
const CLIENT_METRICS: i8 = 16;

impl Handler for ListConfigResources {
    const KEY: ApiKey = ApiKey::ListConfigResources;
    // v0 is ListClientMetricsResources: there are no client metrics here.
    const VERSIONS: (i16, i16) = (1, 1);
    type Request = ListConfigResourcesRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        // The response has no message: a refusal is said in the audit log.
        let refused = |code: i16| ListConfigResourcesResponse::default().with_error_code(code);
        if !crate::authz::cluster(access, security::acl::Operation::DescribeConfigs) {
            return ctx.now(&refused(crate::authz::CLUSTER_AUTHORIZATION_FAILED));
        }
        let mut types = req.resource_types;
        if types.is_empty() {
            types = LISTED_TYPES.to_vec();
        }
        if types.iter().any(|t| !LISTED_TYPES.contains(t)) {
            return ctx.now(&refused(code::UNSUPPORTED_VERSION));
        }
        ctx.later(move |ctx| async move {
            match list_config_resources(&types, ctx.broker.as_ref()).await {
                Ok(listed) => ListConfigResourcesResponse::default().with_config_resources(listed),
                Err(e) => {
                    tracing::warn!(error = %e.message, "ListConfigResources failed");
                    refused(e.code)
                }
            }
        })
    }
}

async fn list_config_resources(
    types: &[i8],
    broker: &dyn Broker,
) -> Result<Vec<list_config_resources_response::ConfigResource>, Refused> {
    let mut out = Vec::new();
    let mut add = |resource_type: i8, names: Vec<String>| {
        out.extend(names.into_iter().map(|n| {
            list_config_resources_response::ConfigResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(n))
        }))
    };
    if types.contains(&GROUP) {
        add(GROUP, broker.configured_groups().await?);
    }
    if types.contains(&BROKER) {
        add(BROKER, broker.brokers().await?.iter().map(|b| b.node_id.to_string()).collect());
    }
    if types.contains(&TOPIC) {
        let topics = broker.topics(None, None, None).await?;
        add(TOPIC, topics.into_iter().filter(|t| !t.internal).map(|t| t.name).collect());
    }
    Ok(out)
}

/// What this area's APIs need of the connection's principal (the helpers are
/// [`crate::authz`]'s).
mod authorize {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    use security::acl::Operation;

    use crate::authz::{
        Access, CLUSTER_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
        TOPIC_AUTHORIZATION_FAILED, TOPIC_RESOURCE,
    };

    /// A config resource's refusal for `op`, none when allowed: a topic's or a group's right,
    /// or the cluster's for a broker.
    fn config_refusal(a: Access<'_>, op: Operation, resource_type: i8, name: &str) -> Option<i16> {
        let (allowed, code) = match resource_type {
            TOPIC_RESOURCE => (a.topic(op, name), TOPIC_AUTHORIZATION_FAILED),
            super::GROUP => (a.group(op, name), GROUP_AUTHORIZATION_FAILED),
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
