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
    }
}

/// `standalone`'s default `writer.min_flush_interval`: light loads are acknowledged in about
/// one file write and one metadata commit; at most 200 WAL objects a second (one per
/// `flush_interval`, if that is shorter).
const STANDALONE_MIN_FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

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
    let node = config::NodeConfig {
        telemetry,
        writer: config::WriterSection {
            listen,
            // A local directory: a PUT is cheap, so flush eagerly by default.
            min_flush_interval: tuned.writer.min_flush_interval.or(Some(config::Duration(
                STANDALONE_MIN_FLUSH_INTERVAL.min(tuned.writer.flush_interval.0),
            ))),
            ..tuned.writer
        },
        maintenance: tuned.maintenance,
        auth: tuned.auth,
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
