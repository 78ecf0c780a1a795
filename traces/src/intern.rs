//! Interning: the short strings rows repeat (process names, RWBS, event, syscall and
//! marker names) kept once each, rows holding their u32 codes. Every reader interns
//! through [`Dictionary`] and keeps no map of its own from strings to codes (the binary
//! reader remembers the code of each RWBS bit pattern, where there is no string to look
//! up). The one memo in front of the dictionary's map, and [`Decoded`], are here too,
//! each with the measurement that keeps it.
use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

/// Interns short strings into u32 codes, numbered in the order they are first seen.
#[derive(Debug, Clone, Default)]
pub struct Dictionary {
    /// The interned strings, indexed by code (code 0 is the empty string in an
    /// [`crate::EventTable`]'s dictionaries).
    pub values: Vec<String>,
    /// The strings' bytes as read (a value is its lossy UTF-8 rendering). The keys come
    /// from the trace, not from an adversary that could exploit Fx's collisions for more
    /// than a slowdown.
    index: HashMap<Box<[u8]>, u32, FxBuildHasher>,
    memo: Memo,
}

impl Dictionary {
    /// `s`'s code, a new one if `s` is new.
    #[inline(always)]
    pub fn intern(&mut self, s: &[u8]) -> u32 {
        match self.code(s) {
            Some(code) => code,
            None => self.insert(s),
        }
    }

    /// `s`'s code if it has one; nothing is interned.
    #[inline(always)]
    pub fn code(&mut self, s: &[u8]) -> Option<u32> {
        let Some(key) = Key::of(s) else {
            return self.index.get(s).copied();
        };
        let slot = &mut self.memo.slots[key.slot()];
        if slot.0 != key {
            *slot = (key, *self.index.get(s)?);
        }
        Some(slot.1)
    }

    #[cold]
    fn insert(&mut self, s: &[u8]) -> u32 {
        let code = self.values.len() as u32;
        self.values.push(String::from_utf8_lossy(s).into_owned());
        self.index.insert(s.into(), code);
        code
    }

    /// The string of `code`; panics on a code the dictionary never gave out.
    pub fn get(&self, code: u32) -> &str {
        &self.values[code as usize]
    }

    /// Drops the value of `code`, which no row may hold any more; the last value takes
    /// its code. Returns that last value's old code (rows holding it must be given
    /// `code`), or None when `code` was the last.
    pub fn swap_remove(&mut self, code: u32) -> Option<u32> {
        let last = self.values.len() as u32 - 1;
        self.index.retain(|_, c| *c != code);
        self.values.swap_remove(code as usize);
        self.memo = Memo::default();
        if code == last {
            return None;
        }
        for c in self.index.values_mut().filter(|c| **c == last) {
            *c = code;
        }
        Some(last)
    }
}

/// What a dictionary's strings decode to (an RWBS string's operation and flags), worked
/// out once per code. Measured on the parse bench's ftrace text (8 RWBS strings in random
/// order): decoding every line's anew mispredicts 1.4 branches a line more (callgrind's
/// branch simulation: 5.49 against 4.08 M on 1 M lines; 1 239 against 1 211 instructions a
/// line) and took 2% (fastest) to 9% (median) more CPU time in 14 interleaved runs.
#[derive(Debug, Clone)]
pub(crate) struct Decoded<T>(Vec<Option<T>>);

impl<T> Default for Decoded<T> {
    fn default() -> Self {
        Decoded(Vec::new())
    }
}

impl<T: Copy> Decoded<T> {
    /// What `s`, of dictionary code `code` if it has one, decodes to: remembered from an
    /// earlier call for the same code, else `decode(s)` (remembered where it has a code
    /// and decodes).
    #[inline(always)]
    pub(crate) fn get(
        &mut self,
        code: Option<u32>,
        s: &[u8],
        decode: impl FnOnce(&[u8]) -> Option<T>,
    ) -> Option<T> {
        let Some(code) = code else {
            return decode(s);
        };
        let i = code as usize;
        if let Some(&Some(v)) = self.0.get(i) {
            return Some(v);
        }
        let v = decode(s)?;
        if i >= self.0.len() {
            self.0.resize(i + 1, None);
        }
        self.0[i] = Some(v);
        Some(v)
    }
}

