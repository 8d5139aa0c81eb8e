//! A node's cluster settings, as the gateway holds them: its internal listener, the shared
//! secret, the hop limit and the runtime's [`ClusterConfig`].

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use durable_runtime::cluster::{ClusterConfig, DEFAULT_HOP_LIMIT};
use subtle::ConstantTimeEq;

/// The secret every node of a cluster shares, sent with each forwarded call and checked in
/// constant time. Never printed: its `Debug` shows `***`.
///
/// # Examples
///
/// ```
/// use durable_server::cluster::ClusterSecret;
///
/// let secret = ClusterSecret::new("s3cret");
/// assert!(secret.matches(b"s3cret"));
/// assert!(!secret.matches(b"s3cre"));
/// assert_eq!(format!("{secret:?}"), "ClusterSecret(***)");
/// ```
#[derive(Clone)]
pub struct ClusterSecret(Arc<str>);

impl ClusterSecret {
    /// A secret from its text.
    pub fn new(secret: impl Into<Arc<str>>) -> Self {
        Self(secret.into())
    }

    /// Whether `candidate` is the secret, compared in constant time.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        bool::from(self.0.as_bytes().ct_eq(candidate))
    }

    /// The secret's text, to send.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Whether it is empty (refused: any caller would know it).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(***)")
    }
}

/// A node's cluster settings in the gateway.
///
/// # Examples
///
/// ```
/// use durable_server::cluster::{ClusterSecret, ClusterSettings};
///
/// let settings = ClusterSettings::new("node-1", "127.0.0.1:7100".parse().unwrap(), ClusterSecret::new("s"));
/// assert_eq!(settings.node.advertise, "127.0.0.1:7100"); // by default, the internal address
/// assert_eq!(settings.hop_limit, 2);
/// ```
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    /// Where the internal listener (forwarded calls from other nodes) listens: an address
    /// only the nodes can reach, never the public one.
    pub internal_bind: SocketAddr,
    /// The secret all nodes share.
    pub secret: ClusterSecret,
    /// How many nodes a forwarded call may be sent to; past it the call is refused. Default
    /// [`DEFAULT_HOP_LIMIT`] (2).
    pub hop_limit: u32,
    /// The runtime's cluster settings; `advertise` is the address other nodes reach the
    /// internal listener at.
    pub node: ClusterConfig,
}

impl ClusterSettings {
    /// Defaults for node `node_id` with its internal listener on `internal_bind`, advertised
    /// at that same address.
    pub fn new(
        node_id: impl Into<String>,
        internal_bind: SocketAddr,
        secret: ClusterSecret,
    ) -> Self {
        Self {
            internal_bind,
            secret,
            hop_limit: DEFAULT_HOP_LIMIT,
            node: ClusterConfig::new(node_id, internal_bind.to_string()),
        }
    }
}
