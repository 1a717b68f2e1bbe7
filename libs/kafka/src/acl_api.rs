//! CreateAcls, DescribeAcls and DeleteAcls over the ACLs every front end enforces (the
//! metadata store's, `security::store`): Kafka's admin tools (`kafka-acls.sh`, AdminClient)
//! manage Lakelog's ACLs. Kafka's vocabulary maps to Lakelog's: TOPIC → stream, GROUP →
//! group, CLUSTER (`kafka-cluster`) → the cluster; READ → consume, WRITE and
//! IDEMPOTENT_WRITE → produce, DESCRIBE and DESCRIBE_CONFIGS → describe, ALTER and
//! ALTER_CONFIGS → alter, CLUSTER_ACTION → admin, ALL → all. Other resource types
//! (transactional ids, delegation tokens, users) are refused with INVALID_REQUEST.

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use security::acl::{Acl, CLUSTER, Operation, PatternType, Permission, ResourceType};
use security::store::AuthStore;

use crate::code;
use kafka_protocol::messages::ApiKey;

use crate::api::{Admission, Ctx, Handler};
use crate::session::Session;

/// Kafka's answer when no authorizer is configured.
pub const SECURITY_DISABLED: i16 = kafka_protocol::ResponseError::SecurityDisabled.code();

/// Kafka's name of its cluster resource.
const KAFKA_CLUSTER: &str = "kafka-cluster";

fn resource_of(t: i8) -> Option<ResourceType> {
    match t {
        2 => Some(ResourceType::Stream),
        3 => Some(ResourceType::Group),
        4 => Some(ResourceType::Cluster),
        5 => Some(ResourceType::TransactionalId),
        _ => None,
    }
}

fn resource_code(r: ResourceType) -> i8 {
    match r {
        ResourceType::Stream => 2,
        ResourceType::Group => 3,
        ResourceType::Cluster => 4,
        ResourceType::TransactionalId => 5,
    }
}

fn operation_of(o: i8) -> Option<Operation> {
    Some(match o {
        2 => Operation::All,
        3 => Operation::Consume,
        4 | 12 => Operation::Produce,
        5 => Operation::Create,
        6 => Operation::Delete,
        7 => Operation::Alter,
        8 => Operation::Describe,
        10 => Operation::DescribeConfigs,
        11 => Operation::AlterConfigs,
        9 => Operation::Admin,
        _ => return None,
    })
}

fn operation_code(o: Operation) -> i8 {
    match o {
        Operation::All => 2,
        Operation::Consume => 3,
        Operation::Produce => 4,
        Operation::Create => 5,
        Operation::Delete => 6,
        Operation::Alter => 7,
        Operation::Describe => 8,
        Operation::DescribeConfigs => 10,
        Operation::AlterConfigs => 11,
        Operation::Admin => 9,
    }
}

fn pattern_code(p: PatternType) -> i8 {
    match p {
        PatternType::Literal => 3,
        PatternType::Prefixed => 4,
    }
}

fn permission_code(p: Permission) -> i8 {
    match p {
        Permission::Deny => 2,
        Permission::Allow => 3,
    }
}

/// An ACL's name as Kafka shows it (the cluster's is `kafka-cluster`).
fn kafka_name(a: &Acl) -> StrBytes {
    match a.resource {
        ResourceType::Cluster => StrBytes::from_static_str(KAFKA_CLUSTER),
        _ => StrBytes::from_string(a.name.clone()),
    }
}

/// A Kafka ACL filter (DescribeAcls, DeleteAcls): ANY (1) matches every value, MATCH (2) a
/// pattern type matches ACLs that apply to the name given.
#[derive(Debug)]
struct Filter {
    resource: Option<ResourceType>,
    name: Option<String>,
    pattern: i8,
    principal: Option<String>,
    operation: Option<Operation>,
    permission: Option<Permission>,
}

fn filter(
    resource_type: i8,
    name: &Option<StrBytes>,
    pattern: i8,
    principal: &Option<StrBytes>,
    host: &Option<StrBytes>,
    operation: i8,
    permission: i8,
) -> Result<Filter, String> {
    let resource = match resource_type {
        1 => None,
        t => Some(resource_of(t).ok_or_else(|| format!("resource type {t} is not served"))?),
    };
    if host.as_ref().is_some_and(|h| h.as_str() != "*") {
        return Err("only host `*` is supported".to_owned());
    }
    Ok(Filter {
        resource,
        name: name.as_ref().map(|n| match (resource, n.as_str()) {
            (Some(ResourceType::Cluster), KAFKA_CLUSTER) => CLUSTER.to_owned(),
            (_, n) => n.to_owned(),
        }),
        pattern,
        principal: principal.as_ref().map(|p| p.to_string()),
        operation: match operation {
            1 => None,
            o => Some(operation_of(o).ok_or_else(|| format!("operation {o} is not served"))?),
        },
        permission: match permission {
            1 => None,
            2 => Some(Permission::Deny),
            3 => Some(Permission::Allow),
            p => return Err(format!("permission type {p} is not served")),
        },
    })
}

