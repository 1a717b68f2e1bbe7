//! Credentials and ACLs in the metadata store, under `/<cluster>/auth/`:
//!
//! | key | value |
//! |---|---|
//! | `auth/tokens/<id>` | [`TokenRecord`]: the token's principal, SHA-256 of its secret, when made |
//! | `auth/users/<name>` | [`UserRecord`]: salted SCRAM credentials (SHA-256 and SHA-512) |
//! | `auth/acls/<digest>` | [`AclRecord`]: one ACL; the key is a digest of the ACL, so adding it twice is one |
//!
//! [`AuthStore`] writes them (the CLI through the catalog's AuthService, Kafka's ACL APIs);
//! [`AuthView`] keeps every role's copy current with a watch.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::{constant_time, digest};
use base64::Engine;
use metadata::{Compare, CompareOp, KeyRange, MetadataStore, RangeRequest, Txn, TxnOp};
use prost::Message;

use crate::acl::{Acl, AclFilter};
use crate::principal::Principal;
use crate::scram::{Credential, Mechanism};

/// A failed credential or ACL operation.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("INVALID_ARGUMENT: {0}")]
    Invalid(String),
    #[error("NOT_FOUND: {0}")]
    NotFound(String),
    #[error("{0}")]
    Meta(#[from] metadata::MetaError),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TokenRecord {
    /// `User:<name>`'s name.
    #[prost(string, tag = "1")]
    pub principal: String,
    /// SHA-256 of the token's secret part.
    #[prost(bytes = "vec", tag = "2")]
    pub hash: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub created_ms: i64,
    #[prost(string, tag = "4")]
    pub description: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CredentialRecord {
    #[prost(string, tag = "1")]
    pub mechanism: String,
    #[prost(bytes = "vec", tag = "2")]
    pub salt: Vec<u8>,
    #[prost(uint32, tag = "3")]
    pub iterations: u32,
    #[prost(bytes = "vec", tag = "4")]
    pub stored_key: Vec<u8>,
    #[prost(bytes = "vec", tag = "5")]
    pub server_key: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UserRecord {
    #[prost(message, repeated, tag = "1")]
    pub credentials: Vec<CredentialRecord>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AclRecord {
    #[prost(string, tag = "1")]
    pub principal: String,
    #[prost(string, tag = "2")]
    pub resource: String,
    #[prost(string, tag = "3")]
    pub pattern: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(string, tag = "5")]
    pub operation: String,
    #[prost(string, tag = "6")]
    pub permission: String,
    #[prost(string, tag = "7")]
    pub host: String,
}

impl From<&Acl> for AclRecord {
    fn from(a: &Acl) -> Self {
        AclRecord {
            principal: a.principal.clone(),
            resource: a.resource.name().to_owned(),
            pattern: a.pattern.name().to_owned(),
            name: a.name.clone(),
            operation: a.operation.name().to_owned(),
            permission: a.permission.name().to_owned(),
            host: a.host.clone(),
        }
    }
}

impl TryFrom<AclRecord> for Acl {
    type Error = String;
    fn try_from(r: AclRecord) -> Result<Self, String> {
        Ok(Acl {
            principal: r.principal,
            resource: r.resource.parse()?,
            pattern: r.pattern.parse()?,
            name: r.name,
            operation: r.operation.parse()?,
            permission: r.permission.parse()?,
            host: r.host,
        })
    }
}

/// A token's listing: never its secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: String,
    pub principal: String,
    pub created_ms: i64,
    pub description: String,
}

/// A user's listing: the mechanisms it has credentials for, with their iterations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub mechanisms: Vec<(Mechanism, u32)>,
}

/// A token is `llt_<id>_<secret>`: 16 hex digits of id, 43 characters of secret.
const TOKEN_PREFIX: &str = "llt_";

fn hash(secret: &str) -> Vec<u8> {
    digest::digest(&digest::SHA256, secret.as_bytes()).as_ref().to_vec()
}

