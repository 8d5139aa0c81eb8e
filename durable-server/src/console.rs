//! The operators' console: a single page served under `/console`, its files embedded in the
//! binary at build time. It holds no data of its own: the page asks the gateway's API with the
//! token its user enters, so the files themselves are public.
//!
//! Each file is answered with its media type, an `ETag` (a hash of its bytes) and
//! `Cache-Control: no-cache`: a browser keeps it and asks again with `If-None-Match`, getting
//! `304` until a new build changes it. A content security policy lets the page load only its
//! own files and talk only to its own origin.

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// One embedded file of the console.
struct Asset {
    /// Its name under `/console/`.
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// The console's files, as built into the binary.
const ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("../console/index.html"),
    },
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../console/console.css"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/app.js"),
    },
    Asset {
        name: "api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/api.js"),
    },
    Asset {
        name: "dom.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/dom.js"),
    },
    Asset {
        name: "pages.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/pages.js"),
    },
    Asset {
        name: "fsm.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/fsm.js"),
    },
    Asset {
        name: "overview.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/overview.js"),
    },
    Asset {
        name: "prometheus.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/prometheus.js"),
    },
    Asset {
        name: "chart.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/chart.js"),
    },
    Asset {
        name: "favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../console/favicon.svg"),
    },
];

/// What the page may load and where it may connect: its own origin only, no inline script
/// or style, and no framing (the page shows what the token may read).
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The console's routes: `/console` (redirected to `/console/`, so the page's relative links
/// resolve under it), the page at `/console/` and its files at `/console/{file}`.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/console", get(|| async { Redirect::permanent("console/") }))
        .route("/console/", get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route(
            "/console/{file}",
            get(|Path(file): Path<String>, headers: HeaderMap| async move {
                serve(&file, &headers)
            }),
        )
}

/// The file `name` for a request with `headers`: `304` if the browser holds this version,
/// `404 not_found` if there is no such file.
fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some((index, asset)) = ASSETS
        .iter()
        .enumerate()
        .find(|(_, asset)| asset.name == name)
    else {
        return ApiError::not_found().into_response();
    };
    let etag = &etags()[index];
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|held| held.as_bytes() == etag.as_bytes());
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.body,
        )
            .into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::ETAG, etag.clone());
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// The `ETag` of each file of [`ASSETS`], in order, hashed once.
fn etags() -> &'static [HeaderValue] {
    static ETAGS: OnceLock<Vec<HeaderValue>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|asset| {
                let digest = Sha256::digest(asset.body);
                let tag = format!("\"{}\"", hex::encode(&digest[..16]));
                HeaderValue::from_str(&tag).expect("hex digits are a valid header value")
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::ASSETS;

    #[test]
    fn every_file_the_page_loads_is_embedded() {
        let page = std::str::from_utf8(ASSETS[0].body).unwrap();
        for asset in &ASSETS[1..] {
            let loaded = page.contains(&format!("\"{}\"", asset.name))
                || ASSETS
                    .iter()
                    .filter(|other| other.name.ends_with(".js"))
                    .any(|script| {
                        std::str::from_utf8(script.body)
                            .unwrap()
                            .contains(&format!("'./{}'", asset.name))
                    });
            assert!(loaded, "{} is embedded but nothing loads it", asset.name);
        }
    }

    #[test]
    fn every_file_of_the_console_is_embedded() {
        let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("console");
        let mut files: Vec<String> = std::fs::read_dir(directory)
            .unwrap()
            .map(|entry| entry.unwrap())
            .filter(|entry| entry.file_type().unwrap().is_file())
            .map(|entry| entry.file_name().into_string().unwrap())
            .collect();
        files.sort();
        let mut embedded: Vec<String> = ASSETS.iter().map(|a| a.name.to_owned()).collect();
        embedded.sort();
        assert_eq!(files, embedded);
    }
}
