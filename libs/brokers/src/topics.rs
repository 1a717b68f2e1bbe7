//! Topics administered through the catalog: created, deleted, grown, configured.

use catalog::CatalogError;
use kafka::{Refused, StreamConfig, code};

use crate::{LogBroker, admin_refused, topic_refused};

#[async_trait::async_trait]
impl kafka::Topics for LogBroker {
    async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        config: StreamConfig,
        validate_only: bool,
    ) -> Result<uuid::Uuid, Refused> {
        // The name first, then the count, as the catalog checks them.
        catalog::validate_name(name).map_err(topic_refused)?;
        if partitions == 0 || partitions > catalog::MAX_PARTITIONS {
            return Err(Refused::new(code::INVALID_PARTITIONS, format!("{partitions} partitions")));
        }
        // Configs that do not go together (lake.retention.ms below retention.ms) are the
        // configs' error, not the topic's.
        catalog::Catalog::check_config(&config)
            .map_err(|e| admin_refused(e, code::INVALID_CONFIG))?;
        if validate_only {
            return match self.catalog.get(name).await {
                Ok(_) => Err(topic_refused(CatalogError::AlreadyExists(name.to_owned()))),
                Err(CatalogError::NotFound(_)) => Ok(uuid::Uuid::nil()),
                Err(e) => Err(topic_refused(e)),
            };
        }
        let s = self.catalog.create(name, partitions, config).await.map_err(topic_refused)?;
        Ok(uuid::Uuid::parse_str(&s.identity).unwrap_or_default())
    }

    async fn delete_topic(&self, name: &str) -> Result<uuid::Uuid, Refused> {
        let s = self.catalog.get(name).await.map_err(topic_refused)?;
        self.catalog.delete(name).await.map_err(topic_refused)?;
        Ok(uuid::Uuid::parse_str(&s.identity).unwrap_or_default())
    }

    async fn create_partitions(
        &self,
        name: &str,
        count: u32,
        validate_only: bool,
    ) -> Result<(), Refused> {
        let s = self.catalog.get(name).await.map_err(topic_refused)?;
        let have = s.partitions.len() as u32;
        // Kafka refuses a count that adds nothing as well as one that removes partitions.
        if count <= have {
            return Err(Refused::new(
                code::INVALID_PARTITIONS,
                format!("topic {name} has {have} partitions; asked for {count}"),
            ));
        }
        if count > catalog::MAX_PARTITIONS {
            return Err(Refused::new(code::INVALID_PARTITIONS, format!("{count} partitions")));
        }
        if !validate_only {
            self.catalog
                .add_partitions(name, count)
                .await
                .map_err(|e| admin_refused(e, code::INVALID_PARTITIONS))?;
        }
        Ok(())
    }

    async fn topic_config(&self, name: &str) -> Result<StreamConfig, Refused> {
        Ok(self.catalog.get(name).await.map_err(topic_refused)?.config)
    }

    async fn set_topic_config(
        &self,
        name: &str,
        config: StreamConfig,
        validate_only: bool,
    ) -> Result<(), Refused> {
        if validate_only {
            self.catalog.get(name).await.map_err(topic_refused)?;
            return catalog::Catalog::check_config(&config)
                .map_err(|e| admin_refused(e, code::INVALID_CONFIG));
        }
        self.catalog
            .set_config(name, config)
            .await
            .map_err(|e| admin_refused(e, code::INVALID_CONFIG))?;
        tracing::info!(topic = name, "Kafka: topic configs altered");
        Ok(())
    }
}