/// A user or principal name: printable, no `/` (it is a key), at most 256 bytes.
pub fn check_name(what: &str, name: &str) -> Result<(), AuthError> {
    if name.is_empty()
        || name.len() > 256
        || name.contains('/')
        || name.chars().any(char::is_control)
    {
        return Err(AuthError::Invalid(format!(
            "{what} `{name}` must be 1 to 256 printable characters without `/`"
        )));
    }
    Ok(())
}

/// Everything under `auth/`, as read at one revision.
#[derive(Clone, Debug, Default)]
pub struct AuthState {
    pub tokens: HashMap<String, TokenRecord>,
    pub users: HashMap<String, Vec<Credential>>,
    pub acls: Vec<Acl>,
}

impl AuthState {
    /// The principal a bearer token authenticates; `None` for an unknown, revoked or
    /// malformed token (compared in constant time).
    pub fn principal_of_token(&self, token: &str) -> Option<Principal> {
        let (id, secret) = token.strip_prefix(TOKEN_PREFIX)?.split_once('_')?;
        let record = self.tokens.get(id)?;
        constant_time::verify_slices_are_equal(&hash(secret), &record.hash)
            .ok()
            .map(|()| Principal::user(&record.principal))
    }

    /// The user's credential for `m`.
    pub fn credential(&self, user: &str, m: Mechanism) -> Option<Credential> {
        self.users.get(user)?.iter().find(|c| c.mechanism == m).cloned()
    }

    fn read(kvs: Vec<metadata::KeyValue>, root: &str) -> AuthState {
        let mut s = AuthState::default();
        for kv in kvs {
            let Some(rest) = kv.key.strip_prefix(root.as_bytes()) else { continue };
            let rest = String::from_utf8_lossy(rest);
            let value = kv.value.as_slice();
            let parsed: Result<(), String> = (|| {
                if let Some(id) = rest.strip_prefix("tokens/") {
                    let t = TokenRecord::decode(value).map_err(|e| e.to_string())?;
                    s.tokens.insert(id.to_owned(), t);
                } else if let Some(name) = rest.strip_prefix("users/") {
                    let u = UserRecord::decode(value).map_err(|e| e.to_string())?;
                    let creds = u.credentials.into_iter().filter_map(|c| {
                        Some(Credential {
                            mechanism: Mechanism::parse(&c.mechanism)?,
                            salt: c.salt,
                            iterations: c.iterations,
                            stored_key: c.stored_key,
                            server_key: c.server_key,
                        })
                    });
                    s.users.insert(name.to_owned(), creds.collect());
                } else if rest.starts_with("acls/") {
                    let a = AclRecord::decode(value).map_err(|e| e.to_string())?;
                    s.acls.push(Acl::try_from(a)?);
                }
                Ok(())
            })();
            // One unreadable record must not open or close everything else: it is skipped
            // (an ACL skipped grants nothing) and said.
            if let Err(e) = parsed {
                tracing::error!(key = %rest, error = %e, "unreadable auth record skipped");
            }
        }
        s.acls.sort();
        s
    }
}

/// Writes and reads credentials and ACLs (module doc).
#[derive(Clone)]
pub struct AuthStore {
    meta: Arc<dyn MetadataStore>,
    root: String,
}

impl std::fmt::Debug for AuthStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthStore").field("root", &self.root).finish()
    }
}

impl AuthStore {
    pub fn new(meta: Arc<dyn MetadataStore>, cluster: &str) -> AuthStore {
        AuthStore { meta, root: format!("/{cluster}/auth/") }
    }

    fn key(&self, rest: &str) -> Vec<u8> {
        format!("{}{rest}", self.root).into_bytes()
    }

    /// Everything, read now, and the revision read at.
    pub async fn read(&self) -> Result<(AuthState, i64), AuthError> {
        let r = self.meta.range(RangeRequest::prefix(self.key(""))).await?;
        Ok((AuthState::read(r.kvs, &self.root), r.revision))
    }

