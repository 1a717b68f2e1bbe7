//! Metadata: brokers (the live writers, and readers as followers), topics and their
//! partitions' leaders for the client's zone, topic ids; auto-creation when the broker allows
//! it and the principal may CREATE; only the topics the principal may DESCRIBE are shown.

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::api::{Admission, Ctx, Handler};
use crate::session::Session;
use crate::{Broker, KafkaConfig, TopicInfo, code};

/// Metadata.
#[derive(Debug)]
pub struct Metadata;

impl Handler for Metadata {
    const KEY: ApiKey = ApiKey::Metadata;
    const VERSIONS: (i16, i16) = (0, 12);
    type Request = MetadataRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        ctx.later(|ctx| async move {
            let (broker, cfg) = (ctx.broker.as_ref(), &ctx.cfg);
            metadata(req, ctx.reply.version, &ctx.client_id, broker, cfg, ctx.access()).await
        })
    }
}

async fn metadata(
    req: MetadataRequest,
    version: i16,
    client_id: &str,
    broker: &dyn Broker,
    cfg: &KafkaConfig,
    access: crate::authz::Access<'_>,
) -> MetadataResponse {
    let cluster_id = broker.cluster_id();
    let mut resp =
        MetadataResponse::default().with_cluster_id(Some(StrBytes::from_string(cluster_id)));
    let brokers = match broker.brokers().await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "Kafka Metadata: brokers unreadable");
            Vec::new()
        }
    };
    resp.controller_id = BrokerId(crate::controller(&brokers));
    resp.brokers = brokers
        .into_iter()
        .map(|b| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.node_id))
                .with_host(StrBytes::from_string(b.host))
                .with_port(b.port)
                .with_rack(b.rack.map(StrBytes::from_string))
        })
        .collect();
    // v0: an empty list asks for every topic; v1+: a null list does, an empty one for none.
    let asked: Option<Vec<MetadataAsk>> = match req.topics {
        None => None,
        Some(t) if t.is_empty() && version == 0 => None,
        Some(t) => Some(
            t.into_iter()
                .map(|t| match t.name {
                    Some(n) => MetadataAsk::Name(n.0.to_string()),
                    None => MetadataAsk::Id(t.topic_id),
                })
                .collect(),
        ),
    };
    // Versions before 4 carry no flag: the broker's setting decides, as in Kafka.
    let allow = version < 4 || req.allow_auto_topic_creation;
    let create = (cfg.auto_create_topics && allow).then_some(cfg.default_partitions);
    let zone = crate::zone_of(client_id);
    let asked_all = asked.is_none();
    let topics = match &asked {
        None => broker.topics(None, zone, None).await,
        Some(asks) => {
            let names: Vec<String> = asks
                .iter()
                .filter_map(|a| match a {
                    MetadataAsk::Name(n) => Some(n.clone()),
                    MetadataAsk::Id(_) => None,
                })
                .collect();
            let by_id = asks.iter().any(|a| matches!(a, MetadataAsk::Id(_)));
            match (names.is_empty(), by_id) {
                (true, false) => Ok(Vec::new()),
                // Topics named by id are looked up among all of them.
                (_, true) => broker.topics(None, zone, None).await.map(|all| {
                    let mut got: Vec<TopicInfo> = Vec::new();
                    for a in asks {
                        match a {
                            MetadataAsk::Name(n) => {
                                got.push(all.iter().find(|t| &t.name == n).cloned().unwrap_or_else(
                                    || TopicInfo::failed(n, code::UNKNOWN_TOPIC_OR_PARTITION),
                                ))
                            }
                            MetadataAsk::Id(id) => got.push(
                                all.iter()
                                    .find(|t| &t.id == id)
                                    .cloned()
                                    .unwrap_or_else(|| TopicInfo::failed("", UNKNOWN_TOPIC_ID)),
                            ),
                        }
                    }
                    got
                }),
                (false, false) => {
                    let create = create.filter(|_| authorize::may_auto_create(access, &names));
                    broker.topics(Some(&names), zone, create).await
                }
            }
        }
    };
    let topics = match topics {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "Kafka Metadata: topics unreadable");
            let names = asked.unwrap_or_default();
            names
                .iter()
                .map(|a| match a {
                    MetadataAsk::Name(n) => TopicInfo::failed(n, code::UNKNOWN_SERVER_ERROR),
                    MetadataAsk::Id(_) => TopicInfo::failed("", code::UNKNOWN_SERVER_ERROR),
                })
                .collect()
        }
    };
    resp.topics = topics.into_iter().map(|t| topic(t, version)).collect();
    authorize::metadata(access, &mut resp, asked_all);
    // KIP-430 (v8–v10): what the principal may do with each topic, and the cluster.
    resp.cluster_authorized_operations = i32::MIN;
    if (8..=10).contains(&version) && req.include_cluster_authorized_operations {
        let cluster = security::acl::ResourceType::Cluster;
        resp.cluster_authorized_operations =
            access.authorized_operations(cluster, security::acl::CLUSTER);
    }
    for t in &mut resp.topics {
        t.topic_authorized_operations = match (&t.name, req.include_topic_authorized_operations) {
            (Some(n), true) if version >= 8 && t.error_code == 0 => {
                access.authorized_operations(security::acl::ResourceType::Stream, n)
            }
            _ => i32::MIN,
        };
    }
    resp
}

