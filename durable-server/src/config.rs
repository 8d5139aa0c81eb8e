//! The gateway's settings: defaults, and loading them from a TOML file.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::auth::{AuthConfig, PrincipalConfig, PublicEndpoint};
use crate::cluster::{ClusterSecret, ClusterSettings};

/// The gateway's settings.
///
/// Build one in code (every field is public and [`Default`] gives the defaults below), or load
/// it from TOML with [`from_toml_str`](ServerConfig::from_toml_str) / [`load`](ServerConfig::load):
///
/// ```toml
/// bind = "127.0.0.1:8080"          # default
/// call_timeout = "30s"             # default; humantime syntax
/// body_limit = 1048576             # bytes; default 1 MiB
/// shutdown_grace = "30s"           # default
/// public = ["metrics", "openapi"]  # default: none; healthz/readyz are always public
/// console = true                   # default: the operators' console under /console
///
/// [[principals]]
/// name = "ops"
/// tokens_sha256 = ["<64 hex digits>"]
///   [[principals.grants]]
///   types = ["Counter"]
///   handlers = ["*"]
///   ops = ["call", "read"]
///
/// [cluster]                        # default: none (a single node)
/// node_id = "node-1"
/// internal = "10.0.0.1:7100"       # the internal listener, for forwarded calls
/// advertise = "10.0.0.1:7100"      # default: `internal`
/// secret_env = "DURABLE_CLUSTER_SECRET"  # or secret_file = "/run/secrets/cluster"
/// shards = 1024                    # default
/// lease_ttl = "10s"                # default
/// margin = "2s"                    # default: a fifth of lease_ttl
/// drain_timeout = "5s"             # default
/// hop_limit = 2                    # default
/// ```
///
/// Authorization is deny-by-default: without principals every request but `/healthz` and
/// `/readyz` is refused, unless `auth.disabled = true` says otherwise.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_server::ServerConfig;
///
/// let config = ServerConfig::from_toml_str(r#"
///     bind = "0.0.0.0:9000"
///     call_timeout = "5s"
/// "#).unwrap();
/// assert_eq!(config.bind.port(), 9000);
/// assert_eq!(config.call_timeout, Duration::from_secs(5));
/// assert_eq!(config.body_limit, 1024 * 1024); // default
/// assert!(config.auth.principals.is_empty()); // nobody may do anything
/// ```
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Where [`serve`](crate::serve) listens. Default `127.0.0.1:8080`.
    pub bind: SocketAddr,
    /// How long a request waits for the runtime (a call, a read, a listing) before it is
    /// answered `504 timeout`. A call cut short may still commit: its outcome is unknown.
    /// Default 30 s.
    pub call_timeout: Duration,
    /// The largest request body accepted, in bytes; larger ones get `413 body_too_large`.
    /// Default 1 MiB.
    pub body_limit: usize,
    /// After a shutdown signal, how long requests in flight may take to finish before they
    /// are cut off. Default 30 s.
    pub shutdown_grace: Duration,
    /// Who may do what.
    pub auth: AuthConfig,
    /// Whether the operators' console is served under `/console`. Its files hold no data
    /// (the page asks the API with its user's token), so they are served without a token.
    /// Default `true`.
    pub console: bool,
    /// The FSM engine the `/v1/fsm` routes (and `durable fsm`) work with; without one those
    /// routes answer `404 fsm_not_enabled`. Set in code ([`ServerConfig::with_fsm`]), never
    /// from the file. Default none.
    pub fsm: Option<durable_runtime::fsm::Engine>,
    /// Cluster mode: the internal listener, its shared secret, the hop limit and the node's
    /// cluster settings (see [`cluster`](crate::cluster)). [`serve`](crate::serve) starts the
    /// internal listener when set; start the runtime with [`cluster::join`](crate::cluster::join).
    /// Default none.
    pub cluster: Option<ClusterSettings>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 8080)),
            call_timeout: Duration::from_secs(30),
            body_limit: 1024 * 1024,
            shutdown_grace: Duration::from_secs(30),
            auth: AuthConfig::default(),
            console: true,
            fsm: None,
            cluster: None,
        }
    }
}

