//! A role reaches an etcd that serves clients over TLS and requires client certificates.

use metadata::MetaError;
use testkit::certs::Pki;

fn tls_config(endpoint: &str, tls: config::TlsConfig) -> config::MetadataConfig {
    let mut c = testkit::etcd_config(endpoint);
    c.tls = Some(tls);
    config::MetadataConfig::Etcd(c)
}

#[tokio::test]
async fn a_role_with_the_clusters_certificate_reaches_etcd_over_tls_and_others_do_not()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let pki = Pki::new(dir.path(), "etcd")?;
    let etcd = testkit::Etcd::start_tls(&pki.issue("etcd", "etcd")?, &pki.ca())?;
    assert!(etcd.endpoint().starts_with("https://"));
    let writer = pki.issue("writer", "writer")?;
    let good = config::TlsConfig {
        ca: Some(pki.ca()),
        cert: Some(writer.cert.clone()),
        key: Some(writer.key.clone()),
        ..Default::default()
    };
    let store = metadata::open(&tls_config(etcd.endpoint(), good.clone())).await?;
    store.put(b"/tls/k", b"v", 0).await?;
    assert_eq!(store.get(b"/tls/k").await?.map(|kv| kv.value), Some(b"v".to_vec()));

    // No client certificate; a certificate another CA signed; a CA that did not sign etcd's;
    // a file that is not there.
    let other = Pki::new(dir.path(), "other")?;
    let stranger = other.issue("stranger", "writer")?;
    let refused = [
        config::TlsConfig { cert: None, key: None, ..good.clone() },
        config::TlsConfig {
            cert: Some(stranger.cert.clone()),
            key: Some(stranger.key.clone()),
            ..good.clone()
        },
        config::TlsConfig { ca: Some(other.ca()), ..good.clone() },
    ];
    for (n, tls) in refused.into_iter().enumerate() {
        let r = metadata::open(&tls_config(etcd.endpoint(), tls)).await;
        assert!(matches!(r, Err(MetaError::Unavailable(_))), "vector {n}: {:?}", r.err());
    }
    let missing = config::TlsConfig { ca: Some(dir.path().join("no-ca.pem")), ..good };
    let r = metadata::open(&tls_config(etcd.endpoint(), missing)).await;
    let err = r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("no-ca.pem"), "{err}");
    Ok(())
}
