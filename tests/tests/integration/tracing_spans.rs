//! Tracing: every call runs inside a `durable.call` span naming its type and handler, and spans
//! a handler opens nest under it, whether the handler is synchronous (run in place by the
//! object's task, or by the caller's task for a read of an idle object) or `async` (run as a
//! future).

use std::sync::{Arc, Mutex};

use durable_runtime::storage::MemoryStorage;
use durable_runtime::{Runtime, durable_object};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[durable_object]
pub struct Traced {
    n: u64,
}

#[durable_object]
impl Traced {
    #[handler]
    fn handle_bump(&mut self) -> u64 {
        let _inner = tracing::info_span!("inner", from = "bump").entered();
        self.n += 1;
        self.n
    }

    #[handler]
    fn handle_peek(&self) -> u64 {
        let _inner = tracing::info_span!("inner", from = "peek").entered();
        self.n
    }

    #[handler]
    async fn handle_bump_later(&mut self) -> u64 {
        tokio::task::yield_now().await;
        let _inner = tracing::info_span!("inner", from = "bump_later").entered();
        self.n += 1;
        self.n
    }
}

/// A span as it was opened: its name, its fields and its parent's name and fields.
#[derive(Clone, Debug)]
struct Opened {
    name: &'static str,
    fields: Vec<(String, String)>,
    parent: Option<(&'static str, Vec<(String, String)>)>,
}

#[derive(Default)]
struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

/// Records every span opened, with its parent.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Opened>>>);

impl<S> Layer<S> for Recorder
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields.0.clone());
        }
        let parent = ctx.span(id).and_then(|span| span.parent()).map(|parent| {
            let fields = parent
                .extensions()
                .get::<Vec<(String, String)>>()
                .cloned()
                .unwrap_or_default();
            (parent.name(), fields)
        });
        self.0.lock().unwrap().push(Opened {
            name: attrs.metadata().name(),
            fields: fields.0,
            parent,
        });
    }
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(field, _)| field == name)
        .map(|(_, value)| value.as_str())
}

// One thread: the subscriber is this thread's default, and the objects' tasks run here too.
#[tokio::test]
async fn handler_spans_nest_under_the_call_span_on_both_paths() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let _default = tracing::subscriber::set_default(subscriber);

    let rt = Runtime::new(Arc::new(MemoryStorage::new()));
    // The first call loads the state (the boxed path); the next ones find it active.
    assert_eq!(Traced::bump(&rt, "t").await.unwrap(), 1);
    assert_eq!(Traced::bump(&rt, "t").await.unwrap(), 2);
    assert_eq!(Traced::bump_later(&rt, "t").await.unwrap(), 3);
    // Idle and active: the read runs in this task.
    assert_eq!(Traced::peek(&rt, "t").await.unwrap(), 3);
    rt.shutdown().await;

    let opened = recorder.0.lock().unwrap().clone();
    let calls: Vec<_> = opened.iter().filter(|s| s.name == "durable.call").collect();
    assert_eq!(calls.len(), 4, "{opened:#?}");
    for call in &calls {
        assert_eq!(
            field(&call.fields, "object_type"),
            Some("Traced"),
            "{call:?}"
        );
    }
    let handlers: Vec<_> = calls
        .iter()
        .map(|call| field(&call.fields, "handler"))
        .collect();
    assert_eq!(
        handlers,
        [Some("bump"), Some("bump"), Some("bump_later"), Some("peek")],
        "{opened:#?}"
    );

    let inner: Vec<_> = opened.iter().filter(|s| s.name == "inner").collect();
    assert_eq!(inner.len(), 4, "{opened:#?}");
    for span in inner {
        let (parent, parent_fields) = span.parent.as_ref().expect("a parent span");
        assert_eq!(*parent, "durable.call", "{span:?}");
        // Each handler's span sits under the call span of that very handler.
        assert_eq!(
            field(parent_fields, "handler"),
            field(&span.fields, "from"),
            "{span:?}"
        );
    }
}
