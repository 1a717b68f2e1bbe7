//! Test environments: a metadata store and an object store, each case on its own prefix.

/// Runs each named case (an `async fn(Env) -> Result<()>` in the calling module) against the
/// embedded store with a local directory, and against etcd with SeaweedFS.
macro_rules! both_envs {
    ($($case:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() -> anyhow::Result<()> {
                    super::$case(crate::env::Env::embedded().await?).await
                }
            )*
        }
        mod etcd_s3 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() -> anyhow::Result<()> {
                    super::$case(crate::env::Env::etcd_s3().await?).await
                }
            )*
        }
    };
}

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use anyhow::Result;
use logstore::{Clock, LogStorage, LogStorageConfig, SystemClock};
use metadata::MetadataStore;
use objstore::object_store::ObjectStore;

pub struct Env {
    pub meta: Arc<dyn MetadataStore>,
    pub objects: Arc<dyn ObjectStore>,
    pub cluster: String,
    /// The object store as configured (lake tables name their files under its root URI).
    // Read by libs/maintenance's lake tests, which share this file; not by Level 1's own.
    #[allow(dead_code)]
    pub store: config::ObjectStoreConfig,
    _guard: Box<dyn std::any::Any + Send>,
}

/// A clock the test sets.
#[derive(Debug, Default)]
pub struct ManualClock(pub AtomicI64);

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl Env {
    pub async fn embedded() -> Result<Env> {
        let dir = tempfile::tempdir()?;
        let meta = metadata::EmbeddedStore::open(&dir.path().join("meta.redb")).await?;
        let store = config::ObjectStoreConfig::Local(config::LocalStoreConfig {
            path: dir.path().join("objects"),
        });
        let objects = objstore::build(&store)?;
        Ok(Env {
            meta: Arc::new(meta),
            objects,
            cluster: testkit::unique_prefix("ls"),
            store,
            _guard: Box::new(dir),
        })
    }

    pub async fn etcd_s3() -> Result<Env> {
        let etcd = testkit::shared_etcd()?;
        let meta = metadata::EtcdStore::connect(&testkit::etcd_config(etcd.endpoint())).await?;
        let cluster = testkit::unique_prefix("ls");
        let s3 = testkit::shared_s3()?.s3().config(&cluster);
        let store = config::ObjectStoreConfig::S3(s3);
        let objects = objstore::build(&store)?;
        Ok(Env { meta: Arc::new(meta), objects, cluster, store, _guard: Box::new(()) })
    }

    /// A writer's config with a short flush interval, so tests run quickly.
    pub fn config(&self, writer: &str) -> LogStorageConfig {
        let mut c = LogStorageConfig::new(&self.cluster, writer);
        c.flush_interval = Duration::from_millis(5);
        c.lease_ttl = Duration::from_secs(5);
        c
    }

    pub async fn writer(&self, writer: &str) -> Result<LogStorage> {
        self.writer_with(self.config(writer), self.objects.clone(), self.meta.clone()).await
    }

    pub async fn writer_with(
        &self,
        cfg: LogStorageConfig,
        objects: Arc<dyn ObjectStore>,
        meta: Arc<dyn MetadataStore>,
    ) -> Result<LogStorage> {
        Ok(LogStorage::open(meta, objects, cfg, Arc::new(SystemClock)).await?)
    }

    pub async fn writer_with_clock(
        &self,
        writer: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<LogStorage> {
        Ok(LogStorage::open(self.meta.clone(), self.objects.clone(), self.config(writer), clock)
            .await?)
    }
}
