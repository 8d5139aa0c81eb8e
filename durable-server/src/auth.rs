//! Who may do what: bearer tokens configured as SHA-256 hashes, principals holding several
//! of them (for rotation), and grants per type, per handler and per operation. Everything not
//! granted is denied.
//!
//! The gateway asks an [`Authorizer`] who a request comes from and whether that principal may
//! perform the request's [`Action`]. [`TokenAuthorizer`] implements it from an [`AuthConfig`];
//! another scheme (JWT, OIDC) plugs in through the same trait with
//! [`router_with_authorizer`](crate::router_with_authorizer).
//!
//! Tokens are never stored, compared or logged in clear: the configuration holds their
//! SHA-256 hashes, a presented token is hashed once and compared with every configured hash in
//! constant time.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use serde::{Deserialize, Deserializer};
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::config::ConfigError;

/// An operation a grant allows. Each route needs one:
///
/// | op | routes |
/// |---|---|
/// | `call` | `POST /objects/{type}/{id}/call/{handler}` (checked per handler) |
/// | `read` | `GET /objects/{type}/{id}`, `GET /objects/{type}/{id}/alarms` |
/// | `list` | `GET /objects`, `GET /types` |
/// | `delete` | `DELETE /objects/{type}/{id}` |
/// | `alarms` | `POST /objects/{type}/{id}/alarms`, `DELETE /objects/{type}/{id}/alarms/{name}` |
/// | `admin` | `GET /alarms/dead`, `POST /alarms/dead/requeue`, `/metrics` and `/openapi.json` unless public |
/// | `fsm_read` | `GET /fsm/{id}`, `GET /fsm` (for `types` naming FSMs; a listing of every FSM needs `"*"`) |
/// | `fsm_write` | `POST /fsm/{name}`, `POST /fsm/signal` (checked against the signalled instance's FSM) |
///
/// # Examples
///
/// ```
/// use durable_server::auth::Op;
///
/// let ops: Vec<Op> = serde_json::from_str(r#"["call", "admin"]"#).unwrap();
/// assert_eq!(ops, [Op::Call, Op::Admin]);
/// assert_eq!(Op::Alarms.as_str(), "alarms");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Op {
    /// Call a handler.
    Call,
    /// Read an object's state, status and alarms.
    Read,
    /// List objects and types.
    List,
    /// Delete an object.
    Delete,
    /// Set and cancel an object's alarms.
    Alarms,
    /// Dead alarms, metrics and the OpenAPI document.
    Admin,
    /// Read an object's key-value storage.
    KvRead,
    /// Change an object's key-value storage.
    KvWrite,
    /// Read and list FSM instances (the grant's `types` name FSMs).
    FsmRead,
    /// Insert FSM instances and signal them (the grant's `types` name FSMs).
    FsmWrite,
}

impl Op {
    /// The operation's name, as written in the configuration.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_server::auth::Op::Call.as_str(), "call");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Call => "call",
            Self::Read => "read",
            Self::List => "list",
            Self::Delete => "delete",
            Self::Alarms => "alarms",
            Self::Admin => "admin",
            Self::KvRead => "kv_read",
            Self::KvWrite => "kv_write",
            Self::FsmRead => "fsm_read",
            Self::FsmWrite => "fsm_write",
        }
    }
}

/// What a request acts on.
///
/// # Examples
///
/// ```
/// use durable_server::auth::Scope;
///
/// let scope = Scope::Type { name: "Counter", handler: Some("increment") };
/// assert_eq!(scope.type_name(), Some("Counter"));
/// assert_eq!(Scope::Server.type_name(), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// The server as a whole, or every type at once (metrics, the OpenAPI document, dead
    /// alarms of all types): only a grant for `types = ["*"]` covers it.
    Server,
    /// One object type; for a call, also the handler.
    Type {
        /// The type's name.
        name: &'a str,
        /// The handler called, for [`Op::Call`].
        handler: Option<&'a str>,
    },
}

