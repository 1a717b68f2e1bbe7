//! The cluster as Kafka clients see it: brokers (the live members that serve Kafka), topics
//! and their leaders for a client's zone, group coordinators.

use kafka::{BrokerNode, Refused, TopicInfo};

use crate::{LogBroker, node_of, serves_kafka};

#[async_trait::async_trait]
impl kafka::Cluster for LogBroker {
    fn cluster_id(&self) -> String {
        self.cluster.clone()
    }

    async fn brokers(&self) -> Result<Vec<BrokerNode>, Refused> {
        let writers = self.writers().await?.into_iter().filter_map(|m| node_of(m, false));
        let readers = self.kafka_readers().await.into_iter().filter_map(|m| node_of(m, true));
        let mut out: Vec<BrokerNode> = writers.chain(readers).collect();
        out.sort_by_key(|b| b.node_id);
        Ok(out)
    }

    async fn topics(
        &self,
        names: Option<&[String]>,
        zone: Option<&str>,
        create: Option<u32>,
    ) -> Result<Vec<TopicInfo>, Refused> {
        let writers = self.writers().await?;
        let readers: Vec<i32> = self.kafka_readers().await.iter().map(|m| m.node_id).collect();
        let Some(names) = names else {
            let all = self.catalog.list().await.map_err(Refused::server)?;
            let mut out: Vec<TopicInfo> =
                all.iter().map(|s| Self::topic(s, &writers, &readers, zone)).collect();
            out.push(self.offsets_topic(&writers));
            return Ok(out);
        };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            out.push(if name == kafka::internal::OFFSETS_TOPIC {
                self.offsets_topic(&writers)
            } else if kafka::internal::is_internal(name) {
                // The other internal topics do not exist (yet): never auto-created.
                TopicInfo::failed(name, kafka::code::UNKNOWN_TOPIC_OR_PARTITION)
            } else {
                match self.named(name, create).await {
                    Ok(s) => Self::topic(&s, &writers, &readers, zone),
                    Err(code) => TopicInfo::failed(name, code),
                }
            });
        }
        Ok(out)
    }

    fn node_id(&self) -> i32 {
        self.node_id
    }

    async fn coordinator(&self, key: &str) -> Result<Option<BrokerNode>, Refused> {
        Ok(self.coordinator_view(key).await?.0)
    }

    async fn coordinator_view(&self, key: &str) -> Result<(Option<BrokerNode>, i64), Refused> {
        // Over the writers that serve Kafka, by the group id: every writer picks the same one.
        // Every group request asks this: the watched writers only, no read of the readers.
        let (writers, view) = self.catalog.members_at("writer").await.map_err(Refused::server)?;
        let writers: Vec<routing::Member> = writers.into_iter().filter(serves_kafka).collect();
        let owner = routing::choose_owner(&writers, &format!("kafka-group/{key}"), 0, None);
        Ok((owner.and_then(|m| node_of(m.clone(), false)), view))
    }
}
