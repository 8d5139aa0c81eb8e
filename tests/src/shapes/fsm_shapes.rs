// Every shape of FSM the DSL accepts compiles without warnings: sync and async steps, with
// and without the context, `Result` steps with any boxable error, an async error handler,
// every option, a generic result type, `Self` in field types, renamed runtime paths.
#![deny(warnings)]

use std::time::Duration;

use durable_runtime::fsm::{Fsm, FsmState, Instance, Outcome, StepContext, StepError, durable_fsm};

#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Receipt {
    pub cents: u64,
}

/// An order.
#[durable_fsm(name = "shop.order", version = 3, queue = "payments", priority = -2, result = Vec<Receipt>)]
#[derive(Debug, Clone)]
pub struct Order {
    /// Its id.
    #[field(default = String::from("unset"))]
    pub id: String,
    tries: u32,
    next: Option<Box<Self>>,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
pub struct Declined;

#[durable_fsm]
impl Order {
    /// Starts.
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::next(Self::CHARGE)
    }

    #[step]
    async fn charge(&mut self, ctx: &StepContext) -> Result<Outcome<Self>, Declined> {
        if ctx.attempt() > 3 {
            return Err(Declined);
        }
        Ok(Outcome::await_signal(["paid"], Self::SETTLE).timeout(Duration::from_secs(60)))
    }

    #[step]
    fn settle(&mut self, ctx: &StepContext) -> Result<Outcome<Self>, String> {
        if ctx.awaited().is_empty() {
            return Err("timed out".to_owned());
        }
        Ok(Outcome::schedule_childs(
            Self::JOIN,
            [Instance::new(Order::default()).correlation_key("child")],
        ))
    }

    #[step]
    async fn join(&mut self) -> Outcome<Self> {
        Outcome::done(vec![Receipt { cents: 1 }])
    }

    /// Not a step.
    pub fn helper(&self) -> u32 {
        self.tries
    }

    #[on_error]
    async fn failed(&mut self, error: StepError, ctx: &StepContext) -> Outcome<Self> {
        self.tries += 1;
        if ctx.attempt() < 2 {
            Outcome::retry(Duration::from_secs(1))
        } else {
            Outcome::stop(error)
        }
    }
}

/// A unit state with nothing but defaults.
#[durable_fsm]
pub struct Ping;

#[durable_fsm]
impl Ping {
    #[step(initial)]
    fn ping(&mut self) -> Outcome<Self> {
        Outcome::done(())
    }
}

mod renamed {
    pub use durable_runtime as rt;
}

#[durable_fsm(crate = "renamed::rt")]
pub struct Renamed {}

#[durable_fsm(crate = "renamed::rt")]
impl Renamed {
    #[durable_runtime::fsm::step(initial)]
    fn only(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::stop("done")
    }
}

/// Checks what the generated code does (run by this package's tests).
pub fn runs() {
    assert_eq!(Order::NAME, "shop.order");
    assert_eq!(Order::VERSION, 3);
    assert_eq!(Order::QUEUE, "payments");
    assert_eq!(Order::PRIORITY, -2);
    assert_eq!(Order::INITIAL, Order::START);
    assert_eq!(Order::STEPS, ["start", "charge", "settle", "join"]);
    assert_eq!(Order::default().id, "unset");
    assert_eq!(Order::default().helper(), 0);
    assert_eq!(Ping::NAME, "Ping");
    assert_eq!(Renamed::INITIAL.name(), "only");
}
