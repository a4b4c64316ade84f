//! Generates the gRPC binding's messages and service from the vendored `proto/a2a.proto`,
//! with the pure-Rust `protox` compiler (no `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(["a2a.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        // Ordered maps, as the object model keeps them: one encoding for one value.
        .btree_map(".")
        .compile_fds(descriptors)?;
    Ok(())
}
