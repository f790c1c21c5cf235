//! Compiles the .proto files with protox (a pure-Rust protobuf compiler), so no
//! system `protoc` is needed, and generates their Rust types with prost.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/shoal/v1/node.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
