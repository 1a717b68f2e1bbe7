//! SASL, the pre-authentication limits and authorization on the front end, over real
//! sockets, with credentials and ACLs in an in-memory metadata store (the roles' tests run
//! real Kafka clients against the same code).

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use kafka::KafkaConfig;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::fetch_request::FetchTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse, FetchRequest, FetchResponse, MetadataRequest,
    MetadataResponse, ProduceRequest, ProduceResponse, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use security::acl::{Acl, Operation, PatternType, Permission, ResourceType};
use security::scram::{Mechanism, ScramClient};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::{Server, batch, decode, read_response, request, server};

fn acl(who: &str, op: Operation, name: &str) -> Acl {
    Acl {
        principal: format!("User:{who}"),
        resource: ResourceType::Stream,
        pattern: PatternType::Literal,
        name: name.to_owned(),
        operation: op,
        permission: Permission::Allow,
        host: "*".to_owned(),
    }
}

/// A front end with authentication on: users `alice` (produce, describe and describe the
/// configs of `orders`; alter the configs of group `alices-group`; write and describe
/// transactional ids `alice-*`) and `root` (a super user).
async fn secured() -> Result<Server> {
    let meta: Arc<dyn metadata::MetadataStore> = Arc::new(metadata::MemoryStore::new());
    let store = security::store::AuthStore::new(meta, "k");
    store.put_user("alice", "alice-pw", 4096).await?;
    store.put_user("root", "root-pw", 4096).await?;
    store
        .add_acls(&[
            acl("alice", Operation::Produce, "orders"),
            acl("alice", Operation::Describe, "orders"),
            acl("alice", Operation::DescribeConfigs, "orders"),
            Acl {
                resource: ResourceType::Group,
                ..acl("alice", Operation::AlterConfigs, "alices-group")
            },
            // Transactions under ids `alice-*`.
            Acl {
                resource: ResourceType::TransactionalId,
                pattern: PatternType::Prefixed,
                ..acl("alice", Operation::Produce, "alice-")
            },
            Acl {
                resource: ResourceType::TransactionalId,
                pattern: PatternType::Prefixed,
                ..acl("alice", Operation::Describe, "alice-")
            },
        ])
        .await?;
    let section = config::AuthSection {
        enabled: true,
        super_users: vec!["root".to_owned()],
        ..Default::default()
    };
    let authz = security::Authorizer::start(&section, &store, "test").await?;
    server(KafkaConfig { authz, acls: Some(store), ..Default::default() }).await
}

/// Sends `body` on `s` and reads its answer; `None` when the connection closed instead.
async fn call<Q: Encodable, R: Decodable>(
    s: &mut TcpStream,
    api: ApiKey,
    version: i16,
    body: &Q,
) -> Result<Option<R>> {
    s.write_all(&request(api, version, 3, "t", body)?).await?;
    let Some(b) = read_response(s).await? else { return Ok(None) };
    Ok(Some(decode::<R>(api, version, b)?.1))
}

/// A connection authenticated as `user` by SCRAM; or the SaslAuthenticate error that closed
/// it.
async fn login(
    s: &Server,
    m: Mechanism,
    user: &str,
    password: &str,
) -> Result<Result<TcpStream, i16>> {
    let mut c = TcpStream::connect(s.addr).await?;
    let hs = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(m.name()));
    let r: SaslHandshakeResponse =
        call(&mut c, ApiKey::SaslHandshake, 1, &hs).await?.context("closed")?;
    ensure!(r.error_code == 0, "handshake: {r:?}");
    let (mut client, first) = ScramClient::new(m, user, password).map_err(anyhow::Error::msg)?;
    let auth = |b: Vec<u8>| SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(b));
    let r: SaslAuthenticateResponse =
        call(&mut c, ApiKey::SaslAuthenticate, 2, &auth(first)).await?.context("closed")?;
    if r.error_code != 0 {
        return Ok(Err(r.error_code));
    }
    let last = client.last(&r.auth_bytes).map_err(anyhow::Error::msg)?;
    let r: SaslAuthenticateResponse =
        call(&mut c, ApiKey::SaslAuthenticate, 2, &auth(last)).await?.context("closed")?;
    if r.error_code != 0 {
        // Answered, then closed.
        let after: Option<MetadataResponse> =
            call(&mut c, ApiKey::Metadata, 12, &MetadataRequest::default()).await?;
        ensure!(after.is_none(), "the connection stayed open after a failed authentication");
        return Ok(Err(r.error_code));
    }
    ensure!(client.verify(&r.auth_bytes), "the server's final message does not verify");
    Ok(Ok(c))
}

fn topics(names: &[&str]) -> MetadataRequest {
    MetadataRequest::default().with_topics(Some(
        names
            .iter()
            .map(|n| {
                MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string((*n).to_owned()))))
            })
            .collect(),
    ))
}

