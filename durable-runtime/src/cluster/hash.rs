//! The two stable hashes of cluster mode: which shard an object belongs to, and which node a
//! shard prefers. Both must give the same answer in every process of every version, so they are
//! spelled out here rather than taken from `std` (whose hasher is seeded per process).

/// FNV-1a, 64 bits: offset basis and prime.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over `bytes`, continuing from `hash`.
fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// SplitMix64's finalizer: spreads FNV's weak low bits over the whole word before a modulo.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The shard of the object `id` of type `object_type` among `shards` shards.
///
/// The hash is FNV-1a (64 bits) over the type's UTF-8 bytes, one `0xff` byte (which UTF-8
/// never contains, so `("ab", "c")` and `("a", "bc")` differ) and the id's bytes, then
/// SplitMix64's finalizer, modulo `shards`. It is part of the storage format of a cluster:
/// every node computes it the same way, and changing it moves every object.
///
/// # Panics
///
/// If `shards` is zero.
///
/// # Examples
///
/// ```
/// use durable_runtime::cluster::shard_of;
///
/// let shard = shard_of("Counter", "user:1", 1024);
/// assert!(shard < 1024);
/// // Stable: the same in every process and every release.
/// assert_eq!(shard, shard_of("Counter", "user:1", 1024));
/// assert_eq!(shard_of("Counter", "a", 1024), 860);
/// ```
pub fn shard_of(object_type: &str, id: &str, shards: u32) -> u32 {
    assert!(shards > 0, "a cluster has at least one shard");
    let hash = fnv1a(FNV_OFFSET, object_type.as_bytes());
    let hash = fnv1a(hash, &[0xff]);
    let hash = mix(fnv1a(hash, id.as_bytes()));
    // The remainder is below `shards`, a u32.
    u32::try_from(hash % u64::from(shards)).unwrap_or(0)
}

/// The rendezvous (highest random weight) score of `node` for `shard`: the node with the
/// highest score among the live nodes is the shard's preferred owner.
fn score(node: &str, shard: u32) -> u64 {
    let hash = fnv1a(FNV_OFFSET, node.as_bytes());
    mix(fnv1a(hash, &shard.to_le_bytes()))
}

/// The preferred owner of `shard` among `nodes`, by rendezvous hashing: each node scores each
/// shard with a stable hash, and the highest score wins (ties, which take a hash collision, go
/// to the smallest node id). When a node joins or leaves, only the shards it wins or won change
/// hands, about `1 / nodes` of them.
///
/// # Examples
///
/// ```
/// use durable_runtime::cluster::preferred_node;
///
/// let nodes = ["a", "b", "c"];
/// let owner = preferred_node(nodes.iter().copied(), 7).unwrap();
/// assert!(nodes.contains(&owner));
/// assert_eq!(preferred_node(std::iter::empty::<&str>(), 7), None);
/// ```
pub fn preferred_node<'a>(nodes: impl IntoIterator<Item = &'a str>, shard: u32) -> Option<&'a str> {
    nodes
        .into_iter()
        .map(|node| (score(node, shard), std::cmp::Reverse(node)))
        .max()
        .map(|(_, std::cmp::Reverse(node))| node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_spread_evenly() {
        let shards = 64;
        let mut counts = vec![0u32; shards as usize];
        for i in 0..64_000 {
            counts[shard_of("Counter", &format!("id-{i}"), shards) as usize] += 1;
        }
        // 1000 expected per shard; a fair hash stays well within ±20 %.
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn the_type_is_part_of_the_key() {
        let spread: std::collections::HashSet<u32> = (0..100)
            .map(|i| shard_of(&format!("T{i}"), "same-id", 1024))
            .collect();
        assert!(spread.len() > 80);
        assert_ne!(shard_of("ab", "c", 1 << 30), shard_of("a", "bc", 1 << 30));
    }

    #[test]
    fn rendezvous_moves_only_the_joiners_share() {
        let before = ["n1", "n2", "n3"];
        let after = ["n1", "n2", "n3", "n4"];
        let mut moved = 0;
        for shard in 0..1024 {
            let old = preferred_node(before, shard).unwrap();
            let new = preferred_node(after, shard).unwrap();
            if old != new {
                // Only to the new node, never between old ones.
                assert_eq!(new, "n4");
                moved += 1;
            }
        }
        // About a quarter.
        assert!((180..330).contains(&moved), "{moved}");
    }
}
