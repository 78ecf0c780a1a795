//! Interning: the short strings rows repeat (process names, RWBS, event, syscall and
//! marker names) kept once each, rows holding their u32 codes. Every reader interns
//! through [`Dictionary`]; no reader keeps a cache of codes of its own.
use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

/// Interns short strings into u32 codes, numbered in the order they are first seen.
#[derive(Debug, Clone, Default)]
pub struct Dictionary {
    pub values: Vec<String>,
    /// The strings' bytes as read (a value is its lossy UTF-8 rendering). The keys come
    /// from the trace, not from an adversary that could exploit Fx's collisions for more
    /// than a slowdown.
    index: HashMap<Box<[u8]>, u32, FxBuildHasher>,
}

impl Dictionary {
    /// `s`'s code, a new one if `s` is new.
    #[inline]
    pub fn intern(&mut self, s: &[u8]) -> u32 {
        match self.index.get(s) {
            Some(&code) => code,
            None => self.insert(s),
        }
    }

    #[cold]
    fn insert(&mut self, s: &[u8]) -> u32 {
        let code = self.values.len() as u32;
        self.values.push(String::from_utf8_lossy(s).into_owned());
        self.index.insert(s.into(), code);
        code
    }

    pub fn get(&self, code: u32) -> &str {
        &self.values[code as usize]
    }
}
