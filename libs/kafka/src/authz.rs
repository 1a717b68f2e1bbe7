//! The Kafka front end's one place of authorization (docs/security.md): what each request
//! needs of the connection's principal, as Kafka's own broker asks it. A request naming
//! several topics or groups is split: those not allowed are taken out before the handler runs
//! and answered with TOPIC_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED, the rest served;
//! a request about one group or the cluster is refused whole. Kafka's operations map to
//! Lakelog's: WRITE and IDEMPOTENT_WRITE → produce, READ → consume, DESCRIBE and
//! DESCRIBE_CONFIGS → describe, ALTER and ALTER_CONFIGS → alter, CREATE, DELETE, and
//! CLUSTER_ACTION → admin.

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use security::acl::{CLUSTER, Operation, ResourceType};
use security::{Authorizer, Principal};

pub const TOPIC_AUTHORIZATION_FAILED: i16 =
    kafka_protocol::ResponseError::TopicAuthorizationFailed.code();
pub const GROUP_AUTHORIZATION_FAILED: i16 =
    kafka_protocol::ResponseError::GroupAuthorizationFailed.code();
pub const CLUSTER_AUTHORIZATION_FAILED: i16 =
    kafka_protocol::ResponseError::ClusterAuthorizationFailed.code();

/// Kafka's config resource types.
const TOPIC_RESOURCE: i8 = 2;

/// A principal's rights on this connection.
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    pub authz: &'a Authorizer,
    pub principal: &'a Principal,
    /// The client's address, as Kafka shows it (`/<ip>`): said with a refusal.
    pub peer: &'a str,
}

impl Access<'_> {
    /// Whether `op` on `kind` `name` is allowed; a refusal is said in the audit log.
    fn allows(&self, op: Operation, kind: ResourceType, name: &str) -> bool {
        let allowed = self.authz.allows(self.principal, op, kind, name);
        if !allowed {
            security::audit::denied(
                self.principal,
                self.peer,
                op.name(),
                &format!("{kind}:{name}"),
            );
        }
        allowed
    }

    pub fn topic(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Stream, name)
    }

    pub fn group(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Group, name)
    }

    pub fn cluster(&self, op: Operation) -> bool {
        self.allows(op, ResourceType::Cluster, CLUSTER)
    }

    /// CREATE on the cluster, or on the topic (as Kafka checks CreateTopics).
    pub fn create(&self, topic: &str) -> bool {
        self.cluster(Operation::Create) || self.topic(Operation::Create, topic)
    }

    /// Whether anything is checked at all (authorization on, not a super user).
    fn checks(&self) -> bool {
        self.authz.enabled() && !self.authz.is_super_user(self.principal)
    }
}

/// Takes out of `items` those `allowed` refuses: returned, in order.
fn split<T>(items: &mut Vec<T>, allowed: impl Fn(&T) -> bool) -> Vec<T> {
    let (keep, out): (Vec<T>, Vec<T>) = std::mem::take(items).into_iter().partition(|i| allowed(i));
    *items = keep;
    out
}

pub fn produce(
    a: Access<'_>,
    req: &mut ProduceRequest,
) -> Vec<produce_response::TopicProduceResponse> {
    use produce_response::{PartitionProduceResponse, TopicProduceResponse};
    if !a.checks() {
        return Vec::new();
    }
    split(&mut req.topic_data, |t| a.topic(Operation::Produce, &t.name))
        .into_iter()
        .map(|t| {
            TopicProduceResponse::default().with_name(t.name).with_partition_responses(
                t.partition_data
                    .iter()
                    .map(|p| {
                        PartitionProduceResponse::default()
                            .with_index(p.index)
                            .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                            .with_base_offset(-1)
                    })
                    .collect(),
            )
        })
        .collect()
}

pub fn fetch(a: Access<'_>, req: &mut FetchRequest) -> Vec<fetch_response::FetchableTopicResponse> {
    use fetch_response::{FetchableTopicResponse, PartitionData};
    if !a.checks() {
        return Vec::new();
    }
    split(&mut req.topics, |t| a.topic(Operation::Consume, &t.topic))
        .into_iter()
        .map(|t| {
            FetchableTopicResponse::default().with_topic(t.topic).with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        PartitionData::default()
                            .with_partition_index(p.partition)
                            .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                            .with_high_watermark(-1)
                            .with_last_stable_offset(-1)
                            .with_log_start_offset(-1)
                    })
                    .collect(),
            )
        })
        .collect()
}

