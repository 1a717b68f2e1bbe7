//! CreateTopics, DeleteTopics and CreatePartitions: topics are streams, so these are the
//! catalog's create, delete and grow. Replication does not apply (object storage keeps the
//! data durable): any replication factor is accepted and answered as 1; a manual replica
//! assignment is checked as Kafka checks one (every broker it names is live, no partition
//! without a replica or with one twice) and accepted, but a partition's leader is still the
//! owner function's choice (ARCHITECTURE §3), not the assignment's first broker. Topic
//! configs are checked as [`crate::configs`] says. And DeleteRecords, which moves a
//! partition's start (a soft trim), and DescribeCluster.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteRecordsRequest, DeleteRecordsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse, DescribeClusterRequest, DescribeClusterResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::{Broker, KafkaConfig, Refused, code};
use kafka_protocol::messages::ApiKey;
use security::acl::Operation;

use crate::api::{Admission, Ctx, Handler};
use crate::session::Session;

pub(crate) async fn create_topics(
    req: CreateTopicsRequest,
    version: i16,
    broker: &dyn Broker,
    cfg: &KafkaConfig,
) -> CreateTopicsResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        let partitions = match (t.num_partitions, t.assignments.len()) {
            (-1, 0) => Ok(cfg.default_partitions),
            (-1, n) => assignment(
                broker,
                t.assignments
                    .iter()
                    .map(|a| (a.partition_index, a.broker_ids.iter().map(|b| b.0).collect())),
            )
            .await
            .map(|()| u32::try_from(n).unwrap_or(u32::MAX)),
            (_, n) if n > 0 => Err(Refused::new(
                code::INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
            )),
            (n, _) if n > 0 => Ok(n as u32),
            (n, _) => Err(Refused::new(code::INVALID_PARTITIONS, format!("{n} partitions"))),
        };
        let configs: Vec<(String, Option<String>)> = t
            .configs
            .iter()
            .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
            .collect();
        let config = crate::configs::config_of(&configs, cfg);
        let r = match (partitions, config) {
            // It exists, as far as clients can tell (Metadata lists it).
            _ if name == crate::internal::OFFSETS_TOPIC => Err(Refused::new(
                code::TOPIC_ALREADY_EXISTS,
                format!("topic {name} already exists (Kafka's internal topic)"),
            )),
            _ if crate::internal::is_internal(&name) => Err(Refused::new(
                code::INVALID_REQUEST,
                format!("Creation of internal topic {name} is prohibited"),
            )),
            _ if !t.assignments.is_empty() && t.replication_factor != -1 => Err(Refused::new(
                code::INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
            )),
            _ if t.replication_factor == 0 || t.replication_factor < -1 => Err(Refused::new(
                code::INVALID_REPLICATION_FACTOR,
                format!("replication factor {}", t.replication_factor),
            )),
            // A topic that exists is TOPIC_ALREADY_EXISTS whatever its request's configs, as
            // Kafka checks the name first.
            (_, Err(e))
                if e.code == code::INVALID_CONFIG && broker.topic_config(&name).await.is_ok() =>
            {
                Err(Refused::new(
                    code::TOPIC_ALREADY_EXISTS,
                    format!("topic {name} already exists"),
                ))
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
            (Ok(n), Ok(c)) => broker
                .create_topic(&name, n, c.clone(), req.validate_only)
                .await
                .map(|id| (id, n, c)),
        };
        let mut out = CreatableTopicResult::default().with_name(t.name);
        match r {
            // num_partitions, replication_factor and the configs exist from v5, the topic id
            // from v7.
            Ok((id, n, c)) => {
                if version >= 5 {
                    out.num_partitions = n as i32;
                    out.replication_factor = 1;
                    out.configs = Some(created_configs(&c, cfg));
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

/// Checks a manual replica assignment as Kafka does: partitions numbered 0, 1, 2… in order,
/// each with at least one replica, none twice, every one a live broker. Accepted, it changes
/// nothing: partitions are led as the owner function says (the module's doc).
async fn assignment(
    broker: &dyn Broker,
    partitions: impl Iterator<Item = (i32, Vec<i32>)>,
) -> Result<(), Refused> {
    let live: std::collections::BTreeSet<i32> =
        broker.brokers().await?.iter().map(|b| b.node_id).collect();
    let bad = |m: String| Refused::new(code::INVALID_REPLICA_ASSIGNMENT, m);
    for (i, (index, replicas)) in partitions.enumerate() {
        if index != i as i32 {
            return Err(bad(format!("partitions should be consecutive and start at 0: {index}")));
        }
        if replicas.is_empty() {
            return Err(bad(format!("partition {index} has no replica")));
        }
        let distinct: std::collections::BTreeSet<i32> = replicas.iter().copied().collect();
        if distinct.len() != replicas.len() {
            return Err(bad(format!(
                "duplicate brokers in partition {index}'s replicas {replicas:?}"
            )));
        }
        if let Some(unknown) = replicas.iter().find(|b| !live.contains(b)) {
            return Err(bad(format!("Unknown broker {unknown} in partition {index}'s replicas")));
        }
    }
    Ok(())
}

/// How many partitions growing topic `name` to `count` adds.
async fn added(broker: &dyn Broker, name: &str, count: i32) -> Result<i64, Refused> {
    let topics = broker.topics(Some(&[name.to_owned()]), None, None).await?;
    let t = topics.first().ok_or_else(|| Refused::new(code::UNKNOWN_TOPIC_OR_PARTITION, name))?;
    if t.error != code::NONE {
        return Err(Refused::new(t.error, format!("topic {name}")));
    }
    Ok(i64::from(count) - t.partitions.len() as i64)
}

/// A created topic's configs as CreateTopics v5+ answers them.
fn created_configs(c: &crate::StreamConfig, cfg: &KafkaConfig) -> Vec<CreatableTopicConfigs> {
    crate::configs::topic_configs(c, cfg)
        .map(|(name, value, source, ..)| {
            CreatableTopicConfigs::default()
                .with_name(StrBytes::from_static_str(name))
                .with_value(Some(StrBytes::from_string(value)))
                .with_config_source(source)
        })
        .collect()
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
        let assigned = async {
            match &t.assignments {
                Some(a) if !a.is_empty() => {
                    let lists = a.iter().enumerate();
                    let lists =
                        lists.map(|(i, a)| (i as i32, a.broker_ids.iter().map(|b| b.0).collect()));
                    assignment(broker, lists).await.map(|()| Some(a.len()))
                }
                _ => Ok(None),
            }
        };
        let r = match (t.count, assigned.await) {
            (n, _) if n <= 0 => {
                Err(Refused::new(code::INVALID_PARTITIONS, format!("{n} partitions")))
            }
            (_, Err(e)) => Err(e),
            // An assignment names the new partitions' replicas: one list a partition added.
            (n, Ok(Some(lists))) => match added(broker, &t.name.0, n).await {
                Ok(more) if more != lists as i64 => Err(Refused::new(
                    code::INVALID_REPLICA_ASSIGNMENT,
                    format!(
                        "Increasing the number of partitions by {more} but {lists} assignments provided."
                    ),
                )),
                Ok(_) => broker.create_partitions(&t.name.0, n as u32, req.validate_only).await,
                Err(e) => Err(e),
            },
            (n, Ok(None)) => broker.create_partitions(&t.name.0, n as u32, req.validate_only).await,
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

pub(crate) async fn delete_records(
    req: DeleteRecordsRequest,
    client_id: &str,
    broker: &dyn Broker,
) -> DeleteRecordsResponse {
    let zone = crate::zone_of(client_id);
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let r = match p.offset {
                o if o < -1 => Err(Refused::new(code::OFFSET_OUT_OF_RANGE, format!("offset {o}"))),
                o => broker.delete_records(&t.name.0, p.partition_index, zone, o).await,
            };
            let mut out = DeleteRecordsPartitionResult::default()
                .with_partition_index(p.partition_index)
                .with_low_watermark(-1);
            match r {
                Ok(low) => out.low_watermark = low,
                Err(e) => out.error_code = e.code,
            }
            partitions.push(out);
        }
        topics.push(
            DeleteRecordsTopicResult::default().with_name(t.name).with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}

/// DescribeCluster: the live writers as brokers. There are no controllers to describe
/// (UNSUPPORTED_ENDPOINT_TYPE, as a broker answers); the cluster's authorized operations are
/// the handler's, when asked.
pub(crate) async fn describe_cluster(
    req: DescribeClusterRequest,
    version: i16,
    broker: &dyn Broker,
) -> DescribeClusterResponse {
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(broker.cluster_id()))
        .with_cluster_authorized_operations(i32::MIN)
        .with_controller_id(BrokerId(-1));
    if version >= 1 {
        resp.endpoint_type = req.endpoint_type;
        if req.endpoint_type != BROKERS_ENDPOINT {
            resp.error_code = UNSUPPORTED_ENDPOINT_TYPE;
            resp.error_message = Some(StrBytes::from_static_str("only brokers are described"));
            return resp;
        }
    }
    match broker.brokers().await {
        Ok(brokers) => {
            resp.controller_id = BrokerId(crate::controller(&brokers));
            resp.brokers = brokers
                .into_iter()
                .map(|b| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(b.node_id))
                        .with_host(StrBytes::from_string(b.host))
                        .with_port(b.port)
                        .with_rack(b.rack.map(StrBytes::from_string))
                })
                .collect();
        }
        Err(e) => {
            resp.error_code = code::UNKNOWN_SERVER_ERROR;
            resp.error_message = Some(StrBytes::from_string(e.message));
        }
    }
    resp
}

/// DescribeCluster's endpoint types: brokers (1), controllers (2).
const BROKERS_ENDPOINT: i8 = 1;
/// Kafka's UNSUPPORTED_ENDPOINT_TYPE.
const UNSUPPORTED_ENDPOINT_TYPE: i16 =
    kafka_protocol::ResponseError::UnsupportedEndpointType.code();

/// CreateTopics: CREATE on each topic (or the cluster); refused topics answered apart.
#[derive(Debug)]
pub struct CreateTopics;

impl Handler for CreateTopics {
    const KEY: ApiKey = ApiKey::CreateTopics;
    const VERSIONS: (i16, i16) = (2, 7);
    type Request = CreateTopicsRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::create_topics(ctx.access(), &mut req);
        ctx.later(|ctx| async move {
            let mut resp =
                create_topics(req, ctx.reply.version, ctx.broker.as_ref(), &ctx.cfg).await;
            resp.topics.extend(refused);
            resp
        })
    }
}

/// DeleteTopics: DELETE on each topic.
#[derive(Debug)]
pub struct DeleteTopics;

impl Handler for DeleteTopics {
    const KEY: ApiKey = ApiKey::DeleteTopics;
    const VERSIONS: (i16, i16) = (1, 6);
    type Request = DeleteTopicsRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::delete_topics(ctx.access(), &mut req);
        ctx.later(|ctx| async move {
            let mut resp = delete_topics(req, ctx.reply.version, ctx.broker.as_ref()).await;
            resp.responses.extend(refused);
            resp
        })
    }
}

/// CreatePartitions: ALTER on each topic.
#[derive(Debug)]
pub struct CreatePartitions;

impl Handler for CreatePartitions {
    const KEY: ApiKey = ApiKey::CreatePartitions;
    const VERSIONS: (i16, i16) = (0, 3);
    type Request = CreatePartitionsRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::create_partitions(ctx.access(), &mut req);
        ctx.later(|ctx| async move {
            let mut resp = create_partitions(req, ctx.broker.as_ref()).await;
            resp.results.extend(refused);
            resp
        })
    }
}

