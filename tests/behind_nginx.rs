//! Issue 38, the production shape: deploy/nginx.conf itself, run by the real
//! nginx with TLS from a certificate authority made for the test, in front
//! of a real paywatch daemon watching a real anvil node. Everything the
//! clients do goes through nginx over HTTPS, from loopback addresses of
//! their own, so nginx's `$remote_addr` tells them apart.
//!
//! - The storefront creates and reads a checkout, the console's sign-in
//!   page loads and a sign-in works (the Origin check passes through the
//!   proxy, and a form from another site is still refused), the payer's
//!   page loads, and its live stream carries the payment while it is open
//!   (not buffered by nginx until it ends); the webhook for the payment
//!   goes out; the metrics are not reachable through nginx.
//! - One client guessing tokens through the same nginx is throttled alone,
//!   whatever forwarding headers it makes up, while another keeps creating
//!   and reading its checkouts and keeps its live stream.
//!
//! Needs nginx (/usr/sbin/nginx, or `PAYWATCH_NGINX`) and the openssl CLI:
//! `apt-get install nginx openssl` (`bash deploy/test.sh` installs both),
//! and anvil (`bash deploy/install-nodes.sh`). A missing one fails the test
//! naming what to install; it never skips.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use common::eth::{deploy_contracts, eth_settings, Daemon, EthOptions, EthWorld, ETH_FOR_100_USD};
use common::sse::{EventStream, SseEvent};
use common::{Backend, TestDb};
use hmac::{Hmac, Mac};
use paywatch::api::TokenTable;
use paywatch::settings::Secret;
use paywatch_testkit::{AnvilNode, AnvilOptions};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use sha2::Sha256;

const STOREFRONT: &str = "shop-token-nginx-41d7";
const OPERATOR: &str = "ops-token-nginx-9c02";
const SUPPORT: &str = "help-token-nginx-5a6e";
const WEBHOOK_SECRET: &str = "whsec-nginx-7e3a90c1d2";

/// The client who guesses tokens, and the one who only does its job.
const ABUSER: [u8; 4] = [127, 0, 0, 2];
const GOOD: [u8; 4] = [127, 0, 0, 3];

/// How long an event may take from the chain to the payer, through nginx:
/// a watcher poll, a reconcile pass and the stream's tail are each well
/// under a second. Buffered by nginx, it would come when the stream ends
/// (api.event_stream_secs, 300 s) or a buffer fills.
const LIVE_WITHIN: Duration = Duration::from_secs(5);
/// Longer waits: finality, webhook delivery.
const WAIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// nginx, as deploy/nginx.conf configures it

/// deploy/nginx.conf as the test runs it: its ports, upstream, name and
/// paths replaced with the test's own. Each value replaced must be in the
/// file: a config that no longer has one would be tested as something it
/// is not.
fn site_config(dir: &Path, tls: &Tls, ports: &Ports, upstream: SocketAddr) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nginx.conf");
    let mut text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let ipv6 = |port: u16, what: &str| match ports.ipv6 {
        true => format!("listen [::1]:{port} "),
        // No IPv6 loopback here (some containers): that listen line is left out.
        false => format!("# {what}: no IPv6 loopback on this machine; listen [::1]:{port} "),
    };
    let logs = format!("{}/", dir.display());
    let replacements = [
        (
            "/etc/letsencrypt/live/pay.example.com/fullchain.pem".to_owned(),
            tls.cert.display().to_string(),
        ),
        (
            "/etc/letsencrypt/live/pay.example.com/privkey.pem".to_owned(),
            tls.key.display().to_string(),
        ),
        ("pay.example.com".to_owned(), "localhost".to_owned()),
        (
            "listen 443 ".to_owned(),
            format!("listen 127.0.0.1:{} ", ports.https),
        ),
        ("listen [::]:443 ".to_owned(), ipv6(ports.https, "https")),
        (
            "listen 80;".to_owned(),
            format!("listen 127.0.0.1:{};", ports.http),
        ),
        (
            "listen [::]:80;".to_owned(),
            format!("{};", ipv6(ports.http, "http").trim_end()),
        ),
        (
            "server 127.0.0.1:8080;".to_owned(),
            format!("server {upstream};"),
        ),
        ("/var/log/nginx/".to_owned(), logs),
    ];
    for (from, to) in replacements {
        assert!(
            text.contains(&from),
            "deploy/nginx.conf no longer has `{from}`, which tests/behind_nginx.rs \
             replaces to run it: change the test with the file"
        );
        text = text.replace(&from, &to);
    }
    text
}