impl Filter {
    fn matches(&self, a: &Acl) -> bool {
        let name_ok = match (&self.name, self.pattern) {
            (None, _) => true,
            // MATCH: the ACLs that apply to this name.
            (Some(n), 2) => match a.pattern {
                PatternType::Literal => a.name == *n || a.name == "*",
                PatternType::Prefixed => n.starts_with(&a.name),
            },
            (Some(n), _) => a.name == *n,
        };
        let pattern_ok = match self.pattern {
            1 | 2 => true,
            p => pattern_code(a.pattern) == p,
        };
        self.resource.is_none_or(|r| r == a.resource)
            && name_ok
            && pattern_ok
            && self.principal.as_ref().is_none_or(|p| *p == a.principal)
            && self.operation.is_none_or(|o| o == a.operation)
            && self.permission.is_none_or(|p| p == a.permission)
    }
}

fn error(code: i16, message: impl Into<String>) -> (i16, Option<StrBytes>) {
    (code, Some(StrBytes::from_string(message.into())))
}

pub async fn create(req: CreateAclsRequest, store: Option<&AuthStore>) -> CreateAclsResponse {
    let resp = CreateAclsResponse::default();
    let Some(store) = store else {
        let (c, m) = error(SECURITY_DISABLED, "authorization is off (auth.enabled: false)");
        return resp.with_results(
            req.creations
                .iter()
                .map(|_| {
                    AclCreationResult::default().with_error_code(c).with_error_message(m.clone())
                })
                .collect(),
        );
    };
    let mut results = Vec::with_capacity(req.creations.len());
    for c in req.creations {
        let acl = (|| -> Result<Acl, String> {
            let resource = resource_of(c.resource_type)
                .ok_or_else(|| format!("resource type {} is not served", c.resource_type))?;
            let pattern = match c.resource_pattern_type {
                3 => PatternType::Literal,
                4 => PatternType::Prefixed,
                p => return Err(format!("pattern type {p}: LITERAL or PREFIXED")),
            };
            let acl = Acl {
                principal: c.principal.to_string(),
                resource,
                pattern,
                name: match resource {
                    ResourceType::Cluster => CLUSTER.to_owned(),
                    _ => c.resource_name.to_string(),
                },
                operation: operation_of(c.operation)
                    .ok_or_else(|| format!("operation {} is not served", c.operation))?,
                permission: match c.permission_type {
                    2 => Permission::Deny,
                    3 => Permission::Allow,
                    p => return Err(format!("permission type {p}: DENY or ALLOW")),
                },
                host: c.host.to_string(),
            };
            acl.validate()?;
            Ok(acl)
        })();
        let result = match acl {
            Ok(acl) => match store.add_acls(&[acl]).await {
                Ok(()) => AclCreationResult::default(),
                Err(e) => AclCreationResult::default()
                    .with_error_code(code::UNKNOWN_SERVER_ERROR)
                    .with_error_message(Some(StrBytes::from_string(e.to_string()))),
            },
            Err(e) => AclCreationResult::default()
                .with_error_code(code::INVALID_REQUEST)
                .with_error_message(Some(StrBytes::from_string(e))),
        };
        results.push(result);
    }
    resp.with_results(results)
}

pub async fn describe(req: DescribeAclsRequest, store: Option<&AuthStore>) -> DescribeAclsResponse {
    let resp = DescribeAclsResponse::default();
    let Some(store) = store else {
        let (c, m) = error(SECURITY_DISABLED, "authorization is off (auth.enabled: false)");
        return resp.with_error_code(c).with_error_message(m);
    };
    let f = match filter(
        req.resource_type_filter,
        &req.resource_name_filter,
        req.pattern_type_filter,
        &req.principal_filter,
        &req.host_filter,
        req.operation,
        req.permission_type,
    ) {
        Ok(f) => f,
        Err(e) => {
            let (c, m) = error(code::INVALID_REQUEST, e);
            return resp.with_error_code(c).with_error_message(m);
        }
    };
    let acls = match store.list_acls(&Default::default()).await {
        Ok(a) => a,
        Err(e) => {
            let (c, m) = error(code::UNKNOWN_SERVER_ERROR, e.to_string());
            return resp.with_error_code(c).with_error_message(m);
        }
    };
    // Grouped by resource, in the store's order.
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    for a in acls.iter().filter(|a| f.matches(a)) {
        let (t, n, p) = (resource_code(a.resource), kafka_name(a), pattern_code(a.pattern));
        let d = AclDescription::default()
            .with_principal(StrBytes::from_string(a.principal.clone()))
            .with_host(StrBytes::from_string(a.host.clone()))
            .with_operation(operation_code(a.operation))
            .with_permission_type(permission_code(a.permission));
        match resources
            .iter_mut()
            .find(|r| r.resource_type == t && r.resource_name == n && r.pattern_type == p)
        {
            Some(r) => r.acls.push(d),
            None => resources.push(
                DescribeAclsResource::default()
                    .with_resource_type(t)
                    .with_resource_name(n)
                    .with_pattern_type(p)
                    .with_acls(vec![d]),
            ),
        }
    }
    resp.with_resources(resources)
}

