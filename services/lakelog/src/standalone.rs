//! `lakelog standalone`: every role in one process on one port, over the embedded metadata
//! store and a local object directory.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

/// The config `standalone` and `--data-dir` commands use: the embedded metadata store and a
/// local object directory inside `dir`, cluster `lakelog`.
pub(crate) fn data_dir_node(dir: &std::path::Path) -> config::NodeConfig {
    config::NodeConfig {
        cluster: "lakelog".to_owned(),
        metadata: config::MetadataConfig::Embedded(config::EmbeddedConfig {
            path: dir.join("meta.redb"),
        }),
        object_store: config::ObjectStoreConfig::Local(config::LocalStoreConfig {
            path: dir.join("objects"),
        }),
        telemetry: Default::default(),
        writer: Default::default(),
        catalog: Default::default(),
        reader: Default::default(),
        maintenance: Default::default(),
        auth: Default::default(),
        latency: None,
    }
}

/// `standalone`'s default `writer.min_flush_interval`: none. A waiting append is flushed as soon
/// as the previous flush's file is written (one at a time: appends gather meanwhile), so a
/// light load is acknowledged in about one file write and one metadata commit, and a heavy one
/// in few, large files.
const STANDALONE_MIN_FLUSH_INTERVAL: std::time::Duration = std::time::Duration::ZERO;

/// `standalone`'s default `writer.commit_interval`: commit rounds back to back. The embedded
/// store serves this process alone, so no budget shares it (etcd's is at least 5ms).
const STANDALONE_COMMIT_INTERVAL: std::time::Duration = std::time::Duration::ZERO;

/// The standalone's settings: the file's (or the defaults), with the Kafka listener from
/// `--kafka-listen` (`off` for none).
pub(crate) fn tuned(
    file: Option<&std::path::Path>,
    kafka_listen: &str,
) -> anyhow::Result<config::StandaloneConfig> {
    let mut tuned = match file {
        Some(file) => config::load_file::<config::StandaloneConfig>(file)?,
        None => config::StandaloneConfig::default(),
    };
    tuned.writer.kafka = match kafka_listen {
        "off" => None,
        addr => {
            let listen: SocketAddr = addr.parse().map_err(|_| {
                anyhow::anyhow!(
                    "INVALID_ARGUMENT: --kafka-listen `{addr}` is neither host:port nor off"
                )
            })?;
            let from_file = tuned.writer.kafka.take();
            Some(config::KafkaSection {
                listen,
                ..from_file.unwrap_or_else(|| config::KafkaSection::on(listen))
            })
        }
    };
    Ok(tuned)
}

pub(crate) async fn standalone(
    data_dir: PathBuf,
    listen: SocketAddr,
    tuned: config::StandaloneConfig,
    latency: Option<config::latency::LatencyProfile>,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        tuned.maintenance.listen.is_none(),
        "INVALID_ARGUMENT: maintenance.listen does not apply to standalone: every role serves on --listen"
    );
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("data dir {}", data_dir.display()))?;
    let mut telemetry = tuned.telemetry;
    if let Ok(level) = std::env::var("LAKELOG_LOG_LEVEL") {
        telemetry.log_level = level;
    }
    // A local directory: a PUT is cheap, so flush eagerly and commit back to back by default.
    // Under a latency profile the stores stand for a cluster's: its roles' defaults apply.
    let local = latency.is_none();
    let node = config::NodeConfig {
        telemetry,
        writer: config::WriterSection {
            listen,
            min_flush_interval: tuned
                .writer
                .min_flush_interval
                .or(local.then_some(config::Duration(STANDALONE_MIN_FLUSH_INTERVAL))),
            // Locally one file at a time (appends gather meanwhile: fewer files, less CPU),
            // and a local file is not worth a second copy.
            eager_puts: tuned.writer.eager_puts.or(local.then_some(1)),
            hedge_quantile: tuned.writer.hedge_quantile.or(local.then_some(0.0)),
            commit_interval: tuned
                .writer
                .commit_interval
                .or(local.then_some(config::Duration(STANDALONE_COMMIT_INTERVAL))),
            ..tuned.writer
        },
        maintenance: tuned.maintenance,
        auth: tuned.auth,
        latency,
        ..data_dir_node(&data_dir)
    };
    let _telemetry = telemetry::init(&node.telemetry, "standalone")?;
    let url = config::url_of(listen, &node.writer.tls);
    match &node.writer.kafka {
        Some(k) => eprintln!(
            "lakelog standalone: serving on {url} (Kafka on {}), data in {}",
            k.listen,
            data_dir.display()
        ),
        None => eprintln!("lakelog standalone: serving on {url}, data in {}", data_dir.display()),
    }
    if let Some(p) = &node.latency {
        eprintln!(
            "lakelog standalone: latency profile {} (objects {:?}/{:?} p50/p99, metadata {:?}/{:?}), benchmarks only",
            p.name, p.objects.p50, p.objects.p99, p.metadata.p50, p.metadata.p99
        );
    }
    // One port serves every role: the writer's LogService, the catalog, the compactor's and the
    // cleaner's services; SIGTERM waits for a maintenance cycle under way, then the writer's
    // drain.
    writer::run_with(&node, "standalone", crate::shutdown_signal(), |storage, role| {
        let catalog =
            catalog::Catalog::new(storage.metadata(), storage.reader().clone(), &node.cluster)
                .with_followed_streams();
        catalog_service::install(role, catalog.clone(), &node.object_store);
        let base_uri = objstore::base_uri(&node.object_store);
        compactor::install(role, catalog, "standalone".to_owned(), &node.maintenance, base_uri);
        cleaner::install(role, storage.reader().clone(), &node.maintenance);
    })
    .await?;
    Ok(())
}