#[tokio::test]
async fn requests_before_authentication_close_the_connection_and_scram_opens_it() -> Result<()> {
    let s = secured().await?;
    let mut anon = TcpStream::connect(s.addr).await?;
    let r: Option<MetadataResponse> =
        call(&mut anon, ApiKey::Metadata, 12, &topics(&["orders"])).await?;
    ensure!(r.is_none(), "Metadata was answered before authentication");

    for m in Mechanism::ALL {
        let mut alice =
            login(&s, m, "alice", "alice-pw").await?.map_err(|e| anyhow::anyhow!("error {e}"))?;
        // Described: orders; not described: secret (and, without CREATE, not auto-created).
        let r: MetadataResponse =
            call(&mut alice, ApiKey::Metadata, 12, &topics(&["orders", "secret"]))
                .await?
                .context("closed")?;
        let codes: Vec<(String, i16)> = r
            .topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(), t.error_code))
            .collect();
        ensure!(codes == [("orders".to_owned(), 0), ("secret".to_owned(), 29)], "{codes:?} {r:?}");
        ensure!(
            s.broker.created.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.is_empty(),
            "auto-created without CREATE"
        );
        // Listing every topic shows only orders.
        let all: MetadataResponse =
            call(&mut alice, ApiKey::Metadata, 12, &MetadataRequest::default().with_topics(None))
                .await?
                .context("closed")?;
        ensure!(all.topics.len() == 1, "{:?}", all.topics);

        // One produce to orders (allowed) and to audit (not): split per topic.
        let b = batch(&["x"], recordbatch::ProducerFields::NONE)?;
        let topic = |n: &str| {
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(n.to_owned())))
                .with_partition_data(vec![
                    PartitionProduceData::default().with_index(0).with_records(Some(b.clone())),
                ])
        };
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![topic("orders"), topic("audit")]);
        let r: ProduceResponse =
            call(&mut alice, ApiKey::Produce, 9, &req).await?.context("closed")?;
        let mut got: Vec<(String, i16)> = r
            .responses
            .iter()
            .map(|t| (t.name.to_string(), t.partition_responses[0].error_code))
            .collect();
        got.sort();
        ensure!(got == [("audit".to_owned(), 29), ("orders".to_owned(), 0)], "{got:?}");
        // No consume on orders: a fetch is refused for it.
        let fetch = FetchRequest::default().with_max_wait_ms(0).with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("orders")))
                .with_partitions(vec![Default::default()]),
        ]);
        let r: FetchResponse =
            call(&mut alice, ApiKey::Fetch, 12, &fetch).await?.context("closed")?;
        ensure!(
            r.responses.len() == 1 && r.responses[0].partitions[0].error_code == 29,
            "{:?}",
            r.responses
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_wrong_password_is_answered_and_closes_the_connection_and_plain_needs_tls() -> Result<()>
{
    let s = secured().await?;
    for m in Mechanism::ALL {
        let r = login(&s, m, "alice", "not-it").await?;
        ensure!(matches!(r, Err(58)), "{m:?}: {:?}", r.as_ref().err());
        let r = login(&s, m, "nobody", "x").await?;
        ensure!(matches!(r, Err(58)), "{m:?} unknown user: {:?}", r.as_ref().err());
    }
    // PLAIN would send the password in the clear: not offered without TLS.
    let mut c = TcpStream::connect(s.addr).await?;
    let hs = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    let r: SaslHandshakeResponse =
        call(&mut c, ApiKey::SaslHandshake, 1, &hs).await?.context("closed")?;
    ensure!(r.error_code == 33 && !r.mechanisms.iter().any(|m| m.as_str() == "PLAIN"), "{r:?}");
    Ok(())
}

#[tokio::test]
async fn frames_before_authentication_are_capped_at_512_kib() -> Result<()> {
    let s = secured().await?;
    // 600 KiB claimed before authenticating: closed unanswered, after reading 4 bytes.
    let mut c = TcpStream::connect(s.addr).await?;
    c.write_all(&((600i32 << 10).to_be_bytes())).await?;
    c.write_all(&[0u8; 1024]).await?;
    ensure!(
        read_response(&mut c).await?.is_none(),
        "a 600 KiB frame was read before authentication"
    );
    // Once authenticated, the same size is a request like any other.
    let mut root = login(&s, Mechanism::ScramSha256, "root", "root-pw")
        .await?
        .map_err(|e| anyhow::anyhow!("error {e}"))?;
    let big = "v".repeat(600 << 10);
    let b = batch(&[big.as_str()], recordbatch::ProducerFields::NONE)?;
    let req = crate::produce_request(-1, vec![(0, Some(b))]);
    let r: Option<ProduceResponse> = call(&mut root, ApiKey::Produce, 9, &req).await?;
    ensure!(r.is_some(), "a 600 KiB produce after authentication closed the connection");
    Ok(())
}

#[tokio::test]
async fn acls_are_created_described_and_deleted_over_kafka_by_the_cluster_admin_only() -> Result<()>
{
    let s = secured().await?;
    let mut root = login(&s, Mechanism::ScramSha512, "root", "root-pw")
        .await?
        .map_err(|e| anyhow::anyhow!("error {e}"))?;
    let mut alice = login(&s, Mechanism::ScramSha512, "alice", "alice-pw")
        .await?
        .map_err(|e| anyhow::anyhow!("error {e}"))?;
    let creation = AclCreation::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_static_str("ord"))
        .with_resource_pattern_type(4)
        .with_principal(StrBytes::from_static_str("User:bob"))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(3)
        .with_permission_type(3);
    let create = CreateAclsRequest::default().with_creations(vec![creation]);
    for v in 1..=3 {
        let r: CreateAclsResponse =
            call(&mut alice, ApiKey::CreateAcls, v, &create).await?.context("closed")?;
        ensure!(r.results[0].error_code == 31, "alice v{v}: {:?}", r.results);
        let r: CreateAclsResponse =
            call(&mut root, ApiKey::CreateAcls, v, &create).await?.context("closed")?;
        ensure!(r.results[0].error_code == 0, "root v{v}: {:?}", r.results);
    }
    let any = DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(1)
        .with_pattern_type_filter(1)
        .with_operation(1)
        .with_permission_type(1);
    let r: DescribeAclsResponse =
        call(&mut root, ApiKey::DescribeAcls, 3, &any).await?.context("closed")?;
    let bob: Vec<_> = r
        .resources
        .iter()
        .filter(|r| r.acls.iter().any(|a| a.principal.as_str() == "User:bob"))
        .collect();
    ensure!(
        bob.len() == 1
            && bob[0].resource_name.as_str() == "ord"
            && bob[0].pattern_type == 4
            && bob[0].acls[0].operation == 3,
        "{:?}",
        r.resources
    );
    // MATCH: the ACLs that apply to topic `orders` (bob's prefix and alice's three literals).
    let matching = DescribeAclsRequest::default()
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(2)
        .with_resource_name_filter(Some(StrBytes::from_static_str("orders")))
        .with_pattern_type_filter(2)
        .with_operation(1)
        .with_permission_type(1);
    let r: DescribeAclsResponse =
        call(&mut root, ApiKey::DescribeAcls, 2, &matching).await?.context("closed")?;
    let n: usize = r.resources.iter().map(|r| r.acls.len()).sum();
    ensure!(n == 4, "{:?}", r.resources);
    let delete = DeleteAclsRequest::default().with_filters(vec![
        DeleteAclsFilter::default()
            .with_resource_name_filter(None)
            .with_host_filter(None)
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_principal_filter(Some(StrBytes::from_static_str("User:bob")))
            .with_operation(1)
            .with_permission_type(1),
    ]);
    let r: DeleteAclsResponse =
        call(&mut root, ApiKey::DeleteAcls, 3, &delete).await?.context("closed")?;
    ensure!(r.filter_results[0].matching_acls.len() == 1, "{:?}", r.filter_results);
    let r: DescribeAclsResponse =
        call(&mut root, ApiKey::DescribeAcls, 3, &any).await?.context("closed")?;
    ensure!(!r.resources.iter().any(|r| r.acls.iter().any(|a| a.principal.as_str() == "User:bob")));
    Ok(())
}

