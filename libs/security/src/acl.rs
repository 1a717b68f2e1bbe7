//! Access control lists: who may do what to which stream, group or the cluster. One ACL is a
//! principal (or `User:*`), a resource (a stream, a consumer group or the cluster) named
//! literally, by prefix, or `*`, an operation, and allow or deny. A request is allowed when an
//! ACL allows it and none denies it: deny wins. Allowing produce, consume, delete or alter a
//! resource allows describing it too (as in Kafka).

use std::fmt;
use std::str::FromStr;

/// What a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// Append to a stream (Kafka WRITE, IDEMPOTENT_WRITE).
    Produce,
    /// Read a stream, or join and commit in a group (Kafka READ).
    Consume,
    /// See that it exists (Kafka DESCRIBE).
    Describe,
    /// Create streams (Kafka CREATE).
    Create,
    /// Delete a stream or a group, trim a stream (Kafka DELETE).
    Delete,
    /// Change a stream's partitions, or the ACLs on the cluster (Kafka ALTER).
    Alter,
    /// Read a topic's or the broker's configs (Kafka DESCRIBE_CONFIGS).
    DescribeConfigs,
    /// Change a topic's or the broker's configs (Kafka ALTER_CONFIGS).
    AlterConfigs,
    /// Operate the cluster: fence logs, run maintenance, manage credentials and ACLs
    /// (Kafka CLUSTER_ACTION).
    Admin,
    /// Every operation (Kafka ALL).
    All,
}

impl Operation {
    pub const EACH: [Operation; 9] = [
        Operation::Produce,
        Operation::Consume,
        Operation::Describe,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::Admin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Operation::Produce => "produce",
            Operation::Consume => "consume",
            Operation::Describe => "describe",
            Operation::Create => "create",
            Operation::Delete => "delete",
            Operation::Alter => "alter",
            Operation::DescribeConfigs => "describe_configs",
            Operation::AlterConfigs => "alter_configs",
            Operation::Admin => "admin",
            Operation::All => "all",
        }
    }

    /// Whether an ACL on `self` covers a request doing `op` (for an allow; a deny covers
    /// only its own operation or all). As Kafka's: READ, WRITE, DELETE and ALTER imply
    /// DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS, and nothing else implies anything.
    fn grants(self, op: Operation) -> bool {
        use Operation::*;
        self == op
            || self == All
            || (op == Describe && matches!(self, Produce | Consume | Delete | Alter))
            || (op == DescribeConfigs && self == AlterConfigs)
    }
}

/// What an ACL is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    Stream,
    Group,
    Cluster,
    /// A Kafka transactional id (Kafka's TRANSACTIONAL_ID): WRITE to run transactions under
    /// it, DESCRIBE to find its coordinator and see its state.
    TransactionalId,
}

impl ResourceType {
    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Stream => "stream",
            ResourceType::Group => "group",
            ResourceType::Cluster => "cluster",
            ResourceType::TransactionalId => "transactional_id",
        }
    }
}

/// How an ACL's resource name matches: exactly (`*` matches every name) or as a prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatternType {
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn name(self) -> &'static str {
        match self {
            PatternType::Literal => "literal",
            PatternType::Prefixed => "prefixed",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    Allow,
    Deny,
}

impl Permission {
    pub fn name(self) -> &'static str {
        match self {
            Permission::Allow => "allow",
            Permission::Deny => "deny",
        }
    }
}

macro_rules! parse_by_name {
    ($t:ty, $($v:expr),+) => {
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                let all = [$($v),+];
                all.into_iter().find(|v| v.name().eq_ignore_ascii_case(s)).ok_or_else(|| {
                    let names: Vec<&str> = all.iter().map(|v| v.name()).collect();
                    format!("`{s}` is not one of {}", names.join(", "))
                })
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

parse_by_name!(
    Operation,
    Operation::Produce,
    Operation::Consume,
    Operation::Describe,
    Operation::Create,
    Operation::Delete,
    Operation::Alter,
    Operation::DescribeConfigs,
    Operation::AlterConfigs,
    Operation::Admin,
    Operation::All
);
parse_by_name!(
    ResourceType,
    ResourceType::Stream,
    ResourceType::Group,
    ResourceType::Cluster,
    ResourceType::TransactionalId
);
parse_by_name!(PatternType, PatternType::Literal, PatternType::Prefixed);
parse_by_name!(Permission, Permission::Allow, Permission::Deny);

/// The name of the one cluster resource.
pub const CLUSTER: &str = "lakelog-cluster";

/// One access control entry with its resource.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Acl {
    /// `User:<name>`, or `User:*` for everyone.
    pub principal: String,
    pub resource: ResourceType,
    pub pattern: PatternType,
    /// The resource name (`*`: every resource of the type); the cluster's is [`CLUSTER`].
    pub name: String,
    pub operation: Operation,
    pub permission: Permission,
    /// The client host it applies to; `*` for any (the only value Lakelog matches).
    pub host: String,
}

impl Acl {
    /// Checks the fields a stored ACL must have right.
    pub fn validate(&self) -> Result<(), String> {
        let name = self.principal.strip_prefix("User:").ok_or_else(|| {
            format!("principal `{}` must be `User:<name>` or `User:*`", self.principal)
        })?;
        if name.is_empty() {
            return Err("principal without a name".to_owned());
        }
        if self.name.is_empty() {
            return Err("resource name must not be empty".to_owned());
        }
        if self.host != "*" {
            return Err(format!("host `{}`: only `*` is supported", self.host));
        }
        Ok(())
    }

    fn applies(&self, principal: &str, resource: ResourceType, name: &str) -> bool {
        let who = self.principal.strip_prefix("User:").unwrap_or(&self.principal);
        (who == "*" || who == principal)
            && self.resource == resource
            && match self.pattern {
                PatternType::Literal => self.name == "*" || self.name == name,
                PatternType::Prefixed => name.starts_with(&self.name),
            }
    }
}

impl fmt::Display for Acl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {}:{}:{} host={}",
            self.principal,
            self.permission,
            self.operation,
            self.resource,
            self.pattern,
            self.name,
            self.host
        )
    }
}

