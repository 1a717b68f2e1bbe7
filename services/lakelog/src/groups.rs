//! `lakelog group list|describe|reset|delete`: Kafka consumer groups, asked of the Kafka port
//! (`--kafka`) as any Kafka admin tool would — group membership lives in the coordinator's
//! memory — with the partitions' ends read over gRPC (`--endpoint`), through
//! [`crate::kafka_client`].

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use bytes::{Buf, Bytes};
use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerProtocolAssignment, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, GroupId, ListGroupsRequest, ListGroupsResponse, MetadataRequest,
    MetadataResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName,
};
use kafka_protocol::messages::{
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse,
};
use kafka_protocol::protocol::Decodable;

use crate::kafka_client::{Conn, coordinator, error_name, s};

pub async fn list(bootstrap: &str) -> anyhow::Result<()> {
    let mut c = Conn::connect(bootstrap).await?;
    let md: MetadataResponse = c
        .call(ApiKey::Metadata, 1, &MetadataRequest::default().with_topics(Some(Vec::new())))
        .await?;
    // Each coordinator lists the groups it holds.
    let mut groups: BTreeMap<String, (String, String)> = BTreeMap::new();
    for b in md.brokers {
        let mut bc = Conn::connect(&format!("{}:{}", b.host, b.port)).await?;
        let r: ListGroupsResponse =
            bc.call(ApiKey::ListGroups, 4, &ListGroupsRequest::default()).await?;
        if r.error_code != 0 {
            bail!("{}: listing the groups of broker {}", error_name(r.error_code), b.node_id.0);
        }
        for g in r.groups {
            groups.insert(
                g.group_id.0.to_string(),
                (g.group_state.to_string(), g.protocol_type.to_string()),
            );
        }
    }
    let mut out = std::io::stdout().lock();
    for (name, (state, ptype)) in groups {
        std::io::Write::write_all(&mut out, format!("{name}\t{state}\t{ptype}\n").as_bytes())?;
    }
    Ok(())
}

/// The group's committed offsets: (topic, partition) → offset.
async fn committed(c: &mut Conn, group: &str) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let r: OffsetFetchResponse = c
        .call(
            ApiKey::OffsetFetch,
            7,
            &OffsetFetchRequest::default().with_group_id(GroupId(s(group))).with_topics(None),
        )
        .await?;
    if r.error_code != 0 {
        bail!("{}: offsets of group {group}", error_name(r.error_code));
    }
    let mut out = BTreeMap::new();
    for t in r.topics {
        for p in t.partitions {
            if p.committed_offset >= 0 {
                out.insert((t.name.0.to_string(), p.partition_index), p.committed_offset);
            }
        }
    }
    Ok(out)
}

/// A group as `describe` and `reset` see it.
struct Group {
    state: String,
    /// `type/protocol` (classic) or `consumer/assignor` (KIP-848).
    protocol: Option<String>,
    /// Member id, client id, partitions as `topic:p,p topic:p`.
    members: Vec<(String, String, String)>,
}

/// The group's state and members: ConsumerGroupDescribe for a KIP-848 group first, then
/// DescribeGroups, as Kafka's admin client does.
async fn describe_raw(c: &mut Conn, group: &str) -> anyhow::Result<Group> {
    let r: ConsumerGroupDescribeResponse = c
        .call(
            ApiKey::ConsumerGroupDescribe,
            0,
            &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(group))]),
        )
        .await?;
    let g = r.groups.into_iter().next().context("INTERNAL: ConsumerGroupDescribe answered none")?;
    match g.error_code {
        0 => {
            let members = g
                .members
                .iter()
                .map(|m| {
                    let parts: Vec<String> = m
                        .assignment
                        .topic_partitions
                        .iter()
                        .map(|t| {
                            let ps: Vec<String> =
                                t.partitions.iter().map(|p| p.to_string()).collect();
                            format!("{}:{}", t.topic_name.0, ps.join(","))
                        })
                        .collect();
                    (m.member_id.to_string(), m.client_id.to_string(), parts.join(" "))
                })
                .collect();
            return Ok(Group {
                state: g.group_state.to_string(),
                protocol: Some(format!("consumer/{}", g.assignor_name)),
                members,
            });
        }
        // Not a consumer group: a classic one, or one with committed offsets only.
        GROUP_ID_NOT_FOUND => {}
        code => bail!("{}: group {group}", error_name(code)),
    }
    let r: DescribeGroupsResponse = c
        .call(
            ApiKey::DescribeGroups,
            4,
            &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]),
        )
        .await?;
    let g = r.groups.into_iter().next().context("INTERNAL: DescribeGroups answered no group")?;
    if g.error_code != 0 {
        bail!("{}: group {group}", error_name(g.error_code));
    }
    Ok(Group {
        state: g.group_state.to_string(),
        protocol: (!g.protocol_type.is_empty())
            .then(|| format!("{}/{}", g.protocol_type, g.protocol_data)),
        members: g
            .members
            .iter()
            .map(|m| {
                (m.member_id.to_string(), m.client_id.to_string(), assignment(&m.member_assignment))
            })
            .collect(),
    })
}

