//! `lakelog auth …` and `lakelog acl …`: credentials and ACLs through the AuthService of the
//! catalog at --endpoint (docs/security.md).

use std::io::BufRead;

use clap::{Args, Subcommand};
use client::auth::{Acl, AclFilter};

#[derive(Subcommand, Debug)]
pub enum AuthCommand {
    /// The principal this CLI authenticates as (a certificate's or --token's), and whether
    /// ACLs are enforced.
    Whoami,
    /// Bearer tokens for gRPC clients.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// SASL users for Kafka clients (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// A new token for a principal; prints it once (only its hash is stored).
    Create {
        /// `alice` or `User:alice`.
        #[arg(long)]
        principal: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Every token's id, principal, creation time and description (never the token).
    List,
    /// Revokes a token by id: every role refuses it within a watch delay.
    Revoke { id: String },
}

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Creates a user or sets its password, read from stdin's first line.
    Add {
        name: String,
        /// PBKDF2 iterations (default 8192, at least 4096).
        #[arg(long, default_value_t = 0)]
        iterations: u32,
    },
    List,
    Remove {
        name: String,
    },
}

/// The resource of an ACL (one of).
#[derive(Args, Debug, Default)]
#[group(multiple = false)]
pub struct ResourceArgs {
    /// A stream by name (`*`: every stream).
    #[arg(long)]
    stream: Option<String>,
    /// Every stream whose name starts with this.
    #[arg(long)]
    stream_prefix: Option<String>,
    /// A consumer group by name (`*`: every group).
    #[arg(long)]
    group: Option<String>,
    /// Every group whose name starts with this.
    #[arg(long)]
    group_prefix: Option<String>,
    /// The cluster (admin operations, creating streams).
    #[arg(long)]
    cluster: bool,
}

impl ResourceArgs {
    /// (resource, pattern, name); empty strings for none.
    fn parts(&self) -> (&str, &str, String) {
        match self {
            ResourceArgs { stream: Some(n), .. } => ("stream", "literal", n.clone()),
            ResourceArgs { stream_prefix: Some(n), .. } => ("stream", "prefixed", n.clone()),
            ResourceArgs { group: Some(n), .. } => ("group", "literal", n.clone()),
            ResourceArgs { group_prefix: Some(n), .. } => ("group", "prefixed", n.clone()),
            ResourceArgs { cluster: true, .. } => ("cluster", "literal", String::new()),
            _ => ("", "", String::new()),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Allows (or with --deny, denies) a principal an operation on a resource. Deny wins.
    Add {
        /// `alice`, `User:alice`, or `*` for everyone.
        #[arg(long)]
        principal: String,
        /// produce, consume, describe, create, delete, alter, describe_configs, alter_configs, admin
        /// or all; repeat for more.
        #[arg(long = "operation", required = true)]
        operations: Vec<String>,
        #[command(flatten)]
        resource: ResourceArgs,
        #[arg(long)]
        deny: bool,
    },
    /// The ACLs (those matching the options given), one per line.
    List {
        #[arg(long)]
        principal: Option<String>,
        #[command(flatten)]
        resource: ResourceArgs,
    },
    /// Removes the ACLs matching the options (at least one), printing each removed.
    Remove {
        #[arg(long)]
        principal: Option<String>,
        #[arg(long)]
        operation: Option<String>,
        #[command(flatten)]
        resource: ResourceArgs,
        #[arg(long, conflicts_with = "allow")]
        deny: bool,
        #[arg(long)]
        allow: bool,
    },
}

fn principal(p: &str) -> String {
    if p.starts_with("User:") { p.to_owned() } else { format!("User:{p}") }
}

fn print_acl(a: &Acl) {
    println!(
        "{}\t{}\t{}\t{}:{}:{}",
        a.principal, a.permission, a.operation, a.resource, a.pattern, a.name
    );
}

pub async fn auth(c: &client::AuthClient, command: AuthCommand) -> anyhow::Result<()> {
    match command {
        AuthCommand::Whoami => {
            let (p, enforced) = c.who_am_i().await?;
            println!(
                "{p}\t{}",
                if enforced { "enforced" } else { "not enforced (auth.enabled: false)" }
            );
        }
        AuthCommand::Token { command: TokenCommand::Create { principal, description } } => {
            let (t, secret) = c.create_token(&principal, &description).await?;
            eprintln!("token {} for {}: shown once, keep it secret", t.id, t.principal);
            println!("{secret}");
        }
        AuthCommand::Token { command: TokenCommand::List } => {
            for t in c.list_tokens().await? {
                println!("{}\t{}\t{}\t{}", t.id, t.principal, t.created_ms, t.description);
            }
        }
        AuthCommand::Token { command: TokenCommand::Revoke { id } } => c.revoke_token(&id).await?,
        AuthCommand::User { command: UserCommand::Add { name, iterations } } => {
            let mut password = String::new();
            std::io::stdin().lock().read_line(&mut password)?;
            let password = password.trim_end_matches(['\r', '\n']);
            anyhow::ensure!(!password.is_empty(), "INVALID_ARGUMENT: give the password on stdin");
            c.put_user(&name, password, iterations).await?;
        }
        AuthCommand::User { command: UserCommand::List } => {
            for u in c.list_users().await? {
                println!("{}\t{}", u.name, u.mechanisms.join(","));
            }
        }
        AuthCommand::User { command: UserCommand::Remove { name } } => c.delete_user(&name).await?,
    }
    Ok(())
}

pub async fn acl(c: &client::AuthClient, command: AclCommand) -> anyhow::Result<()> {
    match command {
        AclCommand::Add { principal: p, operations, resource, deny } => {
            let (kind, pattern, name) = resource.parts();
            anyhow::ensure!(
                !kind.is_empty(),
                "INVALID_ARGUMENT: name a resource: --stream, --stream-prefix, --group, --group-prefix or --cluster"
            );
            let acls = operations
                .iter()
                .map(|op| Acl {
                    principal: principal(&p),
                    resource: kind.to_owned(),
                    pattern: pattern.to_owned(),
                    name: name.clone(),
                    operation: op.clone(),
                    permission: if deny { "deny" } else { "allow" }.to_owned(),
                })
                .collect();
            c.add_acls(acls).await?;
        }
        AclCommand::List { principal: p, resource } => {
            let (kind, pattern, name) = resource.parts();
            let filter = AclFilter {
                principal: p.as_deref().map(principal).unwrap_or_default(),
                resource: kind.to_owned(),
                pattern: pattern.to_owned(),
                name,
                ..Default::default()
            };
            for a in c.list_acls(filter).await? {
                print_acl(&a);
            }
        }
        AclCommand::Remove { principal: p, operation, resource, deny, allow } => {
            let (kind, pattern, name) = resource.parts();
            let filter = AclFilter {
                principal: p.as_deref().map(principal).unwrap_or_default(),
                resource: kind.to_owned(),
                pattern: pattern.to_owned(),
                name,
                operation: operation.unwrap_or_default(),
                permission: match (deny, allow) {
                    (true, _) => "deny",
                    (_, true) => "allow",
                    _ => "",
                }
                .to_owned(),
            };
            for a in c.remove_acls(filter).await? {
                print_acl(&a);
            }
        }
    }
    Ok(())
}
