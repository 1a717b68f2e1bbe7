//! A test PKI: a CA and the certificates it signs, written as PEM files for the processes
//! under test (Lakelog roles, etcd, kcat) to read. Files are replaced whole (written aside,
//! then renamed), as a Secret update or a renewal does.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::TestkitError;

fn failed(e: impl std::fmt::Display) -> TestkitError {
    TestkitError::Failed { server: "test PKI", message: e.to_string(), output: String::new() }
}

/// A certificate and its key, as files.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A CA in a folder (see the module doc).
pub struct Pki {
    dir: PathBuf,
    name: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").field("dir", &self.dir).field("name", &self.name).finish()
    }
}

impl Pki {
    /// A new CA named `name`, its certificate written to `<dir>/<name>-ca.pem`.
    pub fn new(dir: &Path, name: &str) -> Result<Pki, TestkitError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
        params.distinguished_name.push(DnType::CommonName, format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let key = KeyPair::generate().map_err(failed)?;
        let cert = params.self_signed(&key).map_err(failed)?;
        let pki =
            Pki { dir: dir.to_owned(), name: name.to_owned(), issuer: Issuer::new(params, key) };
        write(&pki.ca(), &cert.pem())?;
        Ok(pki)
    }

    /// The CA certificate's file.
    pub fn ca(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// A certificate for `common_name`, valid for `localhost` and `127.0.0.1` (a server's
    /// and a client's alike), as `<dir>/<file>.pem` and `<dir>/<file>-key.pem` (replaced when
    /// they exist).
    pub fn issue(&self, file: &str, common_name: &str) -> Result<Issued, TestkitError> {
        self.issue_valid(file, common_name, (2020, 2100))
    }

    /// [`Pki::issue`], valid only from the start of one year to the start of another:
    /// `(2020, 2021)` is expired.
    pub fn issue_valid(
        &self,
        file: &str,
        common_name: &str,
        (from, to): (i32, i32),
    ) -> Result<Issued, TestkitError> {
        let sans = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let mut params = CertificateParams::new(sans).map_err(failed)?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = rcgen::date_time_ymd(from, 1, 1);
        params.not_after = rcgen::date_time_ymd(to, 1, 1);
        let key = KeyPair::generate().map_err(failed)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(failed)?;
        let issued = Issued {
            cert: self.dir.join(format!("{file}.pem")),
            key: self.dir.join(format!("{file}-key.pem")),
        };
        write(&issued.key, &key.serialize_pem())?;
        write(&issued.cert, &cert.pem())?;
        Ok(issued)
    }
}

/// Writes `path` whole: aside first, then renamed over it.
fn write(path: &Path, text: &str) -> Result<(), TestkitError> {
    let aside = path.with_extension("tmp");
    std::fs::write(&aside, text).map_err(failed)?;
    std::fs::rename(&aside, path).map_err(failed)
}
