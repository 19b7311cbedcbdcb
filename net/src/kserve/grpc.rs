//! KServe v2 over gRPC (tonic): `inference.GRPCInferenceService`.
//! Inputs come as `raw_input_contents` or as `fp32_contents`; outputs go
//! back as `raw_output_contents`. Errors are the `Problem`'s status codes.

use std::collections::HashMap;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::infer::{self, Call, Input, Param, Problem};
use super::pb;
use super::pb::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use super::pb::infer_parameter::ParameterChoice;
use super::{Door, EXTENSIONS, SERVER_NAME};

/// Serves gRPC from `listener` until `stop` turns true, holding at most
/// `max_connections` open (`capped`); then waits at most `GRACE` for the
/// connections to close (HTTP/2's graceful shutdown waits on the client,
/// which may never answer) before dropping them.
pub async fn serve(
    listener: tokio::net::TcpListener,
    door: Arc<dyn Door>,
    super::http::Limits { max_body, max_connections }: super::http::Limits,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let service = GrpcInferenceServiceServer::new(Service { door })
        .max_decoding_message_size(max_body)
        .max_encoding_message_size(max_body);
    let incoming = super::capped::Capped::new(listener, max_connections);
    let mut halted = stop.clone();
    let stopped = async move {
        let _ = stop.changed().await;
    };
    let serving =
        tonic::transport::Server::builder().add_service(service).serve_with_incoming_shutdown(incoming, stopped);
    tokio::select! {
        _ = serving => {}
        _ = async {
            let _ = halted.changed().await;
            tokio::time::sleep(super::http::GRACE).await;
        } => {}
    }
}

struct Service {
    door: Arc<dyn Door>,
}

/// A load or unload's outcome as a status.
async fn repository(done: super::Later<Result<(), Problem>>) -> Result<(), Status> {
    match done.await {
        Ok(r) => r.map_err(|p| p.grpc()),
        Err(_) => Err(Problem::refused(super::Refusal::Stopped).grpc()),
    }
}

fn unknown(name: &str) -> Status {
    Problem::unknown_model(name).grpc()
}

/// The integer or string a parameter holds, or why not.
fn int_param(p: &pb::InferParameter, name: &str) -> Result<i64, Problem> {
    match p.parameter_choice {
        Some(ParameterChoice::Int64Param(i)) => Ok(i),
        Some(ParameterChoice::Uint64Param(u)) => {
            i64::try_from(u).map_err(|_| Problem::invalid(format!("{name} is too large")))
        }
        _ => Err(Problem::invalid(format!("parameter {name} is not an integer"))),
    }
}

fn string_param(p: &pb::InferParameter, name: &str) -> Result<String, Problem> {
    match &p.parameter_choice {
        Some(ParameterChoice::StringParam(s)) => Ok(s.clone()),
        _ => Err(Problem::invalid(format!("parameter {name} is not a string"))),
    }
}

/// A `ModelInferRequest` as a call.
fn call_of(mut r: pb::ModelInferRequest) -> Result<Call, Problem> {
    let slo_us = r.parameters.get("slo_us").map(|p| int_param(p, "slo_us")).transpose()?;
    let app = r.parameters.get("app").map(|p| string_param(p, "app")).transpose()?;
    let raw = std::mem::take(&mut r.raw_input_contents);
    if !raw.is_empty() && raw.len() != r.inputs.len() {
        let why = format!("{} raw_input_contents for {} inputs", raw.len(), r.inputs.len());
        return Err(Problem::invalid(why));
    }
    let mut raw = raw.into_iter();
    let mut inputs = Vec::with_capacity(r.inputs.len());
    for t in r.inputs {
        let data = match (raw.next(), t.contents) {
            (Some(_), Some(_)) => {
                return Err(Problem::invalid(format!(
                    "input `{}` has raw and typed contents",
                    baton_wire::clip(&t.name)
                )))
            }
            (Some(bytes), None) => bytes,
            (None, Some(c)) => c.fp32_contents.iter().flat_map(|x| x.to_le_bytes()).collect(),
            (None, None) => Vec::new(),
        };
        inputs.push(Input { name: t.name, datatype: t.datatype, shape: t.shape, data });
    }
    let outputs = r.outputs.into_iter().map(|o| o.name).collect();
    Ok(Call { model: r.model_name, id: r.id, slo_us, app, inputs, outputs })
}

