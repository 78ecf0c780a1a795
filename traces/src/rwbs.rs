//! RWBS strings: the operation + flag letters both blkparse and ftrace print.
//!
//! Every letter the kernel's `blk_fill_rwbs` (kernel/trace/blktrace.c) and blkparse's
//! `fill_rwbs` have printed, in their order: an optional `F` (preflush, 2.6.37 on), the
//! operation (`W` `R` `D` `N`; `F` a flush request and `DE` a secure erase from 4.8;
//! `ZA` zone append, `ZR` `ZRA` `ZF` `ZO` `ZC` zone management from 6.x), then the flags:
//! `F` FUA, `A` readahead, `B` barrier (before 2.6.37), `S` sync, `M` metadata, `E` secure
//! (2.6.36 to 4.7, after the others), `U` atomic (REQ_ATOMIC, 6.11 on).
//!
//! Dialects: blkparse prints a cache flush request as `FN` (preflush bit, no data),
//! ftrace as `FF` (preflush + the flush operation) or `F`. In both, a leading `F`
//! before the operation letter means preflush and an `F` after it means FUA. The barrier
//! of older kernels (`WBS`) flushed the cache before its write, as a preflush does now.
use crate::table::{flags, Operation};

/// Operation and flag bits decoded from an RWBS string; `None` if it is not one.
pub(crate) fn parse_rwbs(s: &[u8]) -> Option<(Operation, u16)> {
    let (mut f, rest) = match s {
        [b'F', next, ..] if starts_operation(*next) => (flags::PREFLUSH, &s[1..]),
        _ => (0, s),
    };
    let (mut op, letters) = operation(rest)?;
    for &c in letters {
        f |= match c {
            b'F' => flags::FUA,
            b'A' => flags::READAHEAD,
            b'B' => flags::PREFLUSH,
            b'S' => flags::SYNC,
            b'M' => flags::META,
            b'U' => flags::ATOMIC,
            // REQ_SECURE: only ever set on discards, which some kernels printed as `W`.
            b'E' if matches!(op, Operation::Discard | Operation::Write) => {
                op = Operation::SecureErase;
                0
            }
            _ => return None,
        };
    }
    // blkparse's `FN`: a preflush with no data is the cache flush request itself.
    if rest.first() == Some(&b'N') && f & flags::PREFLUSH != 0 {
        op = Operation::Flush;
    }
    Some((op, f))
}

/// Whether `c` can begin an operation, so that an `F` before it is a preflush.
fn starts_operation(c: u8) -> bool {
    matches!(c, b'W' | b'R' | b'D' | b'N' | b'F' | b'Z')
}

/// The operation at the start of `s` and the flag letters after it.
fn operation(s: &[u8]) -> Option<(Operation, &[u8])> {
    Some(match s {
        [b'D', b'E', rest @ ..] => (Operation::SecureErase, rest),
        [b'W', b'Z', rest @ ..] => (Operation::WriteZeroes, rest),
        // Zone append writes data; the other zone operations move none.
        [b'Z', b'A', rest @ ..] => (Operation::Write, rest),
        [b'Z', b'R', b'A', rest @ ..] => (Operation::None, rest),
        [b'Z', b'R' | b'F' | b'O' | b'C', rest @ ..] => (Operation::None, rest),
        [b'W', rest @ ..] => (Operation::Write, rest),
        [b'R', rest @ ..] => (Operation::Read, rest),
        [b'D', rest @ ..] => (Operation::Discard, rest),
        [b'F', rest @ ..] => (Operation::Flush, rest),
        [b'N', rest @ ..] => (Operation::None, rest),
        _ => return None,
    })
}

/// The operation of a request that moves `bytes` bytes and whose RWBS decoded to
/// `(op, flags)`: a write that asks for a preflush and carries no data is the cache
/// flush alone (the empty barrier `WBS` of kernels before 2.6.37, the empty `FWS` of
/// 2.6.37 to 4.7).
pub(crate) fn sized_operation(op: Operation, f: u16, bytes: u64) -> Operation {
    if op == Operation::Write && f & flags::PREFLUSH != 0 && bytes == 0 {
        Operation::Flush
    } else {
        op
    }
}

