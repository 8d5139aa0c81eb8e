//! A gateway with a few objects to look at in the operators' console: accounts (one with an
//! alarm, some only stored), a mailer whose alarm died, shipments (a small state machine: one
//! delivered, one awaiting its delivery signal, one failed), and optional background traffic
//! for the overview's charts. Objects in an SQLite file in a temporary directory, state
//! machine instances in memory.
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

use durable_runtime::fsm::{
    Engine, Instance, MemoryFsmStore, Outcome, Settled, StepContext, durable_fsm,
};
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

/// A parcel on its way: dispatched, then delivered when the carrier signals it.
#[durable_fsm(name = "shipment", result = String)]
pub struct Shipment {
    parcel: String,
    address: String,
}

#[durable_fsm]
impl Shipment {
    #[step(initial)]
    fn dispatch(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        if self.address.is_empty() {
            return Outcome::stop("the parcel has no address");
        }
        Outcome::await_signal(["delivered"], Self::DELIVER)
    }

    #[step]
    fn deliver(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::done(format!("{} delivered to {}", self.parcel, self.address))
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
    let engine = Engine::builder(MemoryFsmStore::new())
        .register::<Shipment>()
        .queue("default", 4)
        .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
        .build()?;
    seed_shipments(&engine).await?;

    let config = ServerConfig::from_toml_str(&format!(
        r#"
        [[principals]]
        name = "operator"
        tokens_sha256 = ["{}"]
          [[principals.grants]]
          types = ["*"]
          handlers = ["*"]
          ops = ["call", "read", "list", "delete", "alarms", "admin", "kv_read", "kv_write", "fsm_read", "fsm_write"]
        "#,
        hash_token(&options.token)
    ))?
    .with_fsm(engine);
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

/// Three shipments: one delivered, one awaiting its delivery, one failed.
async fn seed_shipments(engine: &Engine) -> Result<(), Box<dyn std::error::Error>> {
    let shipment = |parcel: &str, address: &str| Shipment {
        parcel: parcel.to_owned(),
        address: address.to_owned(),
    };
    let delivered = engine
        .insert(Instance::new(shipment("parcel-1", "1 Main Street")).correlation_key("parcel-1"))
        .await?;
    let waiting = engine
        .insert(Instance::new(shipment("parcel-2", "2 High Street")).correlation_key("parcel-2"))
        .await?;
    let failed = engine.insert(shipment("parcel-3", "")).await?;
    for id in [delivered, waiting] {
        if !matches!(
            engine.await_settled(id, SEED_DEADLINE).await?,
            Settled::Awaiting(_)
        ) {
            return Err(format!("shipment {id} did not park on its delivery").into());
        }
    }
    engine
        .signal("parcel-1", "delivered", "signed by the porter", None)
        .await?;
    for id in [delivered, failed] {
        if !matches!(
            engine.await_ended(id, SEED_DEADLINE).await?,
            Settled::Done { .. } | Settled::Failed { .. }
        ) {
            return Err(format!("shipment {id} did not end in time").into());
        }
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
