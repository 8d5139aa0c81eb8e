//! The OpenAPI 3.1 document: the fixed routes described with `utoipa`, and one path per
//! exposed type and handler, built at startup from the runtime's handler table.
//!
//! Each handler's path describes its arguments object, its output and its own error with the
//! JSON schemas the handler table carries (`embed` moves their definitions into the
//! document's components). A handler without schemas has its arguments described by name,
//! and its output and error as any JSON.

mod embed;

use durable_runtime::{ExposedHandler, HandlerSchemas};
use serde_json::{Map, Value, json};
use utoipa::OpenApi;
use utoipa::openapi::content::Content;
use utoipa::openapi::header::Header;
use utoipa::openapi::path::{
    HttpMethod, Operation, OperationBuilder, ParameterBuilder, ParameterIn,
};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::response::Response;
use utoipa::openapi::schema::{AdditionalProperties, Object, ObjectBuilder, SchemaType, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::tag::Tag;
use utoipa::openapi::{Ref, Required};

use crate::auth::PublicEndpoint;
use crate::config::ServerConfig;
use crate::model::AccessView;
use crate::routes::{Catalog, alarms, cluster, fsm, fsm_control, kv, meta, objects, operate};

/// The name of the bearer security scheme.
const BEARER: &str = "bearer";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "durable gateway",
        description = "Call, inspect, list and delete durable objects over HTTP. Every route \
            under `/v1` is also served without the prefix. Every error has the body \
            `{\"error\": {\"code\", \"message\", \"retryable\", \"details\"}}`.",
        license(name = "MIT OR Apache-2.0", identifier = "MIT OR Apache-2.0"),
    ),
    paths(
        objects::call,
        objects::get,
        objects::delete,
        objects::list,
        operate::stop,
        operate::reload,
        operate::replace_state,
        alarms::list,
        alarms::set,
        alarms::cancel,
        alarms::dead,
        alarms::requeue,
        kv::list,
        kv::get,
        kv::put,
        kv::delete,
        fsm::insert,
        fsm::signal,
        fsm::get,
        fsm::list,
        fsm_control::cancel,
        fsm_control::pause,
        fsm_control::resume,
        fsm_control::paused,
        cluster::nodes,
        cluster::shards,
        meta::types,
        meta::openapi,
        meta::metrics,
        meta::healthz,
        meta::readyz,
    ),
    security(("bearer" = [])),
    tags(
        (name = "objects", description = "Call handlers; read, list and delete objects"),
        (name = "alarms", description = "An object's alarms, and dead alarms"),
        (name = "storage", description = "An object's key-value storage"),
        (name = "types", description = "The exposed object types"),
        (name = "fsm", description = "FSM instances: insert, signal, read, list and cancel; pause and resume queues"),
        (name = "cluster", description = "The nodes and shards of a cluster (admin)"),
        (name = "server", description = "Health, readiness, metrics and this document"),
    ),
)]
struct FixedRoutes;

/// The OpenAPI document of a gateway over the exposed types of `catalog`, as JSON: the
/// handlers' JSON schemas use JSON Schema keywords `utoipa`'s model does not hold, so they
/// are placed in the document once it is JSON.
pub(crate) fn document(catalog: &Catalog, config: &ServerConfig) -> Value {
    let mut document = serde_json::to_value(described_routes(catalog, config))
        .expect("an OpenAPI document serializes to JSON");
    let mut components = match document["components"]["schemas"].take() {
        Value::Object(components) => components,
        _ => Map::new(),
    };
    for exposed in catalog.types() {
        for handler in exposed.handlers {
            let Some(schemas) = (handler.schemas)() else {
                continue;
            };
            let path = handler_path(exposed.name, handler);
            let operation = &mut document["paths"][&path]["post"];
            describe_with_schemas(operation, exposed.name, handler, schemas, &mut components);
        }
    }
    document["components"]["schemas"] = Value::Object(components);
    document
}