/// The http {} around the site, as Debian's /etc/nginx/nginx.conf has it
/// around conf.d/*.conf, with every path of nginx's own in `dir`.
fn main_config(dir: &Path) -> String {
    let d = dir.display();
    // Workers run as `user`; as root nginx would make them nobody, who cannot
    // enter the test's private temporary directory.
    let user = match running_as_root() {
        true => "user root;\n",
        false => "",
    };
    format!(
        "{user}worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
daemon off;
master_process on;
events {{ worker_connections 512; }}
http {{
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    gzip on;
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body_temp;
    proxy_temp_path {d}/proxy_temp;
    fastcgi_temp_path {d}/fastcgi_temp;
    uwsgi_temp_path {d}/uwsgi_temp;
    scgi_temp_path {d}/scgi_temp;
    include {d}/paywatch.conf;
}}
"
    )
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn nginx_binary() -> PathBuf {
    let path = std::env::var_os("PAYWATCH_NGINX")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("/usr/sbin/nginx"), PathBuf::from);
    assert!(
        path.is_file(),
        "nginx is not installed ({} is missing): this test runs deploy/nginx.conf in a real \
         nginx. Install it: `apt-get install nginx` (bash deploy/test.sh does), or set \
         PAYWATCH_NGINX to an nginx binary",
        path.display()
    );
    path
}

#[derive(Debug, Clone, Copy)]
struct Ports {
    https: u16,
    http: u16,
    /// nginx also listens on [::1], as the config's [::] lines do.
    ipv6: bool,
}

/// Two ports free on 127.0.0.1 and, if this machine has it, on [::1].
fn free_ports() -> Ports {
    let ipv6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    let mut ports = Vec::new();
    let mut held = Vec::new();
    while ports.len() < 2 {
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = v4.local_addr().unwrap().port();
        if ipv6 {
            match std::net::TcpListener::bind(("::1", port)) {
                Ok(v6) => held.push(v6),
                Err(_) => continue,
            }
        }
        held.push(v4);
        ports.push(port);
    }
    Ports {
        https: ports[0],
        http: ports[1],
        ipv6,
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A certificate authority made for this test, and a certificate for
/// `localhost` and 127.0.0.1 it signed, made with the openssl CLI.
struct Tls {
    ca_pem: Vec<u8>,
    cert: PathBuf,
    key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "the openssl CLI could not be run ({e}): this test makes its certificates with \
                 it. Install it: `apt-get install openssl` (bash deploy/test.sh does)"
            )
        });
    assert!(
        out.status.success(),
        "openssl {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn make_certificates(dir: &Path) -> Tls {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut ca = vec!["req", "-x509", "-nodes"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=paywatch behind_nginx test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca);
    let mut request = vec!["req", "-nodes"];
    request.extend(ec);
    request.extend([
        "-keyout",
        "privkey.pem",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(dir, &request);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n\
         basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\n\
         extendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "fullchain.pem",
        ],
    );
    Tls {
        ca_pem: std::fs::read(dir.join("ca.pem")).unwrap(),
        cert: dir.join("fullchain.pem"),
        key: dir.join("privkey.pem"),
    }
}

/// nginx running deploy/nginx.conf in front of `upstream`, until dropped.
struct Nginx {
    child: Option<Child>,
    dir: tempfile::TempDir,
    ports: Ports,
    ca_pem: Vec<u8>,
}

impl Nginx {
    async fn start(upstream: SocketAddr) -> Nginx {
        let binary = nginx_binary();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let tls = make_certificates(dir.path());
        let ports = free_ports();
        std::fs::write(
            dir.path().join("paywatch.conf"),
            site_config(dir.path(), &tls, &ports, upstream),
        )
        .unwrap();
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, main_config(dir.path())).unwrap();
        let args = |extra: &[&str]| {
            let mut a: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
            for (flag, value) in [
                ("-p", dir.path()),
                ("-e", &dir.path().join("error.log")),
                ("-c", &conf),
            ] {
                a.push(flag.to_owned());
                a.push(value.display().to_string());
            }
            a
        };
        let check = Command::new(&binary)
            .args(args(&["-t", "-q"]))
            .output()
            .expect("nginx -t runs");
        assert!(
            check.status.success(),
            "nginx refuses deploy/nginx.conf:\n{}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        let child = Command::new(&binary)
            .args(args(&[]))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        let mut nginx = Nginx {
            child: Some(child),
            dir,
            ports,
            ca_pem: tls.ca_pem,
        };
        nginx.wait_listening().await;
        nginx
    }

