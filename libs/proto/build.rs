//! Compiles the workspace's .proto files with the protoc on PATH (or $PROTOC), which
//! `make deps` installs.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files = [
        root.join("lakelog/log/v1/log.proto"),
        root.join("lakelog/catalog/v1/catalog.proto"),
        root.join("lakelog/maintenance/v1/maintenance.proto"),
        root.join("lakelog/auth/v1/auth.proto"),
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    // Payloads as `Bytes`: handed from the wire to storage without a copy.
    tonic_prost_build::configure()
        .bytes(".")
        .codec_path("crate::codec::Codec")
        .compile_protos(&files, &[root])?;
    Ok(())
}
