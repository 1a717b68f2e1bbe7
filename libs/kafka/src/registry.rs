//! Every Kafka API this front end serves, one line each: ApiVersions advertises them, decoding
//! and dispatch find each request's [`Handler`](crate::api::Handler) here. An API's handler
//! lives in its area's module, next to what it serves.

use crate::api::{Registration, register};
use crate::{
    acl_api, admin, configs, consumer_api, fetch, group_api, leader_epoch, metadata, produce,
    scram_api, session, txn_api,
};

/// The APIs served, in the order ApiVersions lists them.
pub static APIS: &[Registration] = &[
    register::<produce::Produce>(),
    register::<fetch::Fetch>(),
    register::<fetch::ListOffsets>(),
    register::<metadata::Metadata>(),
    register::<session::ApiVersions>(),
    register::<admin::CreateTopics>(),
    register::<admin::DeleteTopics>(),
    register::<admin::CreatePartitions>(),
    register::<produce::InitProducerId>(),
    register::<configs::DescribeConfigs>(),
    register::<configs::AlterConfigs>(),
    register::<configs::IncrementalAlterConfigs>(),
    register::<configs::ListConfigResources>(),
    register::<admin::DeleteRecords>(),
    register::<admin::DescribeCluster>(),
    register::<group_api::FindCoordinator>(),
    register::<group_api::JoinGroup>(),
    register::<group_api::SyncGroup>(),
    register::<group_api::Heartbeat>(),
    register::<group_api::LeaveGroup>(),
    register::<group_api::CommitOffsets>(),
    register::<group_api::OffsetFetch>(),
    register::<group_api::ListGroups>(),
    register::<group_api::DescribeGroups>(),
    register::<group_api::DeleteGroups>(),
    register::<group_api::OffsetDelete>(),
    register::<consumer_api::ConsumerGroupHeartbeat>(),
    register::<consumer_api::ConsumerGroupDescribe>(),
    register::<session::Handshake>(),
    register::<session::Authenticate>(),
    register::<acl_api::DescribeAcls>(),
    register::<acl_api::CreateAcls>(),
    register::<acl_api::DeleteAcls>(),
    register::<scram_api::DescribeUserScramCredentials>(),
    register::<scram_api::AlterUserScramCredentials>(),
    register::<leader_epoch::OffsetForLeaderEpoch>(),
    register::<txn_api::WriteTxnMarkers>(),
    register::<txn_api::AddPartitionsToTxn>(),
    register::<txn_api::AddOffsetsToTxn>(),
    register::<txn_api::EndTxn>(),
    register::<txn_api::TxnOffsetCommit>(),
    register::<txn_api::DescribeTransactions>(),
    register::<txn_api::ListTransactions>(),
    register::<txn_api::DescribeProducers>(),
];
