//! The one decision every front end asks: may this principal do this to that? Built from the
//! `auth:` config section and the watched credentials and ACLs ([`AuthView`]).

use std::collections::HashSet;
use std::sync::Arc;

use crate::acl::{Operation, ResourceType};
use crate::principal::Principal;
use crate::scram::{Credential, Mechanism};
use crate::store::{AuthError, AuthStore, AuthView};

/// Authentication and authorization for one role process. Cheap to share.
#[derive(Debug)]
pub struct Authorizer {
    enabled: bool,
    super_users: HashSet<String>,
    view: Option<AuthView>,
}

impl Authorizer {
    /// Authentication and ACLs off: everyone may do everything.
    pub fn off() -> Arc<Authorizer> {
        Arc::new(Authorizer { enabled: false, super_users: HashSet::new(), view: None })
    }

    /// As `section` says, over `store`'s credentials and ACLs (watched while this lives).
    /// Off, it says so loudly: anyone who reaches a port may do anything.
    pub async fn start(
        section: &config::AuthSection,
        store: &AuthStore,
        role: &str,
    ) -> Result<Arc<Authorizer>, AuthError> {
        if !section.enabled {
            tracing::warn!(
                role,
                "AUTHENTICATION AND AUTHORIZATION ARE OFF (auth.enabled: false): anyone who \
                 reaches this role's ports may read, write, trim and delete every stream"
            );
            return Ok(Authorizer::off());
        }
        let super_users =
            section.super_users.iter().map(|u| Principal::user(u).name().to_owned()).collect();
        Ok(Arc::new(Authorizer { enabled: true, super_users, view: Some(store.view().await?) }))
    }

    /// Whether clients must authenticate and ACLs apply.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether `p` may do `op` to the `resource` named `name` (always, when off; always for
    /// a super user).
    pub fn allows(&self, p: &Principal, op: Operation, resource: ResourceType, name: &str) -> bool {
        if !self.enabled || self.super_users.contains(p.name()) {
            return true;
        }
        match &self.view {
            Some(v) => crate::acl::allowed(&v.current().acls, p.name(), op, resource, name),
            None => false,
        }
    }

    /// Whether some ACL lets `p` do `op` on some resource of the type (Kafka's "WRITE on any
    /// topic" for an idempotent producer).
    pub fn may_anywhere(&self, p: &Principal, op: Operation, resource: ResourceType) -> bool {
        if !self.enabled || self.super_users.contains(p.name()) {
            return true;
        }
        let Some(v) = &self.view else { return false };
        v.current().acls.iter().any(|a| {
            let who = a.principal.strip_prefix("User:").unwrap_or(&a.principal);
            (who == "*" || who == p.name())
                && a.resource == resource
                && a.permission == crate::acl::Permission::Allow
                && crate::acl::allowed(std::slice::from_ref(a), p.name(), op, resource, &a.name)
        })
    }

    pub fn is_super_user(&self, p: &Principal) -> bool {
        self.super_users.contains(p.name())
    }

    /// The principal a bearer token stands for; `None` if unknown or revoked (or when off).
    pub fn principal_of_token(&self, token: &str) -> Option<Principal> {
        self.view.as_ref()?.current().principal_of_token(token)
    }

    /// A SASL user's credential for `m` (none when off).
    pub fn credential(&self, user: &str, m: Mechanism) -> Option<Credential> {
        self.view.as_ref()?.current().credential(user, m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{Acl, PatternType, Permission};

    #[tokio::test]
    async fn off_allows_everything_on_asks_the_acls_and_super_users_pass() -> anyhow::Result<()> {
        let meta: Arc<dyn metadata::MetadataStore> = Arc::new(metadata::MemoryStore::new());
        let store = AuthStore::new(meta, "c");
        let alice = Principal::user("alice");
        let off = Authorizer::start(&config::AuthSection::default(), &store, "test").await?;
        assert!(off.allows(&alice, Operation::Delete, ResourceType::Stream, "s"));
        let section = config::AuthSection {
            enabled: true,
            super_users: vec!["User:root".to_owned()],
            ..Default::default()
        };
        let on = Authorizer::start(&section, &store, "test").await?;
        assert!(!on.allows(&alice, Operation::Describe, ResourceType::Stream, "s"));
        assert!(on.allows(&Principal::user("root"), Operation::Admin, ResourceType::Cluster, "x"));
        store
            .add_acls(&[Acl {
                principal: "User:alice".into(),
                resource: ResourceType::Stream,
                pattern: PatternType::Literal,
                name: "s".into(),
                operation: Operation::Consume,
                permission: Permission::Allow,
                host: "*".into(),
            }])
            .await?;
        let start = std::time::Instant::now();
        while !on.allows(&alice, Operation::Consume, ResourceType::Stream, "s") {
            anyhow::ensure!(start.elapsed().as_secs() < 5, "the ACL never applied");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(!on.allows(&alice, Operation::Produce, ResourceType::Stream, "s"));
        Ok(())
    }
}
