//! KServe v2 over HTTP/REST (hyper, HTTP/1.1), with the binary tensor
//! extension and Prometheus's `/metrics`.
//!
//! Routes:
//! - `GET /v2`, `/v2/health/live`, `/v2/health/ready`
//! - `GET /v2/models/{name}[/versions/{v}]` (metadata), `.../ready`,
//!   `.../config` (Triton's model-configuration extension)
//! - `POST /v2/models/{name}[/versions/{v}]/infer`
//! - `POST /v2/repository/index`, `/v2/repository/models/{name}/load|unload`
//! - `GET /metrics`
//!
//! Errors are `{"error": "..."}` with the status `Problem::http_status`
//! gives; a body over the limit is 413.

use std::sync::Arc;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Map, Value};

use super::infer::{self, elements, Answer, Call, Input, Param, Problem};
use super::{Door, ModelInfo, EXTENSIONS, SERVER_NAME};

/// The header that says how long the JSON part of a binary-extension body is.
const HEADER_LEN: &str = "inference-header-content-length";

type Reply = Response<Full<Bytes>>;

/// How long a stopping server waits for calls in flight to be answered.
pub const GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// What one listener of the gateway (HTTP or gRPC) takes at most.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_body: usize,
    pub max_connections: usize,
}

/// Serves HTTP connections from `listener` until `stop` turns true; then
/// each connection finishes the call in flight (the frontend answers every
/// request it holds when it stops) and closes. A connection beyond
/// `max_connections` is answered 503 and closed.
pub async fn serve(
    listener: tokio::net::TcpListener,
    door: Arc<dyn Door>,
    Limits { max_body, max_connections }: Limits,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                // Out of descriptors or memory: pause instead of spinning.
                Err(_) => { tokio::time::sleep(std::time::Duration::from_millis(10)).await; continue }
            },
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        // Reap the connections that have ended, then count the open ones.
        while conns.try_join_next().is_some() {}
        if conns.len() >= max_connections {
            tokio::spawn(refuse(stream, max_connections));
            continue;
        }
        let (door, mut stop) = (Arc::clone(&door), stop.clone());
        conns.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let door = Arc::clone(&door);
                async move { Ok::<_, std::convert::Infallible>(route(req, &*door, max_body).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    let _ = tokio::time::timeout(GRACE, async { while conns.join_next().await.is_some() {} }).await;
}

/// Answers a connection over the limit 503 and closes it, reading nothing.
async fn refuse(mut stream: tokio::net::TcpStream, max: usize) {
    use tokio::io::AsyncWriteExt;
    let body = json!({ "error": format!("{max} connections are open, the most this server takes") }).to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all((head + &body).as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn respond(status: u16, content_type: &str, body: Vec<u8>) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).expect("a valid status");
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, content_type.parse().expect("a valid header"));
    r
}

fn json_reply(status: u16, v: &Value) -> Reply {
    respond(status, "application/json", serde_json::to_vec(v).expect("a Value serialises"))
}

fn problem(p: &Problem) -> Reply {
    json_reply(p.http_status(), &json!({ "error": p.message }))
}

fn not_found(what: &str) -> Reply {
    problem(&Problem::new(infer::ProblemKind::NotFound, format!("no such endpoint: {}", baton_wire::clip(what))))
}

async fn route(req: Request<Incoming>, door: &dyn Door, max_body: usize) -> Reply {
    let path = req.uri().path().to_string();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let get = req.method() == Method::GET;
    let post = req.method() == Method::POST;
    match parts.as_slice() {
        ["metrics"] if get => match door.metrics().await {
            Ok(Ok(text)) => respond(200, "text/plain; version=0.0.4; charset=utf-8", text.into_bytes()),
            Ok(Err(p)) => problem(&p),
            Err(_) => problem(&stopping()),
        },
        ["v2"] if get => json_reply(
            200,
            &json!({
                "name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION"), "extensions": EXTENSIONS,
            }),
        ),
        ["v2", "health", "live"] if get => json_reply(200, &json!({ "live": true })),
        ["v2", "health", "ready"] if get => json_reply(200, &json!({ "ready": true })),
        ["v2", "repository", "index"] if post => {
            let index: Vec<Value> = door
                .models()
                .iter()
                .map(|m| json!({ "name": m.name, "version": "1", "state": if m.ready { "READY" } else { "UNAVAILABLE" } }))
                .collect();
            json_reply(200, &Value::Array(index))
        }
        ["v2", "repository", "models", name, verb @ ("load" | "unload")] if post => {
            let done = if *verb == "load" { door.load(name) } else { door.unload(name) };
            match done.await {
                Ok(Ok(())) => json_reply(200, &json!({})),
                Ok(Err(p)) => problem(&p),
                Err(_) => problem(&stopping()),
            }
        }
        ["v2", "models", name, rest @ ..] => {
            let rest = match rest {
                ["versions", _, tail @ ..] => tail,
                tail => tail,
            };
            match (rest, get, post) {
                ([], true, _) => match door.model(name) {
                    Some(m) => json_reply(200, &metadata(&m)),
                    None => problem(&unknown(name)),
                },
                (["config"], true, _) => match door.model(name) {
                    Some(m) => json_reply(200, &config(&m)),
                    None => problem(&unknown(name)),
                },
                (["ready"], true, _) => match door.model(name) {
                    Some(m) => {
                        json_reply(if m.ready { 200 } else { 400 }, &json!({ "name": m.name, "ready": m.ready }))
                    }
                    None => problem(&unknown(name)),
                },
                (["infer"], _, true) => {
                    let model = name.to_string();
                    infer_call(req, door, model, max_body).await
                }
                _ => not_found(&path),
            }
        }
        _ => not_found(&path),
    }
}

