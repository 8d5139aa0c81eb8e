//! The lease loop: every `lease_ttl / 4` a node renews its leases (one statement), forgets
//! the shards it did not keep, reads the cluster, acquires the free shards rendezvous hashing
//! gives it, and hands off the ones another live node prefers. On shutdown it keeps its leases
//! while its objects finish, then releases them all.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{
    ACQUISITIONS, ClusterConfig, ClusterError, ClusterView, Forwarder, HANDOFFS, LEASE_RENEWALS,
    LOST_SHARDS, Node, OWNED_SHARDS, ShardTable, preferred_node,
};
use crate::Runtime;
use crate::object::handle::Shared;
use crate::storage::Storage;

/// How often a draining hand-off or shutdown looks at its objects again.
const DRAIN_POLL: Duration = Duration::from_millis(10);

/// Joins the cluster: checks the configuration and the shard count, fences the store with a
/// new shard table, registers the node, takes its first shards, and starts the lease loop.
pub(crate) async fn join(
    storage: &dyn Storage,
    config: ClusterConfig,
    forwarder: Option<Arc<dyn Forwarder>>,
    build: impl FnOnce() -> Runtime,
) -> Result<Runtime, ClusterError> {
    config.validate()?;
    let backend = storage.cluster_backend().ok_or(ClusterError::Unsupported)?;
    backend.prepare(config.shards).await?;
    let table = Arc::new(ShardTable::new(config.shards));
    // Attached before the runtime starts its alarm scheduler: it claims nothing until the
    // node holds shards.
    backend.attach(Arc::clone(&table))?;
    let generation = backend.register(&config.node_id, &config.advertise).await?;
    let runtime = build();
    let node = Arc::new(Node {
        config,
        table,
        backend,
        generation,
        handing_off: Default::default(),
        forwarder,
    });
    runtime
        .inner
        .cluster
        .set(Arc::clone(&node))
        .map_err(|_| ClusterError::AlreadyAttached)?;
    let mut state = LoopState::default();
    tick(&runtime, &node, &mut state, false).await;
    runtime.spawn_task(run(
        Arc::downgrade(&runtime.inner),
        node,
        state,
        runtime.shutdown_token(),
    ));
    Ok(runtime)
}

/// What the loop remembers between ticks.
#[derive(Default)]
struct LoopState {
    /// The shards held after the previous tick.
    held: HashSet<u32>,
}

async fn run(
    runtime: Weak<Shared>,
    node: Arc<Node>,
    mut state: LoopState,
    shutdown: CancellationToken,
) {
    let every = node.config.renew_every();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(every) => {}
        }
        let Some(rt) = Runtime::upgrade(&runtime) else {
            return;
        };
        tick(&rt, &node, &mut state, false).await;
    }
    let Some(rt) = Runtime::upgrade(&runtime) else {
        return;
    };
    leave(&rt, &node, &mut state).await;
}