/// Kafka's ACL operations, each as Kafka maps it: ALTER_CONFIGS allows changing a topic's
/// configs and not its partitions (ALTER), DESCRIBE_CONFIGS reading its configs and not its
/// metadata (DESCRIBE); both are described back as granted.
#[tokio::test]
async fn alter_configs_and_describe_configs_grant_no_more_than_in_kafka() -> Result<()> {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
    use kafka_protocol::messages::{
        CreatePartitionsRequest, CreatePartitionsResponse, DescribeConfigsRequest,
        DescribeConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    };
    let s = secured().await?;
    let mut root = login(&s, Mechanism::ScramSha512, "root", "root-pw")
        .await?
        .map_err(|e| anyhow::anyhow!("error {e}"))?;
    let mut alice = login(&s, Mechanism::ScramSha512, "alice", "alice-pw")
        .await?
        .map_err(|e| anyhow::anyhow!("error {e}"))?;
    let grant = |operation: i8, topic: &'static str| {
        AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str(topic))
            .with_resource_pattern_type(3)
            .with_principal(StrBytes::from_static_str("User:alice"))
            .with_host(StrBytes::from_static_str("*"))
            .with_operation(operation)
            .with_permission_type(3)
    };
    let create =
        CreateAclsRequest::default().with_creations(vec![grant(11, "orders"), grant(10, "secret")]);
    let r: CreateAclsResponse =
        call(&mut root, ApiKey::CreateAcls, 3, &create).await?.context("closed")?;
    ensure!(r.results.iter().all(|r| r.error_code == 0), "{:?}", r.results);
    // Altering orders' configs is allowed once the view has the ACL.
    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("orders")),
    ]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let r: IncrementalAlterConfigsResponse =
            call(&mut alice, ApiKey::IncrementalAlterConfigs, 1, &alter)
                .await?
                .context("closed")?;
        if r.responses[0].error_code != 29 {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "ALTER_CONFIGS never allowed: {:?}",
            r.responses
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Its partitions are not alice's to grow.
    let grow = CreatePartitionsRequest::default().with_topics(vec![
        CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_count(4),
    ]);
    let r: CreatePartitionsResponse =
        call(&mut alice, ApiKey::CreatePartitions, 1, &grow).await?.context("closed")?;
    ensure!(r.results[0].error_code == 29, "ALTER_CONFIGS grew partitions: {:?}", r.results);
    // secret's configs are alice's to read, its metadata is not.
    let describe = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("secret"))
            .with_configuration_keys(None),
    ]);
    let r: DescribeConfigsResponse =
        call(&mut alice, ApiKey::DescribeConfigs, 4, &describe).await?.context("closed")?;
    ensure!(r.results[0].error_code != 29, "DESCRIBE_CONFIGS refused: {:?}", r.results);
    let md = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("secret")))),
    ]));
    let r: MetadataResponse =
        call(&mut alice, ApiKey::Metadata, 12, &md).await?.context("closed")?;
    ensure!(r.topics[0].error_code == 29, "DESCRIBE_CONFIGS described the topic: {:?}", r.topics);
    // Described back as granted.
    let mine = DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(Some(StrBytes::from_static_str("User:alice")))
        .with_host_filter(None)
        .with_resource_type_filter(1)
        .with_pattern_type_filter(1)
        .with_operation(1)
        .with_permission_type(1);
    let r: DescribeAclsResponse =
        call(&mut root, ApiKey::DescribeAcls, 3, &mine).await?.context("closed")?;
    let mut ops: Vec<(String, i8)> = r
        .resources
        .iter()
        .flat_map(|res| res.acls.iter().map(move |a| (res.resource_name.to_string(), a.operation)))
        .collect();
    ops.sort();
    ensure!(
        ops.contains(&("orders".to_owned(), 11)) && ops.contains(&("secret".to_owned(), 10)),
        "{ops:?}"
    );
    Ok(())
}

