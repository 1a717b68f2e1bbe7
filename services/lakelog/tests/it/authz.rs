//! Authentication and ACLs on a standalone, end to end over gRPC: principals by client
//! certificate and bearer token, an authorization matrix, revocation and an ACL removed while
//! its principal works.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use client::{Code, Security};
use testkit::certs::Pki;

use crate::Standalone;

/// A standalone with TLS (client certificates optional) and authentication on, `admin` its
/// super user; its endpoint is `https://localhost:<port>`.
pub fn auth_standalone(dir: &Path, pki: &Pki) -> Result<Standalone> {
    auth_standalone_with(dir, pki, "")
}

/// [`auth_standalone`], `writer` settings added to its writer section (`key: value` lines,
/// each indented by two spaces).
fn auth_standalone_with(dir: &Path, pki: &Pki, writer: &str) -> Result<Standalone> {
    let server = pki.issue("server", "lakelog")?;
    let file = dir.join("standalone.yaml");
    let tls = format!(
        "{{cert: {}, key: {}, ca: {}, client_auth: optional}}",
        server.cert.display(),
        server.key.display(),
        pki.ca().display()
    );
    std::fs::write(
        &file,
        format!(
            "writer:\n  tls: {tls}\n{writer}  kafka:\n    listen: 127.0.0.1:1\n    tls: {tls}\n\
             auth:\n  enabled: true\n  super_users: [admin]\n"
        ),
    )?;
    let port = testkit::free_port()?;
    let mut s =
        Standalone::start_with(&dir.join("data"), port, &["--config".as_ref(), file.as_os_str()])?;
    s.endpoint = format!("https://localhost:{port}");
    Ok(s)
}

/// What `admin` (the super user, by its client certificate) connects with.
pub fn admin(pki: &Pki) -> Result<Security> {
    let cert = pki.issue("admin", "admin")?;
    Ok(Security { ca: Some(pki.ca()), cert: Some(cert.cert), key: Some(cert.key), token: None })
}

fn with_token(pki: &Pki, token: &str) -> Security {
    Security { ca: Some(pki.ca()), token: Some(token.to_owned()), ..Default::default() }
}

fn acl(
    principal: &str,
    op: &str,
    kind: &str,
    pattern: &str,
    name: &str,
    perm: &str,
) -> client::auth::Acl {
    client::auth::Acl {
        principal: format!("User:{principal}"),
        resource: kind.to_owned(),
        pattern: pattern.to_owned(),
        name: name.to_owned(),
        operation: op.to_owned(),
        permission: perm.to_owned(),
    }
}

const OPS: [&str; 6] = ["describe", "produce", "consume", "alter", "delete", "create"];

/// Does `op` on `stream` as `sec`: Ok(true) done, Ok(false) refused with PERMISSION_DENIED.
async fn attempt(endpoint: &str, sec: &Security, op: &str, stream: &str, log: u64) -> Result<bool> {
    let catalog = client::CatalogClient::connect_with(endpoint, sec).await?;
    let logs = client::LogClient::connect_with(endpoint, sec).await?;
    let r = match op {
        "describe" => catalog.get(stream).await.map(|_| ()),
        "produce" => logs.append(log, 1, bytes::Bytes::from_static(b"x"), None).await.map(|_| ()),
        "consume" => logs.last_offset(log).await.map(|_| ()),
        "alter" => match catalog.get(stream).await {
            // Grown by one (the describe an alter implies).
            Ok(s) => {
                catalog.add_partitions(stream, s.partitions.len() as u32 + 1).await.map(|_| ())
            }
            Err(e) => Err(e),
        },
        "delete" => logs.soft_trim(log, 0).await.map(|_| ()),
        "create" => catalog.create(&format!("{stream}-x"), 1, None, None).await.map(|_| ()),
        _ => anyhow::bail!("no such operation {op}"),
    };
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.code == Code::PermissionDenied => Ok(false),
        Err(e) => anyhow::bail!("{op} on {stream}: {e}"),
    }
}