/// blktrace category bits (upper 16 bits of `action`), from blktrace_api.h.
pub mod category {
    /// The request reads.
    pub const READ: u32 = 1 << 0;
    /// The request writes.
    pub const WRITE: u32 = 1 << 1;
    /// A cache flush (preflush).
    pub const FLUSH: u32 = 1 << 2;
    /// A synchronous request.
    pub const SYNC: u32 = 1 << 3;
    /// Queueing events.
    pub const QUEUE: u32 = 1 << 4;
    /// Requeue events.
    pub const REQUEUE: u32 = 1 << 5;
    /// Issue events.
    pub const ISSUE: u32 = 1 << 6;
    /// Completion events.
    pub const COMPLETE: u32 = 1 << 7;
    /// A filesystem request.
    pub const FS: u32 = 1 << 8;
    /// A passthrough (SCSI) command.
    pub const PC: u32 = 1 << 9;
    /// A notify record (process name, timestamp, message), not an event.
    pub const NOTIFY: u32 = 1 << 10;
    /// Readahead.
    pub const AHEAD: u32 = 1 << 11;
    /// Filesystem metadata.
    pub const META: u32 = 1 << 12;
    /// A discard.
    pub const DISCARD: u32 = 1 << 13;
    /// Driver data.
    pub const DRV_DATA: u32 = 1 << 14;
    /// Forced unit access.
    pub const FUA: u32 = 1 << 15;
}