fn response(a: infer::Answer) -> pb::ModelInferResponse {
    let parameters: HashMap<String, pb::InferParameter> = a
        .params
        .into_iter()
        .map(|(k, p)| {
            let choice = match p {
                Param::Int(i) => ParameterChoice::Int64Param(i),
                Param::Double(d) => ParameterChoice::DoubleParam(d),
            };
            (k.to_string(), pb::InferParameter { parameter_choice: Some(choice) })
        })
        .collect();
    let mut outputs = Vec::with_capacity(a.outputs.len());
    let mut raw = Vec::with_capacity(a.outputs.len());
    for (name, shape, data) in a.outputs {
        outputs.push(pb::model_infer_response::InferOutputTensor {
            name,
            datatype: "FP32".into(),
            shape,
            parameters: HashMap::new(),
            contents: None,
        });
        raw.push(data);
    }
    pb::ModelInferResponse {
        model_name: a.model,
        model_version: "1".into(),
        id: a.id,
        parameters,
        outputs,
        raw_output_contents: raw,
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for Service {
    async fn server_live(&self, _: Request<pb::ServerLiveRequest>) -> Result<Response<pb::ServerLiveResponse>, Status> {
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        Ok(Response::new(pb::ServerReadyResponse { ready: true }))
    }

    async fn model_ready(&self, r: Request<pb::ModelReadyRequest>) -> Result<Response<pb::ModelReadyResponse>, Status> {
        let name = r.into_inner().name;
        let m = self.door.model(&name).ok_or_else(|| unknown(&name))?;
        Ok(Response::new(pb::ModelReadyResponse { ready: m.ready }))
    }

    async fn server_metadata(
        &self,
        _: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        Ok(Response::new(pb::ServerMetadataResponse {
            name: SERVER_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        r: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        use pb::model_metadata_response::TensorMetadata;
        let name = r.into_inner().name;
        let m = self.door.model(&name).ok_or_else(|| unknown(&name))?;
        let tensor =
            |name: &str, n: usize| TensorMetadata { name: name.into(), datatype: "FP32".into(), shape: vec![n as i64] };
        Ok(Response::new(pb::ModelMetadataResponse {
            name: m.name.clone(),
            versions: vec!["1".into()],
            platform: SERVER_NAME.into(),
            inputs: vec![tensor("input", m.input_floats)],
            outputs: m.outputs.iter().map(|(n, k)| tensor(n, *k)).collect(),
        }))
    }

    async fn model_infer(&self, r: Request<pb::ModelInferRequest>) -> Result<Response<pb::ModelInferResponse>, Status> {
        let call = call_of(r.into_inner()).map_err(|p| p.grpc())?;
        let answer = infer::infer(&*self.door, call).await.map_err(|p| p.grpc())?;
        Ok(Response::new(response(answer)))
    }

    async fn model_config(
        &self,
        r: Request<pb::ModelConfigRequest>,
    ) -> Result<Response<pb::ModelConfigResponse>, Status> {
        let name = r.into_inner().name;
        let m = self.door.model(&name).ok_or_else(|| unknown(&name))?;
        let fp32 = pb::DataType::TypeFp32 as i32;
        let config = pb::ModelConfig {
            name: m.name.clone(),
            platform: SERVER_NAME.into(),
            backend: SERVER_NAME.into(),
            // Baton's scheduler batches requests itself.
            max_batch_size: 0,
            input: vec![pb::ModelInput { name: "input".into(), data_type: fp32, dims: vec![m.input_floats as i64] }],
            output: m
                .outputs
                .iter()
                .map(|(n, k)| pb::ModelOutput { name: n.clone(), data_type: fp32, dims: vec![*k as i64] })
                .collect(),
        };
        Ok(Response::new(pb::ModelConfigResponse { config: Some(config) }))
    }

    async fn repository_model_load(
        &self,
        r: Request<pb::RepositoryModelLoadRequest>,
    ) -> Result<Response<pb::RepositoryModelLoadResponse>, Status> {
        repository(self.door.load(&r.into_inner().model_name)).await?;
        Ok(Response::new(pb::RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        r: Request<pb::RepositoryModelUnloadRequest>,
    ) -> Result<Response<pb::RepositoryModelUnloadResponse>, Status> {
        repository(self.door.unload(&r.into_inner().model_name)).await?;
        Ok(Response::new(pb::RepositoryModelUnloadResponse {}))
    }
}
