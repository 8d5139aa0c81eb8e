//! An object whose state is large enough for SQLite to store it compressed, shared by the
//! compression tests and the process they kill (`crash_child large`).

use durable_runtime::durable_object;

/// How many entries a [`Journal`] keeps: the last ones appended.
pub const KEPT: usize = 16;

/// A journal of the last [`KEPT`] entries appended, and how many were appended in all.
#[durable_object]
pub struct Journal {
    /// Entries appended in all.
    pub appended: u64,
    /// The last entries, oldest first.
    pub entries: Vec<String>,
}

#[durable_object]
impl Journal {
    /// Appends `entry`, dropping the oldest past [`KEPT`]; returns how many were appended in all.
    #[handler]
    fn handle_append(&mut self, entry: String) -> u64 {
        self.entries.push(entry);
        if self.entries.len() > KEPT {
            self.entries.remove(0);
        }
        self.appended += 1;
        self.appended
    }

    /// How many entries were appended in all.
    #[handler]
    fn handle_appended(&self) -> u64 {
        self.appended
    }
}

/// `bytes` lowercase letters that do not repeat in a pattern, from `seed`: text that compresses
/// as a real state's letters do (entropy-coded, without long repeats).
pub fn letters(bytes: usize, seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}