impl<'a> Scope<'a> {
    /// The type acted on, if the scope is one type.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::Scope;
    ///
    /// assert_eq!(Scope::Type { name: "Counter", handler: None }.type_name(), Some("Counter"));
    /// ```
    pub fn type_name(&self) -> Option<&'a str> {
        match self {
            Self::Server => None,
            Self::Type { name, .. } => Some(name),
        }
    }
}

/// An operation on a scope: what a request asks to do.
///
/// # Examples
///
/// ```
/// use durable_server::auth::{Action, Op, Scope};
///
/// let action = Action::on_type(Op::Read, "Counter");
/// assert_eq!(action.scope, Scope::Type { name: "Counter", handler: None });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action<'a> {
    /// The operation.
    pub op: Op,
    /// What it acts on.
    pub scope: Scope<'a>,
}

impl<'a> Action<'a> {
    /// `op` on the objects of one type.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::{Action, Op};
    ///
    /// assert_eq!(Action::on_type(Op::List, "Counter").op, Op::List);
    /// ```
    pub fn on_type(op: Op, type_name: &'a str) -> Self {
        Self {
            op,
            scope: Scope::Type {
                name: type_name,
                handler: None,
            },
        }
    }

    /// A call of `handler` on an object of `type_name`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::{Action, Op, Scope};
    ///
    /// let call = Action::call("Counter", "increment");
    /// assert_eq!(call.op, Op::Call);
    /// assert_eq!(call.scope, Scope::Type { name: "Counter", handler: Some("increment") });
    /// ```
    pub fn call(type_name: &'a str, handler: &'a str) -> Self {
        Self {
            op: Op::Call,
            scope: Scope::Type {
                name: type_name,
                handler: Some(handler),
            },
        }
    }

    /// `op` on the server as a whole.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::{Action, Op, Scope};
    ///
    /// assert_eq!(Action::on_server(Op::Admin).scope, Scope::Server);
    /// ```
    pub fn on_server(op: Op) -> Self {
        Self {
            op,
            scope: Scope::Server,
        }
    }
}

/// A permission: the operations `ops` on the types `types` (`"*"` for all), and for `call`
/// only the handlers `handlers` (`"*"` for all, the default).
///
/// # Examples
///
/// ```
/// use durable_server::auth::{Action, Grant, Op};
///
/// let grant: Grant = toml::from_str(r#"
///     types = ["Counter"]
///     handlers = ["get"]
///     ops = ["call", "read"]
/// "#).unwrap();
/// assert!(grant.allows(&Action::call("Counter", "get")));
/// assert!(!grant.allows(&Action::call("Counter", "increment")));
/// assert!(grant.allows(&Action::on_type(Op::Read, "Counter")));
/// assert!(!grant.allows(&Action::on_type(Op::Read, "Account")));
/// assert!(!grant.allows(&Action::on_type(Op::Delete, "Counter")));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// The object types, or `"*"` for every type (and the server-wide routes).
    pub types: Vec<String>,
    /// The handlers `call` may call, or `"*"` (the default) for all.
    #[serde(default = "every_handler")]
    pub handlers: Vec<String>,
    /// The operations granted.
    pub ops: Vec<Op>,
}

fn every_handler() -> Vec<String> {
    vec![WILDCARD.to_owned()]
}

const WILDCARD: &str = "*";

fn matches(patterns: &[String], name: &str) -> bool {
    patterns
        .iter()
        .any(|pattern| pattern == WILDCARD || pattern == name)
}

impl Grant {
    /// Whether this grant allows `action`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::{Action, Grant, Op};
    ///
    /// let admin = Grant { types: vec!["*".into()], handlers: vec!["*".into()], ops: vec![Op::Admin] };
    /// assert!(admin.allows(&Action::on_server(Op::Admin)));
    /// let one_type = Grant { types: vec!["Counter".into()], ..admin };
    /// assert!(!one_type.allows(&Action::on_server(Op::Admin))); // the server is every type
    /// assert!(one_type.allows(&Action::on_type(Op::Admin, "Counter")));
    /// ```
    pub fn allows(&self, action: &Action<'_>) -> bool {
        if !self.ops.contains(&action.op) {
            return false;
        }
        match action.scope {
            Scope::Server => self.types.iter().any(|pattern| pattern == WILDCARD),
            Scope::Type { name, handler } => {
                matches(&self.types, name)
                    && match (action.op, handler) {
                        (Op::Call, Some(handler)) => matches(&self.handlers, handler),
                        _ => true,
                    }
            }
        }
    }
}