/// KIP-848 as Kafka authorizes it: a member subscribes only to topics it may describe (named
/// ones refused with TOPIC_AUTHORIZATION_FAILED, a regex's matches filtered), and
/// ConsumerGroupDescribe of a group that holds a topic the caller may not describe answers
/// TOPIC_AUTHORIZATION_FAILED instead of naming it.
#[tokio::test]
async fn a_kip848_member_sees_and_gets_only_topics_it_may_describe() -> Result<()> {
    use kafka_protocol::messages::{
        ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse, GroupId,
    };
    let s = secured().await?;
    let secret = uuid::Uuid::new_v4();
    s.broker.topics.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.push((
        "secret".to_owned(),
        secret,
        2,
    ));
    let mut root = login(&s, Mechanism::ScramSha512, "root", "root-pw")
        .await?
        .map_err(|e| anyhow::anyhow!("error {e}"))?;
    let mut alice = login(&s, Mechanism::ScramSha512, "alice", "alice-pw")
        .await?
        .map_err(|e| anyhow::anyhow!("error {e}"))?;
    let create = CreateAclsRequest::default().with_creations(vec![
        AclCreation::default()
            .with_resource_type(3)
            .with_resource_name(StrBytes::from_static_str("g"))
            .with_resource_pattern_type(3)
            .with_principal(StrBytes::from_static_str("User:alice"))
            .with_host(StrBytes::from_static_str("*"))
            .with_operation(3)
            .with_permission_type(3),
    ]);
    let r: CreateAclsResponse =
        call(&mut root, ApiKey::CreateAcls, 3, &create).await?.context("closed")?;
    ensure!(r.results[0].error_code == 0, "{:?}", r.results);
    let join = |member: &'static str| {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_member_id(StrBytes::from_static_str(member))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_topic_partitions(Some(Vec::new()))
    };
    let hb = ApiKey::ConsumerGroupHeartbeat;
    // Named: a topic alice may not describe is refused.
    let named = join("a1").with_subscribed_topic_names(Some(vec![
        TopicName(StrBytes::from_static_str("orders")),
        TopicName(StrBytes::from_static_str("secret")),
    ]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let r = loop {
        let r: ConsumerGroupHeartbeatResponse =
            call(&mut alice, hb, 1, &named).await?.context("closed")?;
        if r.error_code != 30 || std::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    ensure!(r.error_code == 29, "a named topic alice may not describe: {r:?}");
    // A regex: its matches are the topics alice may describe.
    let all = Some(StrBytes::from_static_str(".*"));
    let r: ConsumerGroupHeartbeatResponse =
        call(&mut alice, hb, 1, &join("a2").with_subscribed_topic_regex(all.clone()))
            .await?
            .context("closed")?;
    ensure!(r.error_code == 0, "{r:?}");
    let ids: Vec<uuid::Uuid> =
        r.assignment.iter().flat_map(|a| a.topic_partitions.iter().map(|t| t.topic_id)).collect();
    ensure!(!ids.contains(&secret), "alice was assigned secret: {r:?}");
    // root's member takes secret; alice may no longer see the group described.
    let r: ConsumerGroupHeartbeatResponse =
        call(&mut root, hb, 1, &join("r1").with_subscribed_topic_regex(all))
            .await?
            .context("closed")?;
    ensure!(r.error_code == 0, "{r:?}");
    let describe = ConsumerGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(StrBytes::from_static_str("g"))]);
    let r: ConsumerGroupDescribeResponse =
        call(&mut root, ApiKey::ConsumerGroupDescribe, 0, &describe).await?.context("closed")?;
    let named_secret = |r: &ConsumerGroupDescribeResponse| format!("{r:?}").contains("\"secret\"");
    ensure!(r.groups[0].error_code == 0 && named_secret(&r), "root sees all: {r:?}");
    let r: ConsumerGroupDescribeResponse =
        call(&mut alice, ApiKey::ConsumerGroupDescribe, 0, &describe).await?.context("closed")?;
    ensure!(r.groups[0].error_code == 29 && !named_secret(&r), "{r:?}");
    Ok(())
}