fn stopping() -> Problem {
    Problem::refused(super::Refusal::Stopped)
}

fn unknown(name: &str) -> Problem {
    Problem::unknown_model(name)
}

/// A model's metadata in the protocol's JSON.
fn metadata(m: &ModelInfo) -> Value {
    let outputs: Vec<Value> =
        m.outputs.iter().map(|(n, k)| json!({ "name": n, "datatype": "FP32", "shape": [k] })).collect();
    json!({
        "name": m.name,
        "versions": ["1"],
        "platform": SERVER_NAME,
        "inputs": [{ "name": "input", "datatype": "FP32", "shape": [m.input_floats] }],
        "outputs": outputs,
    })
}

/// A model's configuration as Triton's model-configuration extension
/// gives it (what `perf_analyzer` reads): no batch dimension, since
/// Baton's scheduler batches requests itself.
fn config(m: &ModelInfo) -> Value {
    let outputs: Vec<Value> =
        m.outputs.iter().map(|(n, k)| json!({ "name": n, "data_type": "TYPE_FP32", "dims": [k] })).collect();
    json!({
        "name": m.name,
        "platform": SERVER_NAME,
        "backend": SERVER_NAME,
        "max_batch_size": 0,
        "input": [{ "name": "input", "data_type": "TYPE_FP32", "dims": [m.input_floats] }],
        "output": outputs,
    })
}

async fn infer_call(req: Request<Incoming>, door: &dyn Door, model: String, max_body: usize) -> Reply {
    let header_len = match req.headers().get(HEADER_LEN).map(|v| v.to_str().ok().and_then(|s| s.parse().ok())) {
        None => None,
        Some(Some(n)) => Some(n),
        Some(None) => return problem(&Problem::invalid(format!("{HEADER_LEN} is not a length"))),
    };
    let body = match Limited::new(req.into_body(), max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            let why = format!("the body is over {max_body} bytes, the most this server takes");
            return json_reply(413, &json!({ "error": why }));
        }
        Err(e) => return problem(&Problem::invalid(format!("cannot read the body: {e}"))),
    };
    let (call, binary_out) = match parse(model, &body, header_len) {
        Ok(c) => c,
        Err(p) => return problem(&p),
    };
    match infer::infer(door, call).await {
        Ok(a) => encode(a, &binary_out),
        Err(p) => problem(&p),
    }
}

/// Which outputs go back as binary data: every output (`All`), or those named.
enum BinaryOut {
    All,
    Named(Vec<String>),
}

/// A JSON (or binary-extension) infer body as a call.
fn parse(model: String, body: &[u8], header_len: Option<usize>) -> Result<(Call, BinaryOut), Problem> {
    let json_len = header_len.unwrap_or(body.len());
    if json_len > body.len() {
        return Err(Problem::invalid(format!("{HEADER_LEN} is {json_len}, the body has {} bytes", body.len())));
    }
    let (head, mut binary) = body.split_at(json_len);
    let v: Value = serde_json::from_slice(head).map_err(|e| Problem::invalid(format!("the body is not JSON: {e}")))?;
    let obj = v.as_object().ok_or_else(|| Problem::invalid("the body is not a JSON object"))?;
    let params = obj.get("parameters").and_then(Value::as_object);
    let mut call = Call {
        model,
        id: obj.get("id").and_then(Value::as_str).unwrap_or_default().to_string(),
        slo_us: match params.and_then(|p| p.get("slo_us")) {
            None => None,
            Some(v) => Some(v.as_i64().ok_or_else(|| Problem::invalid("parameter slo_us is not an integer"))?),
        },
        app: match params.and_then(|p| p.get("app")) {
            None => None,
            Some(v) => Some(v.as_str().ok_or_else(|| Problem::invalid("parameter app is not a string"))?.to_string()),
        },
        ..Default::default()
    };
    let inputs = obj.get("inputs").and_then(Value::as_array).ok_or_else(|| Problem::invalid("no `inputs` array"))?;
    for t in inputs {
        let input = tensor(t, &mut binary)?;
        call.inputs.push(input);
    }
    if !binary.is_empty() {
        return Err(Problem::invalid(format!("{} bytes of binary data no input claims", binary.len())));
    }
    let all_binary = params.and_then(|p| p.get("binary_data_output")).and_then(Value::as_bool).unwrap_or(false);
    let mut named = Vec::new();
    if let Some(outs) = obj.get("outputs") {
        let outs = outs.as_array().ok_or_else(|| Problem::invalid("`outputs` is not an array"))?;
        for o in outs {
            let name =
                o.get("name").and_then(Value::as_str).ok_or_else(|| Problem::invalid("an output without a name"))?;
            let binary = o.get("parameters").and_then(|p| p.get("binary_data")).and_then(Value::as_bool);
            if binary.unwrap_or(all_binary) {
                named.push(name.to_string());
            }
            call.outputs.push(name.to_string());
        }
    }
    let out = if all_binary && call.outputs.is_empty() { BinaryOut::All } else { BinaryOut::Named(named) };
    Ok((call, out))
}