/// Kafka's UNKNOWN_TOPIC_ID.
const UNKNOWN_TOPIC_ID: i16 = kafka_protocol::ResponseError::UnknownTopicId.code();

enum MetadataAsk {
    Name(String),
    Id(uuid::Uuid),
}

fn topic(t: TopicInfo, version: i16) -> MetadataResponseTopic {
    let partitions = t
        .partitions
        .into_iter()
        .map(|p| {
            let (error, leader) = match p.leader {
                Some(id) => (code::NONE, id),
                None => (code::LEADER_NOT_AVAILABLE, -1),
            };
            // The leader, then the readers that serve its reads (as in sync as the leader: they
            // read the same storage).
            let mut replicas = if leader >= 0 { vec![BrokerId(leader)] } else { Vec::new() };
            replicas.extend(p.followers.iter().filter(|f| **f != leader).map(|f| BrokerId(*f)));
            MetadataResponsePartition::default()
                .with_error_code(error)
                .with_partition_index(p.index)
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(-1)
                .with_replica_nodes(replicas.clone())
                .with_isr_nodes(replicas)
        })
        .collect();
    let mut out = MetadataResponseTopic::default()
        .with_error_code(t.error)
        .with_name(Some(TopicName(StrBytes::from_string(t.name))))
        .with_is_internal(t.internal)
        .with_partitions(partitions);
    if version >= 10 {
        out.topic_id = t.id;
    }
    out
}

/// What this area's APIs need of the connection's principal (the helpers are
/// [`crate::authz`]'s).
mod authorize {
    use kafka_protocol::messages::*;

    use security::acl::Operation;

    use crate::authz::{Access, TOPIC_AUTHORIZATION_FAILED};

    /// Metadata: topics asked by name need DESCRIBE (refused: TOPIC_AUTHORIZATION_FAILED); a
    /// listing of every topic shows those the principal may describe. Auto-creation needs CREATE.
    pub fn metadata(a: Access<'_>, resp: &mut MetadataResponse, asked_all: bool) {
        if !a.checks() {
            return;
        }
        if asked_all {
            resp.topics
                .retain(|t| t.name.as_ref().is_some_and(|n| a.topic(Operation::Describe, n)));
            return;
        }
        for t in &mut resp.topics {
            if let Some(n) = &t.name
                && !a.topic(Operation::Describe, n)
            {
                t.error_code = TOPIC_AUTHORIZATION_FAILED;
                t.partitions.clear();
                t.topic_id = Default::default();
            }
        }
    }

    /// Whether a Metadata request may create the topics it names that do not exist: CREATE (on
    /// the cluster or each topic) and DESCRIBE on every one.
    pub fn may_auto_create(a: Access<'_>, names: &[String]) -> bool {
        !a.checks() || names.iter().all(|n| a.create(n) && a.topic(Operation::Describe, n))
    }
}
