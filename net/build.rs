//! Generates the gRPC bindings of the KServe v2 protocol from
//! `proto/inference.proto` (feature `kserve`): protox compiles the file in
//! pure Rust, so the build needs no `protoc` installed by hand.

fn main() {
    #[cfg(feature = "kserve")]
    {
        let proto = "proto/inference.proto";
        println!("cargo:rerun-if-changed={proto}");
        let files = protox::compile([proto], ["proto"]).expect("proto/inference.proto must compile");
        tonic_prost_build::configure().build_client(true).compile_fds(files).expect("tonic generates the service");
    }
}