/// Why a configuration was refused.
///
/// # Examples
///
/// ```
/// use durable_server::{ConfigError, ServerConfig};
///
/// let err = ServerConfig::from_toml_str("call_timeout = \"soon\"").unwrap_err();
/// assert!(matches!(err, ConfigError::Parse(_)));
/// assert!(err.to_string().contains("call_timeout"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the configuration file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid TOML for this configuration (an unknown key, a value of the
    /// wrong type, a token hash that is not 64 hex digits...).
    #[error("invalid configuration: {0}")]
    Parse(#[from] toml::de::Error),
    /// Two principals have the same name.
    #[error("the principal `{name}` is declared twice")]
    DuplicatePrincipal {
        /// The name.
        name: String,
    },
    /// A principal has no token, so it could never be authenticated.
    #[error("the principal `{name}` has no token")]
    NoToken {
        /// The principal.
        name: String,
    },
    /// One token hash belongs to two principals, so it would not say who is calling.
    #[error("a token of the principal `{name}` also belongs to `{other}`")]
    SharedToken {
        /// The principal.
        name: String,
        /// The other principal holding the same hash.
        other: String,
    },
    /// The cluster section is incomplete or contradicts itself: its message says what.
    #[error("invalid [cluster] section: {0}")]
    Cluster(String),
    /// A grant lists no type or no operation, so it grants nothing.
    #[error("a grant of the principal `{name}` lists no type or no operation")]
    EmptyGrant {
        /// The principal.
        name: String,
    },
}

/// The TOML layout: the auth settings sit at the top level (`public`, `[[principals]]`) and
/// under `[auth]` (`disabled`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    bind: Option<SocketAddr>,
    #[serde(default, deserialize_with = "humantime_option")]
    call_timeout: Option<Duration>,
    body_limit: Option<usize>,
    #[serde(default, deserialize_with = "humantime_option")]
    shutdown_grace: Option<Duration>,
    #[serde(default)]
    public: Vec<PublicEndpoint>,
    #[serde(default)]
    principals: Vec<PrincipalConfig>,
    #[serde(default)]
    auth: AuthSection,
    console: Option<bool>,
    cluster: Option<ClusterSection>,
}

/// `[cluster]`: see [`ServerConfig`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterSection {
    node_id: String,
    internal: SocketAddr,
    advertise: Option<String>,
    secret_env: Option<String>,
    secret_file: Option<PathBuf>,
    shards: Option<u32>,
    #[serde(default, deserialize_with = "humantime_option")]
    lease_ttl: Option<Duration>,
    #[serde(default, deserialize_with = "humantime_option")]
    margin: Option<Duration>,
    #[serde(default, deserialize_with = "humantime_option")]
    drain_timeout: Option<Duration>,
    hop_limit: Option<u32>,
}

impl ClusterSection {
    /// The settings, the secret read from its variable or file (never from the file itself:
    /// configuration files are shared and logged more freely than secrets).
    fn settings(self) -> Result<ClusterSettings, ConfigError> {
        let invalid = |message: String| Err(ConfigError::Cluster(message));
        let secret = match (&self.secret_env, &self.secret_file) {
            (Some(var), None) => match std::env::var(var) {
                Ok(secret) => secret,
                Err(_) => return invalid(format!("the variable {var} (secret_env) is not set")),
            },
            (None, Some(path)) => match std::fs::read_to_string(path) {
                Ok(secret) => secret.trim_end_matches(['\r', '\n']).to_owned(),
                Err(error) => {
                    return invalid(format!(
                        "cannot read the secret file {} (secret_file): {error}",
                        path.display()
                    ));
                }
            },
            _ => return invalid("set exactly one of secret_env and secret_file".to_owned()),
        };
        let secret = ClusterSecret::new(secret);
        if secret.is_empty() {
            return invalid("the cluster secret is empty".to_owned());
        }
        let mut settings = ClusterSettings::new(self.node_id, self.internal, secret);
        if let Some(advertise) = self.advertise {
            settings.node.advertise = advertise;
        }
        if let Some(shards) = self.shards {
            settings.node.shards = shards;
        }
        if let Some(ttl) = self.lease_ttl {
            settings.node.lease_ttl = ttl;
        }
        settings.node.margin = self.margin;
        if let Some(drain) = self.drain_timeout {
            settings.node.drain_timeout = drain;
        }
        if let Some(limit) = self.hop_limit {
            if limit == 0 {
                return invalid("hop_limit must be at least 1".to_owned());
            }
            settings.hop_limit = limit;
        }
        if let Err(error) = settings.node.validate() {
            return invalid(error.to_string());
        }
        Ok(settings)
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthSection {
    #[serde(default)]
    disabled: bool,
}

/// A duration in humantime syntax (`"30s"`, `"1m 30s"`, `"250ms"`).
fn humantime_option<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Duration>, D::Error> {
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = Option<Duration>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as \"30s\" or \"1m 30s\"")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
            humantime::parse_duration(text).map(Some).map_err(E::custom)
        }
    }
    de.deserialize_str(Visitor)
}

