//! Lakelog's gRPC API: the generated bindings of `proto/lakelog/**/*.proto`, one module per
//! package. The only crate that compiles .proto files; depends on no Lakelog crate.

#![allow(missing_docs, clippy::all, missing_debug_implementations)]

pub mod codec;

/// `lakelog.log.v1`: the LogService.
pub mod log {
    pub mod v1 {
        tonic::include_proto!("lakelog.log.v1");
    }
}

/// `lakelog.catalog.v1`: the CatalogService.
pub mod catalog {
    pub mod v1 {
        tonic::include_proto!("lakelog.catalog.v1");
    }
}

/// `lakelog.auth.v1`: the AuthService (tokens, SASL users, ACLs).
pub mod auth {
    pub mod v1 {
        tonic::include_proto!("lakelog.auth.v1");
    }
}

/// `lakelog.maintenance.v1`: the CompactorService and the CleanerService.
pub mod maintenance {
    pub mod v1 {
        tonic::include_proto!("lakelog.maintenance.v1");
    }
}
