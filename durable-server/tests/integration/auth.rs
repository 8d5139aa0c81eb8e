//! Who may do what, over real HTTP: every route without a token (401), with a token whose
//! principal has no grant (403), with a grant for another type only (403), per-handler
//! grants, token rotation, public metrics and OpenAPI; and `/metrics`, labelled by route
//! template, never by object id.

use crate::common;

use common::{TestServer, builder, code, principals_config, token, within};
use durable_runtime::storage::MemoryStorage;
use reqwest::Method;
use serde_json::{Value, json};

/// Every route of the gateway, with a request that the `admin` principal may make.
fn every_route() -> Vec<(Method, &'static str, Option<Value>)> {
    let alarm = json!({"name": "reset", "delay": "1h"});
    let requeue = json!({"type": "Counter", "id": "a", "name": "reset"});
    let mut routes = Vec::new();
    for prefix in ["/v1", ""] {
        let route = |method, path: &str, body: Option<Value>| {
            let path: &'static str = Box::leak(format!("{prefix}{path}").into_boxed_str());
            (method, path, body)
        };
        routes.extend([
            route(
                Method::POST,
                "/objects/Counter/a/call/increment",
                Some(json!({"by": 1})),
            ),
            route(Method::GET, "/objects/Counter/a", None),
            route(Method::GET, "/objects?type=Counter", None),
            route(Method::GET, "/objects/Counter/a/alarms", None),
            route(
                Method::POST,
                "/objects/Counter/a/alarms",
                Some(alarm.clone()),
            ),
            route(Method::DELETE, "/objects/Counter/a/alarms/reset", None),
            route(Method::GET, "/objects/Counter/a/storage", None),
            route(Method::GET, "/objects/Counter/a/storage/k", None),
            route(Method::PUT, "/objects/Counter/a/storage/k", Some(json!(1))),
            route(Method::DELETE, "/objects/Counter/a/storage/k", None),
            route(Method::DELETE, "/objects/Counter/a", None),
            route(Method::GET, "/alarms/dead?type=Counter", None),
            route(Method::GET, "/alarms/dead", None),
            route(Method::POST, "/alarms/dead/requeue", Some(requeue.clone())),
            route(Method::GET, "/types", None),
            route(Method::GET, "/objects/definitions", None),
            route(Method::GET, "/openapi.json", None),
        ]);
    }
    routes.push((Method::GET, "/metrics", None));
    routes
}

/// Routes whose answer is filtered by the caller's grants rather than refused.
fn lists_types(path: &str) -> bool {
    path.ends_with("/types") || path.ends_with("/definitions")
}

