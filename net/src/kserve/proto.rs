//! The gRPC bindings generated from `proto/inference.proto` (`build.rs`).

#[allow(clippy::all, missing_docs)]
pub mod inference {
    tonic::include_proto!("inference");
}
