//! A real headless Chromium driven through chromedriver over the W3C
//! WebDriver HTTP protocol: just what the console's tests need (navigate,
//! find by CSS, type, click, read). Missing chromium or chromedriver fails
//! the test, never skips it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::{Client, Method};
use serde_json::{json, Value};

pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// The key W3C WebDriver names an element reference by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long a page or element may take to appear.
const WAIT: Duration = Duration::from_secs(30);

pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    http: Client,
}

impl Browser {
    /// Starts chromedriver on a free port and opens a headless session.
    pub async fn start() -> Browser {
        for (path, what) in [(CHROMEDRIVER, "chromedriver"), (CHROMIUM, "chromium")] {
            assert!(
                std::path::Path::new(path).exists(),
                "{what} is missing at {path}: the console's browser test needs it. \
                 Install it with: apt-get install chromium chromium-driver \
                 (deploy/test.sh does this on a fresh machine)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{CHROMEDRIVER} did not start ({e}); apt-get install chromium chromium-driver"
                )
            });
        let mut b = Browser {
            driver,
            port,
            session: String::new(),
            http: Client::new(),
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let ready = b
                .http
                .get(format!("{}/status", b.driver_url()))
                .send()
                .await
                .ok();
            let ready = match ready {
                Some(r) => r.json::<Value>().await.ok(),
                None => None,
            };
            if ready.is_some_and(|v| v["value"]["ready"] == json!(true)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver on port {port} was not ready within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000"],
            },
        }}});
        let v = b.send(Method::POST, "/session", Some(caps)).await;
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {v}"))
            .to_owned();
        b
    }

    fn driver_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// One WebDriver command; its `value`. An error answer fails the test.
    async fn send(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        self.try_send(method.clone(), path, body)
            .await
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"))
    }

    async fn try_send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.driver_url()));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let v: Value = resp.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status}: {}", v["value"]));
        }
        Ok(v["value"].clone())
    }

    fn at(&self, path: &str) -> String {
        format!("/session/{}{path}", self.session)
    }

    pub async fn goto(&self, url: &str) {
        self.send(Method::POST, &self.at("/url"), Some(json!({"url": url})))
            .await;
    }

    pub async fn url(&self) -> String {
        self.send(Method::GET, &self.at("/url"), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The page as the browser holds it (its DOM, serialized).
    pub async fn source(&self) -> String {
        self.send(Method::GET, &self.at("/source"), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Every element matching `css` now, possibly none.
    pub async fn find_all(&self, css: &str) -> Vec<String> {
        let v = self
            .send(
                Method::POST,
                &self.at("/elements"),
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first element matching `css`, waiting for it to appear.
    pub async fn find(&self, css: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(e) = self.find_all(css).await.into_iter().next() {
                return e;
            }
            assert!(
                Instant::now() < deadline,
                "no element '{css}' within {WAIT:?} on {}:\n{}",
                self.url().await,
                self.source().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn text(&self, css: &str) -> String {
        let e = self.find(css).await;
        self.send(Method::GET, &self.at(&format!("/element/{e}/text")), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub async fn attribute(&self, css: &str, name: &str) -> Option<String> {
        let e = self.find(css).await;
        self.send(
            Method::GET,
            &self.at(&format!("/element/{e}/attribute/{name}")),
            None,
        )
        .await
        .as_str()
        .map(str::to_owned)
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.send(
            Method::POST,
            &self.at(&format!("/element/{e}/value")),
            Some(json!({"text": text})),
        )
        .await;
    }

    pub async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.send(
            Method::POST,
            &self.at(&format!("/element/{e}/click")),
            Some(json!({})),
        )
        .await;
    }

    /// The browser's cookie `name` for the current page, as WebDriver
    /// reports it (`value`, `path`, `httpOnly`, `sameSite`, ...).
    pub async fn cookie(&self, name: &str) -> Value {
        self.send(Method::GET, &self.at(&format!("/cookie/{name}")), None)
            .await
    }

    /// Waits until the page's URL satisfies `ok` (a click's navigation).
    pub async fn wait_for_url(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let url = self.url().await;
            if ok(&url) {
                return url;
            }
            assert!(
                Instant::now() < deadline,
                "the browser never reached {what}; it is at {url}:\n{}",
                self.source().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Ends the session (closing Chromium) and chromedriver.
    pub async fn quit(mut self) {
        let session = std::mem::take(&mut self.session);
        if !session.is_empty() {
            let _ = self
                .try_send(Method::DELETE, &format!("/session/{session}"), None)
                .await;
        }
        // Drop stops chromedriver.
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A test that failed midway still closes its Chromium: chromedriver
        // would leave it running if killed first. Plain blocking HTTP, since
        // Drop cannot await.
        if !self.session.is_empty() {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = write!(
                    s,
                    "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
                    self.session, self.port
                );
                let mut sink = Vec::new();
                let _ = s.read_to_end(&mut sink);
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
