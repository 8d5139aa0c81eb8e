//! Cluster mode under faults: node processes (the example `cluster_node`, built by the harness
//! on first use) on loopback ports, one fresh Postgres database per test, a lease TTL of 2 s.
//! A client drives increments and reads of `Counter` objects at random nodes, records every
//! call, and a checker judges the history (`cluster_chaos/chaos/checker.rs`: no increment
//! applied twice, no acknowledged write lost, no stale read after an acknowledged write). The
//! faults: SIGKILL, SIGSTOP/SIGCONT for three TTLs, a black-holed database connection (a TCP
//! proxy between a node and Postgres), a node joining, a node leaving on SIGTERM.
//!
//! Each scenario prints one `[chaos]` line with its figures (calls acknowledged, refused with
//! nothing applied, unknown; fenced commits; recovery time): run with `--nocapture` to see
//! them. The scenarios run one at a time.
//!
//! Sizes: CI runs small counts (the whole module in well under 3 minutes). `CHAOS_FULL=1` runs
//! the full sizes — 20,000 increments over 100 counters, 10,000 alarms:
//!
//! ```text
//! CHAOS_FULL=1 cargo test -p durable-server --test integration -- cluster_chaos:: --nocapture
//! ```
//!
//! `DATABASE_URL` names the Postgres server (default `postgres://postgres@127.0.0.1:5432/test`);
//! `CHAOS_LOG` sets the nodes' `RUST_LOG` (default `warn`), `CHAOS_VERBOSE=1` prints every
//! call with an unknown outcome. A failing scenario prints the tail of each node's log.

mod chaos;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use chaos::client::{CALL_DEADLINE, Client, Load, metric};
use chaos::cluster::{Cluster, SHARDS, TTL, one_at_a_time};
use chaos::{burst, check_history, counters_of, scaled, served_again, summary};

