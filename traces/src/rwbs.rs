//! RWBS strings: the operation + flag letters both blkparse and ftrace print.
//!
//! Dialects: blkparse prints a cache flush request as `FN` (preflush bit, no data),
//! ftrace as `FF` (preflush + the flush operation) or `F`. In both, a leading `F`
//! before the operation letter means preflush and an `F` after it means FUA.
use crate::table::{flags, Operation};

/// Operation and flag bits decoded from an RWBS string; `None` if it is not one.
pub fn parse_rwbs(s: &[u8]) -> Option<(Operation, u16)> {
    if s.is_empty() {
        return None;
    }
    let mut f = 0u16;
    let mut i = 0;
    if s[0] == b'F' && s.len() > 1 && matches!(s[1], b'W' | b'R' | b'D' | b'N' | b'F') {
        f |= flags::PREFLUSH;
        i = 1;
    }
    let mut op = match s[i] {
        b'W' => Operation::Write,
        b'R' => Operation::Read,
        b'D' => Operation::Discard,
        b'F' => Operation::Flush,
        b'N' => Operation::None,
        _ => return None,
    };
    i += 1;
    // Two-letter operations of newer kernels: `DE` secure erase, `WZ` write zeroes.
    if i < s.len() {
        match (op, s[i]) {
            (Operation::Discard, b'E') => {
                op = Operation::SecureErase;
                i += 1;
            }
            (Operation::Write, b'Z') => {
                op = Operation::WriteZeroes;
                i += 1;
            }
            _ => {}
        }
    }
    for &c in &s[i..] {
        f |= match c {
            b'F' => flags::FUA,
            b'A' => flags::READAHEAD,
            b'S' => flags::SYNC,
            b'M' => flags::META,
            _ => return None,
        };
    }
    // blkparse's `FN`: a preflush with no data is the cache flush request itself.
    if op == Operation::None && f & flags::PREFLUSH != 0 {
        op = Operation::Flush;
    }
    Some((op, f))
}

/// blktrace category bits (upper 16 bits of `action`), from blktrace_api.h.
pub mod category {
    pub const READ: u32 = 1 << 0;
    pub const WRITE: u32 = 1 << 1;
    pub const FLUSH: u32 = 1 << 2;
    pub const SYNC: u32 = 1 << 3;
    pub const QUEUE: u32 = 1 << 4;
    pub const REQUEUE: u32 = 1 << 5;
    pub const ISSUE: u32 = 1 << 6;
    pub const COMPLETE: u32 = 1 << 7;
    pub const FS: u32 = 1 << 8;
    pub const PC: u32 = 1 << 9;
    pub const NOTIFY: u32 = 1 << 10;
    pub const AHEAD: u32 = 1 << 11;
    pub const META: u32 = 1 << 12;
    pub const DISCARD: u32 = 1 << 13;
    pub const DRV_DATA: u32 = 1 << 14;
    pub const FUA: u32 = 1 << 15;
}

/// The RWBS blkparse prints for a binary record, written into `out`; returns its length.
pub fn rwbs_from_category(cat: u32, bytes: u32, out: &mut [u8; 8]) -> usize {
    let mut i = 0;
    if cat & category::FLUSH != 0 {
        out[i] = b'F';
        i += 1;
    }
    out[i] = if cat & category::DISCARD != 0 {
        b'D'
    } else if cat & category::WRITE != 0 {
        b'W'
    } else if bytes != 0 {
        b'R'
    } else {
        b'N'
    };
    i += 1;
    for (bit, letter) in [
        (category::FUA, b'F'),
        (category::AHEAD, b'A'),
        (category::SYNC, b'S'),
        (category::META, b'M'),
    ] {
        if cat & bit != 0 {
            out[i] = letter;
            i += 1;
        }
    }
    i
}

/// Operation and flags for a binary record, consistent with `parse_rwbs` of its RWBS.
pub fn decode_category(cat: u32, bytes: u32) -> (Operation, u16) {
    let mut f = 0u16;
    for (bit, flag) in [
        (category::FLUSH, flags::PREFLUSH),
        (category::FUA, flags::FUA),
        (category::AHEAD, flags::READAHEAD),
        (category::SYNC, flags::SYNC),
        (category::META, flags::META),
        (category::PC, flags::PC),
    ] {
        if cat & bit != 0 {
            f |= flag;
        }
    }
    let op = if cat & category::DISCARD != 0 {
        Operation::Discard
    } else if cat & category::WRITE != 0 {
        Operation::Write
    } else if bytes != 0 {
        Operation::Read
    } else if cat & category::FLUSH != 0 {
        Operation::Flush
    } else {
        Operation::None
    };
    (op, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_dialects_agree() {
        assert_eq!(parse_rwbs(b"FN"), Some((Operation::Flush, flags::PREFLUSH)));
        assert_eq!(parse_rwbs(b"FF"), Some((Operation::Flush, flags::PREFLUSH)));
        assert_eq!(parse_rwbs(b"F"), Some((Operation::Flush, 0)));
    }

    #[test]
    fn preflush_and_fua_are_told_apart_by_position() {
        assert_eq!(
            parse_rwbs(b"FWFS"),
            Some((Operation::Write, flags::PREFLUSH | flags::FUA | flags::SYNC))
        );
        assert_eq!(
            parse_rwbs(b"WFS"),
            Some((Operation::Write, flags::FUA | flags::SYNC))
        );
        assert_eq!(
            parse_rwbs(b"FWS"),
            Some((Operation::Write, flags::PREFLUSH | flags::SYNC))
        );
        assert_eq!(parse_rwbs(b"RA"), Some((Operation::Read, flags::READAHEAD)));
        assert_eq!(
            parse_rwbs(b"WSM"),
            Some((Operation::Write, flags::SYNC | flags::META))
        );
        assert_eq!(parse_rwbs(b"DS"), Some((Operation::Discard, flags::SYNC)));
        assert_eq!(parse_rwbs(b"DE"), Some((Operation::SecureErase, 0)));
        assert_eq!(parse_rwbs(b"WZ"), Some((Operation::WriteZeroes, 0)));
        assert_eq!(parse_rwbs(b"N"), Some((Operation::None, 0)));
        assert_eq!(parse_rwbs(b"X"), None);
        assert_eq!(parse_rwbs(b""), None);
    }

    #[test]
    fn binary_categories_round_trip_through_rwbs() {
        for cat in 0u32..(1 << 16) {
            if cat
                & (category::QUEUE
                    | category::REQUEUE
                    | category::ISSUE
                    | category::COMPLETE
                    | category::FS
                    | category::NOTIFY
                    | category::DRV_DATA
                    | category::READ
                    | category::PC)
                != 0
            {
                continue;
            }
            for bytes in [0u32, 4096] {
                let mut buf = [0u8; 8];
                let n = rwbs_from_category(cat, bytes, &mut buf);
                let parsed = parse_rwbs(&buf[..n]).unwrap();
                assert_eq!(
                    parsed,
                    decode_category(cat, bytes),
                    "cat {cat:#x} rwbs {:?}",
                    std::str::from_utf8(&buf[..n])
                );
            }
        }
    }
}
