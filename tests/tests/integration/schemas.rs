//! JSON schemas of exposed handlers (the `schemars` feature, which this crate turns on): each
//! handler's arguments object, output and error, checked with a JSON Schema validator against
//! what calls by name really accept and answer, and a type without a schema described as any
//! value rather than breaking the build.

use durable_runtime::{
    CallByNameError, Exposed, ExposedHandler, HandlerSchemas, MemoryStorage, Runtime,
    durable_object,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A line of an order.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Line {
    pub sku: String,
    pub quantity: u32,
}

/// Why a line was refused.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OrderError {
    Closed,
    TooMany { limit: u32 },
}

/// A type without a JSON schema.
#[derive(Debug, Serialize, Deserialize)]
pub struct Opaque(pub u8);

#[durable_object]
pub struct Order {
    lines: Vec<Line>,
    closed: bool,
}

#[durable_object(expose)]
impl Order {
    #[handler]
    fn handle_add(&mut self, line: Line, note: Option<String>) -> Result<usize, OrderError> {
        if self.closed {
            return Err(OrderError::Closed);
        }
        if line.quantity > 10 {
            return Err(OrderError::TooMany { limit: 10 });
        }
        let _ = note;
        self.lines.push(line);
        Ok(self.lines.len())
    }

    #[handler]
    fn handle_close(&mut self) {
        self.closed = true;
    }

    #[handler]
    fn handle_lines(&self) -> Vec<Line> {
        self.lines.clone()
    }

    #[handler]
    fn handle_echo(&self, tag: Opaque) -> Opaque {
        tag
    }
}

fn handler(name: &str) -> &'static ExposedHandler {
    Order::HANDLERS
        .iter()
        .find(|handler| handler.name == name)
        .expect("exposed")
}

fn schemas(name: &str) -> HandlerSchemas {
    (handler(name).schemas)().expect("the `schemars` feature is on")
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::validator_for(schema).unwrap_or_else(|err| panic!("invalid schema {schema}: {err}"))
}

#[test]
fn the_arguments_schema_describes_the_arguments_object() {
    let arguments = schemas("add").arguments;
    assert_eq!(
        arguments["$schema"],
        json!("https://json-schema.org/draft/2020-12/schema")
    );
    assert_eq!(arguments["title"], json!("add arguments"));
    assert_eq!(arguments["type"], json!("object"));
    assert_eq!(
        arguments["required"],
        json!(["line"]),
        "`note` may be left out"
    );
    assert_eq!(arguments["additionalProperties"], json!(false));
    // A named type is referred to, and defined in the document's own `$defs`.
    assert_eq!(
        arguments["properties"]["line"],
        json!({"$ref": "#/$defs/Line"})
    );
    assert_eq!(
        arguments["$defs"]["Line"]["required"],
        json!(["sku", "quantity"])
    );
    // A handler without arguments takes an empty object.
    let none = schemas("close").arguments;
    assert_eq!(
        (&none["properties"], &none["required"]),
        (&json!({}), &json!([]))
    );
}

#[tokio::test]
async fn what_calls_accept_and_answer_validates_against_the_schemas() {
    let rt = Runtime::builder(MemoryStorage::new())
        .expose::<Order>()
        .build();
    let add = schemas("add");
    let arguments = validator(&add.arguments);
    let output = validator(&add.output);
    let error = validator(add.error.as_ref().expect("`add` can fail"));

    // Accepted arguments validate, and so does the output.
    for accepted in [
        json!({"line": {"sku": "a", "quantity": 1}}),
        json!({"line": {"sku": "b", "quantity": 2}, "note": "gift"}),
        json!({"line": {"sku": "c", "quantity": 3}, "note": null}),
    ] {
        assert!(arguments.is_valid(&accepted), "{accepted}");
        let reply = rt
            .call_by_name("Order", "o1", "add", accepted)
            .await
            .unwrap();
        assert!(output.is_valid(&reply), "{reply}");
    }
    // Refused arguments do not.
    for refused in [
        json!({}),
        json!({"line": {"sku": "a"}}),
        json!({"line": {"sku": "a", "quantity": -1}}),
        json!({"line": {"sku": "a", "quantity": 1}, "extra": true}),
        json!([]),
    ] {
        assert!(!arguments.is_valid(&refused), "{refused}");
        let err = rt.call_by_name("Order", "o1", "add", refused.clone()).await;
        assert!(
            matches!(err, Err(CallByNameError::BadArguments { .. })),
            "{refused}: {err:?}"
        );
    }
    // The handler's errors, as JSON, validate against the error schema.
    let too_many = json!({"line": {"sku": "x", "quantity": 11}});
    let closed = json!({"line": {"sku": "x", "quantity": 1}});
    rt.call_by_name("Order", "o2", "close", json!({}))
        .await
        .unwrap();
    for (id, arguments) in [("o1", too_many), ("o2", closed)] {
        match rt.call_by_name("Order", id, "add", arguments).await {
            Err(CallByNameError::Handler { error: json, .. }) => {
                assert!(error.is_valid(&json), "{json}");
            }
            other => panic!("expected the handler's error, got {other:?}"),
        }
    }
    assert!(!error.is_valid(&json!({"kind": "lost"})));

    // A unit output is `null`; a list of named types refers to its `$defs`.
    let close = schemas("close");
    assert_eq!(close.output["type"], json!("null"));
    assert_eq!(close.error, None, "`close` cannot fail");
    let lines = schemas("lines").output;
    let reply = rt
        .call_by_name("Order", "o1", "lines", Value::Null)
        .await
        .unwrap();
    assert_eq!(reply.as_array().map(Vec::len), Some(3));
    assert!(validator(&lines).is_valid(&reply), "{reply}");
    assert!(!validator(&lines).is_valid(&json!([{"sku": 1}])));
    rt.shutdown().await;
}

#[test]
fn a_type_without_a_schema_is_described_as_any_value() {
    let echo = schemas("echo");
    assert_eq!(echo.arguments["properties"]["tag"], json!(true));
    assert_eq!(echo.arguments["required"], json!(["tag"]));
    assert_eq!(echo.output, json!(true));
    assert!(validator(&echo.arguments).is_valid(&json!({"tag": 7})));
}