/// The codes of recently looked-up short strings, in front of the map: a trace repeats a
/// few dozen strings line after line, and ftrace's reader looks up three a line (process,
/// RWBS, event name). Measured on the parse bench's ftrace text (10 M lines, one core, 20
/// interleaved runs): the map alone (hash, probe, memcmp call) took 13% more user time,
/// fastest and median alike; callgrind, 1 298 against 1 211 instructions a line.
#[derive(Debug, Clone)]
struct Memo {
    slots: Box<[(Key, u32); 1 << MEMO_BITS]>,
}

/// log2 of the memo's slots: room for the few dozen strings of a trace with few
/// collisions, small enough to stay in the L1 cache beside the rows.
const MEMO_BITS: u32 = 6;

impl Default for Memo {
    fn default() -> Self {
        Memo {
            slots: Box::new([(Key::NONE, 0); 1 << MEMO_BITS]),
        }
    }
}

/// A byte string of up to 24 bytes as three words and its length: equal keys, equal
/// strings, compared without a memcmp call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key([u64; 3], usize);

impl Key {
    /// Matches no string.
    const NONE: Key = Key([0; 3], usize::MAX);

    #[inline(always)]
    fn of(s: &[u8]) -> Option<Key> {
        let n = s.len();
        let w = |i: usize| u64::from_le_bytes(s[i..i + 8].try_into().expect("eight bytes"));
        Some(match n {
            0 => Key([0; 3], 0),
            // Overlapping loads that together cover every byte once or twice (with the
            // same value): the string's bytes as one word, first byte lowest.
            1..=3 => Key(
                [
                    s[0] as u64
                        | (s[n / 2] as u64) << (8 * (n / 2))
                        | (s[n - 1] as u64) << (8 * (n - 1)),
                    0,
                    0,
                ],
                n,
            ),
            4..=7 => {
                let word = |i: usize| {
                    u32::from_le_bytes(s[i..i + 4].try_into().expect("four bytes")) as u64
                };
                Key([word(0) | word(n - 4) << (8 * (n - 4)), 0, 0], n)
            }
            8..=16 => Key([w(0), w(n - 8), 0], n),
            17..=24 => Key([w(0), w(8), w(n - 8)], n),
            _ => return None,
        })
    }

    #[inline(always)]
    fn slot(&self) -> usize {
        spread(
            self.0[0] ^ self.0[1].rotate_left(21) ^ self.0[2].rotate_left(42) ^ self.1 as u64,
            MEMO_BITS,
        )
    }
}

/// The top `bits` bits of `h` mixed: multiplied, folded and multiplied again, so that keys
/// differing in a bit or two (`W` and `WS`, one CPU digit, one flag) still differ there. A
/// single multiply leaves such differences out of the top bits.
#[inline(always)]
pub(crate) fn spread(h: u64, bits: u32) -> usize {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let h = h.wrapping_mul(K);
    ((h ^ (h >> 32)).wrapping_mul(K) >> (64 - bits)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_the_strings_bytes() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s: Vec<u8> = (0..(x % 8) as usize)
                .map(|k| (x >> (8 * k)) as u8)
                .collect();
            let mut word = [0u8; 8];
            word[..s.len()].copy_from_slice(&s);
            assert!(
                Key::of(&s) == Some(Key([u64::from_le_bytes(word), 0, 0], s.len())),
                "{s:?}"
            );
        }
    }

    /// Codes by first sight, whatever the memo holds: strings of every length class
    /// (beyond 24 bytes the memo is passed by), repeated, colliding or not.
    #[test]
    fn codes_are_first_sight_order() {
        let strings: Vec<Vec<u8>> = (0..300usize)
            .map(|i| {
                (0..i % 40)
                    .map(|k| b'a' + ((i * 7 + k) % 26) as u8)
                    .collect()
            })
            .collect();
        let mut d = Dictionary::default();
        let mut want: Vec<&[u8]> = Vec::new();
        for round in 0..3 {
            for s in strings.iter().skip(round) {
                let code = match want.iter().position(|w| w == s) {
                    Some(c) => c,
                    None => {
                        want.push(s);
                        want.len() - 1
                    }
                };
                assert_eq!(d.intern(s), code as u32, "{s:?}");
            }
        }
        assert_eq!(d.values.len(), want.len());
    }
}
