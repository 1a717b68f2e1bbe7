use std::collections::HashMap;

use super::*;

fn parse(text: &str) -> Result<NodeConfig, ConfigError> {
    from_yaml("node.yaml", text, |_| None)
}

fn parse_env(text: &str, env: &[(&str, &str)]) -> Result<NodeConfig, ConfigError> {
    let env: HashMap<String, String> =
        env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    from_yaml("node.yaml", text, |k| env.get(k).cloned())
}

/// The one-line message of a config that must fail.
fn err_of<T>(r: Result<T, ConfigError>) -> String {
    r.err().map(|e| e.to_string()).unwrap_or_default()
}

const GOOD: &str = "
cluster: prod
metadata:
  etcd:
    endpoints: [http://127.0.0.1:2379]
    request_timeout: 2s
object_store:
  s3:
    endpoint: http://127.0.0.1:8333
    bucket: logs
    allow_http: true
    access_key_id: k
    secret_access_key: s
telemetry:
  log_format: json
";

#[test]
fn node_config_parses_typed_values_and_defaults() -> Result<(), ConfigError> {
    let c = parse(GOOD)?;
    assert_eq!(c.cluster, "prod");
    let MetadataConfig::Etcd(etcd) = &c.metadata else { unreachable!("etcd section given") };
    assert_eq!(etcd.request_timeout.0, std::time::Duration::from_secs(2));
    assert_eq!(etcd.connect_timeout.0, std::time::Duration::from_secs(3));
    let ObjectStoreConfig::S3(s3) = &c.object_store else { unreachable!("s3 section given") };
    assert_eq!(s3.region, "us-east-1");
    assert!(s3.path_style);
    assert_eq!(c.telemetry.log_format, LogFormat::Json);
    assert_eq!(c.telemetry.log_level, "info");
    Ok(())
}

#[test]
fn unknown_key_error_names_file_and_key_path() {
    let text = GOOD.replace("    bucket: logs", "    bucket: logs\n    bukcet: typo");
    let err = err_of(parse(&text));
    assert!(err.starts_with("node.yaml: object_store.s3.bukcet: unknown field `bukcet`"), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
}

#[test]
fn unknown_top_level_key_is_rejected() {
    let err = err_of(parse(&format!("{GOOD}\nwriters: 3\n")));
    assert!(err.starts_with("node.yaml: "), "{err}");
    assert!(err.contains("unknown field `writers`"), "{err}");
}

#[test]
fn malformed_yaml_is_one_line_naming_the_file() {
    let err = err_of(parse("metadata: [unclosed\n  etcd: {"));
    assert!(err.starts_with("node.yaml: "), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
}

#[test]
fn bad_unit_names_the_key() {
    let text = GOOD.replace("request_timeout: 2s", "request_timeout: 2 fortnights");
    let err = err_of(parse(&text));
    assert!(err.starts_with("node.yaml: metadata.etcd.request_timeout: "), "{err}");
}

#[test]
fn validation_rejects_plain_http_without_allow_http() {
    let text = GOOD.replace("    allow_http: true\n", "");
    let err = err_of(parse(&text));
    assert!(err.starts_with("node.yaml: object_store.s3.endpoint: "), "{err}");
    assert!(err.contains("allow_http"), "{err}");
}

#[test]
fn validation_rejects_empty_endpoints_and_bad_cluster() {
    let text = GOOD.replace("[http://127.0.0.1:2379]", "[]");
    let err = err_of(parse(&text));
    assert!(err.starts_with("node.yaml: metadata.etcd.endpoints: "), "{err}");
    let text = GOOD.replace("cluster: prod", "cluster: a/b");
    let err = err_of(parse(&text));
    assert!(err.starts_with("node.yaml: cluster: "), "{err}");
}

#[test]
fn env_overrides_replace_values_and_build_missing_sections() -> Result<(), ConfigError> {
    let text = "metadata:\n  embedded:\n    path: meta.redb\nobject_store:\n  memory: {}\n";
    let c = parse_env(text, &[("LAKELOG_CLUSTER", "staging"), ("LAKELOG_LOG_LEVEL", "debug")])?;
    assert_eq!(c.cluster, "staging");
    assert_eq!(c.telemetry.log_level, "debug");

    let c = parse_env(GOOD, &[("LAKELOG_ETCD_ENDPOINTS", "http://a:1, http://b:2")])?;
    let MetadataConfig::Etcd(etcd) = &c.metadata else { unreachable!("etcd section given") };
    assert_eq!(etcd.endpoints, vec!["http://a:1".to_owned(), "http://b:2".to_owned()]);

    let c = parse_env(GOOD, &[("LAKELOG_WRITER_ADVERTISE", "http://10.0.0.7:7540")])?;
    assert_eq!(c.writer.advertise.as_deref(), Some("http://10.0.0.7:7540"));
    let err = err_of(parse_env(GOOD, &[("LAKELOG_READER_ADVERTISE", "not a url")]));
    assert!(err.starts_with("node.yaml: reader.advertise"), "{err}");

    // A container's addresses: listen on every interface, under a stable id.
    let c = parse_env(
        GOOD,
        &[
            ("LAKELOG_WRITER_LISTEN", "0.0.0.0:7540"),
            ("LAKELOG_WRITER_ID", "writer-2"),
            ("LAKELOG_READER_LISTEN", "0.0.0.0:7542"),
            ("LAKELOG_CATALOG_LISTEN", "0.0.0.0:7541"),
            ("LAKELOG_METRICS_LISTEN", "0.0.0.0:9540"),
            ("LAKELOG_MAINTENANCE_LISTEN", "0.0.0.0:7543"),
        ],
    )?;
    assert_eq!(c.maintenance.listen.map(|a| a.to_string()).as_deref(), Some("0.0.0.0:7543"));
    assert_eq!(c.writer.listen.to_string(), "0.0.0.0:7540");
    assert_eq!(c.writer.id.as_deref(), Some("writer-2"));
    assert_eq!(c.reader.listen.to_string(), "0.0.0.0:7542");
    assert_eq!(c.catalog.listen.to_string(), "0.0.0.0:7541");
    assert_eq!(c.telemetry.metrics_listen.map(|a| a.to_string()).as_deref(), Some("0.0.0.0:9540"));
    let err = err_of(parse_env(GOOD, &[("LAKELOG_WRITER_LISTEN", "everywhere")]));
    assert!(err.starts_with("node.yaml: writer.listen"), "{err}");
    Ok(())
}

/// The README's table of environment overrides lists each one, with its key.
#[test]
fn readme_documents_every_env_override() {
    let readme = include_str!("../../../README.md");
    for o in ENV_OVERRIDES {
        let row = format!("| `{}` | `{}`", o.var, o.key);
        assert!(readme.contains(&row), "README lacks the row {row}");
    }
}

#[test]
fn env_override_is_validated_like_the_file() {
    let err = err_of(parse_env(GOOD, &[("LAKELOG_S3_ENDPOINT", "ftp://x")]));
    assert!(err.starts_with("node.yaml: object_store.s3.endpoint: "), "{err}");
}

#[test]
fn env_override_under_a_scalar_is_a_clear_error() {
    let text = "metadata:\n  embedded:\n    path: x\nobject_store:\n  memory: {}\ntelemetry: 3\n";
    let err = err_of(parse_env(text, &[("LAKELOG_LOG_LEVEL", "debug")]));
    assert!(err.starts_with("node.yaml: telemetry.log_level: from LAKELOG_LOG_LEVEL"), "{err}");
}

#[test]
fn load_file_reports_a_missing_file_by_name() {
    let err = err_of(load_file::<NodeConfig>(std::path::Path::new("/nonexistent/lakelog.yaml")));
    assert!(err.starts_with("/nonexistent/lakelog.yaml: cannot read"), "{err}");
}

#[test]
fn secrets_are_redacted_in_debug_output() -> Result<(), ConfigError> {
    let c = parse(GOOD)?;
    let shown = format!("{c:?}");
    assert!(!shown.contains("secret_access_key: Some(\"s\")"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
    Ok(())
}

#[test]
fn two_backends_in_one_section_is_an_error() {
    let text = GOOD.replace("object_store:\n", "object_store:\n  memory: {}\n");
    let err = err_of(parse(&text));
    assert!(err.starts_with("node.yaml: object_store: set exactly one of"), "{err}");
}

#[test]
fn deploy_example_config_parses() -> Result<(), ConfigError> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/config/node.example.yaml");
    let c: NodeConfig =
        from_yaml(path, include_str!("../../../deploy/config/node.example.yaml"), |_| None)?;
    assert!(matches!(c.metadata, MetadataConfig::Etcd(_)));
    assert!(matches!(c.object_store, ObjectStoreConfig::S3(_)));
    assert_eq!(c.catalog.listen.port(), 7541);
    assert_eq!(c.maintenance.min_chunks, 16);
    assert_eq!(c.maintenance.grace.0, std::time::Duration::from_secs(600));
    Ok(())
}

#[test]
fn every_role_example_config_parses_and_validates() -> Result<(), ConfigError> {
    let roles: [(&str, &str); 5] = [
        ("catalog.yaml", include_str!("../../../deploy/config/catalog.yaml")),
        ("writer.yaml", include_str!("../../../deploy/config/writer.yaml")),
        ("reader.yaml", include_str!("../../../deploy/config/reader.yaml")),
        ("compactor.yaml", include_str!("../../../deploy/config/compactor.yaml")),
        ("cleaner.yaml", include_str!("../../../deploy/config/cleaner.yaml")),
    ];
    let mut ports = std::collections::HashSet::new();
    for (name, text) in roles {
        let c: NodeConfig = from_yaml(name, text, |_| None)?;
        let port = c.telemetry.metrics_listen.map(|a| a.port());
        assert!(
            port.is_some_and(|p| ports.insert(p)),
            "{name}: metrics port {port:?} missing or shared"
        );
    }
    let standalone: StandaloneConfig = from_yaml(
        "standalone.yaml",
        include_str!("../../../deploy/config/standalone.yaml"),
        |_| None,
    )?;
    assert_eq!(standalone.maintenance.interval.0, std::time::Duration::from_secs(60));
    let secure: StandaloneConfig = from_yaml(
        "standalone-secure.yaml",
        include_str!("../../../deploy/config/standalone-secure.yaml"),
        |_| None,
    )?;
    assert!(secure.auth.enabled && secure.writer.tls.is_some());
    assert!(secure.writer.kafka.as_ref().is_some_and(|k| k.tls.is_some()));
    Ok(())
}

#[test]
fn a_bad_maintenance_section_is_named() {
    let yaml = GOOD.to_owned() + "maintenance:\n  min_chunks: 0\n";
    let err = err_of(from_yaml::<NodeConfig, _>("c.yaml", &yaml, |_| None));
    assert!(err.starts_with("c.yaml: maintenance.min_chunks:"), "{err}");
    let yaml = GOOD.to_owned() + "maintenance:\n  interval: 100ms\n";
    let err = err_of(from_yaml::<NodeConfig, _>("c.yaml", &yaml, |_| None));
    assert!(err.starts_with("c.yaml: maintenance.interval:"), "{err}");
    let yaml = GOOD.to_owned() + "maintenance:\n  target_segment_size: 64KiB\n";
    let err = err_of(from_yaml::<NodeConfig, _>("c.yaml", &yaml, |_| None));
    assert!(err.starts_with("c.yaml: maintenance.target_segment_size:"), "{err}");
}

#[test]
fn the_segment_size_defaults_to_64_mib_and_its_earlier_name_is_read() -> Result<(), ConfigError> {
    let c: NodeConfig = from_yaml("c.yaml", GOOD, |_| None)?;
    assert_eq!(c.maintenance.target_segment_size.0, 64 << 20);
    let yaml = GOOD.to_owned() + "maintenance:\n  max_segment_size: 8MiB\n";
    let c: NodeConfig = from_yaml("c.yaml", &yaml, |_| None)?;
    assert_eq!(c.maintenance.target_segment_size.0, 8 << 20);
    Ok(())
}

#[test]
fn a_bad_catalog_section_is_named() {
    let yaml = GOOD.to_owned() + "catalog:\n  advertise: not a url\n";
    let err = err_of(from_yaml::<NodeConfig, _>("c.yaml", &yaml, |_| None));
    assert!(err.starts_with("c.yaml: catalog.advertise:"), "{err}");
}

#[test]
fn load_file_names_the_file_and_key_of_an_unknown_key() -> Result<(), std::io::Error> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("writer.yaml");
    std::fs::write(&path, GOOD.replace("cluster: prod", "cluster: prod\nclustr: typo"))?;
    let err = err_of(load_file::<NodeConfig>(&path));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("{}: clustr: unknown field `clustr`", path.display())),
        "{err}"
    );
    Ok(())
}

#[test]
fn s3_credentials_default_to_keys_and_name_the_cloud_sources() -> Result<(), ConfigError> {
    let ObjectStoreConfig::S3(s3) = parse(GOOD)?.object_store else { unreachable!("s3 given") };
    assert_eq!(s3.credentials, S3Credentials::Keys);
    for (word, want) in
        [("instance", S3Credentials::Instance), ("web_identity", S3Credentials::WebIdentity)]
    {
        let text = GOOD
            .replace("    access_key_id: k\n    secret_access_key: s\n", "")
            .replace("    bucket: logs", &format!("    bucket: logs\n    credentials: {word}"));
        let ObjectStoreConfig::S3(s3) = parse(&text)?.object_store else { unreachable!() };
        assert_eq!((s3.credentials, s3.access_key_id), (want, None));
    }
    let err =
        err_of(parse(&GOOD.replace("    bucket: logs", "    bucket: logs\n    credentials: imds")));
    assert!(err.contains("object_store.s3.credentials") && err.contains("instance"), "{err}");
    Ok(())
}

#[test]
fn a_standalone_config_takes_the_writer_maintenance_and_telemetry_sections()
-> Result<(), ConfigError> {
    let c: StandaloneConfig = from_yaml(
        "standalone.yaml",
        "writer:\n  flush_interval: 20ms\n  buffer_size: 128MiB\nmaintenance:\n  interval: 5s\n",
        |_| None,
    )?;
    assert_eq!(c.writer.flush_interval.0, std::time::Duration::from_millis(20));
    assert_eq!(c.writer.buffer_size.0, 128 << 20);
    assert_eq!(c.maintenance.interval.0, std::time::Duration::from_secs(5));
    let empty: StandaloneConfig = from_yaml("standalone.yaml", "", |_| None)?;
    assert_eq!(empty.maintenance.min_chunks, MaintenanceSection::default().min_chunks);
    // Where data lives is the standalone's data dir, not the file's to say.
    let err = err_of(from_yaml::<StandaloneConfig, _>(
        "standalone.yaml",
        "object_store:\n  memory: {}\n",
        |_| None,
    ));
    assert!(err.contains("unknown field `object_store`"), "{err}");
    let err = err_of(from_yaml::<StandaloneConfig, _>(
        "standalone.yaml",
        "maintenance:\n  interval: 10ms\n",
        |_| None,
    ));
    assert!(err.contains("maintenance.interval"), "{err}");
    // The eager policy: unset unless given, and never slower than the flush interval; 0: no
    // spacing between flushes (one PUT out at a time still).
    assert_eq!(empty.writer.min_flush_interval, None);
    let eager: StandaloneConfig =
        from_yaml("standalone.yaml", "writer:\n  min_flush_interval: 2ms\n", |_| None)?;
    assert_eq!(
        eager.writer.min_flush_interval.map(|d| d.0),
        Some(std::time::Duration::from_millis(2))
    );
    let unspaced: StandaloneConfig =
        from_yaml("standalone.yaml", "writer:\n  min_flush_interval: 0ms\n", |_| None)?;
    assert_eq!(unspaced.writer.min_flush_interval.map(|d| d.0), Some(std::time::Duration::ZERO));
    let err = err_of(from_yaml::<StandaloneConfig, _>(
        "standalone.yaml",
        "writer:\n  min_flush_interval: 300ms\n",
        |_| None,
    ));
    assert!(err.contains("writer.min_flush_interval"), "{err}");
    // Hedging: a quantile from 0.5 up to (not with) 1, or 0 for off; unset: the role's default.
    assert_eq!(empty.writer.hedge_quantile, None);
    let off: StandaloneConfig =
        from_yaml("standalone.yaml", "writer:\n  hedge_quantile: 0\n", |_| None)?;
    assert_eq!(off.writer.hedge_quantile, Some(0.0));
    for bad in ["0.4", "1", "1.5", "-0.9"] {
        let err = err_of(from_yaml::<StandaloneConfig, _>(
            "standalone.yaml",
            &format!("writer:\n  hedge_quantile: {bad}\n"),
            |_| None,
        ));
        assert!(err.contains("writer.hedge_quantile"), "{bad}: {err}");
    }
    let err = err_of(from_yaml::<StandaloneConfig, _>(
        "standalone.yaml",
        "writer:\n  eager_puts: 0\n",
        |_| None,
    ));
    assert!(err.contains("writer.eager_puts"), "{err}");
    // The commit budget: unset (the flush cadence) unless given; 0 (rounds back to back) up to
    // an eighth of the flush deadline, and at least 5ms over etcd.
    assert_eq!(empty.writer.commit_interval, None);
    let back_to_back: StandaloneConfig =
        from_yaml("standalone.yaml", "writer:\n  commit_interval: 0ms\n", |_| None)?;
    assert_eq!(back_to_back.writer.commit_interval.map(|d| d.0), Some(std::time::Duration::ZERO));
    let err = err_of(parse(&format!("{GOOD}writer:\n  commit_interval: 4ms\n")));
    assert!(err.contains("writer.commit_interval") && err.contains("etcd"), "{err}");
    parse(&format!("{GOOD}writer:\n  commit_interval: 5ms\n"))?;
    let paced: StandaloneConfig =
        from_yaml("standalone.yaml", "writer:\n  commit_interval: 20ms\n", |_| None)?;
    assert_eq!(
        paced.writer.commit_interval.map(|d| d.0),
        Some(std::time::Duration::from_millis(20))
    );
    let err = err_of(from_yaml::<StandaloneConfig, _>(
        "standalone.yaml",
        "writer:\n  commit_interval: 10s\n",
        |_| None,
    ));
    assert!(err.contains("writer.commit_interval"), "{err}");
    Ok(())
}

#[test]
fn one_tls_shape_serves_every_section_and_each_misuse_is_named() -> Result<(), ConfigError> {
    let tls = "tls: {cert: /c.pem, key: /k.pem, ca: /ca.pem}";
    let yaml = format!(
        "{GOOD}writer:\n  {tls}\n  kafka:\n    listen: 127.0.0.1:9092\n    \
         tls: {{cert: /c.pem, key: /k.pem}}\n\
         reader:\n  {tls}\ncatalog:\n  {tls}\nmaintenance:\n  {tls}\n"
    );
    let c = parse(&yaml)?;
    let want = TlsConfig {
        cert: Some("/c.pem".into()),
        key: Some("/k.pem".into()),
        ca: Some("/ca.pem".into()),
        client_auth: ClientAuth::Required,
    };
    assert_eq!(c.writer.tls.as_ref(), Some(&want));
    assert_eq!(c.reader.tls.as_ref(), Some(&want));
    assert_eq!(c.catalog.tls.as_ref(), Some(&want));
    assert_eq!(c.maintenance.tls.as_ref(), Some(&want));
    let kafka = c.writer.kafka.as_ref().and_then(|k| k.tls.clone());
    assert_eq!(kafka, Some(TlsConfig { ca: None, ..want.clone() }));

    // A listener without its key; a client certificate without its key; client_auth on a
    // client; a CA file named empty.
    let bad = [
        ("catalog:\n  tls: {cert: /c.pem}\n", "catalog.tls:"),
        ("maintenance:\n  tls: {ca: /ca.pem}\n", "maintenance.tls:"),
        ("writer:\n  kafka: {listen: 127.0.0.1:1, tls: {key: /k}}\n", "writer.kafka.tls:"),
        ("reader:\n  tls: {cert: /c, key: /k, client_auth: sometimes}\n", "reader.tls.client_auth"),
        ("reader:\n  tls: {cert: /c, key: /k, ca: ''}\n", "reader.tls.ca:"),
    ];
    for (section, key) in bad {
        let err = err_of(parse(&format!("{GOOD}{section}")));
        assert!(err.starts_with(&format!("node.yaml: {key}")), "{section}: {err}");
    }
    let etcd = |endpoints: &str, tls: &str| {
        GOOD.replace("[http://127.0.0.1:2379]", endpoints)
            .replace("    request_timeout: 2s\n", &format!("    request_timeout: 2s\n{tls}"))
    };
    let ok = parse(&etcd("[https://e:2379]", "    tls: {ca: /ca, cert: /c, key: /k}\n"))?;
    let MetadataConfig::Etcd(e) = ok.metadata else { panic!("etcd") };
    assert_eq!(e.tls.and_then(|t| t.ca), Some("/ca".into()));
    for (endpoints, tls, key) in [
        ("[https://e:2379]", "", "metadata.etcd.tls:"),
        ("[http://e:2379]", "    tls: {ca: /ca}\n", "metadata.etcd.endpoints:"),
        ("[https://e:2379]", "    tls: {ca: /ca, cert: /c}\n", "metadata.etcd.tls:"),
        ("[https://e:2379]", "    tls: {ca: /ca, client_auth: optional}\n", "metadata.etcd.tls:"),
    ] {
        let err = err_of(parse(&etcd(endpoints, tls)));
        assert!(err.starts_with(&format!("node.yaml: {key}")), "{endpoints} {tls}: {err}");
    }
    let s3 = GOOD.replace("    allow_http: true\n", "    allow_http: true\n    tls: {ca: /ca}\n");
    let c = parse(&s3)?;
    let ObjectStoreConfig::S3(s) = c.object_store else { panic!("s3") };
    assert_eq!(s.tls.and_then(|t| t.ca), Some("/ca".into()));
    let s3 = GOOD
        .replace("    allow_http: true\n", "    allow_http: true\n    tls: {cert: /c, key: /k}\n");
    let err = err_of(parse(&s3));
    assert!(err.starts_with("node.yaml: object_store.s3.tls:"), "{err}");
    Ok(())
}

#[test]
fn a_kafka_listeners_request_budget_must_hold_its_largest_frame() -> Result<(), ConfigError> {
    let kafka = |extra: &str| format!("{GOOD}writer:\n  kafka: {{listen: 127.0.0.1:1{extra}}}\n");
    let c = parse(&kafka(""))?;
    let k = c.writer.kafka.as_ref().map(|k| (k.request_budget.0, k.max_request_size.0));
    assert_eq!(k, Some((100 << 20, 64 << 20)), "the defaults fit each other");
    let c = parse(&kafka(", max_connections_per_ip: 8, connections_max_idle: 2m"))?;
    assert!(c.writer.kafka.is_some_and(|k| k.max_connections_per_ip == 8));
    for (extra, key) in [
        (", max_request_size: 100MiB", "writer.kafka.request_budget"),
        (", request_budget: 4MiB, max_request_size: 1KiB", "writer.kafka.request_budget"),
        (", max_connections_per_ip: 0", "writer.kafka.max_connections"),
        (", connections_max_idle: 10ms", "writer.kafka.connections_max_idle"),
    ] {
        let err = err_of(parse(&kafka(extra)));
        assert!(err.starts_with(&format!("node.yaml: {key}")), "{extra}: {err}");
    }
    Ok(())
}
