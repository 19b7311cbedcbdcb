//! One inference call, whichever transport brought it: checked as the
//! protocol requires (one FP32 tensor named `input` whose bytes match its
//! shape), handed to the frontend as an `fb::InferRequest`, and its one
//! answer turned back into output tensors or a `Problem`. What the engine
//! checks (the model's input size, the app, the SLO, room to hold it) is
//! checked there, once, for every transport.

use baton_wire::fb;

use super::{Door, ModelInfo, Refusal};

/// Why a call failed, as both transports report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub kind: ProblemKind,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// No such model (HTTP 404, gRPC NOT_FOUND).
    NotFound,
    /// The request is malformed or does not fit the model (400, INVALID_ARGUMENT).
    Invalid,
    /// Overloaded, dropped or stopping: try again (503, UNAVAILABLE).
    Unavailable,
    /// The server failed (500, INTERNAL).
    Internal,
}

impl Problem {
    pub fn new(kind: ProblemKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ProblemKind::Invalid, message)
    }

    /// No model (or query) named `name`.
    pub fn unknown_model(name: &str) -> Self {
        Self::new(ProblemKind::NotFound, format!("no model named `{}`", baton_wire::clip(name)))
    }

    /// What a request refused with `r` is told.
    pub fn refused(r: Refusal) -> Self {
        let why = match r {
            Refusal::Full => "overloaded: the frontend's gateway queue is full, try again",
            Refusal::Stopped => "the server is stopping",
        };
        Self::new(ProblemKind::Unavailable, why)
    }

    pub fn http_status(&self) -> u16 {
        match self.kind {
            ProblemKind::NotFound => 404,
            ProblemKind::Invalid => 400,
            ProblemKind::Unavailable => 503,
            ProblemKind::Internal => 500,
        }
    }

    pub fn grpc(&self) -> tonic::Status {
        let m = self.message.clone();
        match self.kind {
            ProblemKind::NotFound => tonic::Status::not_found(m),
            ProblemKind::Invalid => tonic::Status::invalid_argument(m),
            ProblemKind::Unavailable => tonic::Status::unavailable(m),
            ProblemKind::Internal => tonic::Status::internal(m),
        }
    }
}

/// The one input tensor of a call.
#[derive(Debug, Default)]
pub struct Input {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    /// Little-endian FP32 elements.
    pub data: Vec<u8>,
}

/// A call decoded from either transport.
#[derive(Debug, Default)]
pub struct Call {
    pub model: String,
    /// The client's id, echoed in the answer.
    pub id: String,
    /// The `slo_us` parameter.
    pub slo_us: Option<i64>,
    /// The `app` parameter.
    pub app: Option<String>,
    pub inputs: Vec<Input>,
    /// The outputs asked for by name; empty: all.
    pub outputs: Vec<String>,
}

/// A value in an answer's `parameters`.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    Int(i64),
    Double(f64),
}

