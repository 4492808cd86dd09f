//! A real headless Chromium, driven over `WebDriver` (`fantoccini` and Debian's `chromedriver`):
//! started per test on a free loopback port with its own profile, killed when dropped.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

use super::common::{available, DEADLINE};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Whether Chromium and chromedriver are here (under `CI`, their absence fails the test).
pub fn have_chromium(test: &str) -> bool {
    let here =
        std::path::Path::new(CHROMIUM).exists() && std::path::Path::new(CHROMEDRIVER).exists();
    available(
        "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)",
        here,
        test,
    )
}

pub struct Browser {
    pub client: Client,
    /// Held only to be dropped, after the profile's processes are killed (see `Drop`).
    _driver: Driver,
    profile: tempfile::TempDir,
}

/// chromedriver, in a process group of its own with the browser it starts: dropping it
/// kills the group, also when a test panics half-way through starting.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The console tests take turns: each measures "within a second" on a 2-core machine, so
/// none runs beside another one's 100,000 writes.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// A free loopback port (bound, then released for the child to take).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

impl Browser {
    /// Starts chromedriver and a headless Chromium at `width` × `height`.
    pub async fn start(width: u32, height: u32) -> Browser {
        Browser::start_with(width, height, &[]).await
    }

    /// As [`Browser::start`], with `extra` flags for Chromium.
    pub async fn start_with(width: u32, height: u32, extra: &[String]) -> Browser {
        let port = free_port();
        let driver = Driver(
            Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start chromedriver"),
        );
        let profile = tempfile::tempdir().unwrap();
        // The flags keep Chromium off the network it cannot reach here (background
        // updates, sync, QUIC), and let it run as root in a container.
        let args = [
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ]
        .into_iter()
        .chain(extra.iter().cloned())
        .collect::<Vec<_>>();
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let Value::Object(caps) = caps else {
            unreachable!()
        };
        let start = Instant::now();
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(client) => break client,
                Err(e) => {
                    assert!(
                        start.elapsed() < DEADLINE,
                        "chromedriver did not start a browser: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        Browser {
            client,
            _driver: driver,
            profile,
        }
    }

    /// Polls until `check` holds of the value `script` returns, within `within`; panics with
    /// the last value otherwise.
    pub async fn until(
        &self,
        what: &str,
        within: Duration,
        script: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        loop {
            let value = self
                .client
                .execute(script, vec![])
                .await
                .unwrap_or(Value::Null);
            if check(&value) {
                return value;
            }
            assert!(
                start.elapsed() < within,
                "{what}: not within {within:?}; last {value}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The keys (`kind/id`) of the table's rows, in order.
    pub async fn rows(&self) -> Vec<String> {
        let value = self
            .client
            .execute(
                "return [...document.querySelectorAll('#grid-rows .row')].map(r => r.dataset.key)",
                vec![],
            )
            .await
            .unwrap();
        serde_json::from_value(value).unwrap()
    }

    /// Presses `key` (down, then up) as a keyboard would: into whatever has the focus,
    /// without the `WebDriver` element checks (a row repainted under the focus may fail those
    /// for a moment while a keyboard reaches it all the same).
    pub async fn press(&self, key: fantoccini::key::Key) {
        use fantoccini::actions::{InputSource, KeyAction, KeyActions};
        let value: char = key.into();
        let press = KeyActions::new("keyboard".into())
            .then(KeyAction::Down { value })
            .then(KeyAction::Up { value });
        self.client.perform_actions(press).await.unwrap();
    }

    /// Types `text` into the field `css`, replacing what it held.
    pub async fn fill(&self, css: &str, text: &str) {
        let field = self.client.find(Locator::Css(css)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    /// Picks the option `value` of the select `css`.
    pub async fn pick(&self, css: &str, value: &str) {
        let select = self.client.find(Locator::Css(css)).await.unwrap();
        select.select_by_value(value).await.unwrap();
    }

    pub async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }

    /// The browser's console messages of level SEVERE (errors) since the last call.
    pub async fn console_errors(&self) -> Vec<String> {
        let logs = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .expect("the browser log");
        logs.as_array()
            .into_iter()
            .flatten()
            .filter(|entry| entry["level"] == "SEVERE")
            .map(|entry| entry["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Saves a PNG of the window as `name` under the target dir; its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, png).unwrap();
        path
    }

    /// Tells chromedriver to close the browser, then drops the rest.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A browser that left chromedriver's group (or one never closed): by profile.
        let _ = Command::new("pkill")
            .arg("-KILL")
            .arg("-f")
            .arg(self.profile.path())
            .status();
    }
}

/// chromedriver's log of the browser's console (`goog:loggingPrefs`), which the W3C
/// protocol has no command for.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base: &url::Url, id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", id.unwrap_or_default()))
    }

    fn method_and_body(&self, _url: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({"type": "browser"}).to_string()),
        )
    }
}