/// One input tensor: its data inline (`data`, nested arrays allowed) or the
/// next `binary_data_size` bytes of `binary`.
fn tensor(t: &Value, binary: &mut &[u8]) -> Result<Input, Problem> {
    let field = |k: &str| t.get(k).ok_or_else(|| Problem::invalid(format!("an input without `{k}`")));
    let name = field("name")?.as_str().ok_or_else(|| Problem::invalid("an input's name is not a string"))?;
    let datatype = field("datatype")?.as_str().ok_or_else(|| Problem::invalid("a datatype is not a string"))?;
    let shape: Vec<i64> =
        field("shape")?.as_array().and_then(|a| a.iter().map(Value::as_i64).collect()).ok_or_else(|| {
            Problem::invalid(format!("input `{}`: the shape is not a list of integers", baton_wire::clip(name)))
        })?;
    let mut input = Input { name: name.into(), datatype: datatype.into(), shape, data: Vec::new() };
    let size = t.get("parameters").and_then(|p| p.get("binary_data_size"));
    if let Some(size) = size {
        let n = size.as_u64().and_then(|n| usize::try_from(n).ok()).filter(|&n| n <= binary.len());
        let n =
            n.ok_or_else(|| Problem::invalid(format!("input `{}`: binary_data_size is past the body", input.name)))?;
        let (mine, rest) = binary.split_at(n);
        input.data = mine.to_vec();
        *binary = rest;
        return Ok(input);
    }
    if datatype != "FP32" {
        // Checked with its message where the call is checked.
        return Ok(input);
    }
    let data = field("data")?;
    let want = elements(&input.shape)?;
    input.data.reserve(want.min(1 << 24) * 4);
    flatten(data, &mut input.data)?;
    Ok(input)
}

/// Appends the numbers of a (nested) JSON array as little-endian FP32.
fn flatten(v: &Value, out: &mut Vec<u8>) -> Result<(), Problem> {
    match v {
        Value::Array(xs) => xs.iter().try_for_each(|x| flatten(x, out)),
        Value::Number(n) => {
            let x = n.as_f64().ok_or_else(|| Problem::invalid("a number that is not a float"))?;
            out.extend_from_slice(&(x as f32).to_le_bytes());
            Ok(())
        }
        other => Err(Problem::invalid(format!("FP32 data holds {}", kind(other)))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::String(_) => "a string",
        Value::Object(_) => "an object",
        Value::Array(_) | Value::Number(_) => "a number",
    }
}

/// The answer's JSON, followed by binary outputs when any was asked for so.
fn encode(a: Answer, binary_out: &BinaryOut) -> Reply {
    let mut params = Map::new();
    for (k, p) in &a.params {
        let v = match p {
            Param::Int(i) => json!(i),
            Param::Double(d) => json!(d),
        };
        params.insert((*k).to_string(), v);
    }
    let mut tail = Vec::new();
    let outputs: Vec<Value> = a
        .outputs
        .into_iter()
        .map(|(name, shape, data)| {
            let binary = match binary_out {
                BinaryOut::All => true,
                BinaryOut::Named(n) => n.contains(&name),
            };
            if binary {
                let size = data.len();
                tail.extend_from_slice(&data);
                json!({ "name": name, "datatype": "FP32", "shape": shape, "parameters": { "binary_data_size": size } })
            } else {
                let xs: Vec<f32> = data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                json!({ "name": name, "datatype": "FP32", "shape": shape, "data": xs })
            }
        })
        .collect();
    let mut body = json!({ "model_name": a.model, "model_version": "1", "parameters": params, "outputs": outputs });
    if !a.id.is_empty() {
        body["id"] = json!(a.id);
    }
    let mut bytes = serde_json::to_vec(&body).expect("a Value serialises");
    if tail.is_empty() {
        return respond(200, "application/json", bytes);
    }
    let json_len = bytes.len();
    bytes.extend_from_slice(&tail);
    let mut r = respond(200, "application/octet-stream", bytes);
    r.headers_mut().insert(HEADER_LEN, json_len.into());
    r
}