/// Whether `principal` (its name, without `User:`) may do `op` on `resource` `name` under
/// `acls`: some ACL allows it and none denies it.
pub fn allowed(
    acls: &[Acl],
    principal: &str,
    op: Operation,
    resource: ResourceType,
    name: &str,
) -> bool {
    let mut allow = false;
    for a in acls.iter().filter(|a| a.applies(principal, resource, name)) {
        match a.permission {
            Permission::Deny if a.operation == op || a.operation == Operation::All => return false,
            Permission::Deny => {}
            Permission::Allow => allow |= a.operation.grants(op),
        }
    }
    allow
}

/// Which ACLs a listing or a removal means; `None` matches anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AclFilter {
    pub principal: Option<String>,
    pub resource: Option<ResourceType>,
    pub pattern: Option<PatternType>,
    pub name: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

impl AclFilter {
    pub fn matches(&self, a: &Acl) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == a.principal)
            && self.resource.is_none_or(|r| r == a.resource)
            && self.pattern.is_none_or(|p| p == a.pattern)
            && self.name.as_ref().is_none_or(|n| *n == a.name)
            && self.operation.is_none_or(|o| o == a.operation)
            && self.permission.is_none_or(|p| p == a.permission)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(who: &str, perm: Permission, op: Operation, pattern: PatternType, name: &str) -> Acl {
        Acl {
            principal: format!("User:{who}"),
            resource: ResourceType::Stream,
            pattern,
            name: name.to_owned(),
            operation: op,
            permission: perm,
            host: "*".to_owned(),
        }
    }

    #[test]
    fn deny_wins_prefixes_and_wildcards_match_and_writers_may_describe() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        let acls = vec![
            acl("alice", Allow, Produce, Prefixed, "orders-"),
            acl("alice", Deny, Produce, Literal, "orders-secret"),
            acl("*", Allow, Consume, Literal, "public"),
            acl("bob", Allow, All, Literal, "*"),
            acl("bob", Deny, Delete, Prefixed, "keep"),
        ];
        let s = ResourceType::Stream;
        assert!(allowed(&acls, "alice", Produce, s, "orders-eu"));
        assert!(allowed(&acls, "alice", Describe, s, "orders-eu"), "produce implies describe");
        assert!(!allowed(&acls, "alice", Consume, s, "orders-eu"));
        assert!(!allowed(&acls, "alice", Produce, s, "orders-secret"), "deny wins");
        assert!(
            allowed(&acls, "alice", Describe, s, "orders-secret"),
            "a produce deny leaves describe"
        );
        assert!(!allowed(&acls, "alice", Produce, s, "orders"), "a prefix is not the name");
        assert!(allowed(&acls, "carol", Consume, s, "public"));
        assert!(!allowed(&acls, "carol", Consume, s, "publicity"));
        assert!(allowed(&acls, "bob", Delete, s, "anything"));
        assert!(!allowed(&acls, "bob", Delete, s, "keep-me"));
        assert!(allowed(&acls, "bob", Admin, s, "keep-me"));
        assert!(!allowed(&acls, "bob", Consume, ResourceType::Group, "g"), "another resource type");
        assert!(!allowed(&[], "alice", Describe, s, "x"), "no ACL: denied");
    }

    #[test]
    fn names_parse_both_ways_and_bad_acls_are_refused() {
        for op in Operation::EACH {
            assert_eq!(op.name().parse::<Operation>(), Ok(op));
        }
        assert!("write".parse::<Operation>().unwrap_err().contains("produce"));
        let good = acl("a", Permission::Allow, Operation::Produce, PatternType::Literal, "s");
        assert_eq!(good.validate(), Ok(()));
        assert!(Acl { principal: "alice".into(), ..good.clone() }.validate().is_err());
        assert!(Acl { name: String::new(), ..good.clone() }.validate().is_err());
        assert!(Acl { host: "10.0.0.1".into(), ..good }.validate().is_err());
    }
}
