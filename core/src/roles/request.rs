//! What the frontend reads of a client's request when it admits it: a
//! `ClientRequest` borrows from a received frame (`InferRequestRef`: no
//! owned copy of the request is made) or takes an owned request apart
//! (in-process clients, the gateway), without copying either way. Only the input's
//! bytes outlive admission: a borrowed input is copied once, into the
//! buffer the frontend holds; an owned one moves there.

use std::borrow::Cow;

use baton_wire::fb;
use baton_wire::message::RequestView;

/// A client's request as admission reads it.
#[derive(Debug)]
pub struct ClientRequest<'a> {
    pub id: u64,
    pub model: Option<Cow<'a, str>>,
    pub query: Option<Cow<'a, str>>,
    pub app: u32,
    pub app_name: Option<Cow<'a, str>>,
    pub slo_ns: u64,
    pub path_ns: u64,
    /// How many input tensors the request carries.
    pub tensors: usize,
    /// The first of them, if any.
    pub input: Option<Input<'a>>,
}

/// An input tensor as admission checks it.
#[derive(Debug)]
pub struct Input<'a> {
    pub dtype: fb::DType,
    /// The product of its shape (1 for a tensor without one, as a scalar);
    /// None where it overflows (a shape with a 0 in it passes the frame's
    /// verifier, which multiplies wider).
    pub elements: Option<i64>,
    pub data: Cow<'a, [u8]>,
}

impl From<fb::InferRequest> for ClientRequest<'static> {
    fn from(r: fb::InferRequest) -> Self {
        let mut inputs = r.inputs.unwrap_or_default();
        let tensors = inputs.len();
        inputs.truncate(1);
        let input = inputs.pop().map(|t| Input {
            dtype: t.dtype,
            elements: product(t.shape.as_deref().unwrap_or(&[]).iter().copied()),
            data: Cow::Owned(t.data.unwrap_or_default()),
        });
        ClientRequest {
            id: r.id,
            model: r.model.map(Cow::Owned),
            query: r.query.map(Cow::Owned),
            app: r.app,
            app_name: r.app_name.map(Cow::Owned),
            slo_ns: r.slo_ns,
            path_ns: r.path_ns,
            tensors,
            input,
        }
    }
}

impl<'a> From<RequestView<'a>> for ClientRequest<'a> {
    /// A request read in place. The frame was verified and read when it
    /// was split off the stream (`baton_wire::message::view`): nothing is
    /// left to fail here.
    fn from(v: RequestView<'a>) -> Self {
        let input = v.first.map(|t| Input { dtype: t.dtype, elements: t.elements, data: Cow::Borrowed(t.data) });
        ClientRequest {
            id: v.id,
            model: v.model.map(Cow::Borrowed),
            query: v.query.map(Cow::Borrowed),
            app: v.app,
            app_name: v.app_name.map(Cow::Borrowed),
            slo_ns: v.slo_ns,
            path_ns: v.path_ns,
            tensors: v.tensors,
            input,
        }
    }
}

/// The product of a shape's dimensions, None if it overflows.
fn product(dims: impl Iterator<Item = i64>) -> Option<i64> {
    dims.into_iter().try_fold(1i64, i64::checked_mul)
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_wire::message::{decode_payload, view};
    use baton_wire::{encode, Kind, Limits, Message, HEADER_LEN};

    fn request() -> fb::InferRequest {
        let data: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        fb::InferRequest {
            id: 9,
            model: Some("m".into()),
            slo_ns: 5_000,
            app: 1,
            app_name: Some("a".into()),
            path_ns: 70,
            inputs: Some(vec![fb::Tensor {
                name: None,
                dtype: fb::DType::F32,
                shape: Some(vec![3]),
                data: Some(data),
            }]),
            ..Default::default()
        }
    }

    /// The borrowed and the owned reading of one request agree field by field.
    #[test]
    fn a_frame_read_in_place_asks_what_the_owned_request_asks() {
        let frame = encode(&Message::InferRequest(request())).expect("fits a frame");
        let payload = &frame[HEADER_LEN..];
        let Ok(Message::InferRequest(owned)) = decode_payload(Kind::InferRequest, payload, &Limits::default()) else {
            panic!("decodes")
        };
        let owned = ClientRequest::from(owned);
        let borrowed = match view(Kind::InferRequest, payload, &Limits::default()) {
            Ok(baton_wire::message::View::InferRequest(r)) => ClientRequest::from(r),
            other => panic!("a request's view: {other:?}"),
        };
        assert_eq!(format!("{owned:?}"), format!("{borrowed:?}"));
        assert!(matches!(borrowed.input.as_ref().map(|i| &i.data), Some(Cow::Borrowed(_))));
        assert_eq!((borrowed.tensors, borrowed.input.as_ref().and_then(|i| i.elements)), (1, Some(3)));
    }

    /// A shape whose product overflows (it has a 0, so the frame holds no
    /// bytes and passes the verifier) reads as no element count, not a panic.
    #[test]
    fn a_shape_that_overflows_has_no_element_count() {
        let mut r = request();
        let t = &mut r.inputs.as_mut().expect("one tensor")[0];
        (t.shape, t.data) = (Some(vec![i64::MAX, 2, 0]), Some(Vec::new()));
        let frame = encode(&Message::InferRequest(r.clone())).expect("fits a frame");
        let borrowed = match view(Kind::InferRequest, &frame[HEADER_LEN..], &Limits::default()) {
            Ok(baton_wire::message::View::InferRequest(v)) => ClientRequest::from(v),
            other => panic!("a request's view: {other:?}"),
        };
        assert_eq!(borrowed.input.and_then(|i| i.elements), None);
        assert_eq!(ClientRequest::from(r).input.and_then(|i| i.elements), None);
    }
}
