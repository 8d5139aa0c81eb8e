//! The registry's key: an object's id and, while the object is dormant, what it wakes from.
//!
//! A million hibernated objects are a million map entries, so an entry is kept to three words:
//! the key is one allocation, and a dormant object's record (its last committed version, when
//! it was last used and the encoding of its last committed state) follows the id in that same
//! allocation instead of taking a second one and a wider map value. The numbers are LEB128
//! varints: a version and an uptime in milliseconds take 1 to 5 bytes instead of 16.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// An object's id, followed, for a dormant object, by its record. Hashed and compared by the
/// id alone, and borrowed as the id's bytes: the registry is looked up by `id.as_bytes()`.
pub(crate) struct Key(Box<[u8]>);

impl Key {
    /// The key of a live object: its id alone.
    pub(crate) fn new(id: &str) -> Self {
        Self(with_id(id, 0).into_boxed_slice())
    }

    /// The key of a dormant object: its id, then its last committed `version`, when it was last
    /// used (`idle_since`, in milliseconds of the runtime's uptime) and its `committed` state.
    pub(crate) fn dormant(id: &str, committed: &[u8], version: u64, idle_since: u64) -> Self {
        let record = varint_len(version) + varint_len(idle_since) + committed.len();
        let mut bytes = with_id(id, record);
        push_varint(&mut bytes, version);
        push_varint(&mut bytes, idle_since);
        bytes.extend_from_slice(committed);
        Self(bytes.into_boxed_slice())
    }

    /// Where the id starts and ends.
    fn id_range(&self) -> (usize, usize) {
        let (len, start) = read_varint(&self.0, 0);
        (start, start + len as usize)
    }

    fn id_bytes(&self) -> &[u8] {
        let (start, end) = self.id_range();
        &self.0[start..end]
    }

    /// The object's id.
    pub(crate) fn id(&self) -> &str {
        std::str::from_utf8(self.id_bytes()).expect("a key is made from a `&str` id")
    }

    /// The dormant object's record, or `None` if this is a live object's key.
    pub(crate) fn record(&self) -> Option<Record<'_>> {
        let (_, end) = self.id_range();
        if end == self.0.len() {
            return None;
        }
        let (version, at) = read_varint(&self.0, end);
        let (idle_since, at) = read_varint(&self.0, at);
        Some(Record {
            version,
            idle_since,
            committed: &self.0[at..],
        })
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As the borrowed form hashes: lookups by `&[u8]` must find the key.
        self.id_bytes().hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.id_bytes() == other.id_bytes()
    }
}

impl Eq for Key {}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.id_bytes()
    }
}

/// A dormant object's record, read from its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    /// The last committed version.
    pub(crate) version: u64,
    /// When the object was last used, in milliseconds of the runtime's uptime.
    pub(crate) idle_since: u64,
    /// The encoding of the last committed state.
    pub(crate) committed: &'a [u8],
}

/// The id's length and bytes, in a buffer with room for `record` bytes more.
fn with_id(id: &str, record: usize) -> Vec<u8> {
    let len = id.len() as u64;
    let mut bytes = Vec::with_capacity(varint_len(len) + id.len() + record);
    push_varint(&mut bytes, len);
    bytes.extend_from_slice(id.as_bytes());
    bytes
}

/// The bytes `value` takes as a LEB128 varint.
fn varint_len(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

fn push_varint(bytes: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        bytes.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    bytes.push(value as u8);
}

/// The varint at `at` and where what follows it starts. Keys are only made here, so the
/// bytes are well-formed.
fn read_varint(bytes: &[u8], mut at: usize) -> (u64, usize) {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = bytes[at];
        at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return (value, at);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::{Key, Record, varint_len};

    #[test]
    fn a_live_key_is_its_id_alone() {
        let key = Key::new("user:123");
        assert_eq!(key.id(), "user:123");
        assert_eq!(key.record(), None);
        assert_eq!(Key::new("").id(), "", "an empty id is still a key");
    }

    #[test]
    fn a_dormant_key_carries_its_record_after_the_id() {
        for (version, idle_since) in [(1, 0), (127, 128), (u64::MAX, 1 << 40)] {
            let key = Key::dormant("é/ü", br#"{"n":7}"#, version, idle_since);
            assert_eq!(key.id(), "é/ü");
            let record = Record {
                version,
                idle_since,
                committed: br#"{"n":7}"#,
            };
            assert_eq!(key.record(), Some(record));
        }
        // An empty state still makes a record: the version is never absent.
        let key = Key::dormant("a", b"", 3, 9);
        assert_eq!(key.record().map(|record| record.version), Some(3));
    }

    #[test]
    fn keys_are_equal_and_hash_alike_by_id_alone() {
        let hasher = foldhash::fast::RandomState::default();
        let live = Key::new("x");
        let dormant = Key::dormant("x", b"state", 2, 5);
        assert!(live == dormant);
        assert!(Key::new("x") != Key::new("y"));
        let by_id: &[u8] = b"x";
        assert_eq!(hasher.hash_one(&live), hasher.hash_one(&dormant));
        assert_eq!(hasher.hash_one(&live), hasher.hash_one(by_id));
    }

    #[test]
    fn a_long_id_takes_a_longer_length_prefix() {
        let id = "k".repeat(300);
        let key = Key::dormant(&id, b"s", 1, 1);
        assert_eq!(key.id(), id);
        assert_eq!(key.record().map(|record| record.committed), Some(&b"s"[..]));
    }

    #[test]
    fn varints_take_as_few_bytes_as_their_value_needs() {
        assert_eq!(varint_len(0), 1);
        assert_eq!(varint_len(127), 1);
        assert_eq!(varint_len(128), 2);
        assert_eq!(varint_len(u64::MAX), 10);
        for value in [0, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            let mut bytes = Vec::new();
            super::push_varint(&mut bytes, value);
            assert_eq!(bytes.len(), varint_len(value));
            assert_eq!(super::read_varint(&bytes, 0), (value, bytes.len()));
        }
    }
}