/// What a successful call answers.
#[derive(Debug)]
pub struct Answer {
    pub model: String,
    pub id: String,
    /// (name, shape, little-endian FP32 bytes)
    pub outputs: Vec<(String, Vec<i64>, Vec<u8>)>,
    /// Where the request's time went and what served it.
    pub params: Vec<(&'static str, Param)>,
}

/// The elements a shape holds, or why it is not a shape.
pub fn elements(shape: &[i64]) -> Result<usize, Problem> {
    shape.iter().try_fold(1usize, |n, &d| {
        let d =
            usize::try_from(d).map_err(|_| Problem::invalid(format!("shape {shape:?} has a negative dimension")))?;
        n.checked_mul(d).ok_or_else(|| Problem::invalid(format!("shape {shape:?} is too large")))
    })
}

/// Checks `call` and builds the request the frontend admits.
fn request(door: &dyn Door, call: &mut Call) -> Result<(ModelInfo, fb::InferRequest), Problem> {
    let Some(info) = door.model(&call.model) else {
        return Err(Problem::unknown_model(&call.model));
    };
    let input = match call.inputs.as_mut_slice() {
        [one] => one,
        more => {
            return Err(Problem::invalid(format!("{} input tensors: `{}` takes one, `input`", more.len(), info.name)))
        }
    };
    if input.name != "input" {
        return Err(Problem::invalid(format!(
            "input `{}`: `{}` takes one tensor, `input`",
            baton_wire::clip(&input.name),
            info.name
        )));
    }
    if input.datatype != "FP32" {
        return Err(Problem::invalid(format!(
            "input is {}: `{}` takes FP32",
            baton_wire::clip(&input.datatype),
            info.name
        )));
    }
    let n = elements(&input.shape)?;
    if n.checked_mul(4) != Some(input.data.len()) {
        let why = format!("input has shape {:?} ({n} elements) but {} bytes of data", input.shape, input.data.len());
        return Err(Problem::invalid(why));
    }
    if let Some(o) = call.outputs.iter().find(|o| !info.outputs.iter().any(|(name, _)| name == *o)) {
        return Err(Problem::invalid(format!("`{}` has no output `{}`", info.name, baton_wire::clip(o))));
    }
    let slo_ns = match call.slo_us {
        None => info.slo_ns,
        Some(us) if us > 0 => (us as u64).saturating_mul(1_000),
        Some(us) => return Err(Problem::invalid(format!("slo_us is {us}: it must be positive"))),
    };
    let tensor = fb::Tensor {
        name: None,
        dtype: fb::DType::F32,
        shape: Some(vec![n as i64]),
        data: Some(std::mem::take(&mut input.data)),
    };
    let name = Some(info.name.clone());
    let (model, query) = if info.query { (None, name) } else { (name, None) };
    let req = fb::InferRequest {
        id: 0,
        model,
        query,
        slo_ns,
        app: 0,
        app_name: call.app.take(),
        inputs: Some(vec![tensor]),
        path_ns: 0,
    };
    Ok((info, req))
}

/// Runs `call` through the frontend and waits for its one answer.
pub async fn infer(door: &dyn Door, mut call: Call) -> Result<Answer, Problem> {
    let (info, req) = request(door, &mut call)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    door.submit(req, tx).map_err(Problem::refused)?;
    let resp = rx.await.map_err(|_| Problem::new(ProblemKind::Unavailable, "the server stopped before answering"))?;
    answer(&info, call, resp)
}

/// The frontend's answer as the protocol's.
fn answer(info: &ModelInfo, call: Call, resp: fb::InferResponse) -> Result<Answer, Problem> {
    let message = resp.message.unwrap_or_default();
    match resp.status {
        fb::Status::Ok => {}
        fb::Status::Dropped => {
            let stage = resp.stage.map(|s| format!(" at stage `{s}`")).unwrap_or_default();
            let sep = if message.is_empty() { "" } else { ": " };
            let why = format!("dropped ({:?}){stage}{sep}{message}", resp.drop_reason);
            return Err(Problem::new(ProblemKind::Unavailable, why));
        }
        fb::Status::Error => {
            use fb::ErrorCode::*;
            let kind = match resp.error_code {
                UnknownModel | UnknownQuery | Unloaded => ProblemKind::NotFound,
                BadTensor | DeadlineInPast | Malformed | UnexpectedKind | UnknownApp => ProblemKind::Invalid,
                Overloaded | Unavailable => ProblemKind::Unavailable,
                Internal => ProblemKind::Internal,
            };
            return Err(Problem::new(kind, format!("{:?}: {message}", resp.error_code)));
        }
    }
    let mut outputs = Vec::new();
    for (i, t) in resp.outputs.unwrap_or_default().into_iter().enumerate() {
        let name = match (t.name, info.query) {
            (Some(n), _) => n,
            (None, false) => "output".to_string(),
            (None, true) => info.outputs.get(i).map_or_else(|| format!("output{i}"), |(n, _)| n.clone()),
        };
        if call.outputs.is_empty() || call.outputs.contains(&name) {
            let data = t.data.unwrap_or_default();
            outputs.push((name, vec![(data.len() / 4) as i64], data));
        }
    }
    let mut params = vec![("app", Param::Int(i64::from(resp.app)))];
    if let Some(t) = resp.timing {
        params.push(("batch_size", Param::Int(i64::from(t.batch_size))));
        params.push(("queue_us", Param::Int((t.queue_ns / 1_000) as i64)));
        params.push(("exec_us", Param::Int((t.exec_ns / 1_000) as i64)));
    }
    if let Some(s) = resp.subnet {
        params.push(("subnet", Param::Int(i64::from(s))));
        params.push(("accuracy", Param::Double(f64::from(resp.accuracy))));
    }
    Ok(Answer { model: info.name.clone(), id: call.id, outputs, params })
}
