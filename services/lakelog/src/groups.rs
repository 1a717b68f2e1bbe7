//! `lakelog group list|describe|reset|delete`: Kafka consumer groups, asked of the Kafka port
//! (`--kafka`) as any Kafka admin tool would — group membership lives in the coordinator's
//! memory — with the partitions' ends read over gRPC (`--endpoint`). A small Kafka client over
//! the same codec the front end uses; every response length is bounded before it is read.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ApiKey, ConsumerProtocolAssignment, DeleteGroupsRequest, DeleteGroupsResponse,
    DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    GroupId, ListGroupsRequest, ListGroupsResponse, MetadataRequest, MetadataResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest response this client reads.
const MAX_RESPONSE: usize = 64 << 20;

/// One connection to a broker.
struct Conn {
    stream: TcpStream,
    addr: String,
    next: i32,
}

impl Conn {
    async fn connect(addr: &str) -> anyhow::Result<Conn> {
        let stream =
            tokio::time::timeout(std::time::Duration::from_secs(10), TcpStream::connect(addr))
                .await
                .map_err(|_| {
                    anyhow::anyhow!("UNAVAILABLE: no answer from the Kafka port at {addr}")
                })?
                .with_context(|| {
                    format!("UNAVAILABLE: cannot reach the Kafka port at {addr} (--kafka)")
                })?;
        Ok(Conn { stream, addr: addr.to_owned(), next: 1 })
    }

    async fn call<Q: Encodable, R: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Q,
    ) -> anyhow::Result<R> {
        let id = self.next;
        self.next += 1;
        let mut b = BytesMut::new();
        b.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_static_str("lakelog-cli")))
            .encode(&mut b, api.request_header_version(version))?;
        req.encode(&mut b, version)?;
        let size = i32::try_from(b.len() - 4)?;
        b[..4].copy_from_slice(&size.to_be_bytes());
        let io = async {
            self.stream.write_all(&b).await?;
            let n = self.stream.read_i32().await?;
            let n = usize::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_RESPONSE)
                .ok_or_else(|| std::io::Error::other(format!("a response claiming {n} bytes")))?;
            let mut body = vec![0; n];
            self.stream.read_exact(&mut body).await?;
            Ok::<_, std::io::Error>(Bytes::from(body))
        };
        let mut body = tokio::time::timeout(std::time::Duration::from_secs(30), io)
            .await
            .map_err(|_| {
                anyhow::anyhow!("UNAVAILABLE: {api:?} to {} not answered in 30 s", self.addr)
            })?
            .with_context(|| format!("UNAVAILABLE: {api:?} to {}", self.addr))?;
        let header = ResponseHeader::decode(&mut body, api.response_header_version(version))?;
        if header.correlation_id != id {
            bail!(
                "INTERNAL: {} answered correlation id {}, not {id}",
                self.addr,
                header.correlation_id
            );
        }
        let r = R::decode(&mut body, version)?;
        Ok(r)
    }
}

/// A Kafka error code as a line's prefix.
fn error_name(code: i16) -> String {
    use kafka_protocol::error::ParseResponseErrorCode;
    match code.err() {
        Some(e) => format!("{e:?}"),
        None => format!("Kafka error {code}"),
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// A connection to the coordinator of `group`.
async fn coordinator(bootstrap: &str, group: &str) -> anyhow::Result<Conn> {
    let mut c = Conn::connect(bootstrap).await?;
    let r: FindCoordinatorResponse = c
        .call(ApiKey::FindCoordinator, 3, &FindCoordinatorRequest::default().with_key(s(group)))
        .await?;
    if r.error_code != 0 {
        bail!("{}: no coordinator for group {group}", error_name(r.error_code));
    }
    Conn::connect(&format!("{}:{}", r.host, r.port)).await
}

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

/// The group's state and members, as DescribeGroups answers.
async fn describe_raw(
    c: &mut Conn,
    group: &str,
) -> anyhow::Result<kafka_protocol::messages::describe_groups_response::DescribedGroup> {
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
    Ok(g)
}

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
    let g = describe_raw(&mut c, group).await?;
    let offsets = committed(&mut c, group).await?;
    let mut out = String::new();
    out.push_str(&format!("group:    {group}\nstate:    {}\n", g.group_state));
    if !g.protocol_type.is_empty() {
        out.push_str(&format!("protocol: {}/{}\n", g.protocol_type, g.protocol_data));
    }
    out.push_str(&format!("members:  {}\n", g.members.len()));
    for m in &g.members {
        out.push_str(&format!(
            "  {}  client {}  {}\n",
            m.member_id,
            m.client_id,
            assignment(&m.member_assignment)
        ));
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