#[test]
fn grpc_requests_are_allowed_and_denied_exactly_as_the_acls_say() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pki = Pki::new(dir.path(), "cluster")?;
    let s = auth_standalone(dir.path(), &pki)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let e = s.endpoint.as_str();
        let admin = admin(&pki)?;
        let auth = client::AuthClient::connect_with(e, &admin).await?;
        assert_eq!(auth.who_am_i().await?, ("User:admin".to_owned(), true));
        let catalog = client::CatalogClient::connect_with(e, &admin).await?;
        let mut logs = std::collections::HashMap::new();
        for stream in ["orders-eu", "orders-us", "payments"] {
            logs.insert(stream, catalog.create(stream, 1, None, None).await?.partitions[0]);
        }
        let mut tokens = std::collections::HashMap::new();
        for who in ["alice", "bob", "carol"] {
            let (t, secret) = auth.create_token(who, "matrix").await?;
            tokens.insert(who, (t.id, with_token(&pki, &secret)));
        }
        auth.add_acls(vec![
            acl("alice", "produce", "stream", "prefixed", "orders-", "allow"),
            acl("alice", "consume", "stream", "prefixed", "orders-", "allow"),
            acl("alice", "produce", "stream", "literal", "orders-us", "deny"),
            acl("bob", "consume", "stream", "literal", "payments", "allow"),
            acl("bob", "alter", "stream", "literal", "payments", "allow"),
            acl("*", "describe", "stream", "literal", "payments", "allow"),
            acl("bob", "create", "stream", "prefixed", "payments-", "allow"),
        ])
        .await?;
        let listed = auth.list_acls(Default::default()).await?;
        ensure!(listed.len() == 7, "{listed:?}");
        // The ACLs above, read by hand: what each principal may do on each stream.
        let allowed = |who: &str, stream: &str, op: &str| -> bool {
            match (who, stream) {
                ("alice", "orders-eu") => matches!(op, "describe" | "produce" | "consume"),
                ("alice", "orders-us") => matches!(op, "describe" | "consume"),
                ("bob", "payments") => matches!(op, "describe" | "consume" | "alter" | "create"),
                (_, "payments") => op == "describe",
                _ => false,
            }
        };
        // Every cell once the view has the ACLs (it watches: give it a moment).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !attempt(e, &tokens["alice"].1, "produce", "orders-eu", logs["orders-eu"]).await? {
            ensure!(Instant::now() < deadline, "the ACLs never applied");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (mut cells, mut wrong) = (0, Vec::new());
        for who in ["alice", "bob", "carol"] {
            for stream in ["orders-eu", "orders-us", "payments"] {
                for op in OPS {
                    let got = attempt(e, &tokens[who].1, op, stream, logs[stream]).await?;
                    cells += 1;
                    if got != allowed(who, stream, op) {
                        wrong.push(format!(
                            "{who} {op} {stream}: {}",
                            if got { "allowed" } else { "denied" }
                        ));
                    }
                }
            }
        }
        ensure!(wrong.is_empty(), "{} of {cells} cells wrong: {wrong:?}", wrong.len());
        eprintln!("gRPC authorization matrix: {cells} cells, 0 wrong");

        // The SDK producer (AppendStream): allowed for alice, refused for carol.
        let producer_as =
            |who: &str| client::ClientConfig::new(e).with_security(tokens[who].1.clone());
        let alice_producer =
            client::Producer::new(producer_as("alice"), "orders-eu", Default::default()).await?;
        let rec = client::batch::Record::value("streamed");
        alice_producer.send(rec.clone()).await?.wait().await?;
        alice_producer.close().await;
        let carol_producer =
            client::Producer::new(producer_as("carol"), "payments", Default::default()).await?;
        let sent = match carol_producer.send(rec).await {
            Ok(d) => d.wait().await.map(|_| ()),
            Err(e) => Err(e),
        };
        ensure!(sent.as_ref().err().map(|e| e.code) == Some(Code::PermissionDenied), "{sent:?}");

        // Listing streams shows only those the caller may describe.
        let carol = client::CatalogClient::connect_with(e, &tokens["carol"].1).await?;
        let names: Vec<String> = carol.list().await?.into_iter().map(|s| s.name).collect();
        ensure!(names == ["payments"], "carol listed {names:?}");
        // AuthService is the super user's: alice may not mint herself tokens.
        let as_alice = client::AuthClient::connect_with(e, &tokens["alice"].1).await?;
        let minted = as_alice.create_token("alice", "more").await;
        ensure!(
            minted.as_ref().err().map(|e| e.code) == Some(Code::PermissionDenied),
            "{minted:?}"
        );

        // An ACL removed while its principal works: denied within the watch delay.
        let removed = auth
            .remove_acls(client::auth::AclFilter {
                principal: "User:alice".into(),
                operation: "consume".into(),
                ..Default::default()
            })
            .await?;
        ensure!(removed.len() == 1, "{removed:?}");
        let start = Instant::now();
        while attempt(e, &tokens["alice"].1, "consume", "orders-eu", logs["orders-eu"]).await? {
            ensure!(start.elapsed() < Duration::from_secs(5), "still allowed 5 s after removal");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!("ACL removal applied after {:?}", start.elapsed());

        // A revoked token, a made-up one, and no credential at all.
        auth.revoke_token(&tokens["bob"].0).await?;
        let start = Instant::now();
        loop {
            let r = client::CatalogClient::connect_with(e, &tokens["bob"].1).await?.list().await;
            match r {
                Err(err) if err.code == Code::Unauthenticated => break,
                _ => ensure!(start.elapsed() < Duration::from_secs(5), "revoked token still works"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for sec in [
            with_token(&pki, "llt_0000000000000000_forged"),
            Security { ca: Some(pki.ca()), ..Default::default() },
        ] {
            let r = client::CatalogClient::connect_with(e, &sec).await?.list().await;
            ensure!(r.as_ref().err().map(|e| e.code) == Some(Code::Unauthenticated), "{r:?}");
        }
        Ok(())
    })
}

/// A principal with `consume` on stream `a` only names a's log in ReadEntriesByIndex but the
/// byte range of b's entry in the WAL object both share (learned as a super user here; a
/// prober finds it from its own index), then b's compacted segment: refused, never b's bytes.
#[test]
fn a_read_by_index_naming_another_streams_bytes_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pki = Pki::new(dir.path(), "cluster")?;
    // Flushes at most every 300 ms: two appends sent together share one WAL object.
    let s = auth_standalone_with(
        dir.path(),
        &pki,
        "  flush_interval: 300ms\n  min_flush_interval: 300ms\n",
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let e = s.endpoint.as_str();
        let admin = admin(&pki)?;
        let auth = client::AuthClient::connect_with(e, &admin).await?;
        let catalog = client::CatalogClient::connect_with(e, &admin).await?;
        let a = catalog.create("a", 1, None, None).await?.partitions[0];
        let b = catalog.create("b", 1, None, None).await?.partitions[0];
        let (_, secret) = auth.create_token("alice", "h1").await?;
        auth.add_acls(vec![acl("alice", "consume", "stream", "literal", "a", "allow")]).await?;
        let logs = client::LogClient::connect_with(e, &admin).await?;
        let alice = client::LogClient::connect_with(e, &with_token(&pki, &secret)).await?;
        // Appends that arrive together share a flush: until a's and b's share a WAL object.
        let mut shared = None;
        for _ in 0..50 {
            let (ha, hb) = tokio::join!(
                logs.append(a, 1, bytes::Bytes::from_static(b"A-OWN"), None),
                logs.append(b, 1, bytes::Bytes::from_static(b"B-SECRET"), None)
            );
            let ia = logs.read_index_range(a, ha?.offset, 1).await?.remove(0);
            let ib = logs.read_index_range(b, hb?.offset, 1).await?.remove(0);
            if ia.object == ib.object {
                shared = Some((ia, ib));
                break;
            }
        }
        let (ia, ib) = shared.context("50 pairs of appends never shared a flush")?;
        // alice's ACL is applied within the watch delay: her own read waits on it.
        let deadline = Instant::now() + Duration::from_secs(10);
        let own = loop {
            match alice.read_entries_by_index(vec![ia.clone()]).await {
                Ok(got) => break got,
                Err(err) if err.code == Code::PermissionDenied && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(err) => return Err(err.into()),
            }
        };
        ensure!(own[0].payload.as_ref() == b"A-OWN", "{own:?}");
        let refused =
            |what: &str, got: Result<Vec<client::log_pb::Entry>, client::ClientError>| match got {
                Err(err) if matches!(err.code, Code::InvalidArgument | Code::PermissionDenied) => {
                    Ok(())
                }
                other => Err(anyhow::anyhow!("{what}: answered {other:?}")),
            };
        let as_a =
            |i: &client::log_pb::EntryIndex| client::log_pb::EntryIndex { log_id: a, ..i.clone() };
        refused("b's WAL range named as a's", alice.read_entries_by_index(vec![as_a(&ib)]).await)?;
        refused("b's own index", alice.read_entries_by_index(vec![ib.clone()]).await)?;

        // b compacted into a segment of its own: its key, named as a's.
        for i in 0..8u8 {
            logs.append(b, 1, bytes::Bytes::from(vec![i; 8]), None).await?;
        }
        let compactor = client::CompactorClient::connect_with(e, &admin).await?;
        compactor.compact_now(Some(b), Some(1)).await?;
        let seg = logs.read_index_range(b, 0, 1).await?.remove(0);
        ensure!(
            seg.object.starts_with("compacted/") || seg.object.contains("/compacted/"),
            "{seg:?}"
        );
        refused("b's segment named as a's", alice.read_entries_by_index(vec![as_a(&seg)]).await)?;
        let got = logs.read_entries_by_index(vec![seg]).await?;
        ensure!(got[0].payload.as_ref() == b"B-SECRET", "{got:?}");
        anyhow::Ok(())
    })
}