/// Kafka's GROUP_ID_NOT_FOUND.
const GROUP_ID_NOT_FOUND: i16 = 69;

/// A member's partitions from its consumer-protocol assignment: `topic:p,p topic:p`.
fn assignment(bytes: &Bytes) -> String {
    let mut b = bytes.clone();
    if b.remaining() < 2 {
        return String::new();
    }
    let version = b.get_i16();
    let Ok(a) = ConsumerProtocolAssignment::decode(&mut b, version.clamp(0, 3)) else {
        return "(not a consumer assignment)".to_owned();
    };
    a.assigned_partitions
        .iter()
        .map(|t| {
            let ps: Vec<String> = t.partitions.iter().map(|p| p.to_string()).collect();
            format!("{}:{}", t.topic.0, ps.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub async fn describe(
    bootstrap: &str,
    catalog: &client::CatalogClient,
    logs: &client::LogClient,
    group: &str,
) -> anyhow::Result<()> {
    let mut c = coordinator(bootstrap, group).await?;
    if let Some(out) = describe_share(&mut c, group).await? {
        std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes())?;
        return Ok(());
    }
    let g = describe_raw(&mut c, group).await?;
    let offsets = committed(&mut c, group).await?;
    let mut out = String::new();
    out.push_str(&format!("group:    {group}\nstate:    {}\n", g.state));
    if let Some(p) = &g.protocol {
        out.push_str(&format!("protocol: {p}\n"));
    }
    out.push_str(&format!("members:  {}\n", g.members.len()));
    for (id, client, partitions) in &g.members {
        out.push_str(&format!("  {id}  client {client}  {partitions}\n"));
    }
    out.push_str("TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\n");
    let mut ends: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for ((topic, partition), offset) in &offsets {
        if !ends.contains_key(topic) {
            let stream = catalog.get(topic).await?;
            let mut e = Vec::with_capacity(stream.partitions.len());
            for log in &stream.partitions {
                e.push(logs.info(*log).await?.next_offset);
            }
            ends.insert(topic.clone(), e);
        }
        let end = ends
            .get(topic)
            .and_then(|e| usize::try_from(*partition).ok().and_then(|p| e.get(p)))
            .copied();
        match end {
            Some(end) => out.push_str(&format!(
                "{topic}\t{partition}\t{offset}\t{end}\t{}\n",
                i64::try_from(end).unwrap_or(i64::MAX).saturating_sub(*offset).max(0)
            )),
            None => out.push_str(&format!("{topic}\t{partition}\t{offset}\t-\t-\n")),
        }
    }
    std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes())?;
    Ok(())
}

/// A share group's description (ShareGroupDescribe, then DescribeShareGroupOffsets): its
/// state and members, and each share-partition's start offset and lag; `None` if `group` is
/// not a share group.
async fn describe_share(c: &mut Conn, group: &str) -> anyhow::Result<Option<String>> {
    let r: ShareGroupDescribeResponse = c
        .call(
            ApiKey::ShareGroupDescribe,
            1,
            &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(group))]),
        )
        .await?;
    let g = r.groups.into_iter().next().context("INTERNAL: ShareGroupDescribe answered none")?;
    match g.error_code {
        0 => {}
        GROUP_ID_NOT_FOUND => return Ok(None),
        code => bail!("{}: group {group}", error_name(code)),
    }
    let mut out = format!(
        "group:    {group}\nstate:    {}\nprotocol: share/{}\nmembers:  {}\n",
        g.group_state,
        g.assignor_name,
        g.members.len()
    );
    for m in &g.members {
        let parts: Vec<String> = m
            .assignment
            .topic_partitions
            .iter()
            .map(|t| {
                let ps: Vec<String> = t.partitions.iter().map(|p| p.to_string()).collect();
                format!("{}:{}", t.topic_name.0, ps.join(","))
            })
            .collect();
        out.push_str(&format!("  {}  client {}  {}\n", m.member_id, m.client_id, parts.join(" ")));
    }
    let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(None),
    ]);
    let r: DescribeShareGroupOffsetsResponse =
        c.call(ApiKey::DescribeShareGroupOffsets, 1, &req).await?;
    let g =
        r.groups.into_iter().next().context("INTERNAL: DescribeShareGroupOffsets answered none")?;
    if g.error_code != 0 {
        bail!("{}: share offsets of group {group}", error_name(g.error_code));
    }
    out.push_str("TOPIC\tPARTITION\tSTART\tLAG\n");
    for t in g.topics {
        for p in t.partitions {
            out.push_str(&format!(
                "{}\t{}\t{}\t{}\n",
                t.topic_name.0, p.partition_index, p.start_offset, p.lag
            ));
        }
    }
    Ok(Some(out))
}

