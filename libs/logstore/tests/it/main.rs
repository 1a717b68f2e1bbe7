//! Log storage against real parts: the embedded store with a local directory, and a real etcd
//! with a real S3 server (SeaweedFS). Each case runs against both. Invariant numbers refer to
//! ARCHITECTURE §7.

/// Runs each named case (an `async fn(Env) -> Result<()>` in the calling module) against the
/// embedded store with a local directory, and against etcd with SeaweedFS.
macro_rules! both_envs {
    ($($case:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() -> anyhow::Result<()> {
                    super::$case(crate::env::Env::embedded().await?).await
                }
            )*
        }
        mod etcd_s3 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() -> anyhow::Result<()> {
                    super::$case(crate::env::Env::etcd_s3().await?).await
                }
            )*
        }
    };
}

mod cases;
mod cleaning;
mod compaction;
mod cursors;
mod cutoff;
mod env;
mod failures;
mod faulty_meta;
mod flush_policy;
mod lake;