#[test]
fn the_cli_manages_tokens_users_and_acls_and_refuses_without_credentials() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pki = Pki::new(dir.path(), "cluster")?;
    let s = auth_standalone(dir.path(), &pki)?;
    let ca = pki.ca();
    let admin = pki.issue("admin", "admin")?;
    let p = |p: &Path| p.to_str().unwrap_or_default().to_owned();
    let creds = [p(&ca), p(&admin.cert), p(&admin.key)];
    let as_admin = |args: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        v.extend([
            "--ca".into(),
            creds[0].clone(),
            "--cert".into(),
            creds[1].clone(),
            "--key".into(),
            creds[2].clone(),
        ]);
        v
    };
    let run = |args: Vec<String>, stdin: &str| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        s.ok(&refs, stdin)
    };
    ensure!(run(as_admin(&["auth", "whoami"]), "")?.starts_with("User:admin\tenforced"));
    let token =
        run(as_admin(&["auth", "token", "create", "--principal", "dave"]), "")?.trim().to_owned();
    ensure!(token.starts_with("llt_"), "{token}");
    let list = run(as_admin(&["auth", "token", "list"]), "")?;
    ensure!(list.contains("\tdave\t") || list.contains("\tUser:dave\t"), "{list}");
    ensure!(!list.contains(&token), "a listing shows the secret");
    run(as_admin(&["auth", "user", "add", "erin"]), "pw-erin\n")?;
    ensure!(
        run(as_admin(&["auth", "user", "list"]), "")?
            .contains("erin\tSCRAM-SHA-256:8192,SCRAM-SHA-512:8192")
    );
    run(
        as_admin(&[
            "acl",
            "add",
            "--principal",
            "dave",
            "--operation",
            "describe",
            "--operation",
            "create",
            "--stream-prefix",
            "dave-",
        ]),
        "",
    )?;
    let acls = run(as_admin(&["acl", "list", "--principal", "dave"]), "")?;
    ensure!(
        acls.lines().count() == 2
            && acls.contains("User:dave\tallow\tcreate\tstream:prefixed:dave-"),
        "{acls}"
    );
    // dave by token: whoami, then a stream of his prefix, not another.
    let dave = |args: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        v.extend(["--ca".into(), creds[0].clone(), "--token".into(), token.clone()]);
        v
    };
    ensure!(run(dave(&["auth", "whoami"]), "")?.starts_with("User:dave"));
    let start = Instant::now();
    while run(dave(&["stream", "create", "dave-1"]), "").is_err() {
        ensure!(start.elapsed() < Duration::from_secs(5), "dave's ACL never applied");
        std::thread::sleep(Duration::from_millis(50));
    }
    let refs: Vec<String> = dave(&["stream", "create", "other"]);
    let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
    let (code, stderr) = s.err(&refs, "")?;
    ensure!(code != 0 && stderr.contains("PERMISSION_DENIED"), "{stderr}");
    let removed =
        run(as_admin(&["acl", "remove", "--principal", "dave", "--operation", "create"]), "")?;
    ensure!(removed.lines().count() == 1, "{removed}");
    let refs = ["stream", "list", "--ca", creds[0].as_str()];
    let (_, stderr) = s.err(&refs, "")?;
    ensure!(stderr.contains("UNAUTHENTICATED"), "{stderr}");
    let id = list
        .lines()
        .find(|l| l.contains("dave"))
        .and_then(|l| l.split('\t').next())
        .context("token id")?;
    run(as_admin(&["auth", "token", "revoke", id]), "")?;
    Ok(())
}

