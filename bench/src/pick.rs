//! How callers and baselines pick objects at random: xorshift, cheap enough not to show in
//! the figures, and seeded so that every run picks the same sequence.

/// Picks indexes below a bound, from a xorshift generator started at `seed` (made odd, as
/// xorshift needs a nonzero state).
pub(crate) struct Picker(u64);

impl Picker {
    /// A picker started at `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    /// The picker of caller number `caller`: callers spread their seeds over the whole range.
    pub(crate) fn for_caller(caller: u64) -> Self {
        Self::new(caller.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// The next index below `below` (which must not be 0).
    pub(crate) fn below(&mut self, below: usize) -> usize {
        let seed = &mut self.0;
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed % below as u64) as usize
    }
}