/// DeleteRecords (a soft trim): DELETE on each topic.
#[derive(Debug)]
pub struct DeleteRecords;

impl Handler for DeleteRecords {
    const KEY: ApiKey = ApiKey::DeleteRecords;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = DeleteRecordsRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::delete_records(ctx.access(), &mut req);
        ctx.later(|ctx| async move {
            let mut resp = delete_records(req, &ctx.client_id, ctx.broker.as_ref()).await;
            resp.topics.extend(refused);
            resp
        })
    }
}

/// DescribeCluster: DESCRIBE on the cluster.
#[derive(Debug)]
pub struct DescribeCluster;

impl Handler for DescribeCluster {
    const KEY: ApiKey = ApiKey::DescribeCluster;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = DescribeClusterRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        if !crate::authz::cluster(access, Operation::Describe) {
            let resp = DescribeClusterResponse::default()
                .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED)
                .with_error_message(crate::authz::refused_message(access, "describe the cluster"));
            return ctx.now(&resp);
        }
        let operations = req.include_cluster_authorized_operations;
        ctx.later(move |ctx| async move {
            let mut resp = describe_cluster(req, ctx.reply.version, ctx.broker.as_ref()).await;
            if operations && resp.error_code == 0 {
                let cluster = security::acl::ResourceType::Cluster;
                resp.cluster_authorized_operations =
                    ctx.access().authorized_operations(cluster, security::acl::CLUSTER);
            }
            resp
        })
    }
}