/// The gRPC matrix's ACLs and streams, set up by `admin`: users alice, bob and carol (SASL
/// passwords `<name>-pw`), and consume on groups `matrix-*` for everyone (the Kafka consumer
/// of the matrix names a group).
async fn matrix_setup(e: &str, admin: &Security) -> Result<client::AuthClient> {
    let auth = client::AuthClient::connect_with(e, admin).await?;
    let catalog = client::CatalogClient::connect_with(e, admin).await?;
    for stream in ["orders-eu", "orders-us", "payments"] {
        catalog.create(stream, 1, None, None).await?;
    }
    for who in ["alice", "bob", "carol"] {
        auth.put_user(who, &format!("{who}-pw"), 4096).await?;
    }
    auth.add_acls(vec![
        acl("alice", "produce", "stream", "prefixed", "orders-", "allow"),
        acl("alice", "consume", "stream", "prefixed", "orders-", "allow"),
        acl("alice", "produce", "stream", "literal", "orders-us", "deny"),
        acl("bob", "consume", "stream", "literal", "payments", "allow"),
        acl("bob", "alter", "stream", "literal", "payments", "allow"),
        acl("*", "describe", "stream", "literal", "payments", "allow"),
        acl("bob", "create", "stream", "prefixed", "payments-", "allow"),
        acl("*", "consume", "group", "prefixed", "matrix-", "allow"),
    ])
    .await?;
    Ok(auth)
}

