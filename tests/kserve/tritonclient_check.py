"""Drives a running Baton gateway with the stock tritonclient package (HTTP
and gRPC): health, metadata, inference (binary and JSON tensors), the
repository extension, and bad input that must get typed errors while the
server keeps serving. Exits non-zero, saying what failed, on any mismatch;
prints one JSON line of what it did on success.

Usage: tritonclient_check.py --http HOST:PORT --grpc HOST:PORT --model NAME
       --floats N --outputs K --max-body BYTES
"""

import argparse
import json
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def fail(why):
    sys.exit(f"tritonclient_check: {why}")


def expect_error(what, call, status_in):
    """`call` must raise an error whose status is one of `status_in`."""
    try:
        call()
    except InferenceServerException as e:
        status = str(e.status())
        if not any(s in status for s in status_in):
            fail(f"{what}: status {status!r} ({e.message()}), wanted one of {status_in}")
        return status
    fail(f"{what}: succeeded, wanted an error")


def check(client, mod, args, kind):
    done = {}
    if not client.is_server_live() or not client.is_server_ready():
        fail(f"{kind}: server not live and ready")
    meta = client.get_server_metadata()
    name = meta["name"] if isinstance(meta, dict) else meta.name
    if name != "baton":
        fail(f"{kind}: server metadata names {name!r}")
    m = client.get_model_metadata(args.model)
    inputs = m["inputs"] if isinstance(m, dict) else [
        {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in m.inputs]
    if inputs != [{"name": "input", "datatype": "FP32", "shape": [args.floats]}]:
        fail(f"{kind}: model metadata inputs {inputs}")
    if not client.is_model_ready(args.model):
        fail(f"{kind}: model not ready")

    x = np.arange(args.floats, dtype=np.float32)
    for binary in (True, False):
        inp = mod.InferInput("input", [args.floats], "FP32")
        if kind == "http":
            inp.set_data_from_numpy(x, binary_data=binary)
            outs = [mod.InferRequestedOutput("output", binary_data=binary)]
        else:
            inp.set_data_from_numpy(x)
            outs = [mod.InferRequestedOutput("output")]
        r = client.infer(args.model, [inp], outputs=outs, request_id="r1", parameters={"slo_us": 1_000_000})
        out = r.as_numpy("output")
        if out is None or out.shape != (args.outputs,) or out.dtype != np.float32:
            fail(f"{kind}: output {out!r}")
        if not np.all(np.isfinite(out)):
            fail(f"{kind}: output not finite: {out}")
        done[f"infer_binary_{binary}" if kind == "http" else "infer"] = out.tolist()
        if kind == "grpc":
            break

    def infer_with(name, tensor, params=None):
        inp = mod.InferInput("input", list(tensor.shape), "FP32")
        inp.set_data_from_numpy(tensor)
        return lambda: client.infer(name, [inp], parameters=params)

    # Unknown model: 404 / NOT_FOUND.
    expect_error(f"{kind} unknown model", infer_with("no-such-model", x), ["404", "NOT_FOUND"])
    expect_error(f"{kind} metadata of an unknown model", lambda: client.get_model_metadata("no-such-model"),
                 ["404", "NOT_FOUND"])
    # Wrong tensor size: 400 / INVALID_ARGUMENT.
    short = np.zeros(max(1, args.floats // 2), dtype=np.float32)
    expect_error(f"{kind} wrong tensor size", infer_with(args.model, short), ["400", "INVALID_ARGUMENT"])
    # A wrong datatype: 400 / INVALID_ARGUMENT.
    ints = mod.InferInput("input", [args.floats], "INT32")
    ints.set_data_from_numpy(np.zeros(args.floats, dtype=np.int32))
    expect_error(f"{kind} wrong datatype", lambda: client.infer(args.model, [ints]), ["400", "INVALID_ARGUMENT"])
    # A negative SLO: 400 / INVALID_ARGUMENT.
    expect_error(f"{kind} negative slo", infer_with(args.model, x, {"slo_us": -5}), ["400", "INVALID_ARGUMENT"])
    # A message over the limit: 413 over HTTP; over gRPC tonic says OUT_OF_RANGE
    # (grpc-core says RESOURCE_EXHAUSTED).
    big = np.zeros(args.max_body // 4 + 1024, dtype=np.float32)
    expect_error(f"{kind} over the size limit", infer_with(args.model, big), ["413", "RESOURCE_EXHAUSTED", "OUT_OF_RANGE"])

    # Unload: NOT_FOUND / 404 until loaded again; then it serves.
    client.unload_model(args.model)
    if client.is_model_ready(args.model):
        fail(f"{kind}: ready after unload")
    expect_error(f"{kind} infer on an unloaded model", infer_with(args.model, x), ["404", "NOT_FOUND"])
    client.load_model(args.model)
    if not client.is_model_ready(args.model):
        fail(f"{kind}: not ready after load")
    infer_with(args.model, x)()
    # Still serving after all of that.
    if not client.is_server_live():
        fail(f"{kind}: not live at the end")
    return done


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--http", required=True)
    p.add_argument("--grpc", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--floats", type=int, required=True)
    p.add_argument("--outputs", type=int, required=True)
    p.add_argument("--max-body", type=int, required=True)
    args = p.parse_args()
    http = check(httpclient.InferenceServerClient(url=args.http), httpclient, args, "http")
    grpc = check(grpcclient.InferenceServerClient(url=args.grpc), grpcclient, args, "grpc")
    print(json.dumps({"http": http, "grpc": grpc}))


if __name__ == "__main__":
    main()