    async fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("nginx exited ({status}):\n{}", self.error_log());
            }
            let both = tokio::net::TcpStream::connect(("127.0.0.1", self.ports.https))
                .await
                .is_ok()
                && tokio::net::TcpStream::connect(("127.0.0.1", self.ports.http))
                    .await
                    .is_ok();
            if both {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nginx is not listening after 15 s:\n{}",
                self.error_log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The site's https origin, as a browser sends it in `Origin`.
    fn origin(&self) -> String {
        format!("https://localhost:{}", self.ports.https)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin())
    }

    /// A client that trusts only the test's CA and connects to nginx from
    /// `from`, a loopback address of its own; redirects are not followed.
    fn client(&self, from: [u8; 4]) -> Client {
        self.client_for("localhost", from)
    }

    fn client_for(&self, name: &str, from: [u8; 4]) -> Client {
        Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(&self.ca_pem).expect("the test CA"),
            )
            .https_only(true)
            .resolve(name, SocketAddr::from(([127, 0, 0, 1], self.ports.https)))
            .local_address(IpAddr::from(from))
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    fn error_log(&self) -> String {
        let mut text = self.read("error.log");
        text.push_str(&self.read("paywatch.error.log"));
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn access_log(&self) -> String {
        self.read("paywatch.access.log")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGTERM: the master stops its workers and exits (std only sends
        // SIGKILL, which would leave the workers behind).
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("pkill").args(["-KILL", "-P", &pid]).status();
        let _ = child.kill();
        let _ = child.wait();
    }
}

// ---------------------------------------------------------------------------
// The webhook receiver

/// One webhook request the storefront's endpoint got.
#[derive(Debug, Clone)]
struct Hit {
    delivery: String,
    timestamp: String,
    signature: String,
    body: Value,
    raw: String,
}

impl Hit {
    /// The check the README gives a receiver: HMAC-SHA256 of
    /// "<timestamp>.<delivery>.<body>" with the shared secret.
    fn verifies(&self) -> bool {
        let mut mac = Hmac::<Sha256>::new_from_slice(WEBHOOK_SECRET.as_bytes()).unwrap();
        mac.update(format!("{}.{}.{}", self.timestamp, self.delivery, self.raw).as_bytes());
        self.signature == format!("v2={}", hex::encode(mac.finalize().into_bytes()))
    }
}

type Hits = Arc<Mutex<Vec<Hit>>>;

async fn receive(State(hits): State<Hits>, headers: HeaderMap, body: Bytes) -> &'static str {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let raw = String::from_utf8_lossy(&body).into_owned();
    hits.lock().unwrap().push(Hit {
        delivery: header("paywatch-delivery"),
        timestamp: header("paywatch-timestamp"),
        signature: header("paywatch-signature"),
        body: serde_json::from_str(&raw).unwrap_or(Value::Null),
        raw,
    });
    "ok"
}

/// The storefront's webhook endpoint on loopback, and its URL.
async fn webhook_receiver() -> (Hits, String) {
    let hits = Hits::default();
    let app = Router::new()
        .route("/hooks/paywatch", post(receive))
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks/paywatch", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (hits, url)
}

// ---------------------------------------------------------------------------
// The world: anvil, paywatch configured as a merchant behind this nginx, nginx

struct World {
    eth: EthWorld,
    nginx: Nginx,
    hooks: Hits,
    /// paywatch's metrics listener, which nginx does not proxy.
    metrics: SocketAddr,
}

