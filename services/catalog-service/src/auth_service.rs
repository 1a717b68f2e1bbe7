//! The AuthService (docs/security.md): tokens, SASL users and ACLs, in the metadata store
//! through `security::store`. The gRPC guard decides who may call what (WhoAmI anyone,
//! ListAcls `describe` on the cluster, AddAcls and RemoveAcls `alter`, the rest `admin`); this
//! adapts requests and errors.

use std::sync::Arc;

use proto::auth::v1 as pb;
use security::acl::{Acl, AclFilter};
use security::store::{AuthError, AuthStore};
use security::{Authorizer, Principal};
use tonic::{Request, Response, Status};

/// The AuthService over one cluster's store.
#[derive(Clone, Debug)]
pub struct AuthServiceImpl {
    store: AuthStore,
    authz: Arc<Authorizer>,
}

impl AuthServiceImpl {
    pub fn new(store: AuthStore, authz: Arc<Authorizer>) -> Self {
        AuthServiceImpl { store, authz }
    }

    pub fn server(self) -> pb::auth_service_server::AuthServiceServer<Self> {
        pb::auth_service_server::AuthServiceServer::new(self)
    }
}

fn to_status(e: AuthError) -> Status {
    use codes::Code;
    let code = match &e {
        AuthError::Invalid(_) => Code::InvalidArgument,
        AuthError::NotFound(_) => Code::NotFound,
        AuthError::Meta(m) if m.is_retryable() => Code::Unavailable,
        AuthError::Meta(_) => Code::Internal,
    };
    let message = match e {
        AuthError::Invalid(m) | AuthError::NotFound(m) => m,
        AuthError::Meta(m) => m.to_string(),
    };
    codes::grpc::status(code, message)
}

fn invalid(m: String) -> Status {
    to_status(AuthError::Invalid(m))
}

fn acl_of(a: pb::Acl) -> Result<Acl, Status> {
    let acl = Acl {
        principal: match a.principal.as_str() {
            "" => return Err(invalid("an ACL needs a principal".to_owned())),
            p => Principal::user(p).to_string(),
        },
        resource: a.resource.parse().map_err(invalid)?,
        pattern: if a.pattern.is_empty() {
            Ok(security::acl::PatternType::Literal)
        } else {
            a.pattern.parse()
        }
        .map_err(invalid)?,
        name: match (a.resource.as_str(), a.name.as_str()) {
            ("cluster", "") => security::acl::CLUSTER.to_owned(),
            (_, n) => n.to_owned(),
        },
        operation: a.operation.parse().map_err(invalid)?,
        permission: if a.permission.is_empty() {
            Ok(security::acl::Permission::Allow)
        } else {
            a.permission.parse()
        }
        .map_err(invalid)?,
        host: "*".to_owned(),
    };
    acl.validate().map_err(invalid)?;
    Ok(acl)
}

fn acl_pb(a: Acl) -> pb::Acl {
    pb::Acl {
        principal: a.principal,
        resource: a.resource.to_string(),
        pattern: a.pattern.to_string(),
        name: a.name,
        operation: a.operation.to_string(),
        permission: a.permission.to_string(),
    }
}

fn filter_of(f: Option<pb::AclFilter>) -> Result<AclFilter, Status> {
    let f = f.unwrap_or_default();
    let opt = |s: String| (!s.is_empty()).then_some(s);
    Ok(AclFilter {
        principal: opt(f.principal).map(|p| Principal::user(&p).to_string()),
        resource: opt(f.resource).map(|r| r.parse()).transpose().map_err(invalid)?,
        pattern: opt(f.pattern).map(|r| r.parse()).transpose().map_err(invalid)?,
        name: opt(f.name),
        operation: opt(f.operation).map(|r| r.parse()).transpose().map_err(invalid)?,
        permission: opt(f.permission).map(|r| r.parse()).transpose().map_err(invalid)?,
    })
}

#[tonic::async_trait]
impl pb::auth_service_server::AuthService for AuthServiceImpl {
    async fn who_am_i(
        &self,
        req: Request<pb::WhoAmIRequest>,
    ) -> Result<Response<pb::WhoAmIResponse>, Status> {
        let p = req.extensions().get::<Principal>().cloned().unwrap_or_else(Principal::anonymous);
        Ok(Response::new(pb::WhoAmIResponse {
            principal: p.to_string(),
            enforced: self.authz.enabled(),
        }))
    }