impl ServerConfig {
    /// The same settings, with the FSM engine the `/v1/fsm` routes work with: they insert
    /// instances of the FSMs registered with it, signal, read and list instances of its
    /// store.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::{Engine, MemoryFsmStore};
    /// use durable_server::ServerConfig;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let engine = Engine::builder(MemoryFsmStore::new()).build().unwrap();
    /// let config = ServerConfig::default().with_fsm(engine);
    /// assert!(config.fsm.is_some());
    /// # }
    /// ```
    #[must_use]
    pub fn with_fsm(mut self, engine: durable_runtime::fsm::Engine) -> Self {
        self.fsm = Some(engine);
        self
    }

    /// Parses a configuration from TOML text (see [`ServerConfig`] for the layout); keys left
    /// out keep their defaults, unknown keys are refused.
    ///
    /// # Errors
    ///
    /// [`ConfigError`]: text that does not parse, or principals that contradict each other.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::auth::{hash_token, Op};
    /// use durable_server::ServerConfig;
    ///
    /// let text = format!(r#"
    ///     [[principals]]
    ///     name = "ops"
    ///     tokens_sha256 = ["{}"]
    ///     [[principals.grants]]
    ///     types = ["*"]
    ///     ops = ["read", "list"]
    /// "#, hash_token("s3cret"));
    /// let config = ServerConfig::from_toml_str(&text).unwrap();
    /// assert_eq!(config.auth.principals[0].grants[0].ops, [Op::Read, Op::List]);
    /// ```
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let file: ConfigFile = toml::from_str(text)?;
        let defaults = Self::default();
        let config = Self {
            bind: file.bind.unwrap_or(defaults.bind),
            call_timeout: file.call_timeout.unwrap_or(defaults.call_timeout),
            body_limit: file.body_limit.unwrap_or(defaults.body_limit),
            shutdown_grace: file.shutdown_grace.unwrap_or(defaults.shutdown_grace),
            auth: AuthConfig {
                disabled: file.auth.disabled,
                public: file.public,
                principals: file.principals,
            },
            console: file.console.unwrap_or(defaults.console),
            fsm: None,
            cluster: file.cluster.map(ClusterSection::settings).transpose()?,
        };
        config.auth.validate()?;
        Ok(config)
    }

    /// Reads and parses a TOML configuration file.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Read`] if the file cannot be read, else as
    /// [`from_toml_str`](ServerConfig::from_toml_str).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::{ConfigError, ServerConfig};
    ///
    /// let err = ServerConfig::load("/nonexistent/durable.toml").unwrap_err();
    /// assert!(matches!(err, ConfigError::Read { .. }));
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{ConfigError, ServerConfig};
    use crate::auth::{Op, PublicEndpoint, hash_token};

    #[test]
    fn the_documented_layout_parses() {
        let text = format!(
            r#"
            bind = "127.0.0.1:9090"
            call_timeout = "1m 30s"
            body_limit = 2048
            shutdown_grace = "5s"
            public = ["metrics", "openapi"]
            console = false

            [auth]
            disabled = false

            [[principals]]
            name = "ops"
            tokens_sha256 = ["{}", "{}"]
              [[principals.grants]]
              types = ["Counter"]
              handlers = ["*"]
              ops = ["call", "read", "list", "delete", "alarms", "admin"]
            "#,
            hash_token("old"),
            hash_token("new"),
        );
        let config = ServerConfig::from_toml_str(&text).unwrap();
        assert_eq!(config.bind.port(), 9090);
        assert_eq!(config.call_timeout, Duration::from_secs(90));
        assert_eq!(config.body_limit, 2048);
        assert_eq!(config.shutdown_grace, Duration::from_secs(5));
        assert_eq!(
            config.auth.public,
            [PublicEndpoint::Metrics, PublicEndpoint::Openapi]
        );
        let ops = &config.auth.principals[0].grants[0].ops;
        assert_eq!(ops.len(), 6);
        assert!(ops.contains(&Op::Admin));
        assert!(!config.auth.disabled);
        assert!(!config.console);

        let open = ServerConfig::from_toml_str("auth.disabled = true").unwrap();
        assert!(open.auth.disabled);
        assert!(open.console, "the console is served unless turned off");
    }

    #[test]
    fn the_cluster_section_reads_its_secret_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "s3cret\n").unwrap();
        let text = format!(
            r#"
            [cluster]
            node_id = "n1"
            internal = "127.0.0.1:7100"
            secret_file = "{}"
            shards = 64
            lease_ttl = "2s"
            hop_limit = 3
            "#,
            path.display()
        );
        let config = ServerConfig::from_toml_str(&text).unwrap();
        let cluster = config.cluster.unwrap();
        assert!(cluster.secret.matches(b"s3cret"));
        assert_eq!(cluster.node.advertise, "127.0.0.1:7100");
        assert_eq!(cluster.node.shards, 64);
        assert_eq!(cluster.node.lease_ttl, Duration::from_secs(2));
        assert_eq!(cluster.hop_limit, 3);
        assert!(!format!("{cluster:?}").contains("s3cret"), "never printed");

        let cluster = |extra: &str| {
            ServerConfig::from_toml_str(&format!(
                "[cluster]\nnode_id = \"n1\"\ninternal = \"127.0.0.1:7100\"\n{extra}"
            ))
            .unwrap_err()
        };
        assert!(matches!(cluster(""), ConfigError::Cluster(_)));
        let missing = cluster("secret_env = \"DURABLE_TEST_SURELY_UNSET_VARIABLE\"");
        assert!(
            missing
                .to_string()
                .contains("DURABLE_TEST_SURELY_UNSET_VARIABLE")
        );
        let both = format!("secret_env = \"X\"\nsecret_file = \"{}\"", path.display());
        assert!(matches!(cluster(&both), ConfigError::Cluster(_)));
        let short = format!("secret_file = \"{}\"\nlease_ttl = \"10ms\"", path.display());
        assert!(matches!(cluster(&short), ConfigError::Cluster(_)));
    }

    #[test]
    fn inconsistent_configurations_are_refused() {
        let hash = hash_token("t");
        let parse = |text: &str| ServerConfig::from_toml_str(text).unwrap_err();
        for text in [
            "bnid = \"127.0.0.1:1\"",
            "public = [\"everything\"]",
            "call_timeout = 30",
            "[[principals]]\nname = \"x\"\ntokens_sha256 = [\"abc\"]",
            "[[principals]]\nname = \"x\"\ntokens_sha256 = []\n[[principals.grants]]\ntypes = [\"*\"]\nops = [\"fly\"]",
        ] {
            assert!(matches!(parse(text), ConfigError::Parse(_)), "{text}");
        }
        let principal = |name: &str, grants: &str| {
            format!("[[principals]]\nname = \"{name}\"\ntokens_sha256 = [\"{hash}\"]\n{grants}")
        };
        let twice = format!("{}\n{}", principal("x", ""), principal("x", ""));
        assert!(matches!(
            parse(&twice),
            ConfigError::DuplicatePrincipal { .. }
        ));
        let shared = format!("{}\n{}", principal("x", ""), principal("y", ""));
        assert!(matches!(parse(&shared), ConfigError::SharedToken { .. }));
        let empty = principal("x", "[[principals.grants]]\ntypes = []\nops = [\"call\"]");
        assert!(matches!(parse(&empty), ConfigError::EmptyGrant { .. }));
        let tokenless = "[[principals]]\nname = \"x\"\ntokens_sha256 = []";
        assert!(matches!(parse(tokenless), ConfigError::NoToken { .. }));
    }
}