async fn world() -> World {
    // Missing tools fail at once, before anything starts.
    nginx_binary();
    openssl(Path::new("."), &["version"]);
    let node = AnvilNode::start(AnvilOptions::default())
        .await
        .unwrap_or_else(|e| panic!("anvil (bash deploy/install-nodes.sh installs it): {e}"));
    let contracts = deploy_contracts(&node).await;
    let db = TestDb::new(Backend::Sqlite).await;
    let mut s = eth_settings(&db.url, &node, &contracts, &EthOptions::default());
    let api = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    // As deploy/nginx.conf's header tells a merchant to set paywatch.
    s.api.listen = api.to_string();
    s.api.behind_tls = true;
    s.api.trusted_proxies = vec!["127.0.0.1/32".into()];
    s.metrics.listen = metrics.to_string();
    for (role, token) in [
        ("storefront", STOREFRONT),
        ("operator", OPERATOR),
        ("support", SUPPORT),
    ] {
        s.api
            .tokens
            .insert(role.into(), vec![TokenTable::hash_token(token)]);
    }
    let (hooks, url) = webhook_receiver().await;
    s.webhooks.url = url;
    s.webhooks.allow_http_to_loopback = true;
    s.webhooks.secret = Secret(WEBHOOK_SECRET.into());
    s.webhooks.timeout_secs = 2;
    s.webhooks.base_backoff_ms = 50;
    s.webhooks.max_backoff_secs = 1;
    let daemon = Daemon::start(db, s).await;
    daemon.wait_cursor(node.block_number().await.unwrap()).await;
    wait_healthy(&format!("http://{api}/healthz")).await;
    let nginx = Nginx::start(api).await;
    World {
        eth: EthWorld {
            node,
            contracts,
            daemon,
            proxy: None,
        },
        nginx,
        hooks,
        metrics,
    }
}