/// The path of the exposed handler `handler` of `type_name`.
fn handler_path(type_name: &str, handler: &ExposedHandler) -> String {
    format!("/v1/objects/{type_name}/{{id}}/call/{}", handler.name)
}

/// Describes a handler's arguments (the request body), output (`200`, as `result`) and own
/// error (`422`, as the error's `details`; no `422` for a handler that cannot fail) with its
/// schemas.
fn describe_with_schemas(
    operation: &mut Value,
    type_name: &str,
    handler: &ExposedHandler,
    schemas: HandlerSchemas,
    components: &mut Map<String, Value>,
) {
    let prefix = |kind: &str| format!("{type_name}_{}_{kind}_", handler.name);
    let arguments = embed::embed(schemas.arguments, &prefix("arguments"), components);
    operation["requestBody"]["content"]["application/json"]["schema"] = arguments;

    let output = embed::embed(schemas.output, &prefix("output"), components);
    operation["responses"]["200"] = json!({
        "description": "The handler's output, as `result`",
        "content": {"application/json": {"schema": {
            "type": "object",
            "required": ["result"],
            "properties": {"result": output},
        }}},
    });

    let responses = operation["responses"]
        .as_object_mut()
        .expect("an operation has responses");
    let Some(error) = schemas.error else {
        responses.remove("422");
        return;
    };
    let error = embed::embed(error, &prefix("error"), components);
    responses.insert(
        "422".to_owned(),
        json!({
            "description": "`handler_error`: the handler's own error, as JSON, in `details`",
            "content": {"application/json": {"schema": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {
                    "type": "object",
                    "required": ["code", "message", "retryable", "details"],
                    "properties": {
                        "code": {"type": "string", "const": "handler_error"},
                        "message": {"type": "string"},
                        "retryable": {"type": "boolean"},
                        "details": error,
                    },
                }},
            }}},
        }),
    );
}

/// The document as `utoipa` describes it: every route, the handlers described by their
/// argument names.
fn described_routes(catalog: &Catalog, config: &ServerConfig) -> utoipa::openapi::OpenApi {
    let mut doc = FixedRoutes::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    doc.components
        .get_or_insert_with(Default::default)
        .add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token whose SHA-256 hash is configured for a principal",
                    ))
                    .build(),
            ),
        );
    let tags = doc.tags.get_or_insert_with(Vec::new);
    for exposed in catalog.types() {
        let mut tag = Tag::new(exposed.name);
        tag.description = Some(format!("Handlers of the object type `{}`", exposed.name));
        tags.push(tag);
        for handler in exposed.handlers {
            let path = handler_path(exposed.name, handler);
            let operation = handler_operation(exposed.name, handler);
            doc.paths
                .add_path_operation(path, vec![HttpMethod::Post], operation);
        }
    }
    if config.auth.disabled {
        // Nothing asks for a token.
        doc.security = None;
    }
    let public = |endpoint| config.auth.is_public(endpoint);
    for (path, item) in &mut doc.paths.paths {
        let always_public = path == "/healthz" || path == "/readyz";
        let public = always_public
            || config.auth.disabled
            || (path == "/metrics" && public(PublicEndpoint::Metrics))
            || (path == "/v1/openapi.json" && public(PublicEndpoint::Openapi));
        for operation in [
            &mut item.get,
            &mut item.post,
            &mut item.delete,
            &mut item.put,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            if public {
                // An empty list: no authentication for this operation.
                operation.security = Some(Vec::new());
            } else {
                add_auth_errors(operation);
            }
            if !always_public {
                add_common_errors(operation, path);
            }
        }
    }
    doc
}