/// L1: PLAIN's password check (PBKDF2-SHA512, 8,192 iterations here) runs off the async
/// runtime: polled once, the authentication gives the thread back (Pending) instead of
/// computing there and then, and completes once the check is done.
#[tokio::test(flavor = "current_thread")]
async fn a_plain_password_check_does_not_stall_the_runtime() -> Result<()> {
    let meta: Arc<dyn metadata::MetadataStore> = Arc::new(metadata::MemoryStore::new());
    let store = security::store::AuthStore::new(meta, "plain");
    store.put_user("alice", "alice-pw", 8192).await?;
    let section = config::AuthSection { enabled: true, ..Default::default() };
    let authz = security::Authorizer::start(&section, &store, "test").await?;
    let mut session = kafka::session::Session::new(&authz, true, None, 1 << 20, None);
    let hs = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    ensure!(session.handshake(&hs).error_code == 0);
    let req = SaslAuthenticateRequest::default()
        .with_auth_bytes(Bytes::from_static(b"\0alice\0alice-pw"));
    let mut authenticating = Box::pin(session.authenticate(&req, &authz));
    // Checked inline, the first poll would run the whole PBKDF2 and be Ready.
    ensure!(
        futures::poll!(&mut authenticating).is_pending(),
        "the password check ran on the runtime's thread"
    );
    let r = authenticating.await;
    ensure!(r.error_code == 0 && session.authenticated(), "{r:?}");
    Ok(())
}

/// M1: with authentication on, one address opening 1,024 connections that never authenticate
/// cannot lock others out: it holds at most its share of the unauthenticated places, and a
/// SCRAM client from another address still connects and authenticates.
#[tokio::test]
async fn idle_unauthenticated_connections_from_one_address_lock_no_one_else_out() -> Result<()> {
    let s = secured().await?;
    let mut idle = Vec::new();
    for _ in 0..1024 {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.bind(std::net::SocketAddr::from(([127, 0, 0, 2], 0)))?;
        idle.push(sock.connect(s.addr).await?);
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let c = login(&s, Mechanism::ScramSha256, "alice", "alice-pw").await;
    ensure!(matches!(c, Ok(Ok(_))), "locked out by 1,024 idle connections: {c:?}");
    drop(idle);
    Ok(())
}

#[tokio::test]
async fn config_requests_are_split_per_resource_topics_and_the_broker_alike() -> Result<()> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
    use kafka_protocol::messages::{
        DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
    };
    let s = secured().await?;
    let mut alice = login(&s, Mechanism::ScramSha256, "alice", "alice-pw")
        .await?
        .map_err(|e| anyhow::anyhow!("error {e}"))?;
    // alice describes orders, not secret; the broker (type 4) is the cluster's.
    let resource = |t: i8, n: &str| {
        DescribeConfigsResource::default()
            .with_resource_type(t)
            .with_resource_name(StrBytes::from_string(n.to_owned()))
            .with_configuration_keys(None)
    };
    let req = DescribeConfigsRequest::default().with_resources(vec![
        resource(2, "orders"),
        resource(2, "secret"),
        resource(4, "10"),
        resource(32, "alices-group"),
        resource(32, "bobs-group"),
    ]);
    let r: DescribeConfigsResponse =
        call(&mut alice, ApiKey::DescribeConfigs, 4, &req).await?.context("closed")?;
    let mut got: Vec<(String, i16)> =
        r.results.iter().map(|r| (r.resource_name.to_string(), r.error_code)).collect();
    got.sort();
    ensure!(got[1..3] == [("alices-group".to_owned(), 0), ("bobs-group".to_owned(), 30)]);
    ensure!(got[3..] == [("orders".to_owned(), 0), ("secret".to_owned(), 29)], "{got:?}");
    ensure!(got[0] == ("10".to_owned(), 31), "{got:?}");
    // No alter on orders: refused, the handler never sees it.
    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("orders")),
    ]);
    let r: IncrementalAlterConfigsResponse =
        call(&mut alice, ApiKey::IncrementalAlterConfigs, 1, &alter).await?.context("closed")?;
    ensure!(r.responses.len() == 1 && r.responses[0].error_code == 29, "{:?}", r.responses);
    // A group's configs: ALTER_CONFIGS on the group (GROUP_AUTHORIZATION_FAILED without).
    let group = |n: &str| {
        AlterConfigsResource::default()
            .with_resource_type(32)
            .with_resource_name(StrBytes::from_string(n.to_owned()))
    };
    let alter = IncrementalAlterConfigsRequest::default()
        .with_resources(vec![group("alices-group"), group("bobs-group")]);
    let r: IncrementalAlterConfigsResponse =
        call(&mut alice, ApiKey::IncrementalAlterConfigs, 1, &alter).await?.context("closed")?;
    let mut got: Vec<(String, i16)> =
        r.responses.iter().map(|r| (r.resource_name.to_string(), r.error_code)).collect();
    got.sort();
    ensure!(got == [("alices-group".into(), 0), ("bobs-group".into(), 30)], "{got:?}");
    Ok(())
}

