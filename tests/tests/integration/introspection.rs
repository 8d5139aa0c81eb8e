//! Every registered type, exposed or not, described at run time: fields with their types and
//! defaults, handlers with their arguments and access, alarms and options.

use std::collections::BTreeMap;
use std::time::Duration;

use durable_runtime::{
    Access, Context, DurableObject, Handlers, MemoryStorage, ObjectOptions, Runtime, durable_object,
};
use serde_json::json;

/// A shopping cart.
#[durable_object(hibernate_after = "30s", queue_capacity = 16)]
pub struct Cart {
    #[field(default = vec!["welcome".to_owned()])]
    notes: Vec<String>,
    items: BTreeMap<String, u32>,
    owner: Option<String>,
    #[serde(skip)]
    cache: u64,
}

#[durable_object(expose)]
impl Cart {
    /// Adds `quantity` of `sku`.
    #[handler]
    fn handle_add(&mut self, sku: String, quantity: u32) -> Result<u32, String> {
        let count = self.items.entry(sku).or_default();
        *count += quantity;
        Ok(*count)
    }

    #[handler]
    async fn handle_items(&self) -> BTreeMap<String, u32> {
        self.items.clone()
    }

    #[handler(internal)]
    fn handle_merge(&mut self, ctx: &Context, other: Self) {
        let _ = ctx;
        self.items.extend(other.items);
        self.cache += 1;
    }

    #[alarm]
    fn expire(&mut self) {
        self.items.clear();
    }
}

/// Not exposed: described all the same.
#[durable_object]
pub struct Meter;

#[durable_object]
impl Meter {
    #[handler]
    fn handle_tick(&self) {}
}

#[test]
fn a_type_describes_itself() {
    let cart = Cart::describe();
    assert_eq!(cart.name, "Cart");
    let fields: Vec<_> = cart
        .fields
        .iter()
        .map(|field| (field.name, field.ty, field.default.clone()))
        .collect();
    assert_eq!(
        fields,
        [
            ("notes", "Vec<String>", Some(json!(["welcome"]))),
            ("items", "BTreeMap<String, u32>", Some(json!({}))),
            ("owner", "Option<String>", Some(json!(null))),
            ("cache", "u64", None),
        ]
    );
    let [add, items, merge] = cart.handlers else {
        panic!("three handlers: {:?}", cart.handlers);
    };
    assert_eq!(
        (add.name, add.access, add.is_async, add.exposed),
        ("add", Access::Write, false, true)
    );
    let arguments: Vec<_> = add.arguments.iter().map(|a| (a.name, a.ty)).collect();
    assert_eq!(arguments, [("sku", "String"), ("quantity", "u32")]);
    assert_eq!((add.output, add.error), ("u32", Some("String")));
    assert_eq!(add.doc, "Adds `quantity` of `sku`.");
    assert_eq!((items.access, items.is_async), (Access::Read, true));
    assert_eq!(items.output, "BTreeMap<String, u32>");
    // The context is not an argument; `Self` reads as the type's name.
    assert_eq!((merge.exposed, merge.output), (false, "()"));
    assert_eq!(merge.arguments.len(), 1);
    assert_eq!(
        (merge.arguments[0].name, merge.arguments[0].ty),
        ("other", "Cart")
    );
    assert_eq!(cart.alarms, ["expire"]);
    assert_eq!(cart.options.hibernate_after, Some(Duration::from_secs(30)));
    assert_eq!(cart.options.call_timeout, None, "declared options only");
    assert_eq!(Cart::ALARM_NAMES, ["expire"]);

    let meter = Meter::describe();
    assert!(meter.fields.is_empty());
    assert!(!meter.handlers[0].exposed);
}

#[test]
fn a_description_is_json() {
    let listed = serde_json::to_value(Cart::describe()).unwrap();
    assert_eq!(listed["name"], json!("Cart"));
    assert_eq!(
        listed["fields"][1],
        json!({"name": "items", "type": "BTreeMap<String, u32>", "default": {}})
    );
    assert_eq!(
        listed["handlers"][0],
        json!({
            "name": "add",
            "access": "write",
            "arguments": [{"name": "sku", "type": "String"}, {"name": "quantity", "type": "u32"}],
            "output": "u32",
            "error": "String",
            "is_async": false,
            "exposed": true,
            "doc": "Adds `quantity` of `sku`.",
        })
    );
    assert_eq!(listed["alarms"], json!(["expire"]));
    assert_eq!(
        listed["options"],
        json!({
            "hibernate_after_ms": 30_000,
            "shutdown_after_ms": null,
            "call_timeout_ms": null,
            "queue_capacity": 16,
        })
    );
}

#[tokio::test]
async fn a_runtime_lists_every_registered_type() {
    let rt = Runtime::builder(MemoryStorage::new())
        .default_options(ObjectOptions::new().with_call_timeout(Duration::from_secs(7)))
        .expose::<Cart>()
        .build();
    let names = |rt: &Runtime| -> Vec<&'static str> {
        rt.describe_types().iter().map(|d| d.name).collect()
    };
    assert_eq!(names(&rt), ["Cart"]);
    // A type registered by its first call is listed from then on.
    Meter::tick(&rt, "m").await.unwrap();
    assert_eq!(names(&rt), ["Cart", "Meter"]);
    let cart = &rt.describe_types()[0];
    // The options it runs with here.
    assert_eq!(cart.options.call_timeout, Some(Duration::from_secs(7)));
    assert_eq!(cart.options.queue_capacity, Some(16));
    assert_eq!(cart.handlers, Cart::HANDLER_SIGNATURES);
}
