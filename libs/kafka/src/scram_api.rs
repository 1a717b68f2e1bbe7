//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) over the SASL users
//! every front end authenticates against (`security::store`): Kafka's admin tools
//! (`kafka-configs.sh --entity-type users`, AdminClient) list and set Lakelog's SCRAM users.
//! A client sends a credential salted already (`Hi(password, salt, iterations)`), never the
//! password. DESCRIBE on the cluster to list, ALTER to change, as Kafka asks.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::{ResponseError, messages::ApiKey};
use security::acl::Operation;
use security::scram::{Credential, MAX_ITERATIONS, MIN_ITERATIONS, Mechanism};
use security::store::{AuthError, AuthStore};

use crate::api::{Admission, Ctx, Handler};
use crate::session::Session;

const RESOURCE_NOT_FOUND: i16 = ResponseError::ResourceNotFound.code();
const DUPLICATE_RESOURCE: i16 = ResponseError::DuplicateResource.code();
const UNSUPPORTED_SASL_MECHANISM: i16 = ResponseError::UnsupportedSaslMechanism.code();
const UNACCEPTABLE_CREDENTIAL: i16 = ResponseError::UnacceptableCredential.code();
const UNKNOWN_SERVER_ERROR: i16 = ResponseError::UnknownServerError.code();

/// Kafka's ScramMechanism codes.
fn mechanism_of(code: i8) -> Option<Mechanism> {
    match code {
        1 => Some(Mechanism::ScramSha256),
        2 => Some(Mechanism::ScramSha512),
        _ => None,
    }
}

fn code_of(m: Mechanism) -> i8 {
    match m {
        Mechanism::ScramSha256 => 1,
        Mechanism::ScramSha512 => 2,
    }
}

fn store_error(e: &AuthError) -> i16 {
    match e {
        AuthError::NotFound(_) => RESOURCE_NOT_FOUND,
        AuthError::Invalid(_) => UNACCEPTABLE_CREDENTIAL,
        AuthError::Meta(_) => UNKNOWN_SERVER_ERROR,
    }
}

async fn describe(
    req: DescribeUserScramCredentialsRequest,
    store: Option<&AuthStore>,
) -> DescribeUserScramCredentialsResponse {
    let mut resp = DescribeUserScramCredentialsResponse::default();
    let Some(store) = store else {
        resp.error_code = crate::acl_api::SECURITY_DISABLED;
        return resp;
    };
    let users = match store.list_users().await {
        Ok(u) => u,
        Err(e) => {
            resp.error_code = UNKNOWN_SERVER_ERROR;
            resp.error_message = Some(StrBytes::from_string(e.to_string()));
            return resp;
        }
    };
    let info = |mechanisms: &[(Mechanism, u32)]| {
        mechanisms
            .iter()
            .map(|(m, i)| {
                CredentialInfo::default().with_mechanism(code_of(*m)).with_iterations(*i as i32)
            })
            .collect()
    };
    let asked: Vec<String> = match req.users.filter(|u| !u.is_empty()) {
        None => users.iter().map(|u| u.name.clone()).collect(),
        Some(named) => named.into_iter().map(|u| u.name.to_string()).collect(),
    };
    let mut seen = BTreeMap::new();
    for name in &asked {
        *seen.entry(name.clone()).or_insert(0) += 1;
    }
    for (name, times) in seen {
        let mut r = DescribeUserScramCredentialsResult::default()
            .with_user(StrBytes::from_string(name.clone()));
        match users.iter().find(|u| u.name == name) {
            _ if times > 1 => {
                r.error_code = DUPLICATE_RESOURCE;
                r.error_message = Some(StrBytes::from_string(format!(
                    "Cannot describe SCRAM credentials for the same user twice in a single request: {name}"
                )));
            }
            Some(u) => r.credential_infos = info(&u.mechanisms),
            None => {
                r.error_code = RESOURCE_NOT_FOUND;
                r.error_message = Some(StrBytes::from_string(format!(
                    "Attempt to describe a user credential that does not exist: {name}"
                )));
            }
        }
        resp.results.push(r);
    }
    resp
}

/// One user's change, checked: its deletions and upsertions (mechanism, credential).
type Change = (Vec<Mechanism>, Vec<(Mechanism, Credential)>);

