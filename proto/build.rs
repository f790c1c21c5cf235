//! Compiles the .proto files with protox (a pure-Rust protobuf compiler), so no
//! system `protoc` is needed, generates their messages with prost and their tonic
//! clients and servers with tonic-prost-build, and writes the encoded descriptor set
//! that the server's reflection service hands to clients such as `grpcurl`.

use std::path::PathBuf;

/// The API's files, relative to the include directory `proto`.
const FILES: [&str; 3] = [
    "shoal/v1/node.proto",
    "shoal/v1/room.proto",
    "shoal/v1/signal.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut compiler = protox::Compiler::new(["proto"])?;
    // Source info carries the comments, so reflection clients show the docs too.
    compiler
        .include_source_info(true)
        .include_imports(true)
        .open_files(FILES)?;
    std::fs::write(
        out_dir.join("shoal_v1_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;
    // No `XClient::connect(url)` constructors: the generated one would collide with
    // the `SignalService.Connect` method. Clients build a `tonic::transport::Channel`
    // and wrap it: `RoomServiceClient::new(channel)`.
    //
    // Messages also derive serde, so browsers can speak the same messages as JSON
    // (shoal's `/signal` WebSocket): field names in lowerCamelCase as in the proto3
    // JSON mapping, absent fields take their defaults; a oneof (enum_attribute covers
    // them) is externally tagged, so `signal_request::Message` reads and writes
    // `{"join": {...}}`, what the WebSocket carries. Enum fields stay numbers.
    tonic_prost_build::configure()
        .message_attribute(
            ".shoal.v1",
            "#[derive(serde::Serialize, serde::Deserialize)] \
             #[serde(rename_all = \"camelCase\", default)]",
        )
        .enum_attribute(
            ".shoal.v1",
            "#[derive(serde::Serialize, serde::Deserialize)] \
             #[serde(rename_all = \"camelCase\")]",
        )
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