/// The SHA-256 hash of a bearer token, as configured (64 hex digits).
///
/// # Examples
///
/// ```
/// use durable_server::auth::TokenHash;
///
/// let hash = TokenHash::of_token("s3cret");
/// assert_eq!(TokenHash::from_hex(&hash.to_hex()).unwrap(), hash);
/// assert!(TokenHash::from_hex("not hex").is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenHash([u8; 32]);

/// A token hash that is not 64 hex digits.
///
/// # Examples
///
/// ```
/// use durable_server::auth::TokenHash;
///
/// let err = TokenHash::from_hex("abc").unwrap_err();
/// assert_eq!(err.to_string(), "a token hash must be 64 hex digits (a SHA-256 digest)");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a token hash must be 64 hex digits (a SHA-256 digest)")]
pub struct InvalidTokenHash;

impl TokenHash {
    /// The hash of `token`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::TokenHash;
    ///
    /// assert_eq!(
    ///     TokenHash::of_token("").to_hex(),
    ///     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    /// );
    /// ```
    pub fn of_token(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
    }

    /// Parses 64 hex digits (either case).
    ///
    /// # Errors
    ///
    /// [`InvalidTokenHash`] for anything else.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::TokenHash;
    ///
    /// let upper = "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855";
    /// assert_eq!(TokenHash::from_hex(upper).unwrap(), TokenHash::of_token(""));
    /// ```
    pub fn from_hex(hex_digits: &str) -> Result<Self, InvalidTokenHash> {
        let mut bytes = [0; 32];
        hex::decode_to_slice(hex_digits, &mut bytes).map_err(|_| InvalidTokenHash)?;
        Ok(Self(bytes))
    }

    /// The hash as 64 lowercase hex digits, as the configuration holds it.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::TokenHash;
    ///
    /// assert_eq!(TokenHash::of_token("x").to_hex().len(), 64);
    /// ```
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A prefix is enough to tell hashes apart in a debug dump.
        write!(f, "TokenHash({}…)", &self.to_hex()[..8])
    }
}

impl<'de> Deserialize<'de> for TokenHash {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let text = String::deserialize(de)?;
        Self::from_hex(&text).map_err(serde::de::Error::custom)
    }
}

/// The hash to put in the configuration for `token`: its SHA-256 digest as 64 lowercase hex
/// digits (the same as `printf %s "$TOKEN" | sha256sum`).
///
/// # Examples
///
/// ```
/// let hash = durable_server::auth::hash_token("s3cret");
/// assert_eq!(hash.len(), 64);
/// assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
/// ```
pub fn hash_token(token: &str) -> String {
    TokenHash::of_token(token).to_hex()
}

/// One principal of the configuration: a name (in audit lines), its tokens' hashes, and its
/// grants.
///
/// # Examples
///
/// ```
/// use durable_server::auth::{hash_token, PrincipalConfig};
///
/// let text = format!(r#"
///     name = "ci"
///     tokens_sha256 = ["{}", "{}"]  # the old and the new token, during a rotation
///     [[grants]]
///     types = ["*"]
///     ops = ["list"]
/// "#, hash_token("old"), hash_token("new"));
/// let principal: PrincipalConfig = toml::from_str(&text).unwrap();
/// assert_eq!(principal.tokens_sha256.len(), 2);
/// ```
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalConfig {
    /// The principal's name, as audit lines show it.
    pub name: String,
    /// The SHA-256 hashes of its bearer tokens: several, to rotate without downtime.
    pub tokens_sha256: Vec<TokenHash>,
    /// What it may do; nothing if empty.
    #[serde(default)]
    pub grants: Vec<Grant>,
}