    async fn create_token(
        &self,
        req: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        let r = req.into_inner();
        let (t, secret) = self
            .store
            .create_token(
                &r.principal,
                &r.description,
                logstore::Clock::now_ms(&logstore::SystemClock),
            )
            .await
            .map_err(to_status)?;
        let token = pb::Token {
            id: t.id,
            principal: Principal::user(&t.principal).to_string(),
            created_ms: t.created_ms,
            description: t.description,
        };
        Ok(Response::new(pb::CreateTokenResponse { token: Some(token), secret }))
    }

    async fn list_tokens(
        &self,
        _req: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        let tokens = self.store.list_tokens().await.map_err(to_status)?;
        let tokens = tokens
            .into_iter()
            .map(|t| pb::Token {
                id: t.id,
                principal: Principal::user(&t.principal).to_string(),
                created_ms: t.created_ms,
                description: t.description,
            })
            .collect();
        Ok(Response::new(pb::ListTokensResponse { tokens }))
    }

    async fn revoke_token(
        &self,
        req: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        self.store.revoke_token(&req.into_inner().id).await.map_err(to_status)?;
        Ok(Response::new(pb::RevokeTokenResponse {}))
    }

    async fn put_user(
        &self,
        req: Request<pb::PutUserRequest>,
    ) -> Result<Response<pb::PutUserResponse>, Status> {
        let r = req.into_inner();
        let iterations = match r.iterations {
            0 => security::scram::DEFAULT_ITERATIONS,
            n => n,
        };
        self.store.put_user(&r.name, &r.password, iterations).await.map_err(to_status)?;
        Ok(Response::new(pb::PutUserResponse {}))
    }

    async fn delete_user(
        &self,
        req: Request<pb::DeleteUserRequest>,
    ) -> Result<Response<pb::DeleteUserResponse>, Status> {
        self.store.delete_user(&req.into_inner().name).await.map_err(to_status)?;
        Ok(Response::new(pb::DeleteUserResponse {}))
    }

    async fn list_users(
        &self,
        _req: Request<pb::ListUsersRequest>,
    ) -> Result<Response<pb::ListUsersResponse>, Status> {
        let users = self.store.list_users().await.map_err(to_status)?;
        let users = users
            .into_iter()
            .map(|u| pb::User {
                name: u.name,
                mechanisms: u.mechanisms.iter().map(|(m, i)| format!("{}:{i}", m.name())).collect(),
            })
            .collect();
        Ok(Response::new(pb::ListUsersResponse { users }))
    }

    async fn add_acls(
        &self,
        req: Request<pb::AddAclsRequest>,
    ) -> Result<Response<pb::AddAclsResponse>, Status> {
        let acls = req.into_inner().acls.into_iter().map(acl_of).collect::<Result<Vec<_>, _>>()?;
        if acls.is_empty() {
            return Err(invalid("no ACL to add".to_owned()));
        }
        self.store.add_acls(&acls).await.map_err(to_status)?;
        Ok(Response::new(pb::AddAclsResponse {}))
    }

    async fn list_acls(
        &self,
        req: Request<pb::ListAclsRequest>,
    ) -> Result<Response<pb::ListAclsResponse>, Status> {
        let filter = filter_of(req.into_inner().filter)?;
        let acls = self.store.list_acls(&filter).await.map_err(to_status)?;
        Ok(Response::new(pb::ListAclsResponse { acls: acls.into_iter().map(acl_pb).collect() }))
    }

    async fn remove_acls(
        &self,
        req: Request<pb::RemoveAclsRequest>,
    ) -> Result<Response<pb::RemoveAclsResponse>, Status> {
        let filter = filter_of(req.into_inner().filter)?;
        if filter == AclFilter::default() {
            return Err(invalid(
                "an empty filter would remove every ACL: name at least one field".to_owned(),
            ));
        }
        let removed = self.store.remove_acls(&filter).await.map_err(to_status)?;
        Ok(Response::new(pb::RemoveAclsResponse {
            removed: removed.into_iter().map(acl_pb).collect(),
        }))
    }
}