async fn send(
    server: &TestServer,
    (method, path, body): &(Method, &str, Option<Value>),
    token: Option<&str>,
) -> reqwest::Response {
    let mut request = server.request(method.clone(), path, token);
    if let Some(body) = body {
        request = request.json(body);
    }
    within("a response", request.send()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_denied_by_default() {
    let server =
        TestServer::start(builder(MemoryStorage::new()).build(), principals_config("")).await;
    let admin = token("admin");
    for route in every_route() {
        let what = format!("{} {}", route.0, route.1);

        let response = send(&server, &route, None).await;
        assert_eq!(response.status(), 401, "{what} without a token");
        assert_eq!(response.headers()["www-authenticate"], "Bearer", "{what}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(code(&body), "unauthenticated", "{what}");

        let response = send(&server, &route, Some("not-a-token")).await;
        assert_eq!(response.status(), 401, "{what} with an unknown token");

        let response = send(&server, &route, Some(&token("nobody"))).await;
        assert_eq!(response.status(), 403, "{what} without a grant");
        let body: Value = response.json().await.unwrap();
        assert_eq!(code(&body), "forbidden", "{what}");

        let response = send(&server, &route, Some(&token("other-only"))).await;
        if lists_types(route.1) {
            // Listing types shows the types the caller may list, here only `Other`.
            assert_eq!(response.status(), 200, "{what}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["types"].as_array().unwrap().len(), 1, "{what}");
            assert_eq!(body["types"][0]["name"], "Other", "{what}");
        } else {
            assert_eq!(
                response.status(),
                403,
                "{what} with a grant for another type"
            );
        }

        let status = send(&server, &route, Some(&admin)).await.status().as_u16();
        assert!(![401, 403].contains(&status), "{what} as admin: {status}");
    }
    // Health and readiness need no token.
    assert_eq!(server.get("/healthz").await.0, 200);
    assert_eq!(server.get("/readyz").await.0, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_per_handler_and_rotated_tokens() {
    let server =
        TestServer::start(builder(MemoryStorage::new()).build(), principals_config("")).await;
    let get = (Method::POST, "/v1/objects/Counter/h/call/get", None);
    let increment = (
        Method::POST,
        "/v1/objects/Counter/h/call/increment",
        Some(json!({"by": 1})),
    );
    let read = (Method::GET, "/v1/objects/Counter/h", None);
    let reader = token("counter-get");
    assert_eq!(send(&server, &get, Some(&reader)).await.status(), 200);
    assert_eq!(send(&server, &increment, Some(&reader)).await.status(), 403);
    assert_eq!(send(&server, &read, Some(&reader)).await.status(), 403);
    // A grant on one type: an unknown type is forbidden before it is found unknown.
    let other = (Method::POST, "/v1/objects/Nope/h/call/get", None);
    assert_eq!(send(&server, &other, Some(&reader)).await.status(), 403);

    // Both tokens of a principal work, during a rotation.
    for admin in [token("admin"), "retired-admin-token".to_owned()] {
        assert_eq!(send(&server, &increment, Some(&admin)).await.status(), 200);
    }
    // The scheme is case-insensitive; anything but a bearer token is refused.
    let lower = server
        .request(Method::POST, "/v1/objects/Counter/h/call/get", None)
        .header("authorization", format!("bearer {}", token("admin")));
    assert_eq!(server.send(lower).await.0, 200);
    let basic = server
        .request(Method::POST, "/v1/objects/Counter/h/call/get", None)
        .header("authorization", "Basic YWRtaW46YWRtaW4=");
    assert_eq!(server.send(basic).await.0, 401);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_openapi_can_be_public() {
    let server = TestServer::start(
        builder(MemoryStorage::new()).build(),
        principals_config(r#"public = ["metrics", "openapi"]"#),
    )
    .await;
    assert_eq!(server.get("/metrics").await.0, 200);
    assert_eq!(server.get("/openapi.json").await.0, 200);
    let (_, document) = server.get("/v1/openapi.json").await;
    assert_eq!(document["paths"]["/metrics"]["get"]["security"], json!([]));
    assert_eq!(
        document["paths"]["/v1/openapi.json"]["get"]["security"],
        json!([])
    );
    // Everything else still needs a token.
    assert_eq!(server.get("/v1/types").await.0, 401);
    assert_eq!(server.get("/v1/objects/Counter/a").await.0, 401);
    server.stop().await;

    // Not public: the document says so too.
    let server =
        TestServer::start(builder(MemoryStorage::new()).build(), principals_config("")).await;
    let request = server.request(Method::GET, "/openapi.json", Some(&token("admin")));
    let (_, document) = server.send(request).await;
    assert_eq!(
        document["paths"]["/metrics"]["get"]["security"],
        Value::Null
    );
    assert!(document["paths"]["/metrics"]["get"]["responses"]["401"].is_object());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_labelled_by_route_never_by_id() {
    let server =
        TestServer::start(builder(MemoryStorage::new()).build(), principals_config("")).await;
    let admin = token("admin");
    let id = "metric-secret-id-42";
    let call = format!("/v1/objects/Counter/{id}/call/increment");
    let request = server
        .request(Method::POST, &call, Some(&admin))
        .json(&json!({"by": 1}));
    assert_eq!(server.send(request).await.0, 200);
    let request = server.request(
        Method::GET,
        &format!("/v1/objects/Counter/{id}"),
        Some(&admin),
    );
    assert_eq!(server.send(request).await.0, 200);
    let request = server.request(Method::GET, &format!("/no/such/{id}"), Some(&admin));
    assert_eq!(server.send(request).await.0, 404);

    let response = server
        .request(Method::GET, "/metrics", Some(&admin))
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    for expected in [
        r#"durable_http_requests_total{method="POST",route="/v1/objects/{type}/{id}/call/{handler}",status="200"}"#,
        r#"durable_http_requests_total{method="GET",route="/v1/objects/{type}/{id}",status="200"}"#,
        r#"durable_http_requests_total{method="GET",route="unmatched",status="404"}"#,
        r#"durable_http_request_duration_seconds_bucket{method="POST",route="/v1/objects/{type}/{id}/call/{handler}",le="0.001"}"#,
        r#"durable_calls_total{type="Counter",handler="increment",outcome="ok"}"#,
        "durable_live_objects",
        "durable_call_duration_seconds_bucket",
    ] {
        assert!(text.contains(expected), "no `{expected}` in:\n{text}");
    }
    assert!(!text.contains(id), "an object id in a label:\n{text}");
    server.stop().await;
}
