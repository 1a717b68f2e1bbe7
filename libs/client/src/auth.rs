//! [`AuthClient`]: the AuthService of a catalog (or a standalone): who the caller is, bearer
//! tokens, SASL users and ACLs (docs/security.md).

use proto::auth::v1 as pb;
use proto::auth::v1::auth_service_client::AuthServiceClient;

use crate::{ClientError, Security, Transport, transport};

pub use pb::{Acl, AclFilter, Token, User};

/// A client of the AuthService. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AuthClient {
    inner: AuthServiceClient<Transport>,
}

impl AuthClient {
    pub async fn connect_with(endpoint: &str, security: &Security) -> Result<Self, ClientError> {
        Ok(AuthClient { inner: AuthServiceClient::new(transport(endpoint, security).await?) })
    }

    /// The principal this client authenticates as, and whether ACLs are enforced.
    pub async fn who_am_i(&self) -> Result<(String, bool), ClientError> {
        let r = self.inner.clone().who_am_i(pb::WhoAmIRequest {}).await?.into_inner();
        Ok((r.principal, r.enforced))
    }

    /// A new token for `principal`: its listing and the secret to present (shown once).
    pub async fn create_token(
        &self,
        principal: &str,
        description: &str,
    ) -> Result<(Token, String), ClientError> {
        let req = pb::CreateTokenRequest {
            principal: principal.to_owned(),
            description: description.to_owned(),
        };
        let r = self.inner.clone().create_token(req).await?.into_inner();
        Ok((r.token.unwrap_or_default(), r.secret))
    }

    pub async fn list_tokens(&self) -> Result<Vec<Token>, ClientError> {
        Ok(self.inner.clone().list_tokens(pb::ListTokensRequest {}).await?.into_inner().tokens)
    }

    pub async fn revoke_token(&self, id: &str) -> Result<(), ClientError> {
        self.inner.clone().revoke_token(pb::RevokeTokenRequest { id: id.to_owned() }).await?;
        Ok(())
    }

    /// Sets `name`'s SASL password (`iterations` 0: the default).
    pub async fn put_user(
        &self,
        name: &str,
        password: &str,
        iterations: u32,
    ) -> Result<(), ClientError> {
        let req =
            pb::PutUserRequest { name: name.to_owned(), password: password.to_owned(), iterations };
        self.inner.clone().put_user(req).await?;
        Ok(())
    }

    pub async fn delete_user(&self, name: &str) -> Result<(), ClientError> {
        self.inner.clone().delete_user(pb::DeleteUserRequest { name: name.to_owned() }).await?;
        Ok(())
    }

    pub async fn list_users(&self) -> Result<Vec<User>, ClientError> {
        Ok(self.inner.clone().list_users(pb::ListUsersRequest {}).await?.into_inner().users)
    }

    pub async fn add_acls(&self, acls: Vec<Acl>) -> Result<(), ClientError> {
        self.inner.clone().add_acls(pb::AddAclsRequest { acls }).await?;
        Ok(())
    }

    pub async fn list_acls(&self, filter: AclFilter) -> Result<Vec<Acl>, ClientError> {
        let req = pb::ListAclsRequest { filter: Some(filter) };
        Ok(self.inner.clone().list_acls(req).await?.into_inner().acls)
    }

    /// Removes the ACLs `filter` matches (at least one field set): those removed.
    pub async fn remove_acls(&self, filter: AclFilter) -> Result<Vec<Acl>, ClientError> {
        let req = pb::RemoveAclsRequest { filter: Some(filter) };
        Ok(self.inner.clone().remove_acls(req).await?.into_inner().removed)
    }
}
