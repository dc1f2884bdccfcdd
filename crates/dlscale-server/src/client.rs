//! A small HTTP client of the API (plain HTTP: the server binds loopback by default; put a TLS
//! proxy in front for anything else). Used by the CLI and the tests.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub use hyper::{HeaderMap, Method, StatusCode};

use crate::error::ErrorBody;

/// Default API address.
pub const DEFAULT_API: &str = "http://127.0.0.1:7878";

/// An error answer of the server.
#[derive(Debug, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiFailure {
    /// HTTP status.
    pub status: StatusCode,
    /// The server's message (with the field at fault, if any).
    pub message: String,
    /// The request field at fault, when the server names one (`min_batch`, `[1].env.X`).
    pub field: Option<String>,
}

/// How long a request may take, connection included, unless set otherwise
/// ([`ApiClient::with_timeout`]): a server that stopped answering is reported, not waited on.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Client of one server.
#[derive(Clone)]
pub struct ApiClient {
    base: String,
    /// What the errors call the server (`the dlscale server`, `the Ray dashboard`).
    peer: &'static str,
    token: Option<String>,
    timeout: Duration,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("base", &self.base)
            .finish()
    }
}

impl ApiClient {
    /// A client of `base` (`http://host:port`), sending `token` as bearer token when given.
    pub fn new(base: &str, token: Option<String>) -> Result<Self> {
        Self::with_token_from(base, token, "the token")
    }

    /// From `DLSCALE_API` (default [`DEFAULT_API`]) and `DLSCALE_TOKEN`.
    pub fn from_env() -> Result<Self> {
        let base = std::env::var("DLSCALE_API").unwrap_or_else(|_| DEFAULT_API.to_string());
        Self::with_token_from(&base, std::env::var("DLSCALE_TOKEN").ok(), "DLSCALE_TOKEN")
    }

    /// [`ApiClient::new`], a bad token's error naming where it came from (`source`).
    fn with_token_from(base: &str, token: Option<String>, source: &str) -> Result<Self> {
        if let Some(t) = &token {
            check_token(t, source)?;
        }
        let base = base.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            bail!("DLSCALE_API must be an http:// URL, got '{base}'");
        }
        let uri = base
            .parse::<Uri>()
            .with_context(|| format!("invalid API URL '{base}'"))?;
        // A user or password in the URL is sent nowhere, and would be repeated in every error.
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            bail!(
                "DLSCALE_API must not hold a user or password (the token authenticates): give \
                 http://HOST:PORT"
            );
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        Ok(ApiClient {
            base,
            peer: "the dlscale server",
            token: token.filter(|t| !t.is_empty()),
            timeout: DEFAULT_TIMEOUT,
            http: Client::builder(TokioExecutor::new()).build(connector),
        })
    }

    /// The same client, its errors calling the server `peer` (`the Ray dashboard`): it speaks
    /// plain HTTP and JSON to any server, not only dlscale's.
    pub fn naming(mut self, peer: &'static str) -> Self {
        self.peer = peer;
        self
    }

    /// The same client with another per-request time limit.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request; returns status and body whatever the status.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes)> {
        let (status, _, bytes) = self.send_with_headers(method, path, body).await?;
        Ok((status, bytes))
    }

    /// As [`ApiClient::send`], with the answer's headers.
    pub async fn send_with_headers(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, HeaderMap, Bytes)> {
        let uri: Uri = format!("{}{}", self.base, path)
            .parse()
            .with_context(|| format!("invalid request path '{path}'"))?;
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let exchange = async {
            let resp = self.http.request(req).await.map_err(|e| {
                // The client's own message is only `client error (Connect)`: its causes say
                // what went wrong (refused, no such host).
                let mut why = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    why = format!("{why}: {c}");
                    cause = c.source();
                }
                anyhow!("cannot reach {} at {}: {why}", self.peer, self.base)
            })?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let bytes = resp.into_body().collect().await?.to_bytes();
            Ok((status, headers, bytes))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                anyhow!(
                    "{} at {} did not answer {path} within {} s",
                    self.peer,
                    self.base,
                    self.timeout.as_secs_f64()
                )
            })?
    }

    /// Sends a request and decodes a successful JSON answer; an error status becomes
    /// [`ApiFailure`].
    pub async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T> {
        let (status, bytes) = self.send(method, path, body).await?;
        check(status, &bytes)?;
        serde_json::from_slice(&bytes).with_context(|| format!("unexpected answer from {path}"))
    }

    /// GETs every page of a paged list (`path` with its query, e.g. `/v1/jobs?all=true`),
    /// following each answer's `X-Next-Before` until the oldest.
    pub async fn call_pages<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<Vec<T>> {
        let mut all = Vec::new();
        let mut before: Option<String> = None;
        loop {
            let page_path = match &before {
                Some(b) => format!("{path}&before={b}"),
                None => path.to_string(),
            };
            let (status, headers, bytes) = self
                .send_with_headers(Method::GET, &page_path, None)
                .await?;
            check(status, &bytes)?;
            let page: Vec<T> = serde_json::from_slice(&bytes)
                .with_context(|| format!("unexpected answer from {page_path}"))?;
            all.extend(page);
            let next = headers
                .get(crate::api::NEXT_BEFORE_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            match next {
                // A server that answers the same page again would be followed for ever.
                Some(n) if before.as_ref() != Some(&n) => before = Some(n),
                _ => return Ok(all),
            }
        }
    }

    /// Sends a request and returns a successful answer as text.
    pub async fn text(&self, path: &str) -> Result<String> {
        let (status, bytes) = self.send(Method::GET, path, None).await?;
        check(status, &bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Refuses a token that cannot be sent in the `Authorization` header (a newline, another
/// control character, a non-ASCII one), naming `source` and not the secret itself; otherwise
/// every request would fail with the HTTP library's `failed to parse header value`.
fn check_token(token: &str, source: &str) -> Result<()> {
    if let Some((i, c)) = token
        .char_indices()
        .find(|&(_, c)| !(c == ' ' || c == '\t' || c.is_ascii_graphic()))
    {
        bail!(
            "{source} holds a character not allowed in an HTTP header ({c:?} at byte {i}); \
             it is sent as `Authorization: Bearer TOKEN`"
        );
    }
    Ok(())
}

/// `Ok` for a success status; otherwise the server's error as [`ApiFailure`].
pub fn check(status: StatusCode, bytes: &[u8]) -> Result<()> {
    if status.is_success() {
        return Ok(());
    }
    let (message, field) = match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(b) => match b.field {
            Some(f) if !b.error.contains(&f) => (format!("{} (field '{f}')", b.error), Some(f)),
            field => (b.error, field),
        },
        Err(_) => {
            // Not an API error's JSON (a page from another server, a proxy's): its start.
            let text = String::from_utf8_lossy(bytes);
            let start: String = text.chars().take(200).collect();
            let more = if start.len() < text.len() { "…" } else { "" };
            (
                format!("the answer is not the API's JSON: {start}{more}"),
                None,
            )
        }
    };
    Err(ApiFailure {
        status,
        message,
        field,
    }
    .into())
}

/// Percent-encodes a path segment (ids are restricted, but names typed by users may not be).
pub fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
