//! The operators' console under `/console`: its files served from the binary with their media
//! types and caching headers, without a token even when auth is on (they hold no data), while
//! the API the page reads still wants the token; and nothing when the console is turned off.

use crate::common;

use common::{TestServer, builder, code, principals_config, token};
use durable_runtime::storage::MemoryStorage;
use reqwest::Method;
use reqwest::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, LOCATION,
    X_CONTENT_TYPE_OPTIONS,
};

/// Every file of the console and its media type.
const FILES: [(&str, &str); 11] = [
    ("", "text/html; charset=utf-8"),
    ("console.css", "text/css; charset=utf-8"),
    ("app.js", "text/javascript; charset=utf-8"),
    ("api.js", "text/javascript; charset=utf-8"),
    ("dom.js", "text/javascript; charset=utf-8"),
    ("pages.js", "text/javascript; charset=utf-8"),
    ("fsm.js", "text/javascript; charset=utf-8"),
    ("overview.js", "text/javascript; charset=utf-8"),
    ("prometheus.js", "text/javascript; charset=utf-8"),
    ("chart.js", "text/javascript; charset=utf-8"),
    ("favicon.svg", "image/svg+xml"),
];

async fn server() -> TestServer {
    let runtime = builder(MemoryStorage::new()).build();
    TestServer::start(runtime, principals_config("")).await
}

#[tokio::test]
async fn the_files_are_served_without_a_token_with_their_media_types() {
    let server = server().await;
    for (file, media_type) in FILES {
        let path = format!("/console/{file}");
        // A wrong token does not matter either: the files are public.
        for bearer in [None, Some("not-a-token")] {
            let response = server
                .request(Method::GET, &path, bearer)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{path}");
            let headers = response.headers();
            assert_eq!(headers[CONTENT_TYPE], media_type, "{path}");
            assert_eq!(headers[CACHE_CONTROL], "no-cache", "{path}");
            assert_eq!(headers[X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
            let policy = headers[CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(policy.contains("script-src 'self'"), "{policy}");
            assert!(policy.contains("connect-src 'self'"), "{policy}");
            assert!(headers[ETAG].to_str().unwrap().starts_with('"'), "{path}");
            assert!(!response.bytes().await.unwrap().is_empty(), "{path}");
        }
    }
    let page = server.request(Method::GET, "/console/", None).send().await;
    let page = page.unwrap().text().await.unwrap();
    assert!(
        page.contains(r#"<script type="module" src="app.js">"#),
        "{page}"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_bare_path_redirects_to_the_page() {
    let server = server().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = client.get(server.url("/console")).send().await.unwrap();
    assert_eq!(response.status(), 308);
    // Relative, so the page works under a prefix too.
    assert_eq!(response.headers()[LOCATION], "console/");
    server.stop().await;
}

#[tokio::test]
async fn an_unchanged_file_is_not_sent_again() {
    let server = server().await;
    let first = server.request(Method::GET, "/console/app.js", None).send();
    let first = first.await.unwrap();
    let etag = first.headers()[ETAG].clone();

    let again = server
        .request(Method::GET, "/console/app.js", None)
        .header(IF_NONE_MATCH, etag.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()[ETAG], etag);
    assert!(again.bytes().await.unwrap().is_empty());

    let stale = server
        .request(Method::GET, "/console/app.js", None)
        .header(IF_NONE_MATCH, "\"an-older-build\"")
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), 200);
    // Each file has its own tag.
    let css = server.request(Method::GET, "/console/console.css", None);
    let css = css.send().await.unwrap();
    assert_ne!(css.headers()[ETAG], etag);
    server.stop().await;
}

#[tokio::test]
async fn an_unknown_file_is_the_usual_not_found() {
    let server = server().await;
    for path in [
        "/console/nope.js",
        "/console/tests/package.json",
        "/console/a/b",
    ] {
        let (status, body) = server.get(path).await;
        assert_eq!((status, code(&body)), (404, "not_found"), "{path}");
    }
    server.stop().await;
}

#[tokio::test]
async fn the_api_the_page_reads_still_wants_the_token() {
    let server = server().await;
    let (status, body) = server.get("/v1/types").await;
    assert_eq!((status, code(&body)), (401, "unauthenticated"));
    let wrong = server.request(Method::GET, "/v1/types", Some("not-a-token"));
    let (status, body) = server.send(wrong).await;
    assert_eq!((status, code(&body)), (401, "unauthenticated"));
    let admin = token("admin");
    let right = server.request(Method::GET, "/v1/types", Some(&admin));
    let (status, body) = server.send(right).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["types"]
            .as_array()
            .is_some_and(|types| !types.is_empty())
    );
    server.stop().await;
}

#[tokio::test]
async fn turned_off_the_console_is_not_served() {
    let runtime = builder(MemoryStorage::new()).build();
    let config = principals_config("console = false");
    assert!(!config.console);
    let server = TestServer::start(runtime, config).await;
    for path in ["/console", "/console/", "/console/app.js"] {
        let (status, body) = server.get(path).await;
        assert_eq!((status, code(&body)), (404, "not_found"), "{path}");
    }
    server.stop().await;
}
