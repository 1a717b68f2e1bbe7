//! Lakelog configuration.
//!
//! Owns every typed config section and is the ONLY crate that parses YAML. A config file is
//! read into a YAML tree, the environment overrides in [`ENV_OVERRIDES`] are applied to that
//! tree, and the tree is deserialized with unknown keys denied, then validated. Every error is
//! one line naming the file and the key path (`lakelog.yaml: object_store.s3.bukcet: unknown
//! field ...`); nothing here panics on input.
//!
//! Depends on no other Lakelog crate; the metadata, object-store and telemetry crates depend on
//! it for their sections.

pub mod latency;
mod sections;
mod tls;
pub mod units;

use std::fmt::Display;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_norway::Value;

pub use sections::*;
pub use tls::{AuthSection, ClientAuth, TlsConfig, url_of};
pub use units::{ByteSize, Duration};

/// One environment variable that overrides one config key.
#[derive(Debug, Clone, Copy)]
pub struct EnvOverride {
    /// The variable's name.
    pub var: &'static str,
    /// The dotted key path it sets.
    pub key: &'static str,
    /// Whether the value is a comma-separated list.
    pub list: bool,
    /// What it is for, as the README documents it.
    pub doc: &'static str,
}

/// The one documented list of environment overrides. A set variable replaces the key's value
/// (creating the sections on its path), before validation, so an override is checked exactly
/// like a value in the file.
pub const ENV_OVERRIDES: &[EnvOverride] = &[
    EnvOverride {
        var: "LAKELOG_CLUSTER",
        key: "cluster",
        list: false,
        doc: "cluster name: the metadata key prefix",
    },
    EnvOverride {
        var: "LAKELOG_ETCD_ENDPOINTS",
        key: "metadata.etcd.endpoints",
        list: true,
        doc: "comma-separated etcd endpoints",
    },
    EnvOverride {
        var: "LAKELOG_S3_ENDPOINT",
        key: "object_store.s3.endpoint",
        list: false,
        doc: "S3 endpoint URL",
    },
    EnvOverride {
        var: "LAKELOG_S3_BUCKET",
        key: "object_store.s3.bucket",
        list: false,
        doc: "S3 bucket",
    },
    EnvOverride {
        var: "LAKELOG_S3_ACCESS_KEY_ID",
        key: "object_store.s3.access_key_id",
        list: false,
        doc: "S3 access key id",
    },
    EnvOverride {
        var: "LAKELOG_S3_SECRET_ACCESS_KEY",
        key: "object_store.s3.secret_access_key",
        list: false,
        doc: "S3 secret access key",
    },
    EnvOverride {
        var: "LAKELOG_WRITER_LISTEN",
        key: "writer.listen",
        list: false,
        doc: "the writer's gRPC address, e.g. `0.0.0.0:7540` in a container",
    },
    EnvOverride {
        var: "LAKELOG_WRITER_ID",
        key: "writer.id",
        list: false,
        doc: "this writer's id, unique among live writers",
    },
    EnvOverride {
        var: "LAKELOG_READER_LISTEN",
        key: "reader.listen",
        list: false,
        doc: "the reader's gRPC address",
    },
    EnvOverride {
        var: "LAKELOG_READER_ID",
        key: "reader.id",
        list: false,
        doc: "this reader's id",
    },
    EnvOverride {
        var: "LAKELOG_CATALOG_LISTEN",
        key: "catalog.listen",
        list: false,
        doc: "the catalog's gRPC address",
    },
    EnvOverride {
        var: "LAKELOG_METRICS_LISTEN",
        key: "telemetry.metrics_listen",
        list: false,
        doc: "where `/metrics` is served, e.g. `0.0.0.0:9540`",
    },
    EnvOverride {
        var: "LAKELOG_MAINTENANCE_LISTEN",
        key: "maintenance.listen",
        list: false,
        doc: "where the compactor and cleaner serve their gRPC API and health",
    },
    EnvOverride {
        var: "LAKELOG_KAFKA_LISTEN",
        key: "writer.kafka.listen",
        list: false,
        doc: "the writer's Kafka listener (sets up `writer.kafka`)",
    },
    EnvOverride {
        var: "LAKELOG_KAFKA_ADVERTISE",
        key: "writer.kafka.advertise",
        list: false,
        doc: "the `host:port` Kafka clients are told to use (a pod's own address)",
    },
    EnvOverride {
        var: "LAKELOG_READER_KAFKA_LISTEN",
        key: "reader.kafka.listen",
        list: false,
        doc: "the reader's read-only Kafka listener (sets up `reader.kafka`)",
    },
    EnvOverride {
        var: "LAKELOG_READER_KAFKA_ADVERTISE",
        key: "reader.kafka.advertise",
        list: false,
        doc: "the `host:port` Kafka clients are told to use for this reader",
    },
    EnvOverride {
        var: "LAKELOG_WRITER_ADVERTISE",
        key: "writer.advertise",
        list: false,
        doc: "the URL clients reach this writer at (a pod's own address)",
    },
    EnvOverride {
        var: "LAKELOG_READER_ADVERTISE",
        key: "reader.advertise",
        list: false,
        doc: "the URL clients reach this reader at",
    },
    EnvOverride {
        var: "LAKELOG_CATALOG_ADVERTISE",
        key: "catalog.advertise",
        list: false,
        doc: "the URL clients reach this catalog at",
    },
    EnvOverride {
        var: "LAKELOG_LOG_LEVEL",
        key: "telemetry.log_level",
        list: false,
        doc: "tracing filter, e.g. `info` or `lakelog=debug`",
    },
    EnvOverride {
        var: "LAKELOG_OTLP_ENDPOINT",
        key: "telemetry.otlp_endpoint",
        list: false,
        doc: "OTLP/gRPC trace collector URL",
    },
];

