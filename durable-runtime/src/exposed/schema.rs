//! JSON schemas of exposed handlers: what an arguments object, an output and a handler error
//! look like as JSON. Generated with `schemars` behind the `schemars` feature; without it the
//! table's entries say they have none, and the table itself is the same.

use serde_json::Value;

/// The JSON schemas of one exposed handler, from [`ExposedHandler::schemas`]: its arguments
/// object as [`call_by_name`](crate::Runtime::call_by_name) decodes it, its output and its own
/// error as they are encoded.
///
/// Each is a standalone JSON Schema (draft 2020-12) document: the schemas of named types it
/// uses are in its own `$defs`, referred to as `#/$defs/<name>`. To embed one in a larger
/// document (an OpenAPI 3.1 description, say), move its `$defs` where the references can
/// reach them and rewrite the references. A type that does not implement
/// `schemars::JsonSchema` is described by `true`, the schema of any value.
///
/// [`ExposedHandler::schemas`]: crate::ExposedHandler::schemas
///
/// # Examples
///
/// With the `schemars` feature, every exposed handler has schemas. A type that implements
/// `schemars::JsonSchema` is described by its schema; one that does not, by `true` (the
/// schema of any value), so that turning the feature on never breaks a build:
///
/// ```
/// # #[cfg(feature = "schemars")] {
/// use durable_runtime::{durable_object, Exposed};
/// use serde_json::json;
///
/// #[durable_object]
/// pub struct Counter { count: i64 }
///
/// #[durable_object(expose)]
/// impl Counter {
///     #[handler]
///     fn handle_add(&mut self, by: i64, note: Option<String>) -> i64 {
///         self.count += by;
///         self.count
///     }
/// }
///
/// let schemas = (Counter::HANDLERS[0].schemas)().expect("the `schemars` feature is on");
/// assert_eq!(schemas.arguments["type"], json!("object"));
/// assert_eq!(schemas.arguments["required"], json!(["by"])); // `note` may be left out
/// assert_eq!(schemas.arguments["additionalProperties"], json!(false));
/// assert_eq!(schemas.output["type"], json!("integer"));
/// assert_eq!(schemas.error, None); // `add` cannot fail
/// # }
/// ```
///
/// Without it, none:
///
/// ```
/// # #[cfg(not(feature = "schemars"))] {
/// use durable_runtime::{durable_object, Exposed};
///
/// #[durable_object]
/// pub struct Counter { count: i64 }
///
/// #[durable_object(expose)]
/// impl Counter {
///     #[handler]
///     fn handle_get(&self) -> i64 { self.count }
/// }
///
/// assert_eq!((Counter::HANDLERS[0].schemas)(), None);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct HandlerSchemas {
    /// The arguments object: one property per argument, an `Option` argument not required,
    /// no other property allowed.
    pub arguments: Value,
    /// The output (`{"type": "null"}` for a handler that returns nothing).
    pub output: Value,
    /// The handler's own error, `None` for a handler that cannot fail.
    pub error: Option<Value>,
}

/// The schemas of a handler whose table entry has none: generated code without the
/// `schemars` feature names this one.
pub fn no_schemas() -> Option<HandlerSchemas> {
    None
}

#[cfg(feature = "schemars")]
mod generate {
    //! What generated code builds a handler's schemas with. A type's schema is asked for
    //! through a [`SchemaProbe`]: the method resolves to [`KnownSchema`] for a type that
    //! implements `JsonSchema`, and otherwise (through one more reference) to
    //! [`UnknownSchema`], which answers `true`, the schema of any value. So turning the
    //! feature on never breaks a build: a type without a schema is described as anything.

    use std::marker::PhantomData;

    use schemars::generate::SchemaSettings;
    use schemars::{JsonSchema, SchemaGenerator};
    use serde_json::{Map, Value};

    use super::HandlerSchemas;

    /// Stands for the type `T` in generated code (see the module docs).
    pub struct SchemaProbe<T>(PhantomData<fn() -> T>);

    impl<T> SchemaProbe<T> {
        /// The probe of `T`.
        #[allow(clippy::new_without_default)]
        pub const fn new() -> Self {
            Self(PhantomData)
        }
    }