pub fn list_offsets(
    a: Access<'_>,
    req: &mut ListOffsetsRequest,
) -> Vec<list_offsets_response::ListOffsetsTopicResponse> {
    use list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
    if !a.checks() {
        return Vec::new();
    }
    split(&mut req.topics, |t| a.topic(Operation::Describe, &t.name))
        .into_iter()
        .map(|t| {
            ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        ListOffsetsPartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                            .with_timestamp(-1)
                            .with_offset(-1)
                    })
                    .collect(),
            )
        })
        .collect()
}

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

/// InitProducerId: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (as Kafka 3).
pub fn init_producer_id(a: Access<'_>) -> bool {
    !a.checks()
        || a.cluster(Operation::Produce)
        || a.authz.may_anywhere(a.principal, Operation::Produce, ResourceType::Stream)
}

/// Whether the whole request about `group` may go on (`op` on it).
pub fn group(a: Access<'_>, op: Operation, group: &str) -> bool {
    !a.checks() || a.group(op, group)
}

/// Whether `op` on the cluster is allowed.
pub fn cluster(a: Access<'_>, op: Operation) -> bool {
    !a.checks() || a.cluster(op)
}

/// FindCoordinator v4+: the keys not allowed (DESCRIBE on the group), answered refused.
pub fn find_coordinator(
    a: Access<'_>,
    req: &mut FindCoordinatorRequest,
) -> Vec<find_coordinator_response::Coordinator> {
    if !a.checks() {
        return Vec::new();
    }
    split(&mut req.coordinator_keys, |k| a.group(Operation::Describe, k))
        .into_iter()
        .map(|k| {
            find_coordinator_response::Coordinator::default()
                .with_key(k)
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(GROUP_AUTHORIZATION_FAILED)
        })
        .collect()
}

/// OffsetCommit: the group's READ (refused whole by the caller) and each topic's READ.
pub fn offset_commit(
    a: Access<'_>,
    req: &mut OffsetCommitRequest,
) -> Vec<offset_commit_response::OffsetCommitResponseTopic> {
    use offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
    let refuse_all = !group(a, Operation::Consume, &req.group_id);
    if !a.checks() {
        return Vec::new();
    }
    let code =
        |whole: bool| if whole { GROUP_AUTHORIZATION_FAILED } else { TOPIC_AUTHORIZATION_FAILED };
    split(&mut req.topics, |t| !refuse_all && a.topic(Operation::Consume, &t.name))
        .into_iter()
        .map(|t| {
            OffsetCommitResponseTopic::default().with_name(t.name).with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code(refuse_all))
                    })
                    .collect(),
            )
        })
        .collect()
}

/// OffsetDelete: DELETE on the group (refused whole by the caller), READ on each topic.
pub fn offset_delete(
    a: Access<'_>,
    req: &mut OffsetDeleteRequest,
) -> Vec<offset_delete_response::OffsetDeleteResponseTopic> {
    use offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
    if !a.checks() {
        return Vec::new();
    }
    split(&mut req.topics, |t| a.topic(Operation::Consume, &t.name))
        .into_iter()
        .map(|t| {
            OffsetDeleteResponseTopic::default().with_name(t.name).with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        OffsetDeleteResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                    })
                    .collect(),
            )
        })
        .collect()
}

/// DescribeGroups: each group's DESCRIBE.
pub fn describe_groups(
    a: Access<'_>,
    req: &mut DescribeGroupsRequest,
) -> Vec<describe_groups_response::DescribedGroup> {
    if !a.checks() {
        return Vec::new();
    }
    split(&mut req.groups, |g| a.group(Operation::Describe, g))
        .into_iter()
        .map(|g| {
            describe_groups_response::DescribedGroup::default()
                .with_group_id(g)
                .with_error_code(GROUP_AUTHORIZATION_FAILED)
        })
        .collect()
}

/// ConsumerGroupHeartbeat: DESCRIBE on every topic the member names (a regex's matches are
/// filtered where they are resolved).
pub fn consumer_subscription(a: Access<'_>, req: &ConsumerGroupHeartbeatRequest) -> bool {
    !a.checks()
        || req.subscribed_topic_names.iter().flatten().all(|t| a.topic(Operation::Describe, t))
}