pub async fn delete(req: DeleteAclsRequest, store: Option<&AuthStore>) -> DeleteAclsResponse {
    let mut results = Vec::with_capacity(req.filters.len());
    for f in req.filters {
        let Some(store) = store else {
            let (c, m) = error(SECURITY_DISABLED, "authorization is off (auth.enabled: false)");
            results
                .push(DeleteAclsFilterResult::default().with_error_code(c).with_error_message(m));
            continue;
        };
        let parsed = filter(
            f.resource_type_filter,
            &f.resource_name_filter,
            f.pattern_type_filter,
            &f.principal_filter,
            &f.host_filter,
            f.operation,
            f.permission_type,
        );
        let result = match parsed {
            Err(e) => {
                let (c, m) = error(code::INVALID_REQUEST, e);
                DeleteAclsFilterResult::default().with_error_code(c).with_error_message(m)
            }
            Ok(filter) => match store.remove_acls_where(|a| filter.matches(a)).await {
                Ok(removed) => DeleteAclsFilterResult::default().with_matching_acls(
                    removed
                        .iter()
                        .map(|a| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(resource_code(a.resource))
                                .with_resource_name(kafka_name(a))
                                .with_pattern_type(pattern_code(a.pattern))
                                .with_principal(StrBytes::from_string(a.principal.clone()))
                                .with_host(StrBytes::from_string(a.host.clone()))
                                .with_operation(operation_code(a.operation))
                                .with_permission_type(permission_code(a.permission))
                        })
                        .collect(),
                ),
                Err(e) => {
                    let (c, m) = error(code::UNKNOWN_SERVER_ERROR, e.to_string());
                    DeleteAclsFilterResult::default().with_error_code(c).with_error_message(m)
                }
            },
        };
        results.push(result);
    }
    DeleteAclsResponse::default().with_filter_results(results)
}

// The ACL APIs: DESCRIBE on the cluster to list ACLs, ALTER to change them (as in Kafka).

/// DescribeAcls.
#[derive(Debug)]
pub struct DescribeAcls;

impl Handler for DescribeAcls {
    const KEY: ApiKey = ApiKey::DescribeAcls;
    const VERSIONS: (i16, i16) = (1, 3);
    type Request = DescribeAclsRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        if !crate::authz::cluster(access, Operation::Describe) {
            let resp = DescribeAclsResponse::default()
                .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED)
                .with_error_message(crate::authz::refused_message(access, "describe ACLs"));
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move { describe(req, ctx.cfg.acls.as_ref()).await })
    }
}

/// CreateAcls.
#[derive(Debug)]
pub struct CreateAcls;

impl Handler for CreateAcls {
    const KEY: ApiKey = ApiKey::CreateAcls;
    const VERSIONS: (i16, i16) = (1, 3);
    type Request = CreateAclsRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        if !crate::authz::cluster(access, Operation::Alter) {
            let refused = AclCreationResult::default()
                .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED)
                .with_error_message(crate::authz::refused_message(access, "create ACLs"));
            let resp = CreateAclsResponse::default()
                .with_results(req.creations.iter().map(|_| refused.clone()).collect());
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move { create(req, ctx.cfg.acls.as_ref()).await })
    }
}

/// DeleteAcls.
#[derive(Debug)]
pub struct DeleteAcls;

impl Handler for DeleteAcls {
    const KEY: ApiKey = ApiKey::DeleteAcls;
    const VERSIONS: (i16, i16) = (1, 3);
    type Request = DeleteAclsRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        if !crate::authz::cluster(access, Operation::Alter) {
            let refused = DeleteAclsFilterResult::default()
                .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED)
                .with_error_message(crate::authz::refused_message(access, "delete ACLs"));
            let resp = DeleteAclsResponse::default()
                .with_filter_results(req.filters.iter().map(|_| refused.clone()).collect());
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move { delete(req, ctx.cfg.acls.as_ref()).await })
    }
}
