//! Lakelog's object storage.
//!
//! Owns how an `Arc<dyn ObjectStore>` is built from config ([`build`]: local directory with
//! fsync, S3-compatible, or in-memory for unit tests), the ONE module that lays out object
//! keys ([`keys`]), the create-only put every write-once object goes through
//! ([`put_create_only`]), and a fault-injecting wrapper for tests ([`faults`]).
//!
//! Depends on no Lakelog crate but `config`. Everything else reaches object storage through
//! the `object_store` trait, so adapters (prefix, metrics, faults) stack freely.

pub mod counting;
pub mod faults;
pub mod keys;

use std::sync::Arc;

use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, PutResult};

pub use object_store;
pub use object_store::path::Path;

/// A store could not be built from its config.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("object store directory {path}: {source}")]
    LocalDir { path: String, source: std::io::Error },
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
}

/// Builds the store a config names. The local directory store always fsyncs files and their
/// directories before a put returns (`object_store` does not by default).
pub fn build(config: &config::ObjectStoreConfig) -> Result<Arc<dyn ObjectStore>, BuildError> {
    Ok(match config {
        config::ObjectStoreConfig::Local(c) => {
            std::fs::create_dir_all(&c.path).map_err(|source| BuildError::LocalDir {
                path: c.path.display().to_string(),
                source,
            })?;
            Arc::new(LocalFileSystem::new_with_prefix(&c.path)?.with_fsync(true))
        }
        config::ObjectStoreConfig::S3(c) => {
            let mut b = AmazonS3Builder::new()
                .with_bucket_name(&c.bucket)
                .with_region(&c.region)
                .with_allow_http(c.allow_http)
                .with_virtual_hosted_style_request(!c.path_style);
            if let Some(e) = &c.endpoint {
                b = b.with_endpoint(e);
            }
            if let (Some(id), Some(secret)) = (&c.access_key_id, &c.secret_access_key) {
                b = b.with_access_key_id(id).with_secret_access_key(secret);
            }
            let s3 = b.build()?;
            if c.prefix.is_empty() {
                Arc::new(s3)
            } else {
                Arc::new(PrefixStore::new(s3, c.prefix.as_str()))
            }
        }
        config::ObjectStoreConfig::Memory => Arc::new(InMemory::new()),
    })
}

/// Writes a write-once object: succeeds only if nothing exists at `path` yet. A second writer
/// gets `object_store::Error::AlreadyExists`; exactly one of any number of racing creators
/// wins (S3 `If-None-Match: *`, an atomic link on the local filesystem).
pub async fn put_create_only(
    store: &dyn ObjectStore,
    path: &Path,
    payload: Bytes,
) -> object_store::Result<PutResult> {
    let opts = PutOptions { mode: PutMode::Create, ..Default::default() };
    store.put_opts(path, PutPayload::from(payload), opts).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn create_only_put_refuses_an_existing_object() -> anyhow::Result<()> {
        let store = build(&config::ObjectStoreConfig::Memory)?;
        let p = Path::from("a/b");
        put_create_only(store.as_ref(), &p, Bytes::from_static(b"one")).await?;
        let second = put_create_only(store.as_ref(), &p, Bytes::from_static(b"two")).await;
        assert!(matches!(second, Err(object_store::Error::AlreadyExists { .. })), "{second:?}");
        assert_eq!(store.get(&p).await?.bytes().await?, Bytes::from_static(b"one"));
        Ok(())
    }

    #[test]
    fn local_store_on_a_file_path_is_a_clear_error() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x")?;
        let cfg = config::ObjectStoreConfig::Local(config::LocalStoreConfig { path: file.clone() });
        let err = build(&cfg).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(&file.display().to_string()), "{err}");
        Ok(())
    }
}