    /// A new token for `principal`: its listing and the token itself (shown once; only its
    /// hash is stored).
    pub async fn create_token(
        &self,
        principal: &str,
        description: &str,
        now_ms: i64,
    ) -> Result<(TokenInfo, String), AuthError> {
        let principal = Principal::user(principal);
        check_name("principal", principal.name())?;
        let random = crate::scram::random_bytes(40).map_err(AuthError::Invalid)?;
        let id: String = random[..8].iter().map(|b| format!("{b:02x}")).collect();
        let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&random[8..]);
        let record = TokenRecord {
            principal: principal.name().to_owned(),
            hash: hash(&secret),
            created_ms: now_ms,
            description: description.to_owned(),
        };
        let key = self.key(&format!("tokens/{id}"));
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, record.encode_to_vec())]);
        if !self.meta.txn(txn).await?.succeeded {
            return Err(AuthError::Invalid("token id taken; create it again".to_owned()));
        }
        let info = TokenInfo {
            id: id.clone(),
            principal: record.principal,
            created_ms: now_ms,
            description: record.description,
        };
        Ok((info, format!("{TOKEN_PREFIX}{id}_{secret}")))
    }

    /// Stores `token` (`llt_<id>_<secret>`, made elsewhere: a bootstrap Secret) for
    /// `principal`, replacing a token of the same id.
    pub async fn put_token(
        &self,
        principal: &str,
        token: &str,
        description: &str,
        now_ms: i64,
    ) -> Result<(), AuthError> {
        let principal = Principal::user(principal);
        check_name("principal", principal.name())?;
        let malformed = || AuthError::Invalid("a token is `llt_<id>_<secret>`".to_owned());
        let (id, secret) = token
            .strip_prefix(TOKEN_PREFIX)
            .and_then(|t| t.split_once('_'))
            .ok_or_else(malformed)?;
        check_name("token id", id)?;
        if secret.len() < 32 {
            return Err(AuthError::Invalid(
                "a token's secret part must be at least 32 characters".to_owned(),
            ));
        }
        let record = TokenRecord {
            principal: principal.name().to_owned(),
            hash: hash(secret),
            created_ms: now_ms,
            description: description.to_owned(),
        };
        let key = self.key(&format!("tokens/{id}"));
        let current = self.meta.get(&key).await?;
        let same = current
            .and_then(|kv| TokenRecord::decode(kv.value.as_slice()).ok())
            .is_some_and(|t| t.principal == record.principal && t.hash == record.hash);
        if !same {
            self.meta.put(&key, &record.encode_to_vec(), 0).await?;
        }
        Ok(())
    }

    /// Creates or updates the users and tokens of `section`'s bootstrap files (a role that
    /// serves the AuthService does it at start): a user whose stored password already matches
    /// is left alone. Returns how many users and tokens the files named.
    pub async fn bootstrap(
        &self,
        section: &config::AuthSection,
        now_ms: i64,
    ) -> Result<(usize, usize), AuthError> {
        let lines = |path: &std::path::Path| -> Result<Vec<(String, String)>, AuthError> {
            let text = std::fs::read_to_string(path)
                .map_err(|e| AuthError::Invalid(format!("{}: {e}", path.display())))?;
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| {
                    l.split_once(':').map(|(a, b)| (a.to_owned(), b.to_owned())).ok_or_else(|| {
                        AuthError::Invalid(format!("{}: a line is `name:value`", path.display()))
                    })
                })
                .collect()
        };
        let (mut users, mut tokens) = (0, 0);
        if let Some(path) = &section.users_file {
            let state = self.read().await?.0;
            for (name, password) in lines(path)? {
                let current = state.credential(&name, Mechanism::ScramSha512);
                if !current.is_some_and(|c| c.verify_password(&password)) {
                    self.put_user(&name, &password, crate::scram::DEFAULT_ITERATIONS).await?;
                }
                users += 1;
            }
        }
        if let Some(path) = &section.tokens_file {
            for (principal, token) in lines(path)? {
                self.put_token(&principal, &token, "bootstrap", now_ms).await?;
                tokens += 1;
            }
        }
        Ok((users, tokens))
    }

    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>, AuthError> {
        let mut out: Vec<TokenInfo> = (self.read().await?.0.tokens.into_iter())
            .map(|(id, t)| TokenInfo {
                id,
                principal: t.principal,
                created_ms: t.created_ms,
                description: t.description,
            })
            .collect();
        out.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(out)
    }

    /// Revokes the token of id `id` (the id printed at creation and by list).
    pub async fn revoke_token(&self, id: &str) -> Result<(), AuthError> {
        let id = id.strip_prefix(TOKEN_PREFIX).map_or(id, |t| t.split('_').next().unwrap_or(t));
        check_name("token id", id)?;
        let deleted = self.meta.delete(KeyRange::key(self.key(&format!("tokens/{id}")))).await?;
        if deleted == 0 {
            return Err(AuthError::NotFound(format!("no token `{id}`")));
        }
        Ok(())
    }

    /// Sets `name`'s password (SCRAM-SHA-256 and -512 credentials, `iterations` each).
    pub async fn put_user(
        &self,
        name: &str,
        password: &str,
        iterations: u32,
    ) -> Result<(), AuthError> {
        check_name("user", name)?;
        if password.is_empty() {
            return Err(AuthError::Invalid("the password must not be empty".to_owned()));
        }
        let mut record = UserRecord::default();
        for m in Mechanism::ALL {
            let c = Credential::new(m, password, iterations).map_err(AuthError::Invalid)?;
            record.credentials.push(CredentialRecord {
                mechanism: m.name().to_owned(),
                salt: c.salt,
                iterations: c.iterations,
                stored_key: c.stored_key,
                server_key: c.server_key,
            });
        }
        self.meta.put(&self.key(&format!("users/{name}")), &record.encode_to_vec(), 0).await?;
        Ok(())
    }

    /// Sets one of `name`'s credentials (its mechanism's), creating the user if needed and
    /// keeping its others (compare-and-set on the user's record).
    pub async fn put_credential(&self, name: &str, c: Credential) -> Result<(), AuthError> {
        check_name("user", name)?;
        self.change_user(name, |record| {
            record.credentials.retain(|r| r.mechanism != c.mechanism.name());
            record.credentials.push(CredentialRecord {
                mechanism: c.mechanism.name().to_owned(),
                salt: c.salt.clone(),
                iterations: c.iterations,
                stored_key: c.stored_key.clone(),
                server_key: c.server_key.clone(),
            });
            Ok(())
        })
        .await
    }

    /// Removes `name`'s credential of `m` (the user, once it has none); NotFound if it has none.
    pub async fn delete_credential(&self, name: &str, m: Mechanism) -> Result<(), AuthError> {
        check_name("user", name)?;
        self.change_user(name, |record| {
            let before = record.credentials.len();
            record.credentials.retain(|r| r.mechanism != m.name());
            if record.credentials.len() == before {
                return Err(AuthError::NotFound(format!(
                    "user `{name}` has no {} credential",
                    m.name()
                )));
            }
            Ok(())
        })
        .await
    }

    /// Reads `name`'s record (empty if none), changes it, writes it back if unchanged since
    /// (deletes it once it holds no credential).
    async fn change_user(
        &self,
        name: &str,
        change: impl Fn(&mut UserRecord) -> Result<(), AuthError>,
    ) -> Result<(), AuthError> {
        let key = self.key(&format!("users/{name}"));
        for _ in 0..16 {
            let got = self.meta.get(&key).await?;
            let revision = got.as_ref().map_or(0, |kv| kv.mod_revision);
            let mut record = match &got {
                Some(kv) => UserRecord::decode(kv.value.as_slice())
                    .map_err(|_| AuthError::Invalid(format!("user `{name}`: a corrupt record")))?,
                None => UserRecord::default(),
            };
            change(&mut record)?;
            let write = if record.credentials.is_empty() {
                TxnOp::delete(KeyRange::key(key.clone()))
            } else {
                TxnOp::put(key.clone(), record.encode_to_vec())
            };
            let txn = Txn::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, revision)])
                .and_then([write]);
            if self.meta.txn(txn).await?.succeeded {
                return Ok(());
            }
        }
        Err(AuthError::Invalid(format!("user `{name}`: too many concurrent changes")))
    }

    pub async fn delete_user(&self, name: &str) -> Result<(), AuthError> {
        check_name("user", name)?;
        if self.meta.delete(KeyRange::key(self.key(&format!("users/{name}")))).await? == 0 {
            return Err(AuthError::NotFound(format!("no user `{name}`")));
        }
        Ok(())
    }

    pub async fn list_users(&self) -> Result<Vec<UserInfo>, AuthError> {
        let mut out: Vec<UserInfo> = (self.read().await?.0.users.into_iter())
            .map(|(name, creds)| UserInfo {
                name,
                mechanisms: creds.iter().map(|c| (c.mechanism, c.iterations)).collect(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn acl_key(&self, a: &Acl) -> Vec<u8> {
        let d = digest::digest(&digest::SHA256, &AclRecord::from(a).encode_to_vec());
        let hex: String = d.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.key(&format!("acls/{hex}"))
    }

    /// Adds ACLs (each once however often added).
    pub async fn add_acls(&self, acls: &[Acl]) -> Result<(), AuthError> {
        for a in acls {
            a.validate().map_err(AuthError::Invalid)?;
        }
        let unique: std::collections::BTreeSet<&Acl> = acls.iter().collect();
        let unique: Vec<&Acl> = unique.into_iter().collect();
        // A transaction per 64 (etcd caps operations per transaction at 128).
        for chunk in unique.chunks(64) {
            let ops = chunk
                .iter()
                .map(|a| TxnOp::put(self.acl_key(a), AclRecord::from(*a).encode_to_vec()));
            self.meta.txn(Txn::new().and_then(ops)).await?;
        }
        Ok(())
    }

    pub async fn list_acls(&self, filter: &AclFilter) -> Result<Vec<Acl>, AuthError> {
        Ok(self.read().await?.0.acls.into_iter().filter(|a| filter.matches(a)).collect())
    }

    /// Removes the ACLs `filter` matches: those removed.
    pub async fn remove_acls(&self, filter: &AclFilter) -> Result<Vec<Acl>, AuthError> {
        self.remove_acls_where(|a| filter.matches(a)).await
    }

    /// Removes the ACLs `matches` picks: those removed.
    pub async fn remove_acls_where(
        &self,
        matches: impl Fn(&Acl) -> bool,
    ) -> Result<Vec<Acl>, AuthError> {
        let all = self.read().await?.0.acls;
        let gone: Vec<Acl> = all.into_iter().filter(|a| matches(a)).collect();
        for chunk in gone.chunks(64) {
            let ops = chunk.iter().map(|a| TxnOp::delete(KeyRange::key(self.acl_key(a))));
            self.meta.txn(Txn::new().and_then(ops)).await?;
        }
        Ok(gone)
    }

    /// A view kept current by a watch (re-read whole on any change), until dropped.
    pub async fn view(&self) -> Result<AuthView, AuthError> {
        let root = self.root.clone();
        let followed = metadata::follow::follow(self.meta.clone(), self.key(""), move |kvs| {
            AuthState::read(kvs, &root)
        })
        .await?;
        Ok(AuthView { followed })
    }
}

/// An [`AuthView`]'s state at one revision.
#[derive(Clone, Debug)]
pub struct Current(Arc<(AuthState, i64)>);

impl std::ops::Deref for Current {
    type Target = AuthState;
    fn deref(&self) -> &AuthState {
        &self.0.0
    }
}

/// Every role's current copy of `auth/` (see [`AuthStore::view`]). Cheap to clone.
#[derive(Clone, Debug)]
pub struct AuthView {
    followed: metadata::follow::Followed<AuthState>,
}

impl AuthView {
    /// The state as last read (no copy).
    pub fn current(&self) -> Current {
        Current(self.followed.current())
    }

    /// Waits until the view has seen revision `revision` (a write's), at most `within`.
    pub async fn caught_up(&mut self, revision: i64, within: Duration) -> bool {
        self.followed.caught_up(revision, within).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{Operation, PatternType, Permission, ResourceType};

    #[tokio::test]
    async fn tokens_users_and_acls_round_trip_and_the_view_follows_them() -> anyhow::Result<()> {
        let meta: Arc<dyn MetadataStore> = Arc::new(metadata::MemoryStore::new());
        let store = AuthStore::new(meta, "c");
        let mut view = store.view().await?;
        let (info, token) = store.create_token("User:svc-writer", "ci", 1000).await?;
        assert_eq!(info.principal, "svc-writer");
        assert!(token.starts_with("llt_") && !token.contains(&hex_of(&hash(""))));
        store.put_user("alice", "pw-1", 4096).await?;
        let acl = Acl {
            principal: "User:alice".into(),
            resource: ResourceType::Stream,
            pattern: PatternType::Prefixed,
            name: "orders".into(),
            operation: Operation::Produce,
            permission: Permission::Allow,
            host: "*".into(),
        };
        store.add_acls(&[acl.clone(), acl.clone()]).await?;
        let rev = store.read().await?.1;
        assert!(view.caught_up(rev, Duration::from_secs(5)).await, "the view never caught up");
        let now = view.current();
        assert_eq!(now.principal_of_token(&token), Some(Principal::user("svc-writer")));
        assert_eq!(now.principal_of_token(&token.replace("llt_", "llt_0")), None);
        assert_eq!(now.principal_of_token(&format!("{token}x")), None);
        assert!(
            now.credential("alice", Mechanism::ScramSha512)
                .is_some_and(|c| c.verify_password("pw-1"))
        );
        assert_eq!(now.acls, vec![acl.clone()], "an ACL added twice is one");
        assert_eq!(store.list_users().await?[0].mechanisms.len(), 2);

        store.revoke_token(&info.id).await?;
        assert!(matches!(store.revoke_token(&info.id).await, Err(AuthError::NotFound(_))));
        let removed = store
            .remove_acls(&AclFilter { principal: Some("User:alice".into()), ..Default::default() })
            .await?;
        assert_eq!(removed, vec![acl]);
        let rev = store.read().await?.1;
        assert!(view.caught_up(rev, Duration::from_secs(5)).await);
        assert_eq!(view.current().principal_of_token(&token), None, "revoked");
        assert!(view.current().acls.is_empty());
        for bad in ["", "a/b", "tab\there"] {
            assert!(store.put_user(bad, "pw", 4096).await.is_err(), "{bad:?}");
        }
        assert!(store.put_user("bob", "pw", 100).await.is_err(), "too few iterations");
        Ok(())
    }

    #[tokio::test]
    async fn bootstrap_files_create_users_and_tokens_once() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let meta: Arc<dyn MetadataStore> = Arc::new(metadata::MemoryStore::new());
        let store = AuthStore::new(meta, "c");
        let token = format!("llt_00112233aabbccdd_{}", "s".repeat(43));
        std::fs::write(
            dir.path().join("users"),
            "# SASL users\nalice:pw-a\n\nbob:pw:with:colons\n",
        )?;
        std::fs::write(dir.path().join("tokens"), format!("svc-writer:{token}\n"))?;
        let section = config::AuthSection {
            enabled: true,
            users_file: Some(dir.path().join("users")),
            tokens_file: Some(dir.path().join("tokens")),
            ..Default::default()
        };
        assert_eq!(store.bootstrap(&section, 1).await?, (2, 1));
        let (state, rev) = store.read().await?;
        assert!(
            state
                .credential("bob", Mechanism::ScramSha256)
                .is_some_and(|c| c.verify_password("pw:with:colons"))
        );
        assert_eq!(state.principal_of_token(&token), Some(Principal::user("svc-writer")));
        // Again: nothing rewritten (the same salts, no new revision).
        store.bootstrap(&section, 2).await?;
        let (again, rev2) = store.read().await?;
        assert_eq!(rev, rev2, "an unchanged bootstrap wrote");
        assert_eq!(
            again.credential("alice", Mechanism::ScramSha512).map(|c| c.salt),
            state.credential("alice", Mechanism::ScramSha512).map(|c| c.salt)
        );
        std::fs::write(dir.path().join("tokens"), "svc:llt_short_x\n")?;
        assert!(store.bootstrap(&section, 3).await.is_err(), "a short token secret was stored");
        Ok(())
    }

    fn hex_of(b: &[u8]) -> String {
        b.iter().map(|b| format!("{b:02x}")).collect()
    }
}
