//! Authorization in the Kafka front end (docs/security.md): what a principal may do, and the
//! helpers each API's handler authorizes with (its own rules live beside it, in its module's
//! `authorize`), as Kafka's own broker asks them. A request naming several topics or groups is
//! split: those not allowed are taken out before the handler serves the rest and answered with
//! TOPIC_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED; a request about one group or the
//! cluster is refused whole. Kafka's operations map to
//! Lakelog's: WRITE and IDEMPOTENT_WRITE → produce, READ → consume, DESCRIBE and
//! DESCRIBE_CONFIGS → describe, ALTER and ALTER_CONFIGS → alter, CREATE, DELETE, and
//! CLUSTER_ACTION → admin.

use kafka_protocol::protocol::StrBytes;
use security::acl::{CLUSTER, Operation, ResourceType};
use security::{Authorizer, Principal};

pub const TOPIC_AUTHORIZATION_FAILED: i16 =
    kafka_protocol::ResponseError::TopicAuthorizationFailed.code();
pub const GROUP_AUTHORIZATION_FAILED: i16 =
    kafka_protocol::ResponseError::GroupAuthorizationFailed.code();
pub const CLUSTER_AUTHORIZATION_FAILED: i16 =
    kafka_protocol::ResponseError::ClusterAuthorizationFailed.code();
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 =
    kafka_protocol::ResponseError::TransactionalIdAuthorizationFailed.code();

/// Kafka's config resource types.
pub(crate) const TOPIC_RESOURCE: i8 = 2;

/// A principal's rights on this connection.
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    pub authz: &'a Authorizer,
    pub principal: &'a Principal,
    /// The client's address, as Kafka shows it (`/<ip>`): said with a refusal.
    pub peer: &'a str,
}

impl Access<'_> {
    /// Whether `op` on `kind` `name` is allowed; a refusal is said in the audit log.
    pub(crate) fn allows(&self, op: Operation, kind: ResourceType, name: &str) -> bool {
        let allowed = self.authz.allows(self.principal, op, kind, name);
        if !allowed {
            security::audit::denied(
                self.principal,
                self.peer,
                op.name(),
                &format!("{kind}:{name}"),
            );
        }
        allowed
    }

    pub fn topic(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Stream, name)
    }

    pub fn group(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Group, name)
    }

    pub fn cluster(&self, op: Operation) -> bool {
        self.allows(op, ResourceType::Cluster, CLUSTER)
    }

    pub fn transactional_id(&self, op: Operation, id: &str) -> bool {
        self.allows(op, ResourceType::TransactionalId, id)
    }

    /// CREATE on the cluster, or on the topic (as Kafka checks CreateTopics).
    pub fn create(&self, topic: &str) -> bool {
        self.cluster(Operation::Create) || self.topic(Operation::Create, topic)
    }

    /// Kafka's authorized-operations bitfield (KIP-430) of `kind` `name`: each operation Kafka
    /// lists for the resource's type that this principal may do, bit `1 << code` for Kafka's
    /// AclOperation code. Asked, not acted on: no refusal is logged.
    pub fn authorized_operations(&self, kind: ResourceType, name: &str) -> i32 {
        // Kafka's codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
        // CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
        let listed: &[(i32, Operation)] = match kind {
            ResourceType::Cluster => &[
                (5, Operation::Create),
                (7, Operation::Alter),
                (8, Operation::Describe),
                (9, Operation::Admin),
                (10, Operation::DescribeConfigs),
                (11, Operation::AlterConfigs),
                (12, Operation::Produce),
            ],
            ResourceType::TransactionalId => &[(4, Operation::Produce), (8, Operation::Describe)],
            ResourceType::Group => &[
                (3, Operation::Consume),
                (6, Operation::Delete),
                (8, Operation::Describe),
                (10, Operation::DescribeConfigs),
                (11, Operation::AlterConfigs),
            ],
            _ => &[
                (3, Operation::Consume),
                (4, Operation::Produce),
                (5, Operation::Create),
                (6, Operation::Delete),
                (7, Operation::Alter),
                (8, Operation::Describe),
                (10, Operation::DescribeConfigs),
                (11, Operation::AlterConfigs),
            ],
        };
        listed
            .iter()
            .filter(|(_, op)| self.authz.allows(self.principal, *op, kind, name))
            .fold(0, |bits, (code, _)| bits | (1 << code))
    }

    /// Whether anything is checked at all (authorization on, not a super user).
    pub(crate) fn checks(&self) -> bool {
        self.authz.enabled() && !self.authz.is_super_user(self.principal)
    }
}

/// Takes out of `items` those `allowed` refuses: returned, in order.
pub(crate) fn split<T>(items: &mut Vec<T>, allowed: impl Fn(&T) -> bool) -> Vec<T> {
    let (keep, out): (Vec<T>, Vec<T>) = std::mem::take(items).into_iter().partition(|i| allowed(i));
    *items = keep;
    out
}

/// Whether the whole request about `group` may go on (`op` on it).
pub fn group(a: Access<'_>, op: Operation, group: &str) -> bool {
    !a.checks() || a.group(op, group)
}

/// Whether `op` on transactional id `id` is allowed (WRITE to run transactions under it,
/// DESCRIBE to find its coordinator and see its state), as Kafka checks TRANSACTIONAL_ID.
pub fn transactional_id(a: Access<'_>, op: Operation, id: &str) -> bool {
    !a.checks() || a.transactional_id(op, id)
}

/// Whether `op` on the cluster is allowed.
pub fn cluster(a: Access<'_>, op: Operation) -> bool {
    !a.checks() || a.cluster(op)
}

/// A message for a refused request.
pub fn refused_message(a: Access<'_>, what: &str) -> Option<StrBytes> {
    Some(StrBytes::from_string(format!("{} may not {what}", a.principal)))
}