    /// The schemas of a type that has them.
    pub trait KnownSchema {
        /// The schema of an argument of this type, its named parts added to `generator`.
        fn argument_schema(&self, generator: &mut SchemaGenerator) -> Value;
        /// The standalone schema of an output or error of this type, as it is encoded.
        fn reply_schema(&self) -> Value;
    }

    impl<T: JsonSchema> KnownSchema for SchemaProbe<T> {
        fn argument_schema(&self, generator: &mut SchemaGenerator) -> Value {
            generator.subschema_for::<T>().to_value()
        }

        fn reply_schema(&self) -> Value {
            let generator = SchemaGenerator::new(SchemaSettings::draft2020_12().for_serialize());
            generator.into_root_schema_for::<T>().to_value()
        }
    }

    /// The schemas of a type that has none: `true`, any value.
    pub trait UnknownSchema {
        /// `true`.
        fn argument_schema(&self, _: &mut SchemaGenerator) -> Value {
            Value::Bool(true)
        }
        /// `true`.
        fn reply_schema(&self) -> Value {
            Value::Bool(true)
        }
    }

    impl<T> UnknownSchema for &SchemaProbe<T> {}

    /// An `Option` argument, which the arguments object may leave out.
    pub trait OptionalArgument {
        /// `true`.
        fn is_optional(&self) -> bool {
            true
        }
    }

    impl<T> OptionalArgument for SchemaProbe<Option<T>> {}

    /// Any other argument, which the arguments object must hold.
    pub trait RequiredArgument {
        /// `false`.
        fn is_optional(&self) -> bool {
            false
        }
    }

    impl<T> RequiredArgument for &SchemaProbe<T> {}

    /// The schema of a handler's arguments object, built one argument at a time: one property
    /// per argument, the `Option` ones not required, no other property allowed (as the
    /// arguments are decoded).
    pub struct ArgumentsSchema {
        generator: SchemaGenerator,
        properties: Map<String, Value>,
        required: Vec<Value>,
    }

    impl ArgumentsSchema {
        /// An arguments object without arguments yet.
        #[allow(clippy::new_without_default)]
        pub fn new() -> Self {
            Self {
                generator: SchemaGenerator::new(SchemaSettings::draft2020_12().for_deserialize()),
                properties: Map::new(),
                required: Vec::new(),
            }
        }

        /// Where the arguments' schemas put the schemas of the named types they use.
        pub fn generator(&mut self) -> &mut SchemaGenerator {
            &mut self.generator
        }

        /// Adds the argument `name`.
        pub fn argument(&mut self, name: &str, schema: Value, optional: bool) {
            self.properties.insert(name.to_owned(), schema);
            if !optional {
                self.required.push(Value::from(name));
            }
        }

        /// The standalone schema of the arguments object of `handler`.
        pub fn finish(mut self, handler: &str) -> Value {
            let mut schema = Map::new();
            let meta = self.generator.settings().meta_schema.clone();
            if let Some(meta) = meta {
                schema.insert("$schema".to_owned(), Value::from(meta.into_owned()));
            }
            schema.insert("title".to_owned(), format!("{handler} arguments").into());
            schema.insert("type".to_owned(), "object".into());
            schema.insert("properties".to_owned(), self.properties.into());
            schema.insert("required".to_owned(), self.required.into());
            schema.insert("additionalProperties".to_owned(), false.into());
            let definitions = self.generator.take_definitions(true);
            if !definitions.is_empty() {
                schema.insert("$defs".to_owned(), definitions.into());
            }
            schema.into()
        }
    }

    /// A handler's schemas, for its table entry.
    pub fn handler_schemas(
        arguments: Value,
        output: Value,
        error: Option<Value>,
    ) -> Option<HandlerSchemas> {
        Some(HandlerSchemas {
            arguments,
            output,
            error,
        })
    }
}

#[cfg(feature = "schemars")]
pub use generate::{
    ArgumentsSchema, KnownSchema, OptionalArgument, RequiredArgument, SchemaProbe, UnknownSchema,
    handler_schemas,
};