/// KIP-430: Metadata (v8+) and DescribeCluster say, when asked, what the principal may do:
/// alice may produce, describe and describe the configs of `orders` (WRITE 4, DESCRIBE 8,
/// DESCRIBE_CONFIGS 10) and nothing of the cluster; root, a super user, everything; not
/// asked, Kafka's "none given" (i32::MIN).
#[tokio::test]
async fn authorized_operations_say_what_the_principal_may_do() -> Result<()> {
    use kafka_protocol::messages::{
        DescribeClusterRequest, DescribeClusterResponse, DescribeGroupsRequest,
        DescribeGroupsResponse, GroupId,
    };
    let s = secured().await?;
    let login_as = |user: &'static str, pw: &'static str| {
        let s = &s;
        async move {
            login(s, Mechanism::ScramSha512, user, pw)
                .await?
                .map_err(|e| anyhow::anyhow!("error {e}"))
        }
    };
    let (mut alice, mut root) =
        (login_as("alice", "alice-pw").await?, login_as("root", "root-pw").await?);
    let asked = topics(&["orders"])
        .with_include_topic_authorized_operations(true)
        .with_include_cluster_authorized_operations(true);
    let r: MetadataResponse =
        call(&mut alice, ApiKey::Metadata, 10, &asked).await?.context("closed")?;
    let ops = r.topics[0].topic_authorized_operations;
    ensure!(ops == (1 << 4) | (1 << 8) | (1 << 10), "alice on orders: {ops:#b}");
    ensure!(r.cluster_authorized_operations == 0, "alice on the cluster: {r:?}");
    let r: MetadataResponse =
        call(&mut root, ApiKey::Metadata, 10, &asked).await?.context("closed")?;
    let all_topic = [3, 4, 5, 6, 7, 8, 10, 11].iter().fold(0, |b, c| b | (1 << c));
    ensure!(r.topics[0].topic_authorized_operations == all_topic, "root: {r:?}");
    let r: MetadataResponse =
        call(&mut alice, ApiKey::Metadata, 10, &topics(&["orders"])).await?.context("closed")?;
    ensure!(r.topics[0].topic_authorized_operations == i32::MIN, "not asked: {r:?}");
    let cluster =
        DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
    let r: DescribeClusterResponse =
        call(&mut root, ApiKey::DescribeCluster, 1, &cluster).await?.context("closed")?;
    let all_cluster = [5, 7, 8, 9, 10, 11, 12].iter().fold(0, |b, c| b | (1 << c));
    ensure!(r.error_code == 0 && r.cluster_authorized_operations == all_cluster, "{r:?}");
    // A group's, as Kafka 4.4 lists them: READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS,
    // ALTER_CONFIGS.
    let groups = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_static_str("g"))])
        .with_include_authorized_operations(true);
    let r: DescribeGroupsResponse =
        call(&mut root, ApiKey::DescribeGroups, 5, &groups).await?.context("closed")?;
    let all_group = [3, 6, 8, 10, 11].iter().fold(0, |b, c| b | (1 << c));
    ensure!(r.groups[0].authorized_operations == all_group, "{r:?}");
    Ok(())
}

