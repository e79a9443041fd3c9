//! Just enough HTTP/1.1 to drive the lab API from xtask without a client
//! library: one request per connection, JSON in and out.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

/// How long a request answered 503 is asked again.
const PATIENCE: Duration = Duration::from_secs(10);

/// The server a run talks to: `http://host:port`.
#[derive(Debug, Clone)]
pub struct Api {
    address: String,
}

impl Api {
    pub fn new(base_url: &str) -> anyhow::Result<Self> {
        let Some(address) = base_url.strip_prefix("http://") else {
            bail!("--base-url must start with http://, got {base_url}");
        };
        Ok(Self {
            address: address.trim_end_matches('/').to_string(),
        })
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.request("GET", path, None)
    }

    /// Empties the lab (DELETE /lab/data).
    pub fn delete_data(&self) -> anyhow::Result<Value> {
        self.request("DELETE", "/lab/data", None)
    }

    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.request("POST", path, Some(body))
    }

    /// Sends one POST, as it is (no retry); its status.
    pub fn post_status(&self, path: &str, body: &Value) -> anyhow::Result<u16> {
        Ok(self.exchange("POST", path, Some(body))?.0)
    }

    /// Sends the request and returns the envelope's `response`, or fails with
    /// the envelope's error message. A 503 is asked again for up to
    /// [`PATIENCE`]: after a cut link, each pooled connection that died with
    /// it fails its first use, as a 503, before a new one is opened — and a
    /// 503 changed nothing.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let since = Instant::now();
        loop {
            let (status, envelope) = self.exchange(method, path, body)?;
            if status != 503 || since.elapsed() > PATIENCE {
                return response(status, method, path, envelope);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A GET's body as text (`/metrics`), when answered 200.
    pub fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let (status, body) = self.raw("GET", path, None)?;
        anyhow::ensure!(status == 200, "GET {path} answered {status}: {body}");
        Ok(body)
    }

    /// Sends the request; its status and envelope.
    fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let (status, body) = self.raw(method, path, body)?;
        let envelope: Value =
            serde_json::from_str(&body).with_context(|| format!("not JSON ({status}): {body}"))?;
        Ok((status, envelope))
    }

    /// Sends the request; its status and body.
    fn raw(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<(u16, String)> {
        let mut stream = TcpStream::connect(&self.address)
            .with_context(|| format!("cannot reach the lab at http://{}", self.address))?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        let body = body.map(Value::to_string).unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.address,
            body.len()
        )?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        let raw = String::from_utf8_lossy(&raw);
        let (head, body) = raw
            .split_once("\r\n\r\n")
            .context("the lab answered without a body")?;
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .context("no HTTP status")?;
        Ok((status, body.to_string()))
    }
}

/// The envelope's `response`, or its error message as the error.
fn response(status: u16, method: &str, path: &str, envelope: Value) -> anyhow::Result<Value> {
    if envelope["success"] != Value::Bool(true) {
        bail!(
            "{method} {path} answered {status}: {}",
            envelope["error"]["message"]
        );
    }
    Ok(envelope["response"].clone())
}
