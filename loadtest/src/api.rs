//! The lab's `/lab` API as the runner drives it (reqwest's blocking
//! client): JSON in, the envelope's `response` out, its error message as
//! the error.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::Method;
use reqwest::blocking::Client;
use serde_json::Value;

/// How long a request answered 503 is asked again.
const PATIENCE: Duration = Duration::from_secs(10);

/// How long one request may take: a million members' INSERTs take seconds.
const REQUEST_LIMIT: Duration = Duration::from_secs(120);

/// The server a run talks to: `http://host:port`.
#[derive(Debug, Clone)]
pub struct Api {
    base_url: String,
    client: Client,
}

impl Api {
    pub fn new(base_url: &str) -> anyhow::Result<Self> {
        if !base_url.starts_with("http://") {
            bail!("--base-url must start with http://, got {base_url}");
        }
        let client = Client::builder()
            .timeout(REQUEST_LIMIT)
            // A connection per request, as the runner always had: a server
            // killed and restarted on its port leaves no pooled connection
            // dead, and what the soak measures (the server's open files, a
            // request's latency) is as it was.
            .pool_max_idle_per_host(0)
            .build()?;
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_string(),
            client,
        })
    }

    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.request(Method::GET, path, None)
    }

    /// Empties the lab (DELETE /lab/data).
    pub fn delete_data(&self) -> anyhow::Result<Value> {
        self.request(Method::DELETE, "/lab/data", None)
    }

    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.request(Method::POST, path, Some(body))
    }

    /// Sends one POST, as it is (no retry); its status.
    pub fn post_status(&self, path: &str, body: &Value) -> anyhow::Result<u16> {
        Ok(self.send(Method::POST, path, Some(body))?.0)
    }

    /// A GET's body as text (`/metrics`), when answered 200.
    pub fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let (status, body) = self.send(Method::GET, path, None)?;
        anyhow::ensure!(status == 200, "GET {path} answered {status}: {body}");
        Ok(body)
    }

    /// Sends the request and returns the envelope's `response`, or fails with
    /// the envelope's error message. A 503 is asked again for up to
    /// [`PATIENCE`]: after a cut link, each pooled connection that died with
    /// it fails its first use, as a 503, before a new one is opened — and a
    /// 503 changed nothing.
    fn request(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let since = Instant::now();
        loop {
            let (status, text) = self.send(method.clone(), path, body)?;
            if status != 503 || since.elapsed() > PATIENCE {
                let envelope: Value = serde_json::from_str(&text)
                    .with_context(|| format!("not JSON ({status}): {text}"))?;
                return response(status, &method, path, envelope);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Sends the request; its status and body.
    fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, String)> {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base_url));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .with_context(|| format!("cannot reach the lab at {}", self.base_url))?;
        let status = response.status().as_u16();
        Ok((status, response.text()?))
    }
}

/// The envelope's `response`, or its error message as the error.
fn response(status: u16, method: &Method, path: &str, envelope: Value) -> anyhow::Result<Value> {
    if envelope["success"] != Value::Bool(true) {
        bail!(
            "{method} {path} answered {status}: {}",
            envelope["error"]["message"]
        );
    }
    Ok(envelope["response"].clone())
}