/// The RWBS blkparse prints for a binary record, written into `out`; returns its length.
pub(crate) fn rwbs_from_category(cat: u32, bytes: u32, out: &mut [u8; 8]) -> usize {
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

/// Operation and flags for a binary record, consistent with `parse_rwbs` of its RWBS
/// and `sized_operation` of its bytes.
pub(crate) fn decode_category(cat: u32, bytes: u32) -> (Operation, u16) {
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
    (sized_operation(op, f, bytes as u64), f)
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

    /// A request as the kernel's `blk_fill_rwbs` sees it: the operation's letters, what
    /// sqlwa calls that operation, and the flags.
    type Request = (&'static str, Operation, [bool; 6]);

    const OPS_6X: [(&str, Operation); 11] = [
        ("W", Operation::Write),
        ("D", Operation::Discard),
        ("DE", Operation::SecureErase),
        ("F", Operation::Flush),
        ("R", Operation::Read),
        ("ZA", Operation::Write),
        ("ZR", Operation::None),
        ("ZRA", Operation::None),
        ("ZF", Operation::None),
        ("ZO", Operation::None),
        ("ZC", Operation::None),
    ];

    /// Every request of every operation and flag set of `ops`, except the few whose
    /// strings the kernel prints alike (a flush operation with FUA reads as preflush, a
    /// zone operation with readahead as another zone operation).
    fn requests(ops: &[(&'static str, Operation)]) -> Vec<Request> {
        let mut out = Vec::new();
        for &(letters, op) in ops {
            for bits in 0..64u32 {
                let set: [bool; 6] = std::array::from_fn(|k| bits >> k & 1 != 0);
                let [_, fua, ahead, ..] = set;
                if (letters == "F" && fua) || (letters.starts_with('Z') && ahead) {
                    continue;
                }
                out.push((letters, op, set));
            }
        }
        out
    }

    /// The flags column of a request's flag set (preflush, FUA, readahead, sync, meta,
    /// atomic).
    fn flag_bits(set: [bool; 6]) -> u16 {
        [
            flags::PREFLUSH,
            flags::FUA,
            flags::READAHEAD,
            flags::SYNC,
            flags::META,
            flags::ATOMIC,
        ]
        .iter()
        .zip(set)
        .filter(|&(_, on)| on)
        .fold(0, |f, (&bit, _)| f | bit)
    }

    /// `blk_fill_rwbs` of kernels 6.11 on (kernel/trace/blktrace.c, torvalds/linux
    /// 04678e72e95f): `F` for a preflush, the operation, then `F` `A` `S` `M` `U`.
    fn kernel_6x(letters: &str, [preflush, fua, ahead, sync, meta, atomic]: [bool; 6]) -> String {
        let flag = |on: bool, c: &'static str| if on { c } else { "" };
        [
            flag(preflush, "F"),
            letters,
            flag(fua, "F"),
            flag(ahead, "A"),
            flag(sync, "S"),
            flag(meta, "M"),
            flag(atomic, "U"),
        ]
        .concat()
    }

    /// `blk_fill_rwbs` of 2.6.30 to 2.6.36: the operation (`W` `D` `R` `N`), then `A`,
    /// `B` for a barrier (which flushed the cache before the write, as a preflush does
    /// now), `S`, `M`, and from 2.6.36 `E` for a secure discard.
    fn kernel_2_6_3x(letters: &str, [barrier, _, ahead, sync, meta, secure]: [bool; 6]) -> String {
        let flag = |on: bool, c: &'static str| if on { c } else { "" };
        [
            letters,
            flag(ahead, "A"),
            flag(barrier, "B"),
            flag(sync, "S"),
            flag(meta, "M"),
            flag(secure, "E"),
        ]
        .concat()
    }

    #[test]
    fn every_string_of_kernels_6x_reads_back_as_its_request() {
        for (letters, op, set) in requests(&OPS_6X) {
            let rwbs = kernel_6x(letters, set);
            assert_eq!(
                parse_rwbs(rwbs.as_bytes()),
                Some((op, flag_bits(set))),
                "{rwbs}"
            );
        }
    }

    #[test]
    fn every_string_of_kernels_2_6_3x_reads_back_as_its_request() {
        let ops = [
            ("W", Operation::Write),
            ("D", Operation::Discard),
            ("R", Operation::Read),
        ];
        for (letters, op, set) in requests(&ops) {
            let [barrier, fua, ahead, sync, meta, secure] = set;
            if fua || (secure && op == Operation::Read) {
                continue; // no FUA letter then; REQ_SECURE only on discards
            }
            let rwbs = kernel_2_6_3x(letters, set);
            let op = if secure { Operation::SecureErase } else { op };
            let want = flag_bits([barrier, false, ahead, sync, meta, false]);
            assert_eq!(parse_rwbs(rwbs.as_bytes()), Some((op, want)), "{rwbs}");
        }
    }

    /// blktrace_api.h's BLK_TC_BARRIER became BLK_TC_FLUSH, the same bit (1 << 2): the
    /// record old blkparse printed `WBS` is the one blkparse 1.2 prints `FWS`.
    #[test]
    fn a_barrier_is_the_bit_blkparse_now_prints_as_preflush() {
        let cat = category::WRITE | category::FLUSH | category::SYNC;
        let mut buf = [0u8; 8];
        let n = rwbs_from_category(cat, 4096, &mut buf);
        assert_eq!(&buf[..n], b"FWS");
        assert_eq!(parse_rwbs(b"WBS"), parse_rwbs(b"FWS"));
        assert_eq!(parse_rwbs(b"WBS"), Some(decode_category(cat, 4096)));
    }

    #[test]
    fn an_empty_barrier_or_preflush_write_is_the_flush_alone() {
        for rwbs in ["WBS", "WB", "FWS"] {
            let (op, f) = parse_rwbs(rwbs.as_bytes()).unwrap();
            assert_eq!(
                (sized_operation(op, f, 0), sized_operation(op, f, 4096)),
                (Operation::Flush, Operation::Write),
                "{rwbs}"
            );
        }
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
                let (op, f) = parse_rwbs(&buf[..n]).unwrap();
                assert_eq!(
                    (sized_operation(op, f, bytes as u64), f),
                    decode_category(cat, bytes),
                    "cat {cat:#x} rwbs {:?}",
                    std::str::from_utf8(&buf[..n])
                );
            }
        }
    }
}