/// KIP-554 over the user store: the super user sets a SCRAM credential for bob (salted by the
/// client, as Kafka's tools send it), bob logs in with it and is listed; alice (no cluster
/// rights) may neither list nor alter; a credential out of Kafka's bounds is refused; once
/// deleted, bob's login fails and he is no longer found.
#[tokio::test]
async fn scram_credentials_are_described_and_altered_by_the_cluster_admin_only() -> Result<()> {
    use kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };
    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
    use kafka_protocol::messages::{
        AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
        DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
    };
    let s = secured().await?;
    let login_as = |user: &'static str, pw: &'static str| {
        let s = &s;
        async move { login(s, Mechanism::ScramSha512, user, pw).await }
    };
    let mut root = login_as("root", "root-pw").await?.map_err(|e| anyhow::anyhow!("error {e}"))?;
    let mut alice =
        login_as("alice", "alice-pw").await?.map_err(|e| anyhow::anyhow!("error {e}"))?;
    let salt = b"bob-salt".to_vec();
    let upsert = |iterations: i32| {
        let salted = security::scram::salted(Mechanism::ScramSha512, "bob-pw", &salt, 4096);
        AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(StrBytes::from_static_str("bob"))
                .with_mechanism(2)
                .with_iterations(iterations)
                .with_salt(Bytes::from(salt.clone()))
                .with_salted_password(Bytes::from(salted)),
        ])
    };
    async fn alter(
        c: &mut TcpStream,
        req: AlterUserScramCredentialsRequest,
    ) -> Result<Option<i16>> {
        let r: AlterUserScramCredentialsResponse =
            call(c, ApiKey::AlterUserScramCredentials, 0, &req).await?.context("closed")?;
        Ok(r.results.first().map(|r| r.error_code))
    }
    ensure!(alter(&mut alice, upsert(4096)).await? == Some(31), "alice altered a user");
    ensure!(alter(&mut root, upsert(100)).await? == Some(93), "100 iterations accepted");
    ensure!(alter(&mut root, upsert(4096)).await? == Some(0), "root's upsert refused");
    // bob logs in once the view has him.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while login_as("bob", "bob-pw").await?.is_err() {
        ensure!(std::time::Instant::now() < deadline, "bob cannot log in");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let describe = |users: Option<Vec<&'static str>>| {
        DescribeUserScramCredentialsRequest::default().with_users(users.map(|u| {
            u.into_iter()
                .map(|n| UserName::default().with_name(StrBytes::from_static_str(n)))
                .collect()
        }))
    };
    let r: DescribeUserScramCredentialsResponse = call(
        &mut root,
        ApiKey::DescribeUserScramCredentials,
        0,
        &describe(Some(vec!["bob", "nobody"])),
    )
    .await?
    .context("closed")?;
    let bob = r.results.iter().find(|x| x.user.as_str() == "bob").context("bob")?;
    ensure!(bob.error_code == 0 && bob.credential_infos.len() == 1, "{r:?}");
    ensure!((bob.credential_infos[0].mechanism, bob.credential_infos[0].iterations) == (2, 4096));
    let nobody = r.results.iter().find(|x| x.user.as_str() == "nobody").context("nobody")?;
    ensure!(nobody.error_code == 91, "{r:?}");
    let r: DescribeUserScramCredentialsResponse =
        call(&mut alice, ApiKey::DescribeUserScramCredentials, 0, &describe(None))
            .await?
            .context("closed")?;
    ensure!(r.error_code == 31, "alice listed users: {r:?}");
    let delete = AlterUserScramCredentialsRequest::default().with_deletions(vec![
        ScramCredentialDeletion::default()
            .with_name(StrBytes::from_static_str("bob"))
            .with_mechanism(2),
    ]);
    ensure!(alter(&mut root, delete.clone()).await? == Some(0));
    ensure!(alter(&mut root, delete).await? == Some(91), "a second delete");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while login_as("bob", "bob-pw").await?.is_ok() {
        ensure!(std::time::Instant::now() < deadline, "bob still logs in");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(())
}

/// WriteTxnMarkers is the cluster's (CLUSTER_ACTION): alice's markers are refused, each
/// partition with CLUSTER_AUTHORIZATION_FAILED, and nothing is written.
#[tokio::test]
async fn transaction_markers_are_written_only_with_the_clusters_right() -> Result<()> {
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };
    use kafka_protocol::messages::{
        ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
    };
    let s = secured().await?;
    let mut alice = login(&s, Mechanism::ScramSha256, "alice", "alice-pw")
        .await?
        .map_err(|e| anyhow::anyhow!("error {e}"))?;
    let req = WriteTxnMarkersRequest::default().with_markers(vec![
        WritableTxnMarker::default()
            .with_producer_id(ProducerId(7))
            .with_transaction_result(true)
            .with_topics(vec![
                WritableTxnMarkerTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("orders")))
                    .with_partition_indexes(vec![0, 1]),
            ]),
    ]);
    let r: WriteTxnMarkersResponse =
        call(&mut alice, ApiKey::WriteTxnMarkers, 1, &req).await?.context("closed")?;
    let codes: Vec<i16> = r.markers[0].topics[0].partitions.iter().map(|p| p.error_code).collect();
    ensure!(codes == [31, 31], "{codes:?}");
    Ok(())
}