/// The operation of one exposed handler, its arguments described by name.
fn handler_operation(type_name: &str, handler: &ExposedHandler) -> Operation {
    let mut arguments = ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::FreeForm(false)));
    for argument in handler.arguments {
        arguments = arguments.property(*argument, Object::with_type(SchemaType::AnyValue));
    }
    let access = match AccessView::from(handler.access) {
        AccessView::Read => "Reads the object's state.",
        AccessView::Write => {
            "Writes the object's state; its changes are committed before the reply."
        }
    };
    let names = if handler.arguments.is_empty() {
        "none".to_owned()
    } else {
        handler.arguments.join(", ")
    };
    OperationBuilder::new()
        .operation_id(Some(format!("call_{type_name}_{}", handler.name)))
        .tag(type_name)
        .summary(Some(format!("Call `{}` of `{type_name}`", handler.name)))
        .description(Some(format!("{access} Arguments: {names}.")))
        .parameter(
            ParameterBuilder::new()
                .name("id")
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .description(Some("The object id (1 to 1024 bytes of UTF-8, no NUL)"))
                .schema(Some(Object::with_type(Type::String))),
        )
        .request_body(Some(
            RequestBodyBuilder::new()
                .description(Some(
                    "The handler's arguments by name; an empty body is `{}`",
                ))
                .required(Some(Required::False))
                .content("application/json", Content::new(Some(arguments.build())))
                .build(),
        ))
        .response("200", json_response("The handler's output", "CallReply"))
        .response(
            "409",
            error_response("`conflict` (retryable) or `call_cycle`", false),
        )
        .response("413", error_response("`body_too_large`", false))
        .response(
            "422",
            error_response(
                "`handler_error`: the handler's own error, as JSON, in `details`",
                false,
            ),
        )
        .response(
            "429",
            error_response("`overloaded`: the object's queue is full", true),
        )
        .build()
}

fn json_response(description: &str, schema: &str) -> Response {
    Response::builder()
        .description(description)
        .content(
            "application/json",
            Content::new(Some(Ref::from_schema_name(schema))),
        )
        .build()
}

fn error_response(description: &str, retry_after: bool) -> Response {
    let mut response = json_response(description, "ErrorEnvelope");
    if retry_after {
        response.headers.insert(
            "Retry-After".to_owned(),
            Header::builder()
                .schema(Some(Object::with_type(Type::Integer)))
                .description(Some("Seconds to wait before retrying"))
                .build()
                .into(),
        );
    }
    response
}

fn add_missing(operation: &mut Operation, status: &str, response: impl FnOnce() -> Response) {
    let responses = &mut operation.responses.responses;
    if !responses.contains_key(status) {
        responses.insert(status.to_owned(), response().into());
    }
}

/// The answers of routes that need a token.
fn add_auth_errors(operation: &mut Operation) {
    add_missing(operation, "401", || {
        let mut response = error_response("`unauthenticated`: no valid bearer token", false);
        response.headers.insert(
            "WWW-Authenticate".to_owned(),
            Header::builder()
                .schema(Some(Object::with_type(Type::String)))
                .build()
                .into(),
        );
        response
    });
    add_missing(operation, "403", || {
        error_response("`forbidden`: no grant for this operation", false)
    });
}

/// The answers every route may give: server-side failures, and for the routes that reach
/// objects the runtime's refusals.
fn add_common_errors(operation: &mut Operation, path: &str) {
    add_missing(operation, "500", || {
        error_response(
            "`handler_panicked`, `state_decode_failed`, `state_encode_failed` or `internal`",
            false,
        )
    });
    if path == "/metrics" {
        add_missing(operation, "404", || {
            error_response("`not_found`: metrics are off", false)
        });
    }
    if !(path.starts_with("/v1/objects") || path.starts_with("/v1/alarms")) {
        return;
    }
    add_missing(operation, "400", || {
        error_response(
            "`invalid_arguments`, `invalid_id` or `invalid_request`",
            false,
        )
    });
    add_missing(operation, "404", || {
        error_response(
            "`unknown_type`, `unknown_handler`, `unknown_alarm` or `object_not_found`",
            false,
        )
    });
    add_missing(operation, "503", || {
        error_response(
            "`too_many_objects`, `shutting_down`, `unavailable` (retryable) or `outcome_unknown`",
            true,
        )
    });
    add_missing(operation, "504", || {
        error_response("`timeout`: no reply in time; the outcome is unknown", false)
    });
}
