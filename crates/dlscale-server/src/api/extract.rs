//! What handlers take from a request — the body ([`Body`]), a path parameter ([`PathParam`]),
//! the query ([`ApiQuery`]) and a JSON body parsed ([`parse_json`]) — with every way of getting
//! them wrong answered in the API's error shape (a status and `{"error", "field"}`,
//! [`ApiError`]) saying what was wrong, instead of axum's plain-text rejections. Every handler
//! takes these, not axum's `Bytes`, `Path` or `Query`, so that this module is the one place a
//! rejection is worded.

use axum::extract::rejection::{BytesRejection, FailedToBufferBody, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::MAX_BODY;
use crate::error::ApiError;

/// A request body, at most [`MAX_BODY`] bytes (the router's limit); a larger one is refused
/// with 413 naming the limit.
#[derive(Debug, Clone)]
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        Bytes::from_request(request, state)
            .await
            .map(Body)
            .map_err(body_rejection)
    }
}

/// What was wrong with a body that could not be read.
fn body_rejection(rejection: BytesRejection) -> ApiError {
    match rejection {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "request body over the limit of {MAX_BODY} bytes ({} MiB)",
                    MAX_BODY >> 20
                ),
            )
        }
        other => ApiError::new(
            other.status(),
            format!("cannot read the request body: {}", other.body_text()),
        ),
    }
}

/// The one parameter of a route's path (`{id}`, `{name}`), percent-decoded; a parameter whose
/// bytes are not UTF-8 text is refused naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| PathParam(value))
            .map_err(path_rejection)
    }
}

/// What was wrong with a path whose parameter could not be read.
fn path_rejection(rejection: PathRejection) -> ApiError {
    use axum::extract::path::ErrorKind;
    match rejection {
        PathRejection::FailedToDeserializePathParams(e) => match e.kind() {
            ErrorKind::InvalidUtf8InPathParam { key } => ApiError::field(
                key.clone(),
                format!(
                    "path parameter '{key}' is not UTF-8 text once percent-decoded (ids are \
                     A-Z a-z 0-9 . _ -)"
                ),
            ),
            _ => ApiError::new(e.status(), format!("invalid path: {}", e.body_text())),
        },
        // A route whose handler asks for a parameter its path has none of: the server's fault.
        other => ApiError::internal(other.body_text()),
    }
}

/// A route's query string, parsed into `T`; one that does not parse is refused saying why.
#[derive(Debug, Clone)]
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| ApiQuery(q))
            .map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))
    }
}

/// serde_json's words for a number no 64-bit float holds (`1e400`), which it counts as a
/// syntax error.
const OUT_OF_RANGE: &str = "number out of range";

/// Parses a JSON request body into `T`. The one place the API parses a JSON body: every error
/// names the field at fault as a path (`gpus`, `model.compute_base_s`, `[1].max_gpus`, from
/// `serde_path_to_error`), a value out of its field's range included, whether its type refuses
/// it (`99999999999` for a `u32`) or no JSON number type holds it (`1e400`, which serde_json
/// reports with a line and column only); what follows the value is refused as well.
pub(crate) fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(json_error)?;
    de.end()
        .map_err(|e| ApiError::bad_request(format!("request body is not valid JSON: {e}")))?;
    Ok(value)
}

/// The error of a body that did not parse, naming the field where the parser was.
fn json_error(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let field = field_path(e.path());
    let inner = e.into_inner();
    let message = inner.to_string();
    if inner.is_syntax() || inner.is_eof() {
        return match field {
            Some(field) if message.starts_with(OUT_OF_RANGE) => ApiError::field(
                field.clone(),
                format!("field '{field}': {message}: no 64-bit number holds it"),
            ),
            Some(field) => ApiError::field(
                field.clone(),
                format!("request body is not valid JSON: field '{field}': {message}"),
            ),
            None => ApiError::bad_request(format!("request body is not valid JSON: {message}")),
        };
    }
    // A missing field is named by its parent's path and its own name.
    let (field, message) =
        dlscale_core::error::serde_field(field.as_deref().unwrap_or("."), &message);
    if field == "." {
        return ApiError::bad_request(format!("request body: {message}"));
    }
    ApiError::field(field.clone(), format!("field '{field}': {message}"))
}

/// `path` as the API names a field (`model.compute_base_s`, `[1].gpus`), up to where it is
/// known (a key that could not be read is none); `None` for the body itself.
fn field_path(path: &serde_path_to_error::Path) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut field = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => field.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(key);
            }
            Segment::Unknown => break,
        }
    }
    Some(field).filter(|f| !f.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlscale_core::jobfile::UniqueKeys;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)] // read by serde only
    struct Report {
        attempt: u32,
        rate: f64,
        inner: Option<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        counts: Vec<u32>,
    }

    fn error<T: DeserializeOwned + std::fmt::Debug>(body: &str) -> ApiError {
        parse_json::<T>(body.as_bytes()).unwrap_err()
    }

    /// A number out of range names its field, whether its type refuses it or no JSON number
    /// holds it, in a typed body and in a submission read as a value with unique keys.
    #[test]
    fn a_number_out_of_range_names_its_field() {
        let cases = [
            (r#"{"attempt": 99999999999, "rate": 1}"#, "attempt"),
            (r#"{"attempt": 1, "rate": 1e400}"#, "rate"),
            (r#"{"attempt": 1, "rate": -1e400}"#, "rate"),
            (
                r#"{"attempt": 1, "rate": 1, "inner": {"counts": [1, 1e999]}}"#,
                "inner.counts[1]",
            ),
            (
                r#"{"attempt": 1, "rate": 1, "inner": {"counts": [1, 4294967296]}}"#,
                "inner.counts[1]",
            ),
        ];
        for (body, field) in cases {
            let e = error::<Report>(body);
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}: {e:?}");
            assert_eq!(e.field.as_deref(), Some(field), "{body}: {e:?}");
            assert!(e.message.contains(&format!("'{field}'")), "{body}: {e:?}");
        }
        let e = error::<UniqueKeys>(r#"[{"id": "a"}, {"id": "b", "gpus": 1e400}]"#);
        assert_eq!(e.field.as_deref(), Some("[1].gpus"), "{e:?}");
        assert!(e.message.contains("number out of range"), "{e:?}");
    }

    /// Broken JSON still says so; a field is named where the parser was in one; the body as a
    /// whole is no field.
    #[test]
    fn broken_json_says_so_and_the_body_is_no_field() {
        let e = error::<Report>(r#"{"attempt": tru}"#);
        assert!(e.message.contains("not valid JSON"), "{e:?}");
        assert_eq!(e.field.as_deref(), Some("attempt"));
        for body in ["{nope", r#"{"attempt": 1, "rate": 2} x"#, ""] {
            let e = error::<Report>(body);
            assert!(e.message.contains("not valid JSON"), "{body}: {e:?}");
            assert_eq!(e.field, None, "{body}: {e:?}");
        }
        let e = error::<Report>(r#""text""#);
        assert_eq!(e.field, None, "{e:?}");
        assert!(e.message.starts_with("request body: invalid type"), "{e:?}");
        let e = error::<Report>(r#"{"rate": 1}"#);
        assert_eq!(e.field.as_deref(), Some("attempt"), "{e:?}");
        let e = error::<UniqueKeys>(r#"{"a": 1, "a": 2}"#);
        assert!(e.message.contains("`a` is given twice"), "{e:?}");
    }
}
