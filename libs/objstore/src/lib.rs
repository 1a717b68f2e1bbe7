//! Lakelog's object storage.
//!
//! Owns how an `Arc<dyn ObjectStore>` is built from config ([`build`]: local directory with
//! fsync, whose plain puts and long reads [`local`] does with direct I/O, S3-compatible, or in-memory for unit
//! tests), the ONE module that lays out object keys ([`keys`]), the create-only put every
//! write-once object goes through ([`put_create_only`]), and a fault-injecting wrapper for
//! tests ([`faults`]).
//!
//! Depends on no Lakelog crate but `config`. Everything else reaches object storage through
//! the `object_store` trait, so adapters (prefix, metrics, faults) stack freely.

pub mod counting;
pub mod faults;
pub mod keys;
pub mod latency;
pub mod local;

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
    /// The S3 config names no way to authenticate, or names one whose inputs are missing.
    #[error("object_store.s3: {0}")]
    Credentials(String),
    /// `object_store.s3.tls.ca` cannot be read or holds no certificate.
    #[error("object_store.s3.tls.ca {path}: {message}")]
    Ca { path: String, message: String },
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
            Arc::new(local::LocalStore::new(
                LocalFileSystem::new_with_prefix(&c.path)?.with_fsync(true),
            ))
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
            b = with_credentials(b, c, |var| std::env::var(var).ok())?;
            if let Some(ca) = c.tls.as_ref().and_then(|t| t.ca.as_ref()) {
                b = b.with_client_options(trusting(ca)?);
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

/// HTTP client options that trust the CA certificates of `ca` beside the system's roots.
fn trusting(ca: &std::path::Path) -> Result<object_store::ClientOptions, BuildError> {
    let failed = |message: String| BuildError::Ca { path: ca.display().to_string(), message };
    let pem = std::fs::read(ca).map_err(|e| failed(e.to_string()))?;
    let certs =
        object_store::Certificate::from_pem_bundle(&pem).map_err(|e| failed(e.to_string()))?;
    if certs.is_empty() {
        return Err(failed("no CERTIFICATE in the file".to_owned()));
    }
    Ok(certs
        .into_iter()
        .fold(object_store::ClientOptions::new(), |o, c| o.with_root_certificate(c)))
}

/// The URI the store's root has for engines outside Lakelog (a lake table's file paths):
/// `file:///abs/dir`, `s3://bucket/prefix`, or `memory://` (a store no other process sees).
pub fn base_uri(config: &config::ObjectStoreConfig) -> String {
    match config {
        config::ObjectStoreConfig::Local(c) => {
            let path = std::path::absolute(&c.path).unwrap_or_else(|_| c.path.clone());
            format!("file://{}", path.display().to_string().trim_end_matches('/'))
        }
        config::ObjectStoreConfig::S3(c) => {
            let prefix = c.prefix.trim_matches('/');
            if prefix.is_empty() {
                format!("s3://{}", c.bucket)
            } else {
                format!("s3://{}/{prefix}", c.bucket)
            }
        }
        config::ObjectStoreConfig::Memory => "memory://".to_owned(),
    }
}

/// Sets how the S3 client authenticates, exactly as the config says (`env` reads the process
/// environment). `object_store` on its own falls back to the cloud's instance-metadata
/// endpoint when no keys are given; here that happens only with `credentials: instance`.
fn with_credentials(
    b: AmazonS3Builder,
    c: &config::S3Config,
    env: impl Fn(&str) -> Option<String>,
) -> Result<AmazonS3Builder, BuildError> {
    use config::S3Credentials;
    use object_store::aws::AmazonS3ConfigKey as Key;
    let missing = |what: &str| BuildError::Credentials(what.to_owned());
    let keys = (c.access_key_id.as_deref(), c.secret_access_key.as_deref());
    match c.credentials {
        S3Credentials::Keys => match keys {
            (Some(id), Some(secret)) if !id.is_empty() && !secret.is_empty() => {
                Ok(b.with_access_key_id(id).with_secret_access_key(secret))
            }
            (id, secret) => {
                let mut unset = Vec::new();
                if id.is_none_or(str::is_empty) {
                    unset.push("access_key_id (or LAKELOG_S3_ACCESS_KEY_ID)");
                }
                if secret.is_none_or(str::is_empty) {
                    unset.push("secret_access_key (or LAKELOG_S3_SECRET_ACCESS_KEY)");
                }
                Err(BuildError::Credentials(format!(
                    "no credentials: {} not set; set them, or `credentials: instance` or \
                     `credentials: web_identity` to use the cloud's",
                    unset.join(" and ")
                )))
            }
        },
        S3Credentials::Instance | S3Credentials::WebIdentity if keys != (None, None) => {
            Err(missing(
                "access_key_id / secret_access_key are set, but credentials says they are not \
                 used: remove them, or `credentials: keys`",
            ))
        }
        S3Credentials::Instance => {
            // An ECS task role's endpoint when the container has one; else EC2's metadata.
            let mut b = b;
            for (var, key) in [
                ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", Key::ContainerCredentialsRelativeUri),
                ("AWS_CONTAINER_CREDENTIALS_FULL_URI", Key::ContainerCredentialsFullUri),
            ] {
                if let Some(v) = env(var) {
                    b = b.with_config(key, v);
                }
            }
            Ok(b)
        }
        S3Credentials::WebIdentity => {
            let (Some(token), Some(role)) =
                (env("AWS_WEB_IDENTITY_TOKEN_FILE"), env("AWS_ROLE_ARN"))
            else {
                return Err(missing(
                    "credentials: web_identity needs AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN \
                     in the environment",
                ));
            };
            let mut b =
                b.with_config(Key::WebIdentityTokenFile, token).with_config(Key::RoleArn, role);
            if let Some(name) = env("AWS_ROLE_SESSION_NAME") {
                b = b.with_config(Key::RoleSessionName, name);
            }
            Ok(b)
        }
    }
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

    fn s3(
        id: Option<&str>,
        secret: Option<&str>,
        credentials: config::S3Credentials,
    ) -> config::S3Config {
        config::S3Config {
            endpoint: Some("http://127.0.0.1:9".to_owned()),
            bucket: "b".to_owned(),
            region: "us-east-1".to_owned(),
            access_key_id: id.map(str::to_owned),
            secret_access_key: secret.map(str::to_owned),
            credentials,
            allow_http: true,
            path_style: true,
            prefix: String::new(),
            tls: None,
        }
    }

    fn credentials_error(c: &config::S3Config, env: &[(&str, &str)]) -> Option<String> {
        let env = |var: &str| env.iter().find(|(k, _)| *k == var).map(|(_, v)| (*v).to_owned());
        with_credentials(AmazonS3Builder::new(), c, env).err().map(|e| e.to_string())
    }

    #[test]
    fn an_s3_store_without_credentials_is_refused_naming_what_is_missing() {
        use config::S3Credentials::*;
        let none = credentials_error(&s3(None, None, Keys), &[]).unwrap_or_default();
        assert!(
            none.starts_with("object_store.s3: no credentials")
                && none.contains("access_key_id (or LAKELOG_S3_ACCESS_KEY_ID)")
                && none.contains("secret_access_key (or LAKELOG_S3_SECRET_ACCESS_KEY)")
                && !none.contains('\n'),
            "{none}"
        );
        let no_secret = credentials_error(&s3(Some("id"), None, Keys), &[]).unwrap_or_default();
        assert!(no_secret.contains("secret_access_key") && !no_secret.contains("access_key_id ("));
        let empty = credentials_error(&s3(Some(""), Some("s"), Keys), &[]).unwrap_or_default();
        assert!(empty.contains("access_key_id (or"), "{empty}");
        assert_eq!(credentials_error(&s3(Some("id"), Some("s"), Keys), &[]), None);
        // The cloud's credentials only when asked for, and then without keys.
        assert_eq!(credentials_error(&s3(None, None, Instance), &[]), None);
        let both = credentials_error(&s3(Some("id"), Some("s"), Instance), &[]).unwrap_or_default();
        assert!(both.contains("credentials says they are not used"), "{both}");
        let web = credentials_error(&s3(None, None, WebIdentity), &[]).unwrap_or_default();
        assert!(web.contains("AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN"), "{web}");
        let env =
            [("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"), ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r")];
        assert_eq!(credentials_error(&s3(None, None, WebIdentity), &env), None);
        // And `build` refuses before any client exists.
        let built = build(&config::ObjectStoreConfig::S3(s3(None, None, Keys)));
        assert!(matches!(built, Err(BuildError::Credentials(_))));
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