/// Where `reset` moves a group's offsets.
#[derive(Clone, Copy, Debug)]
pub enum ResetTo {
    Earliest,
    Latest,
    Offset(u64),
}

pub async fn reset(
    bootstrap: &str,
    catalog: &client::CatalogClient,
    logs: &client::LogClient,
    group: &str,
    topic: &str,
    to: ResetTo,
) -> anyhow::Result<()> {
    let mut c = coordinator(bootstrap, group).await?;
    let g = describe_raw(&mut c, group).await?;
    if !g.members.is_empty() {
        bail!(
            "FAILED_PRECONDITION: group {group} has {} active members; stop them first (offsets are reset only for an inactive group, as in Kafka)",
            g.members.len()
        );
    }
    let stream = catalog.get(topic).await?;
    let mut partitions = Vec::with_capacity(stream.partitions.len());
    for (p, log) in stream.partitions.iter().enumerate() {
        let info = logs.info(*log).await?;
        let target = match to {
            ResetTo::Earliest => info.first_offset,
            ResetTo::Latest => info.next_offset,
            // Outside a partition's range, its nearest end, as Kafka's tool does.
            ResetTo::Offset(o) => o.clamp(info.first_offset, info.next_offset),
        };
        partitions.push((p as i32, target));
    }
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default().with_name(TopicName(s(topic))).with_partitions(
                partitions
                    .iter()
                    .map(|(p, o)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(*p)
                            .with_committed_offset(*o as i64)
                            .with_committed_leader_epoch(-1)
                    })
                    .collect(),
            ),
        ]);
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &req).await?;
    let mut out = String::new();
    for t in &r.topics {
        for p in &t.partitions {
            if p.error_code != 0 {
                bail!(
                    "{}: committing partition {} of {topic}",
                    error_name(p.error_code),
                    p.partition_index
                );
            }
        }
    }
    for (p, o) in partitions {
        out.push_str(&format!("{topic}\t{p}\t{o}\n"));
    }
    std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes())?;
    Ok(())
}

pub async fn delete(bootstrap: &str, group: &str) -> anyhow::Result<()> {
    let mut c = coordinator(bootstrap, group).await?;
    let r: DeleteGroupsResponse = c
        .call(
            ApiKey::DeleteGroups,
            1,
            &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(group))]),
        )
        .await?;
    match r.results.first().map(|g| g.error_code) {
        Some(0) => Ok(()),
        Some(code) => bail!("{}: deleting group {group}", error_name(code)),
        None => bail!("INTERNAL: DeleteGroups answered nothing"),
    }
}