/// The changes `req` asks for, by user, or each user's refusal (code, message).
fn changes(
    req: &AlterUserScramCredentialsRequest,
) -> BTreeMap<String, Result<Change, (i16, String)>> {
    let mut out: BTreeMap<String, Result<Change, (i16, String)>> = BTreeMap::new();
    let refuse = |out: &mut BTreeMap<String, Result<Change, (i16, String)>>,
                  user: &str,
                  code: i16,
                  m: String| {
        out.insert(user.to_owned(), Err((code, m)));
    };
    for d in &req.deletions {
        let user = d.name.to_string();
        let Some(m) = mechanism_of(d.mechanism) else {
            refuse(
                &mut out,
                &user,
                UNSUPPORTED_SASL_MECHANISM,
                format!("Unknown SCRAM mechanism {}", d.mechanism),
            );
            continue;
        };
        if let Ok((dels, _)) = out.entry(user).or_insert_with(|| Ok((Vec::new(), Vec::new()))) {
            dels.push(m);
        }
    }
    for u in &req.upsertions {
        let user = u.name.to_string();
        let Some(m) = mechanism_of(u.mechanism) else {
            refuse(
                &mut out,
                &user,
                UNSUPPORTED_SASL_MECHANISM,
                format!("Unknown SCRAM mechanism {}", u.mechanism),
            );
            continue;
        };
        let iterations = u32::try_from(u.iterations).unwrap_or(0);
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            let why =
                format!("Iterations {} not in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]", u.iterations);
            refuse(&mut out, &user, UNACCEPTABLE_CREDENTIAL, why);
            continue;
        }
        if u.salt.is_empty() || u.salted_password.len() != m.salted_len() {
            refuse(
                &mut out,
                &user,
                UNACCEPTABLE_CREDENTIAL,
                "an empty salt or a salted password of the wrong length".into(),
            );
            continue;
        }
        let c = Credential::from_salted(m, &u.salted_password, u.salt.to_vec(), iterations);
        if let Ok((dels, ups)) =
            out.entry(user.clone()).or_insert_with(|| Ok((Vec::new(), Vec::new())))
        {
            if dels.contains(&m) || ups.iter().any(|(x, _)| *x == m) {
                let why = format!(
                    "A user credential cannot be altered twice in the same request: {user}"
                );
                refuse(&mut out, &user, DUPLICATE_RESOURCE, why);
            } else {
                ups.push((m, c));
            }
        }
    }
    out
}

async fn alter(
    req: AlterUserScramCredentialsRequest,
    store: Option<&AuthStore>,
) -> AlterUserScramCredentialsResponse {
    let mut resp = AlterUserScramCredentialsResponse::default();
    for (user, change) in changes(&req) {
        let mut r = AlterUserScramCredentialsResult::default()
            .with_user(StrBytes::from_string(user.clone()));
        let done: Result<(), (i16, String)> = match (change, store) {
            (Err(e), _) => Err(e),
            (Ok(_), None) => Err((crate::acl_api::SECURITY_DISABLED, "no user store".into())),
            (Ok((dels, ups)), Some(store)) => {
                async {
                    for m in dels {
                        store
                            .delete_credential(&user, m)
                            .await
                            .map_err(|e| (store_error(&e), e.to_string()))?;
                    }
                    for (_, c) in ups {
                        store
                            .put_credential(&user, c)
                            .await
                            .map_err(|e| (store_error(&e), e.to_string()))?;
                    }
                    Ok(())
                }
                .await
            }
        };
        if let Err((code, message)) = done {
            r.error_code = code;
            r.error_message = Some(StrBytes::from_string(message));
        }
        resp.results.push(r);
    }
    resp
}

/// DescribeUserScramCredentials: DESCRIBE on the cluster.
#[derive(Debug)]
pub struct DescribeUserScramCredentials;

impl Handler for DescribeUserScramCredentials {
    const KEY: ApiKey = ApiKey::DescribeUserScramCredentials;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = DescribeUserScramCredentialsRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        if !crate::authz::cluster(access, Operation::Describe) {
            let resp = DescribeUserScramCredentialsResponse::default()
                .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED)
                .with_error_message(crate::authz::refused_message(access, "describe SCRAM users"));
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move { describe(req, ctx.cfg.acls.as_ref()).await })
    }
}

/// AlterUserScramCredentials: ALTER on the cluster.
#[derive(Debug)]
pub struct AlterUserScramCredentials;

impl Handler for AlterUserScramCredentials {
    const KEY: ApiKey = ApiKey::AlterUserScramCredentials;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = AlterUserScramCredentialsRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        if !crate::authz::cluster(access, Operation::Alter) {
            // Every user named is refused.
            let mut resp = AlterUserScramCredentialsResponse::default();
            let names =
                req.deletions.iter().map(|d| &d.name).chain(req.upsertions.iter().map(|u| &u.name));
            let names: std::collections::BTreeSet<&StrBytes> = names.collect();
            for n in names {
                resp.results.push(
                    AlterUserScramCredentialsResult::default()
                        .with_user(n.clone())
                        .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED),
                );
            }
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move { alter(req, ctx.cfg.acls.as_ref()).await })
    }
}