/// What this area's APIs need of the connection's principal (the helpers are
/// [`crate::authz`]'s).
mod authorize {
    use kafka_protocol::messages::*;

    use security::acl::Operation;

    use crate::authz::{Access, TOPIC_AUTHORIZATION_FAILED, split};

    pub fn create_topics(
        a: Access<'_>,
        req: &mut CreateTopicsRequest,
    ) -> Vec<create_topics_response::CreatableTopicResult> {
        if !a.checks() {
            return Vec::new();
        }
        split(&mut req.topics, |t| a.create(&t.name))
            .into_iter()
            .map(|t| {
                create_topics_response::CreatableTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
            })
            .collect()
    }

    pub fn delete_topics(
        a: Access<'_>,
        req: &mut DeleteTopicsRequest,
    ) -> Vec<delete_topics_response::DeletableTopicResult> {
        use delete_topics_response::DeletableTopicResult;
        if !a.checks() {
            return Vec::new();
        }
        let refused = |name: TopicName| {
            DeletableTopicResult::default()
                .with_name(Some(name))
                .with_error_code(TOPIC_AUTHORIZATION_FAILED)
        };
        let mut out: Vec<DeletableTopicResult> =
            split(&mut req.topic_names, |n| a.topic(Operation::Delete, n))
                .into_iter()
                .map(refused)
                .collect();
        // v6: topics by name or by id. One named only by its id is allowed only to a principal
        // that may delete every stream (`*`: no stream is named so, so only a wildcard grants it).
        out.extend(
            split(&mut req.topics, |t| match &t.name {
                Some(n) => a.topic(Operation::Delete, n),
                None => a.topic(Operation::Delete, "*"),
            })
            .into_iter()
            .map(|t| match t.name {
                Some(n) => refused(n),
                None => DeletableTopicResult::default()
                    .with_topic_id(t.topic_id)
                    .with_error_code(TOPIC_AUTHORIZATION_FAILED),
            }),
        );
        out
    }

    pub fn create_partitions(
        a: Access<'_>,
        req: &mut CreatePartitionsRequest,
    ) -> Vec<create_partitions_response::CreatePartitionsTopicResult> {
        if !a.checks() {
            return Vec::new();
        }
        split(&mut req.topics, |t| a.topic(Operation::Alter, &t.name))
            .into_iter()
            .map(|t| {
                create_partitions_response::CreatePartitionsTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(TOPIC_AUTHORIZATION_FAILED)
            })
            .collect()
    }

    pub fn delete_records(
        a: Access<'_>,
        req: &mut DeleteRecordsRequest,
    ) -> Vec<delete_records_response::DeleteRecordsTopicResult> {
        use delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
        if !a.checks() {
            return Vec::new();
        }
        split(&mut req.topics, |t| a.topic(Operation::Delete, &t.name))
            .into_iter()
            .map(|t| {
                DeleteRecordsTopicResult::default().with_name(t.name).with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            DeleteRecordsPartitionResult::default()
                                .with_partition_index(p.partition_index)
                                .with_low_watermark(-1)
                                .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                        })
                        .collect(),
                )
            })
            .collect()
    }
}