const COUNTERS: usize = 100;
/// How long placement may take to settle after a start, a join or a departure.
const SETTLE: Duration = Duration::from_secs(40);
/// How long a whole load run may take.
const RUN: Duration = Duration::from_secs(300);
/// How soon the objects of a frozen or cut-off node are served elsewhere: its leases end
/// within a TTL, the others take them at their next renewal (within a quarter TTL), plus 1 s
/// for the activations and the probe's reads on a loaded machine.
const RECOVERY_BOUND: Duration = Duration::from_millis(2000 + 500 + 1000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_increments_at_random_nodes() {
    let _serial = one_at_a_time().await;
    let cluster = Cluster::start(3).await;
    let owners = cluster.settled(SETTLE).await;
    let client = Client::new(cluster.addresses());
    let increments = scaled(2_000, 20_000);
    let started = Instant::now();
    // One call in ten is a read.
    Load::start(&client, COUNTERS, 16, 1, increments * 10 / 9)
        .finish(RUN)
        .await;
    let took = started.elapsed();
    let checked = check_history(&client, COUNTERS).await;
    assert_eq!(
        client.stats.unknown.load(Ordering::Relaxed),
        0,
        "no fault, no unknown outcome"
    );
    assert_eq!(client.stats.failed.load(Ordering::Relaxed), 0);

    // Exactly one activation per object: each node holds live exactly the counters of the
    // shards it owns (its `durable_live_objects` gauge), and the owners did not change.
    assert_eq!(
        cluster.shard_owners().await,
        owners,
        "placement moved without a fault"
    );
    let mut live_total = 0.0;
    for node in &cluster.nodes {
        let page = client
            .get_text(node.public, "/metrics")
            .await
            .expect("metrics");
        let live = metric(&page, "durable_live_objects", "Counter");
        let owned = counters_of(&owners, &node.id, COUNTERS).len();
        assert_eq!(
            live, owned as f64,
            "{}: live objects vs counters of its shards",
            node.id
        );
        live_total += live;
    }
    assert_eq!(
        live_total, COUNTERS as f64,
        "one activation per object cluster-wide"
    );
    summary(
        "steady state",
        &client,
        &checked,
        &format!(
            "{live_total} live objects for {COUNTERS} counters over 3 nodes; load took {took:?}"
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_an_owner_loses_no_acknowledged_write() {
    let _serial = one_at_a_time().await;
    let mut cluster = Cluster::start(3).await;
    let owners = cluster.settled(SETTLE).await;
    let client = Client::new(cluster.addresses());
    let load = Load::start(&client, COUNTERS, 12, 1, u64::MAX);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let victim = 1;
    let orphaned = counters_of(&owners, &cluster.nodes[victim].id, COUNTERS);
    let shards = owners
        .values()
        .filter(|(owner, _)| *owner == cluster.nodes[victim].id)
        .count();
    let killed_at = Instant::now();
    cluster.nodes[victim].kill();
    let live = [cluster.nodes[0].public, cluster.nodes[2].public];
    let recovered = served_again(&live, &orphaned, killed_at, Duration::from_secs(40)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    load.stop().await;

    let checked = check_history(&client, COUNTERS).await;
    let bound = TTL + Duration::from_secs(1);
    summary(
        "SIGKILL",
        &client,
        &checked,
        &format!(
            "killed the owner of {shards}/{SHARDS} shards; its {} counters served again after \
             {recovered:?} (bound {bound:?})",
            orphaned.len()
        ),
    );
    assert!(
        recovered <= bound,
        "served again after {recovered:?}, over {bound:?}"
    );
    // Calls in the gap were refused at once, retryably; none hung to its deadline.
    assert_eq!(
        client.stats.timeouts.load(Ordering::Relaxed),
        0,
        "a call hung"
    );
    let slowest = Duration::from_micros(client.stats.slowest_refusal_us.load(Ordering::Relaxed));
    assert!(slowest < CALL_DEADLINE, "a refusal took {slowest:?}");
    assert_eq!(
        client.stats.failed.load(Ordering::Relaxed),
        0,
        "a call never got through"
    );
}

/// The split brain: a node frozen past its lease with calls admitted and queued on its
/// objects (a burst of concurrent increments sent to it, its commits held for a moment by its
/// database proxy so that they queue), then thawed after three TTLs, by when other nodes
/// have taken its shards and activated its objects. Its queued calls run and their commits
/// are refused by the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_past_the_lease_gets_late_commits_fenced() {
    let _serial = one_at_a_time().await;
    let cluster = Cluster::start(3).await;
    let owners = cluster.settled(SETTLE).await;
    let client = Client::new(cluster.addresses());
    let load = Load::start(&client, COUNTERS, 12, 1, u64::MAX);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let victim = &cluster.nodes[1];
    let mine = counters_of(&owners, &victim.id, COUNTERS);
    let targets: Vec<usize> = mine.iter().copied().take(8).collect();
    victim.proxy.blackhole();
    let calls = burst(&client, victim.public, &targets, 6).await;
    // The calls reach the node and queue behind their objects' held commits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped_at = Instant::now();
    victim.stop();
    victim.proxy.heal();
    let others = vec![cluster.nodes[0].public, cluster.nodes[2].public];
    let probe = probe_recovery(others, &mine, stopped_at);
    let frozen = TTL * 3;
    tokio::time::sleep(frozen.saturating_sub(stopped_at.elapsed())).await;
    let stuck = cluster.stuck_connections().await;
    victim.resume();
    let recovered = probe.await.expect("probe");
    let resumed_at = Instant::now();
    calls.join_all().await;
    // Back from its pause, the node serves again once placement gives it shards.
    cluster.settled(SETTLE).await;
    load.stop().await;

    let page = client
        .get_text(victim.public, "/metrics")
        .await
        .expect("metrics");
    let fenced = metric(&page, "durable_fenced_commits_total", "");
    let checked = check_history(&client, COUNTERS).await;
    summary(
        "SIGSTOP",
        &client,
        &checked,
        &format!(
            "frozen {frozen:?} with {} calls in flight; {fenced} late commits fenced; its \
             counters served elsewhere after {recovered:?} (bound {RECOVERY_BOUND:?}); settled {:?} after SIGCONT; \
             connections (idle in transaction, waiting for a lock) before SIGCONT: {stuck:?}",
            targets.len() * 6,
            resumed_at.elapsed()
        ),
    );
    assert!(fenced > 0.0, "no late commit of the frozen node was fenced");
    // Its leases end at most a TTL after the freeze (a renewal the proxy held is delivered
    // at the freeze), the others take them at their next renewal (within a quarter TTL) and
    // activate its objects, whose rows a commit it left open keeps locked for at most half a
    // TTL (the nodes' idle-in-transaction timeout), well within the TTL; 1 s more for the
    // activations and the probe's reads on a loaded machine.
    let bound = RECOVERY_BOUND;
    assert!(
        recovered <= bound,
        "served elsewhere after {recovered:?}, over {bound:?}"
    );
    assert_eq!(
        client.stats.failed.load(Ordering::Relaxed),
        0,
        "a call never got through"
    );
}

/// A partition between one node and the database: its statements (commits, lease renewals)
/// are held for three TTLs, then delivered. The node stops serving at its local deadline, the
/// others take over; its held commits reach the database after the take-over and are fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackholed_database_gets_late_commits_fenced() {
    let _serial = one_at_a_time().await;
    let cluster = Cluster::start(3).await;
    let owners = cluster.settled(SETTLE).await;
    let client = Client::new(cluster.addresses());
    let load_started = Instant::now();
    let load = Load::start(&client, COUNTERS, 12, 1, u64::MAX);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let victim = &cluster.nodes[2];
    let mine = counters_of(&owners, &victim.id, COUNTERS);
    let targets: Vec<usize> = mine.iter().copied().take(8).collect();
    let cut_at = Instant::now();
    victim.proxy.blackhole();
    let calls = burst(&client, victim.public, &targets, 6).await;
    let others = vec![cluster.nodes[0].public, cluster.nodes[1].public];
    let probe = probe_recovery(others, &mine, cut_at);
    let cut = TTL * 3;
    tokio::time::sleep(cut.saturating_sub(cut_at.elapsed())).await;
    let stuck = cluster.stuck_connections().await;
    eprintln!(
        "black hole on {} ({}) from {:?} to {:?} after the load started",
        victim.id,
        victim.public,
        cut_at - load_started,
        load_started.elapsed()
    );
    victim.proxy.heal();
    let recovered = probe.await.expect("probe");
    calls.join_all().await;
    cluster.settled(SETTLE).await;
    load.stop().await;

    let page = client
        .get_text(victim.public, "/metrics")
        .await
        .expect("metrics");
    let fenced = metric(&page, "durable_fenced_commits_total", "");
    let checked = check_history(&client, COUNTERS).await;
    summary(
        "black-holed database",
        &client,
        &checked,
        &format!(
            "cut off {cut:?} with {} calls sent to it; {fenced} late commits fenced; its \
             counters served elsewhere after {recovered:?} (bound {RECOVERY_BOUND:?}); connections (idle in transaction, \
             waiting for a lock) before the heal: {stuck:?}",
            targets.len() * 6
        ),
    );
    assert!(
        fenced > 0.0,
        "no late commit of the cut-off node was fenced"
    );
    // Its leases end at most a TTL after the cut (no renewal gets through), the others take
    // them at their next renewal (within a quarter TTL) and activate its objects; a commit it
    // left open keeps their rows locked only until the database ends the transaction (the
    // nodes' idle-in-transaction timeout, half a TTL after the cut).
    let bound = RECOVERY_BOUND;
    assert!(
        recovered <= bound,
        "served elsewhere after {recovered:?}, over {bound:?}"
    );
    assert_eq!(
        client.stats.failed.load(Ordering::Relaxed),
        0,
        "a call never got through"
    );
}

/// Measures, in the background, when every counter of `counters` is served again through
/// `nodes` after `since`; 40 s at most.
fn probe_recovery(
    nodes: Vec<std::net::SocketAddr>,
    counters: &[usize],
    since: Instant,
) -> tokio::task::JoinHandle<Duration> {
    let counters = counters.to_vec();
    tokio::spawn(
        async move { served_again(&nodes, &counters, since, Duration::from_secs(40)).await },
    )
}

/// Shards by owner.
fn shards_by_owner(owners: &HashMap<u32, (String, i64)>) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for (owner, _) in owners.values() {
        *counts.entry(owner.clone()).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_node_joins_under_load_without_a_failed_call() {
    let _serial = one_at_a_time().await;
    let mut cluster = Cluster::start(3).await;
    let before = cluster.settled(SETTLE).await;
    let client = Client::new(cluster.addresses());
    let load = Load::start(&client, COUNTERS, 12, 1, u64::MAX);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let joined_at = Instant::now();
    let newcomer = cluster.add_node().await;
    client.add_node(cluster.nodes[newcomer].public);
    let after = cluster.settled(SETTLE).await;
    let settled_in = joined_at.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    load.stop().await;

    let id = &cluster.nodes[newcomer].id;
    let moved: Vec<u32> = after
        .iter()
        .filter(|(shard, (owner, _))| before.get(shard).is_none_or(|(old, _)| old != owner))
        .map(|(shard, _)| *shard)
        .collect();
    let taken = after.values().filter(|(owner, _)| owner == id).count();
    let mut handoffs = 0.0;
    let mut lost = 0.0;
    for node in &cluster.nodes {
        let page = client
            .get_text(node.public, "/metrics")
            .await
            .expect("metrics");
        handoffs += metric(&page, "durable_cluster_handoffs_total", "");
        lost += metric(&page, "durable_cluster_lost_shards_total", "");
    }
    let checked = check_history(&client, COUNTERS).await;
    summary(
        "4th node joins",
        &client,
        &checked,
        &format!(
            "{} of {SHARDS} shards moved ({taken} to the new node), {handoffs} hand-offs, \
             {lost} shards lost; settled {settled_in:?} after the start; owners {:?}",
            moved.len(),
            shards_by_owner(&after)
        ),
    );
    // Only shards going to the newcomer move, about a quarter of them, each by hand-off.
    assert_eq!(moved.len(), taken, "a shard moved between the old nodes");
    let quarter = SHARDS as usize / 4;
    assert!(
        (quarter / 2..=quarter * 2).contains(&taken),
        "{taken} shards moved"
    );
    assert_eq!(lost, 0.0, "a shard was lost instead of handed off");
    assert!(
        handoffs >= taken as f64,
        "{handoffs} hand-offs for {taken} moves"
    );
    assert_eq!(
        client.stats.unknown.load(Ordering::Relaxed),
        0,
        "a call's outcome is unknown"
    );
    assert_eq!(
        client.stats.failed.load(Ordering::Relaxed),
        0,
        "a call never got through"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_leaving_on_sigterm_fails_no_call() {
    let _serial = one_at_a_time().await;
    let mut cluster = Cluster::start(3).await;
    let before = cluster.settled(SETTLE).await;
    let client = Client::new(cluster.addresses());
    let load = Load::start(&client, COUNTERS, 12, 1, u64::MAX);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let leaving = 0;
    let id = cluster.nodes[leaving].id.clone();
    let held = before.values().filter(|(owner, _)| *owner == id).count();
    let exited_in = cluster.nodes[leaving].terminate(Duration::from_secs(30));
    let left_at = Instant::now();
    let after = cluster.settled(SETTLE).await;
    let settled_in = left_at.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    load.stop().await;

    let checked = check_history(&client, COUNTERS).await;
    summary(
        "SIGTERM",
        &client,
        &checked,
        &format!(
            "the leaving node held {held} shards, exited {exited_in:?} after SIGTERM; \
             placement settled {settled_in:?} later; owners {:?}",
            shards_by_owner(&after)
        ),
    );
    assert!(
        after.values().all(|(owner, _)| *owner != id),
        "the leaver still holds shards"
    );
    assert_eq!(
        client.stats.unknown.load(Ordering::Relaxed),
        0,
        "a call's outcome is unknown"
    );
    assert_eq!(
        client.stats.failed.load(Ordering::Relaxed),
        0,
        "a call never got through"
    );
}

/// Sets the alarm of each object `{prefix}{i}` to fire `delay` after its call, `workers`
/// calls at a time; every call must be acknowledged.
async fn set_alarms(client: &Client, prefix: &str, count: usize, delay: Duration) {
    let workers = 16;
    let tasks: Vec<_> = (0..workers)
        .map(|worker| {
            let (client, prefix) = (client.clone(), prefix.to_owned());
            tokio::spawn(async move {
                let mut rng = chaos::client::Rng::new(worker as u64 + 77);
                for i in (worker..count).step_by(workers) {
                    let at = std::time::SystemTime::now() + delay;
                    let at_ms = at
                        .duration_since(std::time::UNIX_EPOCH)
                        .expect("after 1970")
                        .as_millis();
                    let args = serde_json::json!({ "at_ms": at_ms });
                    let id = format!("{prefix}{i}");
                    let (outcome, ..) = client
                        .call_handler(&mut rng, None, &id, "fire_at", Some(&args))
                        .await;
                    assert!(
                        chaos::acknowledged(outcome),
                        "setting the alarm of {id}: {outcome:?}"
                    );
                }
            })
        })
        .collect();
    tokio::time::timeout(RUN, futures_util::future::try_join_all(tasks))
        .await
        .expect("alarms set in time")
        .expect("alarm setter");
}

/// How many times the alarm of each object `{prefix}{i}` fired, read through any node, a
/// few at a time: `None` for a read that was not acknowledged (while a killed node's shards
/// have no owner yet, a read of one may give up).
async fn fired_counts(client: &Client, prefix: &str, count: usize) -> Vec<Option<u64>> {
    use futures_util::StreamExt;
    futures_util::stream::iter(0..count)
        .map(|i| async move {
            let mut rng = chaos::client::Rng::new(99 + i as u64);
            let id = format!("{prefix}{i}");
            let (outcome, reply, ..) = client
                .call_handler(&mut rng, None, &id, "fired", None)
                .await;
            chaos::acknowledged(outcome)
                .then(|| reply.and_then(|value| value.as_u64()).expect("a count"))
        })
        .buffered(8)
        .collect()
        .await
}

/// Alarms over three nodes: each fires once, on its shard's owner (each node's count of
/// fired alarms equals the number of alarmed objects in its shards). Then alarms due while a
/// node is killed: all fire, duplicates (an alarm fired on the killed node whose completion
/// did not commit, fired again by the new owner) counted and reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarms_fire_on_their_shards_owner() {
    let _serial = one_at_a_time().await;
    let mut cluster = Cluster::start(3).await;
    let owners = cluster.settled(SETTLE).await;
    let client = Client::new(cluster.addresses());
    let count = usize::try_from(scaled(600, 10_000)).expect("count");
    let started = Instant::now();
    set_alarms(&client, "a", count, Duration::from_secs(2)).await;
    let set_in = started.elapsed();

    let fired_ok = |page: &str| metric(page, "durable_alarms_fired_total", "outcome=\"ok\"");
    let deadline = Instant::now() + RUN;
    let mut per_node = Vec::new();
    loop {
        per_node.clear();
        for node in &cluster.nodes {
            let page = client
                .get_text(node.public, "/metrics")
                .await
                .expect("metrics");
            per_node.push(fired_ok(&page));
        }
        if per_node.iter().sum::<f64>() >= count as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "alarms fired: {per_node:?} of {count}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let all_fired_in = started.elapsed();
    assert_eq!(
        cluster.shard_owners().await,
        owners,
        "placement moved without a fault"
    );
    for (node, fired) in cluster.nodes.iter().zip(&per_node) {
        let mine = (0..count)
            .filter(|i| {
                let shard = durable_runtime::cluster::shard_of("Counter", &format!("a{i}"), SHARDS);
                owners
                    .get(&shard)
                    .is_some_and(|(owner, _)| *owner == node.id)
            })
            .count();
        assert_eq!(
            *fired, mine as f64,
            "{}: alarms fired vs alarmed objects of its shards",
            node.id
        );
    }
    let fired: Vec<u64> = fired_counts(&client, "a", count)
        .await
        .into_iter()
        .enumerate()
        .map(|(i, read)| read.unwrap_or_else(|| panic!("reading a{i} without a fault failed")))
        .collect();
    let duplicates: u64 = fired.iter().map(|&n| n.saturating_sub(1)).sum();
    assert!(fired.iter().all(|&n| n >= 1), "an alarm did not fire");
    assert_eq!(duplicates, 0, "an alarm fired twice without a failover");

    // Alarms due while their owner is killed.
    let more = count / 2;
    set_alarms(&client, "b", more, Duration::from_millis(1500)).await;
    let killed_at = Instant::now();
    cluster.nodes[1].kill();
    let deadline = killed_at + Duration::from_secs(60);
    let fired_after = loop {
        let fired = fired_counts(&client, "b", more).await;
        if fired.iter().all(|read| read.is_some_and(|n| n >= 1)) {
            break fired.into_iter().flatten().collect::<Vec<u64>>();
        }
        assert!(
            Instant::now() < deadline,
            "alarms of the killed node's shards did not fire"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let failover_duplicates: u64 = fired_after.iter().map(|&n| n.saturating_sub(1)).sum();
    println!(
        "[chaos] alarms: {count} alarms set in {set_in:?}, all fired {all_fired_in:?} after the \
         first was set, by node {per_node:?} (each equal to the alarmed objects of its shards), \
         {duplicates} duplicates; {more} alarms due across a SIGKILL all fired within {:?}, \
         {failover_duplicates} duplicates; calls: {}",
        killed_at.elapsed(),
        client.stats.line()
    );
}