/// Transactional ids are Kafka's TRANSACTIONAL_ID resources: alice, who may write and describe
/// `alice-*`, finds the coordinator of, initializes, describes and lists only those; bob's
/// id is TRANSACTIONAL_ID_AUTHORIZATION_FAILED for her in FindCoordinator, InitProducerId,
/// AddPartitionsToTxn, EndTxn, Produce and DescribeTransactions, and not listed.
#[tokio::test]
async fn a_transactional_id_is_used_and_seen_only_with_its_acls() -> Result<()> {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::*;
    const REFUSED: i16 = 53;
    let s = secured().await?;
    let str = |v: &str| StrBytes::from_string(v.to_owned());
    let mut alice = login(&s, Mechanism::ScramSha256, "alice", "alice-pw")
        .await?
        .map_err(|e| anyhow::anyhow!("error {e}"))?;
    let mut root = login(&s, Mechanism::ScramSha256, "root", "root-pw")
        .await?
        .map_err(|e| anyhow::anyhow!("error {e}"))?;
    let init = |id: &str| {
        InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(str(id))))
            .with_transaction_timeout_ms(60_000)
    };
    let r: InitProducerIdResponse =
        call(&mut root, ApiKey::InitProducerId, 4, &init("bob-app")).await?.context("closed")?;
    ensure!(r.error_code == 0, "root inits bob's: {r:?}");
    let r: InitProducerIdResponse =
        call(&mut alice, ApiKey::InitProducerId, 4, &init("bob-app")).await?.context("closed")?;
    ensure!(r.error_code == REFUSED, "{r:?}");
    let r: InitProducerIdResponse =
        call(&mut alice, ApiKey::InitProducerId, 4, &init("alice-app")).await?.context("closed")?;
    ensure!(r.error_code == 0, "{r:?}");
    let (pid, epoch) = (r.producer_id, r.producer_epoch);

    let find = FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(vec![str("alice-app"), str("bob-app")]);
    let r: FindCoordinatorResponse =
        call(&mut alice, ApiKey::FindCoordinator, 4, &find).await?.context("closed")?;
    let codes: Vec<(String, i16)> =
        r.coordinators.iter().map(|c| (c.key.to_string(), c.error_code)).collect();
    ensure!(
        codes.contains(&("alice-app".into(), 0)) && codes.contains(&("bob-app".into(), REFUSED)),
        "{codes:?}"
    );
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(str("bob-app")))
        .with_v3_and_below_producer_id(pid)
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(str("orders")))
                .with_partitions(vec![0]),
        ]);
    let r: AddPartitionsToTxnResponse =
        call(&mut alice, ApiKey::AddPartitionsToTxn, 3, &add).await?.context("closed")?;
    let code = r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
    ensure!(code == REFUSED, "{r:?}");
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(str("bob-app")))
        .with_producer_id(pid)
        .with_producer_epoch(epoch)
        .with_committed(true);
    let r: EndTxnResponse = call(&mut alice, ApiKey::EndTxn, 3, &end).await?.context("closed")?;
    ensure!(r.error_code == REFUSED, "{r:?}");
    let produce = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_transactional_id(Some(TransactionalId(str("bob-app"))))
        .with_topic_data(vec![
            TopicProduceData::default().with_name(TopicName(str("orders"))).with_partition_data(
                vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch(&["x"], recordbatch::ProducerFields::NONE)?)),
                ],
            ),
            // A topic she may not write either: still the transactional id's refusal (Kafka
            // answers the whole request so).
            TopicProduceData::default().with_name(TopicName(str("payroll"))).with_partition_data(
                vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch(&["y"], recordbatch::ProducerFields::NONE)?)),
                ],
            ),
        ]);
    let r: ProduceResponse =
        call(&mut alice, ApiKey::Produce, 9, &produce).await?.context("closed")?;
    let codes: Vec<i16> = r
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter().map(|p| p.error_code))
        .collect();
    ensure!(codes == [REFUSED, REFUSED], "{r:?}");

    let describe = DescribeTransactionsRequest::default().with_transactional_ids(vec![
        TransactionalId(str("alice-app")),
        TransactionalId(str("bob-app")),
    ]);
    let r: DescribeTransactionsResponse =
        call(&mut alice, ApiKey::DescribeTransactions, 0, &describe).await?.context("closed")?;
    let codes: Vec<i16> = r.transaction_states.iter().map(|t| t.error_code).collect();
    ensure!(codes == [0, REFUSED], "{r:?}");
    let r: ListTransactionsResponse =
        call(&mut alice, ApiKey::ListTransactions, 0, &ListTransactionsRequest::default())
            .await?
            .context("closed")?;
    let listed: Vec<String> =
        r.transaction_states.iter().map(|t| t.transactional_id.to_string()).collect();
    ensure!(r.error_code == 0 && listed == ["alice-app"], "{r:?}");
    let r: ListTransactionsResponse =
        call(&mut root, ApiKey::ListTransactions, 0, &ListTransactionsRequest::default())
            .await?
            .context("closed")?;
    ensure!(r.transaction_states.len() == 2, "root sees both: {r:?}");
    Ok(())
}
