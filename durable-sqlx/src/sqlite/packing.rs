//! Large states stored compressed.
//!
//! In WAL mode SQLite writes every changed page twice: to the WAL at the commit, then to the
//! database file at the checkpoint. A large state's bytes written per call are therefore about
//! twice its pages, whatever the page settings; only fewer pages per state lowers them. A state
//! of [`compress_states_from`](super::SqliteStoreBuilder::compress_states_from) bytes or more
//! is stored as a zstd frame (a BLOB in the `state` column) when that saves at least an eighth
//! of it; smaller states, and those that do not compress, stay JSON text that SQL can read.
//!
//! A stored state tells its own form: a zstd frame starts with the bytes `28 B5 2F FD`, and a
//! text state cannot (`B5` after an ASCII byte is not UTF-8, and every text state is UTF-8).
//! A frame that does not decompress is handed to the runtime as it is stored, so that the
//! object fails as undecodable while the row stays untouched, as any state that does not
//! decode.

use std::sync::Mutex;

use zstd::bulk::Compressor;

/// The first bytes of every zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// zstd's fastest regular level: large JSON states compress about as well as at the default
/// level 3 (their letters are entropy-coded either way), in less time on the commit path.
const LEVEL: i32 = 1;

/// Compresses the large states of a store's batches.
pub(super) struct Packer {
    /// The smallest state compressed, in bytes; `None`: none is.
    from: Option<usize>,
    /// One compression context, reused: batches are built one at a time per store.
    compressor: Mutex<Option<Compressor<'static>>>,
}

impl Packer {
    /// A packer compressing states of `from` bytes or more (none if `None`).
    pub(super) fn new(from: Option<usize>) -> Self {
        Self {
            from,
            compressor: Mutex::new(None),
        }
    }

    /// `state` compressed, if it is large enough to be and compressing saves an eighth of it.
    pub(super) fn pack(&self, state: &[u8]) -> Option<Vec<u8>> {
        if self.from.is_none_or(|from| state.len() < from) {
            return None;
        }
        let mut compressor = self
            .compressor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if compressor.is_none() {
            *compressor = Compressor::new(LEVEL).ok();
        }
        // A context that could not be made, or a failed compression, leaves the state as text.
        let packed = compressor.as_mut()?.compress(state).ok()?;
        (packed.len() <= state.len() - state.len() / 8).then_some(packed)
    }
}

impl std::fmt::Debug for Packer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packer")
            .field("from", &self.from)
            .finish_non_exhaustive()
    }
}

/// A stored state as the runtime reads it: decompressed if it is a zstd frame. A frame that
/// does not decompress is returned as stored (see the module's documentation).
pub(super) fn unpack(stored: Vec<u8>, object: impl FnOnce() -> String) -> Vec<u8> {
    if !stored.starts_with(&ZSTD_MAGIC) {
        return stored;
    }
    match zstd::stream::decode_all(stored.as_slice()) {
        Ok(state) => state,
        Err(error) => {
            tracing::error!(object = %object(), %error, "a stored state does not decompress; the object fails to decode and its row is kept as it is");
            stored
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JSON with varied letters, as a real state's text: compressible, but not trivially.
    fn large_state(bytes: usize) -> Vec<u8> {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let pad: String = (0..bytes)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'a' + (x % 26) as u8)
            })
            .collect();
        format!(r#"{{"pad":"{pad}"}}"#).into_bytes()
    }

    #[test]
    fn states_from_the_threshold_on_are_compressed_and_come_back_whole() {
        let packer = Packer::new(Some(16 * 1024));
        let state = large_state(64 * 1024);
        let packed = packer.pack(&state).expect("a 64 KiB state is compressed");
        assert!(packed.starts_with(&ZSTD_MAGIC));
        assert!(
            packed.len() < state.len() * 7 / 10,
            "{} bytes",
            packed.len()
        );
        assert_eq!(unpack(packed, String::new), state);
    }

    #[test]
    fn small_states_and_no_threshold_leave_the_state_as_text() {
        let state = large_state(64 * 1024);
        assert_eq!(Packer::new(None).pack(&state), None);
        assert_eq!(Packer::new(Some(state.len() + 1)).pack(&state), None);
        assert!(Packer::new(Some(state.len())).pack(&state).is_some());
        // Text passes through unchanged.
        assert_eq!(unpack(state.clone(), String::new), state);
    }

    #[test]
    fn a_state_that_does_not_compress_by_an_eighth_stays_text() {
        // Too short for a frame's header to pay for itself.
        let state = br#"{"k":"abcdefghijklmnopqrstuvwxyz"}"#;
        assert_eq!(Packer::new(Some(1)).pack(state), None);
    }

    #[test]
    fn a_frame_that_does_not_decompress_is_returned_as_stored() {
        let mut broken = Packer::new(Some(1))
            .pack(&large_state(4096))
            .expect("compressed");
        broken.truncate(broken.len() / 2);
        assert_eq!(unpack(broken.clone(), || "t/1".into()), broken);
    }
}
