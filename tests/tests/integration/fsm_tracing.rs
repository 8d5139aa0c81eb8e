//! Tracing: every FSM step runs in a `durable.fsm.step` span naming its FSM, step, instance
//! and attempt, and the spans a step opens nest under it.

use std::sync::{Arc, Mutex};

use durable_runtime::fsm::testing::drain;
use durable_runtime::fsm::{Engine, MemoryFsmStore, Outcome, StepContext, durable_fsm};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// Opens a span in each of its steps.
#[durable_fsm(name = "obs.traced", result = u32)]
pub struct Traced {}

#[durable_fsm]
impl Traced {
    #[step(initial)]
    fn first(&mut self) -> Outcome<Self> {
        let _inner = tracing::info_span!("inner", from = "first").entered();
        Outcome::next(Self::SECOND)
    }

    #[step]
    async fn second(&mut self, ctx: &StepContext) -> Outcome<Self> {
        tokio::task::yield_now().await;
        let _inner = tracing::info_span!("inner", from = "second").entered();
        Outcome::done(ctx.attempt())
    }
}

#[derive(Clone, Debug)]
struct Opened {
    name: &'static str,
    fields: Vec<(String, String)>,
    parent: Option<&'static str>,
}

#[derive(Default)]
struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Opened>>>);

impl<S> Layer<S> for Recorder
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent())
            .map(|parent| parent.name());
        self.0.lock().unwrap().push(Opened {
            name: attrs.metadata().name(),
            fields: fields.0,
            parent,
        });
    }
}

fn field<'a>(opened: &'a Opened, name: &str) -> Option<&'a str> {
    opened
        .fields
        .iter()
        .find(|(field, _)| field == name)
        .map(|(_, value)| value.as_str())
}

// One thread: the subscriber is this thread's default, and drain runs the steps here.
#[tokio::test]
async fn every_step_runs_in_a_span_naming_it() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let _default = tracing::subscriber::set_default(subscriber);

    let engine = Engine::builder(MemoryFsmStore::new())
        .register::<Traced>()
        .no_reaper()
        .no_gc()
        .build()
        .unwrap();
    let id = engine.insert(Traced {}).await.unwrap();
    assert_eq!(drain(&engine).await.unwrap().steps, 2);

    let opened = recorder.0.lock().unwrap().clone();
    let steps: Vec<&Opened> = opened
        .iter()
        .filter(|span| span.name == "durable.fsm.step")
        .collect();
    assert_eq!(steps.len(), 2, "{opened:#?}");
    for (span, step) in steps.iter().zip(["first", "second"]) {
        assert_eq!(field(span, "fsm"), Some("\"obs.traced\""), "{span:?}");
        assert_eq!(field(span, "step"), Some(format!("{step:?}").as_str()));
        assert_eq!(field(span, "id"), Some(id.get().to_string().as_str()));
        assert_eq!(field(span, "attempt"), Some("0"));
    }
    let inner: Vec<&Opened> = opened.iter().filter(|span| span.name == "inner").collect();
    assert_eq!(inner.len(), 2, "{opened:#?}");
    assert!(
        inner
            .iter()
            .all(|span| span.parent == Some("durable.fsm.step")),
        "{inner:#?}"
    );
}
