//! A gateway with a few objects to look at in the operators' console: accounts (one with an
//! alarm, some only stored), a mailer whose alarm died, and optional background traffic for
//! the overview's charts. State in an SQLite file in a temporary directory.
//!
//! ```text
//! cargo run -p durable-server --example console_demo -- --token dev-token --traffic
//! # console: http://127.0.0.1:PORT/console/   (log in with dev-token)
//! ```
//!
//! It listens on a free loopback port (or `--bind`), prints the console's address on its
//! first line of output, and stops on Ctrl-C or SIGTERM. The browser tests of the console
//! run against it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use durable_runtime::{AlarmSettings, RetryPolicy, Runtime, durable_object};
use durable_server::ServerConfig;
use durable_server::auth::hash_token;
use schemars::JsonSchema;
use serde::Serialize;

/// A bank account.
#[durable_object]
pub struct Account {
    balance: i64,
}

/// Why a withdrawal was refused.
#[derive(Debug, Serialize, JsonSchema)]
pub enum AccountError {
    /// The balance does not cover the withdrawal.
    Insufficient { balance: i64, wanted: i64 },
}

#[durable_object(expose)]
impl Account {
    /// Adds `amount` to the balance.
    #[handler]
    fn handle_deposit(&mut self, amount: i64) -> i64 {
        self.balance += amount;
        self.balance
    }

    /// Takes `amount` from the balance, refused beyond it.
    #[handler]
    fn handle_withdraw(&mut self, amount: i64) -> Result<i64, AccountError> {
        if amount > self.balance {
            return Err(AccountError::Insufficient {
                balance: self.balance,
                wanted: amount,
            });
        }
        self.balance -= amount;
        Ok(self.balance)
    }

    /// The balance.
    #[handler]
    fn handle_balance(&self) -> i64 {
        self.balance
    }

    /// Sends the monthly statement.
    #[alarm]
    fn statement(&mut self) {}
}

/// Sends mail from an alarm; the mail server refuses it until the mailer is repaired.
#[durable_object]
pub struct Mailer {
    repaired: bool,
    sent: u32,
}

#[durable_object(expose)]
impl Mailer {
    /// Fixes what made sending fail.
    #[handler]
    fn handle_repair(&mut self) -> bool {
        self.repaired = true;
        self.repaired
    }

    /// Sends the queued mail.
    #[alarm]
    fn send(&mut self) -> Result<(), String> {
        if !self.repaired {
            return Err("the mail server refused the connection".to_owned());
        }
        self.sent += 1;
        Ok(())
    }
}

/// Counts ticks: the background traffic.
#[durable_object]
pub struct Ticker {
    ticks: u64,
}

#[durable_object(expose)]
impl Ticker {
    /// One more tick.
    #[handler]
    fn handle_tick(&mut self) -> u64 {
        self.ticks += 1;
        self.ticks
    }
}

/// How long seeding may take before the demo gives up.
const SEED_DEADLINE: Duration = Duration::from_secs(30);

struct Options {
    token: String,
    bind: SocketAddr,
    traffic: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        token: String::new(),
        bind: SocketAddr::from(([127, 0, 0, 1], 0)),
        traffic: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--token" => options.token = args.next().ok_or("--token needs a value")?,
            "--bind" => {
                let bind = args.next().ok_or("--bind needs an address")?;
                options.bind = bind.parse().map_err(|e| format!("--bind {bind}: {e}"))?;
            }
            "--traffic" => options.traffic = true,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if options.token.is_empty() {
        return Err("usage: console_demo --token TOKEN [--bind ADDR] [--traffic]".to_owned());
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options()?;
    // The recorder goes in before the first call, so `/metrics` counts every call.
    durable_server::metrics::prometheus();
    let directory = tempfile::tempdir()?;
    let store = durable_sqlx::SqliteStore::open(directory.path().join("console.db")).await?;
    // A failed alarm is dead after one attempt, found within 50 ms.
    let alarms = AlarmSettings::default()
        .with_poll_interval(Duration::from_millis(50))
        .with_retry(RetryPolicy::new(
            Duration::from_millis(1),
            Duration::from_millis(1),
            1,
        ));
    let runtime = Runtime::builder(store)
        .alarm_settings(alarms)
        .expose::<Account>()
        .expose::<Mailer>()
        .expose::<Ticker>()
        .build();
    seed(&runtime).await?;

    let config = ServerConfig::from_toml_str(&format!(
        r#"
        [[principals]]
        name = "operator"
        tokens_sha256 = ["{}"]
          [[principals.grants]]
          types = ["*"]
          handlers = ["*"]
          ops = ["call", "read", "list", "delete", "alarms", "admin", "kv_read", "kv_write"]
        "#,
        hash_token(&options.token)
    ))?;
    let listener = tokio::net::TcpListener::bind(options.bind).await?;
    println!("console: http://{}/console/", listener.local_addr()?);
    if options.traffic {
        tokio::spawn(traffic(runtime.clone()));
    }
    durable_server::serve_with_shutdown(
        runtime,
        config,
        listener,
        durable_server::shutdown_signal(),
    )
    .await?;
    Ok(())
}

/// Twelve accounts (six of them only stored, one with an alarm due in an hour) and a mailer
/// whose alarm is dead.
async fn seed(runtime: &Runtime) -> Result<(), Box<dyn std::error::Error>> {
    for n in 1..=12 {
        let id = format!("acct-{n:02}");
        Account::deposit(runtime, &id, n * 10).await?;
        if n > 6 {
            runtime.stop::<Account>(&id).await?;
        }
    }
    runtime
        .schedule_alarm("acct-01", Account::STATEMENT, Duration::from_secs(3600))
        .await?;
    runtime
        .schedule_alarm("mailer-1", Mailer::SEND, Duration::ZERO)
        .await?;
    let started = Instant::now();
    while runtime
        .list_dead_alarms::<Mailer>(None, 1)
        .await?
        .alarms
        .is_empty()
    {
        if started.elapsed() > SEED_DEADLINE {
            return Err("the mailer's alarm did not die in time".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Calls on eight tickers at once, fifty times a second, until the process ends.
async fn traffic(runtime: Runtime) {
    let ids: Vec<String> = (1..=8).map(|n| format!("ticker-{n}")).collect();
    loop {
        let calls = ids.iter().map(|id| Ticker::tick(&runtime, id));
        for result in futures_util::future::join_all(calls).await {
            if let Err(error) = result {
                eprintln!("traffic: {error}");
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