/// A route that can be made public (no token needed). `/healthz` and `/readyz` always are.
///
/// # Examples
///
/// ```
/// use durable_server::auth::PublicEndpoint;
///
/// let public: Vec<PublicEndpoint> = serde_json::from_str(r#"["metrics"]"#).unwrap();
/// assert_eq!(public, [PublicEndpoint::Metrics]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PublicEndpoint {
    /// `GET /metrics`.
    Metrics,
    /// `GET /openapi.json`.
    Openapi,
}

/// The authorization settings of a [`ServerConfig`](crate::ServerConfig).
///
/// The default denies everything but `/healthz` and `/readyz`.
///
/// # Examples
///
/// ```
/// use durable_server::auth::AuthConfig;
///
/// let config = AuthConfig::default();
/// assert!(!config.disabled && config.principals.is_empty() && config.public.is_empty());
/// ```
#[derive(Clone, Debug, Default)]
pub struct AuthConfig {
    /// Lets every request through without a token (`auth.disabled = true`): for local
    /// development only.
    pub disabled: bool,
    /// Routes that need no token.
    pub public: Vec<PublicEndpoint>,
    /// Who may do what.
    pub principals: Vec<PrincipalConfig>,
}

impl AuthConfig {
    /// Whether `endpoint` is public.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::{AuthConfig, PublicEndpoint};
    ///
    /// let config = AuthConfig { public: vec![PublicEndpoint::Metrics], ..AuthConfig::default() };
    /// assert!(config.is_public(PublicEndpoint::Metrics));
    /// assert!(!config.is_public(PublicEndpoint::Openapi));
    /// ```
    pub fn is_public(&self, endpoint: PublicEndpoint) -> bool {
        self.disabled || self.public.contains(&endpoint)
    }

    /// Checks that the principals are consistent: unique names, at least one token each, no
    /// token shared by two principals, no empty grant.
    ///
    /// # Errors
    ///
    /// The first inconsistency found, as a [`ConfigError`].
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::{AuthConfig, PrincipalConfig, TokenHash};
    /// use durable_server::ConfigError;
    ///
    /// let nobody = PrincipalConfig { name: "x".into(), tokens_sha256: vec![], grants: vec![] };
    /// let config = AuthConfig { principals: vec![nobody], ..AuthConfig::default() };
    /// assert!(matches!(config.validate(), Err(ConfigError::NoToken { .. })));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (at, principal) in self.principals.iter().enumerate() {
            let name = || principal.name.clone();
            let earlier = &self.principals[..at];
            if earlier.iter().any(|other| other.name == principal.name) {
                return Err(ConfigError::DuplicatePrincipal { name: name() });
            }
            if principal.tokens_sha256.is_empty() {
                return Err(ConfigError::NoToken { name: name() });
            }
            for hash in &principal.tokens_sha256 {
                if let Some(other) = earlier
                    .iter()
                    .find(|other| other.tokens_sha256.contains(hash))
                {
                    return Err(ConfigError::SharedToken {
                        name: name(),
                        other: other.name.clone(),
                    });
                }
            }
            if principal
                .grants
                .iter()
                .any(|grant| grant.types.is_empty() || grant.ops.is_empty())
            {
                return Err(ConfigError::EmptyGrant { name: name() });
            }
        }
        Ok(())
    }
}

/// Someone a request was authenticated as: a name for audit lines, and the grants that
/// decide what it may do.
///
/// # Examples
///
/// ```
/// use durable_server::auth::{Action, Grant, Op, Principal};
///
/// let reader = Principal::new("dashboard", vec![Grant {
///     types: vec!["*".into()],
///     handlers: vec!["*".into()],
///     ops: vec![Op::Read],
/// }]);
/// assert_eq!(reader.name(), "dashboard");
/// assert!(reader.may(&Action::on_type(Op::Read, "Counter")));
/// assert!(!reader.may(&Action::call("Counter", "increment")));
/// ```
#[derive(Clone)]
pub struct Principal {
    name: Arc<str>,
    grants: Arc<[Grant]>,
    unrestricted: bool,
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Principal")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Principal {
    /// A principal called `name` holding `grants`.
    ///
    /// # Examples
    ///
    /// ```
    /// let nobody = durable_server::auth::Principal::new("nobody", vec![]);
    /// assert_eq!(nobody.name(), "nobody");
    /// ```
    pub fn new(name: impl Into<Arc<str>>, grants: Vec<Grant>) -> Self {
        Self {
            name: name.into(),
            grants: grants.into(),
            unrestricted: false,
        }
    }