fn python(script: &str, args: &[&str]) -> Result<std::process::Output> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    std::process::Command::new(format!("{root}/.tools/venv/bin/python"))
        .arg(format!("{root}/e2e/kafka/{script}"))
        .args(args)
        .output()
        .context("the Python clients (`make deps` installs them in .tools/venv)")
}

#[test]
fn kafka_requests_are_allowed_and_denied_exactly_as_the_acls_say() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pki = Pki::new(dir.path(), "cluster")?;
    let s = auth_standalone(dir.path(), &pki)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let auth = rt.block_on(matrix_setup(&s.endpoint, &admin(&pki)?))?;
    let ca = pki.ca().display().to_string();
    // The view applies the ACLs within its watch delay: alice's first describe waits on it.
    std::thread::sleep(Duration::from_millis(500));
    let allowed = |who: &str, stream: &str, op: &str| -> bool {
        match (who, stream) {
            ("alice", "orders-eu") => matches!(op, "describe" | "produce" | "consume"),
            ("alice", "orders-us") => matches!(op, "describe" | "consume"),
            ("bob", "payments") => matches!(op, "describe" | "consume" | "alter" | "create"),
            (_, "payments") => op == "describe",
            _ => false,
        }
    };
    let (mut cells, mut wrong) = (0, Vec::new());
    for who in ["alice", "bob", "carol"] {
        let out = python(
            "authz_matrix.py",
            &[&s.kafka, &ca, who, &format!("{who}-pw"), "orders-eu,orders-us,payments"],
        )?;
        ensure!(out.status.success(), "{who}: {}", String::from_utf8_lossy(&out.stderr));
        let got: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        for stream in ["orders-eu", "orders-us", "payments"] {
            for op in OPS {
                cells += 1;
                let verdict = got[stream][op].as_str().unwrap_or("missing");
                let want = if allowed(who, stream, op) { "allowed" } else { "denied" };
                if verdict != want {
                    wrong.push(format!("{who} {op} {stream}: {verdict}"));
                }
            }
        }
    }
    ensure!(wrong.is_empty(), "{} of {cells} cells wrong: {wrong:?}", wrong.len());
    eprintln!("Kafka authorization matrix: {cells} cells, 0 wrong");

    // alice produces every 20 ms while her produce ACL is removed: refused within the watch
    // delay, nothing failing otherwise.
    let producing = {
        let (bootstrap, ca) = (s.kafka.clone(), ca.clone());
        std::thread::spawn(move || {
            python(
                "authz_matrix.py",
                &["--until-denied", &bootstrap, &ca, "alice", "alice-pw", "orders-eu"],
            )
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let removed = rt.block_on(auth.remove_acls(client::auth::AclFilter {
        principal: "User:alice".into(),
        operation: "produce".into(),
        permission: "allow".into(),
        ..Default::default()
    }))?;
    ensure!(removed.len() == 1, "{removed:?}");
    let out = producing.join().map_err(|_| anyhow::anyhow!("the producer thread panicked"))??;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    ensure!(got["acked"].as_u64().unwrap_or(0) > 10, "{got}");
    eprintln!("Kafka producer refused after its ACL's removal: {got}");
    Ok(())
}

#[test]
fn kcat_round_trips_over_sasl_ssl_scram_sha_512_and_a_wrong_password_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pki = Pki::new(dir.path(), "cluster")?;
    let s = auth_standalone(dir.path(), &pki)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let admin = admin(&pki)?;
        let auth = client::AuthClient::connect_with(&s.endpoint, &admin).await?;
        auth.put_user("kc", "kc-secret", 0).await?;
        auth.add_acls(vec![
            acl("kc", "produce", "stream", "prefixed", "kc-", "allow"),
            acl("kc", "consume", "stream", "prefixed", "kc-", "allow"),
        ])
        .await?;
        client::CatalogClient::connect_with(&s.endpoint, &admin)
            .await?
            .create("kc-orders", 1, None, None)
            .await?;
        Ok::<_, anyhow::Error>(())
    })?;
    std::thread::sleep(Duration::from_millis(500));
    let ca = format!("ssl.ca.location={}", pki.ca().display());
    let sasl = |password: &str| -> Vec<String> {
        [
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            "sasl.mechanisms=SCRAM-SHA-512",
            "-X",
            "sasl.username=kc",
            "-X",
            &format!("sasl.password={password}"),
            "-X",
            &ca,
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let kcat = |password: &str, args: &[&str], stdin: &str| {
        let mut all = sasl(password);
        all.extend(args.iter().map(|a| a.to_string()));
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        testkit::kcat(&refs, stdin)
    };
    let b = s.kafka.as_str();
    let lines: String = (0..100).map(|i| format!("k{}:v{i}\n", i % 3)).collect();
    kcat("kc-secret", &["-b", b, "-P", "-t", "kc-orders", "-K:"], &lines)?;
    let read = kcat(
        "kc-secret",
        &["-b", b, "-C", "-t", "kc-orders", "-o", "beginning", "-e", "-q", "-f", "%k:%s\n"],
        "",
    )?;
    ensure!(read == lines, "kcat read back over SASL_SSL:\n{read}");
    // A topic kc may not write: refused.
    let other = kcat("kc-secret", &["-b", b, "-P", "-t", "not-kc", "-K:"], "a:b\n");
    ensure!(other.is_err(), "kcat wrote to a topic its ACLs do not allow: {other:?}");
    // A wrong password: refused, the listing never answered.
    let wrong = kcat("wrong", &["-b", b, "-L", "-m", "5"], "");
    ensure!(wrong.is_err(), "a wrong password listed the cluster: {wrong:?}");
    // lakelog's own Kafka client (`lakelog group`) over SASL_SSL, then with a wrong password.
    let ca = pki.ca().display().to_string();
    let group = |password: &str| {
        std::process::Command::new(crate::BIN)
            .args(["group", "list", "--kafka", b, "--kafka-security-protocol", "SASL_SSL"])
            .args(["--kafka-user", "kc", "--ca", &ca])
            .env("LAKELOG_KAFKA_PASSWORD", password)
            .output()
    };
    let ok = group("kc-secret")?;
    ensure!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let refused = group("wrong")?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    ensure!(!refused.status.success() && stderr.contains("UNAUTHENTICATED"), "{stderr}");
    Ok(())
}
