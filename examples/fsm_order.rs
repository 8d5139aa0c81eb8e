//! An order workflow on the durable FSM engine: reserve every line item in parallel (a
//! fan-out of child FSMs joined by the engine), then wait for the payment provider's webhook
//! (a signal addressed by the order's correlation key, deduplicated by the provider's event
//! id), giving up on the payment after a timeout.
//!
//! ```text
//! cargo run -p durable-examples --example fsm_order            # in memory
//! DATABASE_URL=postgres://... cargo run -p durable-examples --example fsm_order
//! ```
//!
//! On Postgres its tables are in the schema `durable_example`.
//!
//! It checks its own behaviour: one order is paid, one has an item out of stock, one is never
//! paid and times out.

use std::sync::Arc;
use std::time::Duration;

use durable_runtime::fsm::store::FsmStore;
use durable_runtime::fsm::{
    AnyInstance, Engine, Instance, MemoryFsmStore, Outcome, Settled, Status, StepContext,
    StepError, durable_fsm,
};
use serde::{Deserialize, Serialize};

/// What a paid order ends with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub order_id: String,
    pub cents: u64,
    pub payment: String,
}

/// The payment provider's webhook payload.
#[derive(Debug, Serialize, Deserialize)]
pub struct Paid {
    pub payment: String,
}

/// One order.
#[durable_fsm(name = "shop.order", queue = "orders", result = Receipt)]
pub struct Order {
    order_id: String,
    items: Vec<String>,
    #[field(default = 0)]
    cents: u64,
    /// How long the customer has to pay.
    #[field(default = 3600)]
    payment_timeout_secs: u64,
}

#[durable_fsm]
impl Order {
    /// Reserves every item at once: one child per item, joined by the engine.
    #[step(initial)]
    fn reserve(&mut self) -> Outcome<Self> {
        let children: Vec<AnyInstance> = self
            .items
            .iter()
            .map(|item| Instance::new(Reservation { item: item.clone() }).into())
            .collect();
        Outcome::schedule_childs(Self::CHARGE, children)
    }

    /// All reservations ended: charge if every one succeeded, and wait for the webhook.
    #[step]
    fn charge(&mut self, ctx: &StepContext) -> Outcome<Self> {
        if let Some(failed) = ctx
            .children()
            .iter()
            .find(|child| child.status() == Status::Failed)
        {
            return Outcome::stop(failed.last_error().unwrap_or("a reservation failed"));
        }
        self.cents = ctx
            .children()
            .iter()
            .filter_map(|child| child.result::<u64>().ok().flatten())
            .sum();
        // Here the payment provider would be called, with `ctx.id()` as the idempotency key.
        Outcome::await_signal(["paid", "declined"], Self::SETTLE)
            .timeout(Duration::from_secs(self.payment_timeout_secs))
    }

    /// The webhook arrived, or the time is up.
    #[step]
    fn settle(&mut self, ctx: &StepContext) -> Result<Outcome<Self>, serde_json::Error> {
        let Some(signal) = ctx.awaited().first() else {
            return Ok(Outcome::stop("not paid in time"));
        };
        if signal.name() == "declined" {
            return Ok(Outcome::stop("payment declined"));
        }
        let paid: Paid = signal.payload()?;
        Ok(Outcome::done(Receipt {
            order_id: self.order_id.clone(),
            cents: self.cents,
            payment: paid.payment,
        }))
    }

    /// A webhook that does not decode is a provider bug: fail the order, naming it.
    #[on_error]
    fn failed(&mut self, error: StepError) -> Outcome<Self> {
        Outcome::stop(format!("order {} failed: {error}", self.order_id))
    }
}

/// Reserves one item in the (pretend) warehouse; ends with its price in cents.
#[durable_fsm(name = "shop.reservation", queue = "warehouse", result = u64)]
pub struct Reservation {
    item: String,
}

#[durable_fsm]
impl Reservation {
    #[step(initial)]
    async fn reserve(&mut self) -> Outcome<Self> {
        match self.item.as_str() {
            "unicorn" => Outcome::stop(format!("{} is out of stock", self.item)),
            item => Outcome::done(100 * item.len() as u64),
        }
    }
}

/// Postgres at `DATABASE_URL` (in the schema `durable_example`), or memory.
async fn store() -> Result<Arc<dyn FsmStore>, durable_sqlx::Error> {
    Ok(match std::env::var("DATABASE_URL") {
        Ok(url) => {
            let store = durable_sqlx::PostgresStore::builder(&url)
                .schema("durable_example")
                .connect()
                .await?;
            Arc::new(store.fsm())
        }
        Err(_) => Arc::new(MemoryFsmStore::new()),
    })
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::builder(store().await?)
        .register::<Order>()
        .register::<Reservation>()
        .queue("orders", 8)
        .queue("warehouse", 16)
        .reaper_interval(Duration::from_millis(200))
        .build()?;
    // A run of its own: keys from an earlier run on the same database are not reused.
    let run = std::process::id();
    let order = |id: &str, items: &[&str], timeout_secs: u64| {
        Instance::new(Order {
            order_id: id.to_owned(),
            items: items.iter().map(|item| (*item).to_owned()).collect(),
            payment_timeout_secs: timeout_secs,
            ..Order::default()
        })
        .correlation_key(format!("order:{run}:{id}"))
    };
    let paid = engine.insert(order("1", &["book", "pen"], 3600)).await?;
    let short = engine
        .insert(order("2", &["book", "unicorn"], 3600))
        .await?;
    let late = engine.insert(order("3", &["lamp"], 1)).await?;

    // Order 1 waits for its payment; the provider delivers the webhook twice.
    let settled = engine.await_settled(paid, Duration::from_secs(10)).await?;
    assert!(matches!(settled, Settled::Awaiting(_)), "{settled:?}");
    for _ in 0..2 {
        engine
            .signal(
                format!("order:{run}:1").as_str(),
                "paid",
                Paid {
                    payment: "pay_123".into(),
                },
                Some("evt_1"),
            )
            .await?;
    }
    let receipt = engine.await_ended(paid, Duration::from_secs(10)).await?;
    assert_eq!(
        receipt.result::<Receipt>()?,
        Some(Receipt {
            order_id: "1".into(),
            cents: 700,
            payment: "pay_123".into(),
        })
    );
    println!("order 1: {receipt:?}");

    // Order 2 has an item out of stock: its join sees the failed reservation.
    let short = engine.await_ended(short, Duration::from_secs(10)).await?;
    assert_eq!(
        short,
        Settled::Failed {
            error: "unicorn is out of stock".into()
        }
    );
    println!("order 2: {short:?}");

    // Order 3 is never paid: its await times out after a second.
    let late = engine.await_ended(late, Duration::from_secs(10)).await?;
    assert_eq!(
        late,
        Settled::Failed {
            error: "not paid in time".into()
        }
    );
    println!("order 3: {late:?}");
    engine.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run().await
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs() {
        super::run().await.unwrap();
    }
}