    /// The caller when authorization is disabled: `anonymous`, allowed everything.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::{Action, Op, Principal};
    ///
    /// let anyone = Principal::anonymous();
    /// assert_eq!(anyone.name(), "anonymous");
    /// assert!(anyone.may(&Action::on_server(Op::Admin)));
    /// ```
    pub fn anonymous() -> Self {
        Self {
            name: Arc::from("anonymous"),
            grants: Arc::new([]),
            unrestricted: true,
        }
    }

    /// The principal's name.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_server::auth::Principal::new("ops", vec![]).name(), "ops");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether one of the principal's grants allows `action`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::{Action, Op, Principal};
    ///
    /// assert!(!Principal::new("nobody", vec![]).may(&Action::on_type(Op::Read, "Counter")));
    /// ```
    pub fn may(&self, action: &Action<'_>) -> bool {
        self.unrestricted || self.grants.iter().any(|grant| grant.allows(action))
    }
}

/// Why a request could not be authenticated (`401 unauthenticated`).
///
/// # Examples
///
/// ```
/// use durable_server::auth::AuthError;
///
/// assert_eq!(AuthError::MissingToken.to_string(), "a bearer token is required");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `Authorization: Bearer ...` header.
    #[error("a bearer token is required")]
    MissingToken,
    /// A token that no principal holds, or a malformed `Authorization` header.
    #[error("the bearer token is not valid")]
    InvalidToken,
}

/// Decides who a request comes from and what they may do.
///
/// [`TokenAuthorizer`] is the built-in implementation; a JWT or OIDC scheme implements this
/// trait, mapping its claims to a [`Principal`]'s grants (or overriding
/// [`authorize`](Authorizer::authorize)), and is passed to
/// [`router_with_authorizer`](crate::router_with_authorizer).
///
/// # Examples
///
/// ```
/// use async_trait::async_trait;
/// use axum::http::HeaderMap;
/// use durable_server::auth::{Action, AuthError, Authorizer, Grant, Op, Principal};
///
/// /// Trusts a header set by a proxy in front of the gateway.
/// struct ProxyHeader;
///
/// #[async_trait]
/// impl Authorizer for ProxyHeader {
///     async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthError> {
///         let user = headers.get("x-user").and_then(|v| v.to_str().ok());
///         let user = user.ok_or(AuthError::MissingToken)?;
///         let read_all = Grant { types: vec!["*".into()], handlers: vec!["*".into()], ops: vec![Op::Read] };
///         Ok(Principal::new(user, vec![read_all]))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let mut headers = HeaderMap::new();
/// headers.insert("x-user", "ann".parse().unwrap());
/// let ann = ProxyHeader.authenticate(&headers).await.unwrap();
/// assert!(ProxyHeader.authorize(&ann, &Action::on_type(Op::Read, "Counter")));
/// # }
/// ```
#[async_trait]
pub trait Authorizer: Send + Sync + 'static {
    /// Who sent a request with these headers.
    ///
    /// # Errors
    ///
    /// [`AuthError`] if no principal can be established (the request gets `401`).
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthError>;

    /// Whether `principal` may perform `action` (otherwise the request gets `403`). The
    /// default asks the principal's grants.
    fn authorize(&self, principal: &Principal, action: &Action<'_>) -> bool {
        principal.may(action)
    }
}

