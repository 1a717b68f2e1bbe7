//! Lakelog as the Iceberg REST catalog of its lake tables (docs/lake.md), read-only: config,
//! a token, the one namespace `lakelog`, list, load and check tables. A table is a stream with
//! `lake.table` set whose first segment has been committed; its metadata comes from the state
//! the compaction swaps move (`lake/<identity>/table`), the same JSON the swap's commit wrote
//! at its metadata location. Writes are refused: external engines read these tables, never
//! rewrite them (the log and the table are one copy).
//!
//! Served on the catalog role's port under `/iceberg` (HTTP/1.1 beside gRPC), so an engine's
//! catalog URI is `http://<catalog>/iceberg`.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use catalog::{Catalog, CatalogError};
use serde_json::{Value as Json, json};

/// The one namespace every lake table is in.
pub const NAMESPACE: &str = "lakelog";

/// Where the routes are mounted.
pub const PREFIX: &str = "/iceberg";

/// What table loads tell engines about reaching the files (an S3 endpoint; never credentials).
#[derive(Clone, Debug, Default)]
pub struct FileAccess {
    pub properties: Vec<(String, String)>,
}

impl FileAccess {
    /// From the object store's config: an S3-compatible store's endpoint, region and path
    /// style (engines bring their own credentials).
    pub fn of(store: &config::ObjectStoreConfig) -> Self {
        let mut properties = Vec::new();
        if let config::ObjectStoreConfig::S3(s3) = store {
            if let Some(e) = &s3.endpoint {
                properties.push(("s3.endpoint".to_owned(), e.clone()));
            }
            properties.push(("s3.region".to_owned(), s3.region.clone()));
            properties.push(("s3.path-style-access".to_owned(), s3.path_style.to_string()));
        }
        FileAccess { properties }
    }
}

#[derive(Clone)]
struct Rest {
    catalog: Catalog,
    access: FileAccess,
}

/// The REST catalog's routes, to add to the catalog role's port.
pub fn routes(catalog: Catalog, access: FileAccess) -> Router {
    let v1 = Router::new()
        .route("/v1/config", get(config))
        .route("/v1/oauth/tokens", post(token))
        .route("/v1/namespaces", get(namespaces).post(read_only))
        .route("/v1/namespaces/{ns}", get(namespace).head(namespace).delete(read_only))
        .route("/v1/namespaces/{ns}/tables", get(tables).post(read_only))
        .route(
            "/v1/namespaces/{ns}/tables/{table}",
            get(load_table).head(table_exists).post(read_only).delete(read_only),
        )
        .route("/v1/tables/rename", post(read_only))
        .route("/v1/transactions/commit", post(read_only))
        .fallback(not_found);
    Router::new().nest(PREFIX, v1).with_state(Rest { catalog, access })
}

fn reply(status: StatusCode, body: Json) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// An Iceberg REST error (`ErrorModel`).
fn error(status: StatusCode, kind: &str, message: String) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "code": status.as_u16()}});
    reply(status, body)
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "NotFoundException", "no such route".to_owned())
}

async fn read_only() -> Response {
    error(
        StatusCode::FORBIDDEN,
        "ForbiddenException",
        "Lakelog's lake tables are read-only to engines: the compactor alone commits to them"
            .to_owned(),
    )
}

async fn config() -> Response {
    reply(StatusCode::OK, json!({"defaults": {}, "overrides": {}}))
}

/// A token for clients that ask for one (OAuth2 client credentials); any is accepted until
/// the catalog authenticates (issue 20).
async fn token() -> Response {
    reply(
        StatusCode::OK,
        json!({
            "access_token": "lakelog",
            "token_type": "bearer",
            "expires_in": 3600,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        }),
    )
}

async fn namespaces() -> Response {
    reply(StatusCode::OK, json!({"namespaces": [[NAMESPACE]]}))
}

fn no_namespace(ns: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "NoSuchNamespaceException",
        format!("namespace {ns} does not exist (lake tables are in `{NAMESPACE}`)"),
    )
}

async fn namespace(Path(ns): Path<String>) -> Response {
    if ns != NAMESPACE {
        return no_namespace(&ns);
    }
    reply(StatusCode::OK, json!({"namespace": [NAMESPACE], "properties": {}}))
}

fn unavailable(e: impl std::fmt::Display) -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailableException", e.to_string())
}

async fn tables(State(s): State<Rest>, Path(ns): Path<String>) -> Response {
    if ns != NAMESPACE {
        return no_namespace(&ns);
    }
    let streams = match s.catalog.list().await {
        Ok(l) => l,
        Err(e) => return unavailable(e),
    };
    let mut ids = Vec::new();
    for stream in streams.into_iter().filter(|s| s.config.lake_table()) {
        match table_state(&s.catalog, &stream.identity).await {
            Ok(Some(_)) => ids.push(json!({"namespace": [NAMESPACE], "name": stream.name})),
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    reply(StatusCode::OK, json!({"identifiers": ids}))
}

/// The table state of the stream `identity`, if its table has a commit.
async fn table_state(
    catalog: &Catalog,
    identity: &str,
) -> Result<Option<lake::table::TableState>, Response> {
    let keys = logstore::keys::Keys::new(catalog.logs().keys().cluster());
    let kv = catalog.logs().meta().get(&keys.lake_table(identity)).await.map_err(unavailable)?;
    match kv {
        None => Ok(None),
        Some(kv) => maintenance::lakes::decode_table(&kv.value).map(Some).map_err(|e| {
            error(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", e.to_string())
        }),
    }
}

/// A stream's table, or the REST error that says why there is none.
async fn find(s: &Rest, ns: &str, table: &str) -> Result<lake::table::TableState, Response> {
    if ns != NAMESPACE {
        return Err(no_namespace(ns));
    }
    let missing = |why: &str| {
        error(StatusCode::NOT_FOUND, "NoSuchTableException", format!("table {ns}.{table}: {why}"))
    };
    let stream = match s.catalog.get(table).await {
        Ok(st) => st,
        Err(CatalogError::NotFound(_) | CatalogError::InvalidArgument(_)) => {
            return Err(missing("no such stream"));
        }
        Err(e) => return Err(unavailable(e)),
    };
    if !stream.config.lake_table() {
        return Err(missing("the stream does not have lake.table set"));
    }
    table_state(&s.catalog, &stream.identity)
        .await?
        .ok_or_else(|| missing("no segment has been committed to it yet"))
}

async fn load_table(State(s): State<Rest>, Path((ns, table)): Path<(String, String)>) -> Response {
    let state = match find(&s, &ns, &table).await {
        Ok(t) => t,
        Err(e) => return e,
    };
    let metadata: Json = match serde_json::from_str(&state.table().metadata_json()) {
        Ok(m) => m,
        Err(e) => {
            return error(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", e.to_string());
        }
    };
    let config: serde_json::Map<String, Json> =
        s.access.properties.iter().map(|(k, v)| (k.clone(), Json::String(v.clone()))).collect();
    reply(
        StatusCode::OK,
        json!({
            "metadata-location": state.metadata_location(),
            "metadata": metadata,
            "config": config,
        }),
    )
}

async fn table_exists(
    State(s): State<Rest>,
    Path((ns, table)): Path<(String, String)>,
) -> Response {
    match find(&s, &ns, &table).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.status().into_response(),
    }
}