/// Graceful leave: keep the leases while the objects finish their calls (the runtime's
/// shutdown closed them), then release every shard and mark the node left.
async fn leave(runtime: &Runtime, node: &Node, state: &mut LoopState) {
    let started = Instant::now();
    let mut renewed = Instant::now();
    while runtime.live_in_shards(&node.table, None) > 0
        && started.elapsed() < node.config.drain_timeout
    {
        if renewed.elapsed() >= node.config.renew_every() {
            tick(runtime, node, state, true).await;
            renewed = Instant::now();
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
    let held = node.table.held();
    for &(shard, _) in &held {
        node.table.drain(shard);
    }
    if let Err(error) = node.backend.release(&node.config.node_id, &held).await {
        tracing::warn!(%error, "could not release the node's shards; they free up when their leases end");
    } else {
        metrics::counter!(HANDOFFS).increment(held.len() as u64);
    }
    for (shard, epoch) in held {
        node.table.lose(shard, epoch);
    }
    owned_shards(node, 0);
    if let Err(error) = node
        .backend
        .leave(&node.config.node_id, node.generation)
        .await
    {
        tracing::warn!(%error, "could not mark the node as left");
    }
}

/// One round: renew, forget what was lost, look, acquire, hand off. `leaving`: renew only.
async fn tick(runtime: &Runtime, node: &Node, state: &mut LoopState, leaving: bool) {
    let config = &node.config;
    let table = &node.table;
    let valid_for = config.lease_ttl.saturating_sub(config.margin());
    let held = table.held();
    if !held.is_empty() || !leaving {
        // Measured before sending: the database's lease starts later than this.
        let sent = Instant::now();
        match node
            .backend
            .renew(&config.node_id, node.generation, &held, config.lease_ttl)
            .await
        {
            Ok(renewed) => {
                metrics::counter!(LEASE_RENEWALS).increment(renewed.len() as u64);
                let renewed: HashSet<u32> = renewed.into_iter().collect();
                for &(shard, epoch) in &held {
                    if renewed.contains(&shard) {
                        table.extend(shard, epoch, sent + valid_for);
                    } else if table.lose(shard, epoch) {
                        tracing::warn!(shard, epoch, "shard lease lost: another node took it over");
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "could not renew the shard leases; each stops serving at its local deadline");
            }
        }
    }
    // Forget the objects of every shard no longer held (not renewed, fenced by a newer owner
    // as the store found, or handed off): their state may be stale from now on.
    let now_held: HashSet<u32> = table.held().into_iter().map(|(shard, _)| shard).collect();
    let dropped: HashSet<u32> = state.held.difference(&now_held).copied().collect();
    if !dropped.is_empty() {
        let lost = {
            let mut handing_off = lock(&node.handing_off);
            let lost = dropped.difference(&handing_off).count();
            handing_off.retain(|shard| !dropped.contains(shard));
            lost
        };
        metrics::counter!(LOST_SHARDS).increment(lost as u64);
        runtime.close_shards(table, &dropped);
    }
    state.held = now_held;
    // Also here: a tick that cannot read the cluster below still reports its losses.
    owned_shards(node, state.held.len());
    if leaving {
        return;
    }
    let view = match node.backend.view(config.lease_ttl).await {
        Ok(view) => view,
        Err(error) => {
            tracing::warn!(%error, "could not read the cluster's shards");
            return;
        }
    };
    table.set_owners(owners_of(&view));
    let me = config.node_id.as_str();
    let mut live: Vec<&str> = view
        .nodes
        .iter()
        .filter(|n| n.live && n.status == "up")
        .map(|n| n.node_id.as_str())
        .collect();
    if !live.contains(&me) {
        live.push(me);
    }
    let mut wanted = Vec::new();
    let mut hand_off = Vec::new();
    for row in &view.shards {
        let preferred = preferred_node(live.iter().copied(), row.shard);
        let holds = state.held.contains(&row.shard);
        if !holds && row.free && (preferred == Some(me) || row.orphaned) {
            wanted.push(row.shard);
        } else if holds && preferred.is_some_and(|p| p != me) && !table.is_draining(row.shard) {
            hand_off.push(row.shard);
        }
    }
    if !wanted.is_empty() {
        let sent = Instant::now();
        match node
            .backend
            .acquire(&config.node_id, &wanted, config.lease_ttl)
            .await
        {
            Ok(acquired) => {
                metrics::counter!(ACQUISITIONS).increment(acquired.len() as u64);
                for (shard, epoch) in acquired {
                    table.hold(shard, epoch, sent + valid_for);
                    state.held.insert(shard);
                }
            }
            Err(error) => tracing::warn!(%error, "could not acquire shards"),
        }
    }
    if !hand_off.is_empty() {
        start_hand_off(runtime, node, hand_off);
    }
    owned_shards(node, state.held.len());
}

/// Sets the gauge of the shards `node` holds (labelled by node: several nodes may share a
/// process, in tests).
fn owned_shards(node: &Node, held: usize) {
    metrics::gauge!(OWNED_SHARDS, "node" => node.config.node_id.clone()).set(held as f64);
}

/// The owner's address of every shard in `view` (`None`: free, or its owner unknown).
pub(crate) fn owners_of(view: &ClusterView) -> Arc<[Option<Arc<str>>]> {
    let addresses: HashMap<&str, &str> = view
        .nodes
        .iter()
        .map(|n| (n.node_id.as_str(), n.address.as_str()))
        .collect();
    let mut address_of: HashMap<&str, Arc<str>> = HashMap::new();
    view.shards
        .iter()
        .map(|row| {
            let owner = row.owner.as_deref().filter(|_| !row.free)?;
            let address = addresses.get(owner)?;
            Some(Arc::clone(
                address_of
                    .entry(address)
                    .or_insert_with(|| Arc::from(*address)),
            ))
        })
        .collect()
}

/// Hands `shards` off in the background: stop admitting their calls, let their objects finish
/// (their replies wait for their commits, so finishing is flushing), then release them.
fn start_hand_off(runtime: &Runtime, node: &Node, shards: Vec<u32>) {
    let shards: HashSet<u32> = {
        let mut handing_off = lock(&node.handing_off);
        shards
            .into_iter()
            .filter(|&shard| handing_off.insert(shard))
            .collect()
    };
    if shards.is_empty() {
        return;
    }
    for &shard in &shards {
        node.table.drain(shard);
    }
    let Some(node) = runtime.cluster_node().map(Arc::clone) else {
        return;
    };
    let rt = runtime.clone();
    runtime.spawn_task(async move {
        rt.close_shards(&node.table, &shards);
        let started = Instant::now();
        while rt.live_in_shards(&node.table, Some(&shards)) > 0
            && started.elapsed() < node.config.drain_timeout
        {
            tokio::time::sleep(DRAIN_POLL).await;
        }
        let held: Vec<(u32, u64)> = node
            .table
            .held()
            .into_iter()
            .filter(|(shard, _)| shards.contains(shard))
            .collect();
        match node.backend.release(&node.config.node_id, &held).await {
            Ok(()) => {
                metrics::counter!(HANDOFFS).increment(held.len() as u64);
                for (shard, epoch) in held {
                    node.table.lose(shard, epoch);
                }
            }
            Err(error) => {
                // Still held: serve them again; a later tick tries the hand-off again.
                tracing::warn!(%error, "could not release handed-off shards");
                let mut handing_off = lock(&node.handing_off);
                for shard in &shards {
                    node.table.undrain(*shard);
                    handing_off.remove(shard);
                }
            }
        }
        // A released shard leaves `handing_off` at the next tick, which sees it dropped and
        // does not count it as lost.
    });
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