/// The token in an `Authorization: Bearer <token>` header (the scheme in any case).
///
/// # Errors
///
/// [`AuthError::MissingToken`] without an `Authorization` header,
/// [`AuthError::InvalidToken`] for one that is not a bearer token.
///
/// # Examples
///
/// ```
/// use axum::http::HeaderMap;
/// use durable_server::auth::{bearer_token, AuthError};
///
/// let mut headers = HeaderMap::new();
/// assert_eq!(bearer_token(&headers), Err(AuthError::MissingToken));
/// headers.insert("authorization", "bearer s3cret".parse().unwrap());
/// assert_eq!(bearer_token(&headers), Ok("s3cret"));
/// headers.insert("authorization", "Basic czNjcmV0".parse().unwrap());
/// assert_eq!(bearer_token(&headers), Err(AuthError::InvalidToken));
/// ```
pub fn bearer_token(headers: &HeaderMap) -> Result<&str, AuthError> {
    let value = headers
        .get(AUTHORIZATION)
        .ok_or(AuthError::MissingToken)?
        .to_str()
        .map_err(|_| AuthError::InvalidToken)?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::InvalidToken)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(AuthError::InvalidToken);
    }
    Ok(token)
}

/// The [`Authorizer`] of an [`AuthConfig`]: bearer tokens checked against the configured
/// hashes, grants from the configuration; or, with `disabled`, everyone is
/// [`Principal::anonymous`].
///
/// # Examples
///
/// ```
/// use axum::http::HeaderMap;
/// use durable_server::auth::{hash_token, Authorizer, TokenAuthorizer};
/// use durable_server::ServerConfig;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let text = format!(r#"
///     [[principals]]
///     name = "ops"
///     tokens_sha256 = ["{}"]
/// "#, hash_token("s3cret"));
/// let config = ServerConfig::from_toml_str(&text).unwrap();
/// let authorizer = TokenAuthorizer::new(&config.auth);
///
/// let mut headers = HeaderMap::new();
/// headers.insert("authorization", "Bearer s3cret".parse().unwrap());
/// assert_eq!(authorizer.authenticate(&headers).await.unwrap().name(), "ops");
/// headers.insert("authorization", "Bearer guess".parse().unwrap());
/// assert!(authorizer.authenticate(&headers).await.is_err());
/// # }
/// ```
pub struct TokenAuthorizer {
    disabled: bool,
    /// Every configured hash with the index of its principal.
    tokens: Vec<(TokenHash, u64)>,
    principals: Vec<Principal>,
}

impl fmt::Debug for TokenAuthorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenAuthorizer")
            .field("disabled", &self.disabled)
            .field("principals", &self.principals)
            .finish_non_exhaustive()
    }
}

impl TokenAuthorizer {
    /// The authorizer of `config`. A configuration that did not pass
    /// [`AuthConfig::validate`] still works: a token held by two principals authenticates as
    /// the last of them.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::{AuthConfig, TokenAuthorizer};
    ///
    /// let deny_all = TokenAuthorizer::new(&AuthConfig::default());
    /// # drop(deny_all);
    /// ```
    pub fn new(config: &AuthConfig) -> Self {
        let principals: Vec<Principal> = config
            .principals
            .iter()
            .map(|principal| Principal::new(principal.name.as_str(), principal.grants.clone()))
            .collect();
        let tokens = config
            .principals
            .iter()
            .zip(0_u64..)
            .flat_map(|(principal, index)| {
                principal
                    .tokens_sha256
                    .iter()
                    .map(move |hash| (*hash, index))
            })
            .collect();
        Self {
            disabled: config.disabled,
            tokens,
            principals,
        }
    }

    /// The principal holding `token`. Every configured hash is compared, in constant time,
    /// so the time taken says nothing about which hash (if any) matched.
    fn principal_of(&self, token: &str) -> Option<&Principal> {
        let presented = TokenHash::of_token(token);
        let mut found = subtle::Choice::from(0);
        let mut index = 0_u64;
        for (hash, principal) in &self.tokens {
            let equal = hash.0.ct_eq(&presented.0);
            index.conditional_assign(principal, equal);
            found |= equal;
        }
        if bool::from(found) {
            usize::try_from(index)
                .ok()
                .and_then(|index| self.principals.get(index))
        } else {
            None
        }
    }
}

#[async_trait]
impl Authorizer for TokenAuthorizer {
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthError> {
        if self.disabled {
            return Ok(Principal::anonymous());
        }
        let token = bearer_token(headers)?;
        self.principal_of(token)
            .cloned()
            .ok_or(AuthError::InvalidToken)
    }
}