/// A config that could not be loaded. `Display` is one line naming the file and, where there
/// is one, the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {source}")]
    Read { file: String, source: std::io::Error },
    #[error("{file}: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: {key}: {message}")]
    Invalid { file: String, key: String, message: String },
}

/// A value that is well-formed YAML but not a usable setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// Dotted key path.
    pub key: String,
    pub message: String,
}

impl Invalid {
    pub fn new(key: impl Into<String>, message: impl Display) -> Self {
        Invalid { key: key.into(), message: message.to_string() }
    }
}

/// Checks that go beyond types: ranges, non-empty lists, consistent settings.
pub trait Validate {
    fn validate(&self) -> Result<(), Invalid>;
}

/// Reads `path`, applies the process environment's overrides, deserializes and validates.
pub fn load_file<T: DeserializeOwned + Validate>(path: &Path) -> Result<T, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { file: file.clone(), source })?;
    from_yaml(&file, &text, |var| std::env::var(var).ok())
}

/// Parses `text` (named `file` in errors), applying the overrides `env` returns.
pub fn from_yaml<T, E>(file: &str, text: &str, env: E) -> Result<T, ConfigError>
where
    T: DeserializeOwned + Validate,
    E: Fn(&str) -> Option<String>,
{
    let mut tree: Value = serde_norway::from_str(text)
        .map_err(|e| ConfigError::Syntax { file: file.to_owned(), message: e.to_string() })?;
    if tree.is_null() {
        tree = Value::Mapping(Default::default());
    }
    for o in ENV_OVERRIDES {
        if let Some(value) = env(o.var) {
            apply_override(&mut tree, o, &value).map_err(|message| ConfigError::Invalid {
                file: file.to_owned(),
                key: o.key.to_owned(),
                message: format!("from {}: {message}", o.var),
            })?;
        }
    }
    let config: T = serde_path_to_error::deserialize(tree).map_err(|e| {
        let key = e.path().to_string();
        let message = e.into_inner().to_string();
        ConfigError::Invalid { file: file.to_owned(), key, message }
    })?;
    config.validate().map_err(|i| ConfigError::Invalid {
        file: file.to_owned(),
        key: i.key,
        message: i.message,
    })?;
    Ok(config)
}

fn apply_override(tree: &mut Value, o: &EnvOverride, raw: &str) -> Result<(), String> {
    let value = if o.list {
        Value::Sequence(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_owned()))
                .collect(),
        )
    } else {
        Value::String(raw.to_owned())
    };
    let mut node = tree;
    let mut parts = o.key.split('.').peekable();
    while let Some(part) = parts.next() {
        if node.is_null() {
            *node = Value::Mapping(Default::default());
        }
        let Value::Mapping(map) = node else {
            return Err(format!("`{part}` sits under a key that is not a section"));
        };
        let key = Value::String(part.to_owned());
        if parts.peek().is_none() {
            map.insert(key, value);
            return Ok(());
        }
        node = map.entry(key).or_insert(Value::Null);
    }
    Ok(())
}

/// A path that, when relative, is taken relative to the config file's folder.
pub fn resolve_relative(config_file: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_owned();
    }
    config_file.parent().map(|dir| dir.join(path)).unwrap_or_else(|| path.to_owned())
}

#[cfg(test)]
mod tests;