/// ConsumerGroupDescribe, answered: a group whose members subscribe to, hold or are to hold a
/// topic the caller may not describe is answered TOPIC_AUTHORIZATION_FAILED with no members,
/// as Kafka answers, so no topic's name or layout reaches a principal that may not see it.
pub fn consumer_group_described(a: Access<'_>, resp: &mut ConsumerGroupDescribeResponse) {
    if !a.checks() {
        return;
    }
    for g in &mut resp.groups {
        let hidden = g.members.iter().any(|m| {
            let held = [&m.assignment, &m.target_assignment]
                .into_iter()
                .flat_map(|x| x.topic_partitions.iter().map(|t| &t.topic_name));
            m.subscribed_topic_names.iter().chain(held).any(|t| !a.topic(Operation::Describe, t))
        });
        if hidden {
            g.error_code = TOPIC_AUTHORIZATION_FAILED;
            g.error_message = Some(StrBytes::from_static_str(
                "The group has described topic(s) that the client is not authorized to describe.",
            ));
            g.members.clear();
            g.assignor_name = StrBytes::default();
        }
    }
}

pub fn consumer_group_describe(
    a: Access<'_>,
    req: &mut ConsumerGroupDescribeRequest,
) -> Vec<consumer_group_describe_response::DescribedGroup> {
    if !a.checks() {
        return Vec::new();
    }
    split(&mut req.group_ids, |g| a.group(Operation::Describe, g))
        .into_iter()
        .map(|g| {
            consumer_group_describe_response::DescribedGroup::default()
                .with_group_id(g)
                .with_error_code(GROUP_AUTHORIZATION_FAILED)
        })
        .collect()
}

/// DeleteGroups: each group's DELETE.
pub fn delete_groups(
    a: Access<'_>,
    req: &mut DeleteGroupsRequest,
) -> Vec<delete_groups_response::DeletableGroupResult> {
    if !a.checks() {
        return Vec::new();
    }
    split(&mut req.groups_names, |g| a.group(Operation::Delete, g))
        .into_iter()
        .map(|g| {
            delete_groups_response::DeletableGroupResult::default()
                .with_group_id(g)
                .with_error_code(GROUP_AUTHORIZATION_FAILED)
        })
        .collect()
}

/// ListGroups: every group with DESCRIBE on the cluster, else those the principal may
/// describe.
pub fn list_groups(a: Access<'_>, resp: &mut ListGroupsResponse) {
    if a.checks() && !a.cluster(Operation::Describe) {
        resp.groups.retain(|g| a.group(Operation::Describe, &g.group_id));
    }
}

/// OffsetFetch: the groups' DESCRIBE (v8+: per group; before: the one group, refused whole
/// by the caller) and the topics' DESCRIBE: a topic not allowed is answered refused, and a
/// fetch of every topic leaves it out.
pub fn offset_fetch(a: Access<'_>, resp: &mut OffsetFetchResponse) {
    if !a.checks() {
        return;
    }
    for t in &mut resp.topics {
        if !a.topic(Operation::Describe, &t.name) {
            for p in &mut t.partitions {
                (p.committed_offset, p.metadata, p.error_code) =
                    (-1, None, TOPIC_AUTHORIZATION_FAILED);
            }
        }
    }
    for g in &mut resp.groups {
        if !a.group(Operation::Describe, &g.group_id) {
            g.topics.clear();
            g.error_code = GROUP_AUTHORIZATION_FAILED;
            continue;
        }
        for t in &mut g.topics {
            if !a.topic(Operation::Describe, &t.name) {
                for p in &mut t.partitions {
                    (p.committed_offset, p.metadata, p.error_code) =
                        (-1, None, TOPIC_AUTHORIZATION_FAILED);
                }
            }
        }
    }
}

/// Metadata: topics asked by name need DESCRIBE (refused: TOPIC_AUTHORIZATION_FAILED); a
/// listing of every topic shows those the principal may describe. Auto-creation needs CREATE.
pub fn metadata(a: Access<'_>, resp: &mut MetadataResponse, asked_all: bool) {
    if !a.checks() {
        return;
    }
    if asked_all {
        resp.topics.retain(|t| t.name.as_ref().is_some_and(|n| a.topic(Operation::Describe, n)));
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

/// A message for a refused request.
pub fn refused_message(a: Access<'_>, what: &str) -> Option<StrBytes> {
    Some(StrBytes::from_string(format!("{} may not {what}", a.principal)))
}