async fn wait_healthy(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = Client::new().get(url).send().await {
            if r.status() == StatusCode::OK {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{url} never answered 200");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a storefront sends to open a checkout.
fn order(reference: &str) -> Value {
    json!({"kind": "order", "reference": reference, "account": "acct-1",
           "asset": "ETH", "network": "ethereum", "usd_amount": "100"})
}

impl World {
    /// POST /v1/intents through nginx from `client`: the status and body.
    async fn create(&self, client: &Client, reference: &str) -> (StatusCode, Value) {
        let r = client
            .post(self.nginx.url("/v1/intents"))
            .bearer_auth(STOREFRONT)
            .header("idempotency-key", format!("create-{reference}"))
            .json(&order(reference))
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST /v1/intents through nginx: {e}"));
        self.json(r).await
    }

    async fn get(&self, client: &Client, path: &str, token: Option<&str>) -> (StatusCode, Value) {
        let mut req = client.get(self.nginx.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path} through nginx: {e}"));
        self.json(r).await
    }

    async fn json(&self, r: reqwest::Response) -> (StatusCode, Value) {
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        let v = serde_json::from_str(&text).unwrap_or_else(|_| {
            panic!(
                "not JSON ({status}): {text}\nnginx's error log:\n{}",
                self.nginx.error_log()
            )
        });
        (status, v)
    }

    /// Opens a live status stream through nginx; panics unless it is one.
    async fn stream(&self, client: &Client, path: &str, token: Option<&str>) -> EventStream {
        let (status, stream) =
            EventStream::try_open_with(client, &self.nginx.url(path), token, None).await;
        stream.unwrap_or_else(|body| {
            panic!(
                "{path} through nginx answered {status}: {body}\nnginx's error log:\n{}",
                self.nginx.error_log()
            )
        })
    }

    /// Signs in at the console through nginx with `token`, as a browser's
    /// form post does (Origin: the site the browser addressed); the answer.
    async fn sign_in(&self, client: &Client, token: &str, origin: &str) -> reqwest::Response {
        client
            .post(self.nginx.url("/console/login"))
            .header("origin", origin)
            .form(&[("token", token)])
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST /console/login through nginx: {e}"))
    }

    /// The webhooks received for `intent`, once `done` holds for them.
    async fn webhooks_until(&self, intent: i64, done: impl Fn(&[Hit]) -> bool) -> Vec<Hit> {
        let deadline = Instant::now() + WAIT;
        loop {
            let hits: Vec<Hit> = self
                .hooks
                .lock()
                .unwrap()
                .iter()
                .filter(|h| h.body["intent_id"] == intent)
                .cloned()
                .collect();
            if done(&hits) {
                return hits;
            }
            assert!(
                Instant::now() < deadline,
                "the webhooks for intent {intent} never came: {hits:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A status as a stream carries it: the payer's `status` events and the
/// storefront's `intent.status` (the feed's event, the status in `data`).
fn status_of(e: &SseEvent) -> Option<&str> {
    match e.event.as_str() {
        "status" => e.data["status"].as_str(),
        "intent.status" => e.data["data"]["status"].as_str(),
        _ => None,
    }
}

/// Waits on `stream` for the status `wanted`, for at most `within`.
async fn until_status(stream: &mut EventStream, wanted: &str, within: Duration) -> SseEvent {
    let events = stream.until(within, |e| status_of(e) == Some(wanted)).await;
    events.last().unwrap().clone()
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storefront_console_payer_page_and_webhooks_work_through_nginx_with_tls() {
    let w = world().await;
    let shop = w.nginx.client(GOOD);

    // The storefront opens a checkout and reads it back.
    let (st, created) = w.create(&shop, "nginx-order-1").await;
    assert_eq!(st, StatusCode::CREATED, "{created}");
    let id = created["id"].as_i64().expect("an id");
    let address = created["address"].as_str().unwrap().to_owned();
    let token = created["view_token"]
        .as_str()
        .expect("a view token")
        .to_owned();
    assert_eq!(created["pay_page"], format!("/pay/{token}"));
    let (st, read) = w
        .get(&shop, &format!("/v1/intents/{id}"), Some(STOREFRONT))
        .await;
    assert_eq!(st, StatusCode::OK, "{read}");
    assert_eq!(read["address"], address.as_str());
    assert_eq!(read["status"], "awaiting_payment");
    assert_eq!(read["amount_due"], ETH_FOR_100_USD.to_string());
    let (st, _) = w.get(&shop, &format!("/v1/intents/{id}"), None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "no token, no intent");

    // The console: the sign-in page, a sign-in (the browser's Origin is the
    // https site it addressed, port and all, which paywatch must see as its
    // own through the proxy), and a page behind it.
    let browser = w.nginx.client(GOOD);
    let page = browser
        .get(w.nginx.url("/console/login"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        header(&page, "strict-transport-security").starts_with("max-age="),
        "nginx tells browsers to keep to HTTPS"
    );
    let html = page.text().await.unwrap();
    assert!(
        html.contains("id=\"login\"") && html.contains("name=\"token\""),
        "{html}"
    );
    let signed_in = w.sign_in(&browser, SUPPORT, &w.nginx.origin()).await;
    if signed_in.status() != StatusCode::SEE_OTHER {
        panic!(
            "a sign-in from the site's own page is refused behind nginx: {} {}",
            signed_in.status(),
            signed_in.text().await.unwrap_or_default()
        );
    }
    assert_eq!(header(&signed_in, "location"), "/console/overview");
    let cookie = header(&signed_in, "set-cookie").to_owned();
    assert!(
        cookie.starts_with("__Host-paywatch_session=") && cookie.contains("Secure"),
        "behind TLS the session cookie is __Host- and Secure: {cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let overview = browser
        .get(w.nginx.url("/console/overview"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(
        overview.status(),
        StatusCode::OK,
        "signed in, the overview opens"
    );
    // A form another site made the browser post is still refused.
    let forged = w.sign_in(&browser, SUPPORT, "https://evil.example").await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert!(forged.headers().get("set-cookie").is_none());

    // The payer's page, and its script, through nginx.
    let payer = w.nginx.client(GOOD);
    let page = payer
        .get(w.nginx.url(&format!("/pay/{token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(header(&page, "content-security-policy").contains("connect-src 'self'"));
    assert!(page.text().await.unwrap().contains(&address));
    let script = payer
        .get(w.nginx.url("/assets/pay.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(script.status(), StatusCode::OK);

    // Its live stream: open through nginx, the state now at once, then the
    // payment while the stream is still open, within seconds. Buffered by
    // the proxy, it would arrive when the stream ends, five minutes on.
    let opened = Instant::now();
    let mut live = w
        .stream(&payer, &format!("/v1/view/{token}/events"), None)
        .await;
    let snapshot = live.next(LIVE_WITHIN).await.unwrap_or_else(|| {
        panic!(
            "no snapshot through nginx within {LIVE_WITHIN:?}: buffered?\n{}",
            w.nginx.error_log()
        )
    });
    assert_eq!(snapshot.event, "snapshot");
    assert_eq!(snapshot.data["status"], "awaiting_payment");
    eprintln!("snapshot through nginx after {:?}", opened.elapsed());
    let mut shop_live = w
        .stream(&shop, &format!("/v1/intents/{id}/events"), Some(STOREFRONT))
        .await;
    assert_eq!(shop_live.next(LIVE_WITHIN).await.unwrap().event, "snapshot");

    let sent = Instant::now();
    w.eth.pay_eth(&address, ETH_FOR_100_USD).await;
    let seen = until_status(&mut live, "confirming", LIVE_WITHIN).await;
    eprintln!(
        "payment seen through nginx {:?} after it was sent",
        sent.elapsed()
    );
    assert_eq!(seen.data["reason_code"], "seen_in_time", "{seen:?}");
    until_status(&mut shop_live, "confirming", LIVE_WITHIN).await;

    // Final: the same streams, still open, carry the payment to paid.
    w.eth.finalize().await;
    let paid = until_status(&mut live, "paid", WAIT).await;
    assert_eq!(paid.data["paid"], true);
    let settled = live.until(WAIT, |e| e.event == "settlement").await;
    assert_eq!(settled.last().unwrap().data["event"], "settlement.settled");
    until_status(&mut shop_live, "paid", WAIT).await;
    let (st, read) = w
        .get(&shop, &format!("/v1/intents/{id}"), Some(STOREFRONT))
        .await;
    assert_eq!(
        (st, read["status"].as_str()),
        (StatusCode::OK, Some("paid"))
    );

    // The webhooks for the payment went out, signed, while paywatch sat
    // behind nginx.
    let hits = w
        .webhooks_until(id, |hits| hits.iter().any(|h| h.body["status"] == "paid"))
        .await;
    // Delivery is at least once: a receiver de-duplicates on the delivery id.
    let mut delivered = std::collections::BTreeSet::new();
    let statuses: Vec<&str> = hits
        .iter()
        .filter(|h| delivered.insert(h.delivery.clone()))
        .filter(|h| h.body["event"] == "intent.status")
        .filter_map(|h| h.body["status"].as_str())
        .collect();
    assert_eq!(statuses, ["confirming", "paid"], "{hits:#?}");
    for hit in &hits {
        assert!(hit.verifies(), "signed with the shared secret: {hit:?}");
    }

    // The metrics are on paywatch's own listener, never through nginx.
    let scrape = Client::new()
        .get(format!("http://{}/metrics", w.metrics))
        .send()
        .await
        .unwrap();
    assert_eq!(scrape.status(), StatusCode::OK);
    let through = shop.get(w.nginx.url("/metrics")).send().await.unwrap();
    assert_eq!(
        through.status(),
        StatusCode::NOT_FOUND,
        "metrics through nginx"
    );

    // Plain HTTP only redirects, and a name that is not the site's gets no
    // TLS handshake at all.
    let plain = Client::builder()
        .resolve(
            "localhost",
            SocketAddr::from(([127, 0, 0, 1], w.nginx.ports.http)),
        )
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let redirect = plain
        .get(format!(
            "http://localhost:{}/console/login",
            w.nginx.ports.http
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(redirect.status(), StatusCode::MOVED_PERMANENTLY);
    assert_eq!(
        header(&redirect, "location"),
        "https://localhost/console/login"
    );
    let stranger = w
        .nginx
        .client_for("elsewhere.example", GOOD)
        .get(format!(
            "https://elsewhere.example:{}/healthz",
            w.nginx.ports.https
        ))
        .send()
        .await;
    assert!(stranger.is_err(), "another name is served: {stranger:?}");

    // The access log names the client and keeps the payer's link out.
    let log = w.nginx.access_log();
    assert!(
        log.lines()
            .any(|l| l.starts_with("127.0.0.3 ") && l.contains("/pay/-")),
        "{log}"
    );
    assert!(
        !log.contains(&token),
        "the view token is in the access log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_abusive_client_through_nginx_is_throttled_alone() {
    let w = world().await;
    let good = w.nginx.client(GOOD);
    let abuser = w.nginx.client(ABUSER);

    // The good client's checkout, and its storefront stream and payer's
    // stream, open before the abuse starts.
    let (st, created) = w.create(&good, "nginx-good-1").await;
    assert_eq!(st, StatusCode::CREATED, "{created}");
    let id = created["id"].as_i64().unwrap();
    let address = created["address"].as_str().unwrap().to_owned();
    let token = created["view_token"].as_str().unwrap().to_owned();
    let mut shop_live = w
        .stream(&good, &format!("/v1/intents/{id}/events"), Some(STOREFRONT))
        .await;
    assert_eq!(shop_live.next(LIVE_WITHIN).await.unwrap().event, "snapshot");
    let mut payer_live = w
        .stream(&good, &format!("/v1/view/{token}/events"), None)
        .await;
    assert_eq!(
        payer_live.next(LIVE_WITHIN).await.unwrap().event,
        "snapshot"
    );

    // The abuser fails console sign-ins and bearer tokens, each time naming
    // another client in every forwarding header it can think of. nginx
    // replaces X-Forwarded-For and passes Forwarded on as the client wrote
    // it; paywatch reads only X-Forwarded-For (api.trusted_proxy_header),
    // so it counts every failure against the address nginx saw.
    let limit = w.eth.daemon.settings.api.auth_failures_per_minute;
    let origin = w.nginx.origin();
    for n in 0..limit {
        let forged_for = format!("203.0.113.{n}");
        let forged_forwarded = format!("for=198.51.100.{n};proto=https");
        let r = if n % 2 == 0 {
            abuser
                .post(w.nginx.url("/console/login"))
                .header("origin", &origin)
                .header("x-forwarded-for", &forged_for)
                .header("forwarded", &forged_forwarded)
                .form(&[("token", format!("guess-{n}"))])
                .send()
                .await
        } else {
            abuser
                .get(w.nginx.url("/v1/review-queue"))
                .bearer_auth(format!("guess-{n}"))
                .header("x-forwarded-for", &forged_for)
                .header("forwarded", &forged_forwarded)
                .send()
                .await
        }
        .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "guess {n}");
    }
    // Now every credential from it is refused, the right ones too, and
    // made-up forwarding headers change nothing.
    let r = abuser
        .get(w.nginx.url("/v1/review-queue"))
        .bearer_auth(OPERATOR)
        .header("forwarded", "for=192.0.2.200")
        .header("x-forwarded-for", "192.0.2.201")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        !header(&r, "retry-after").is_empty(),
        "Retry-After is passed on"
    );
    let (_, v) = w.json(r).await;
    assert_eq!(v["error"]["code"], "too_many_failures", "{v}");
    let (st, v) = w.create(&abuser, "nginx-abuser-1").await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "{v}");
    let r = w.sign_in(&abuser, OPERATOR, &origin).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // Its health check still answers, as do a payer's routes.
    let health = abuser.get(w.nginx.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let (st, view) = w.get(&abuser, &format!("/v1/view/{token}"), None).await;
    assert_eq!(st, StatusCode::OK, "{view}");

    // The other client, through the same nginx, is served: a new checkout
    // created and read with the storefront's token, the operator's token
    // taken, a console sign-in.
    let (st, second) = w.create(&good, "nginx-good-2").await;
    assert_eq!(st, StatusCode::CREATED, "{second}");
    let (st, read) = w
        .get(
            &good,
            &format!("/v1/intents/{}", second["id"]),
            Some(STOREFRONT),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{read}");
    let (st, queue) = w.get(&good, "/v1/review-queue", Some(OPERATOR)).await;
    assert_eq!(st, StatusCode::OK, "{queue}");
    let r = w.sign_in(&good, SUPPORT, &origin).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);

    // Its streams stayed open through all of it: the payment arrives on
    // both while they are.
    let sent = Instant::now();
    w.eth.pay_eth(&address, ETH_FOR_100_USD).await;
    until_status(&mut payer_live, "confirming", LIVE_WITHIN).await;
    until_status(&mut shop_live, "confirming", LIVE_WITHIN).await;
    eprintln!(
        "payment seen through nginx {:?} after it was sent",
        sent.elapsed()
    );

    // The operator sees the refusals counted (the client is in the log
    // line beside each, never a label).
    let scrape = reqwest::get(format!("http://{}/metrics", w.metrics))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused: u64 = scrape
        .lines()
        .find_map(|l| l.strip_prefix("paywatch_http_refused_total{why=\"too_many_failures\"} "))
        .unwrap_or_else(|| panic!("no refusals counted:\n{scrape}"))
        .trim()
        .parse()
        .unwrap();
    assert!(refused >= 3, "{refused} refusals counted");

    // nginx told the two apart by their addresses.
    let log = w.nginx.access_log();
    for (who, from) in [("abuser", "127.0.0.2 "), ("good client", "127.0.0.3 ")] {
        assert!(
            log.lines().any(|l| l.starts_with(from)),
            "no request of the {who} ({from}) in nginx's access log:\n{log}"
        );
    }
}
