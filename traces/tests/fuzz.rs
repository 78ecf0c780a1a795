//! Never a panic: arbitrary bytes, mangled real lines and well-framed records with random
//! fields go through all three readers, strict and lenient. Bounded by the case counts.
mod common;

use blktrace_parse::table::MAX_TIME_NS;
use blktrace_parse::writer::{self, RawRecord};
use blktrace_parse::{parse_paths, Format};
use common::{proptest_cases, sample, Scratch};
use proptest::prelude::*;

fn parse_all_ways(dir: &Scratch, bytes: &[u8]) {
    let path = dir.join("case.blktrace.0");
    std::fs::write(&path, bytes).unwrap();
    for format in [
        Format::Auto,
        Format::Blktrace,
        Format::Blkparse,
        Format::Ftrace,
    ] {
        for lenient in [false, true] {
            // Errors are fine; panics are not. Lenient mode only fails on I/O errors.
            let result = parse_paths(std::slice::from_ref(&path), format, lenient);
            if let Ok((table, _)) = &result {
                // Readers compute with times as signed 64-bit integers.
                assert!(
                    table.time_ns.iter().all(|&t| t <= MAX_TIME_NS),
                    "{format:?}"
                );
            }
            if lenient && format != Format::Auto {
                assert!(
                    result.is_ok(),
                    "lenient {format:?} failed: {:?}",
                    result.err()
                );
            }
        }
    }
}

fn sample_lines() -> Vec<String> {
    let mut lines = Vec::new();
    for name in [
        "ftrace-loop-ext4/trace.txt",
        "blkparse-nvme-dmcrypt/nvme0n1.blktrace.txt",
    ] {
        let text = std::fs::read_to_string(sample(name)).unwrap();
        lines.extend(text.lines().take(400).map(str::to_string));
    }
    lines
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(300), .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let dir = Scratch::new("fuzz-bytes");
        parse_all_ways(&dir, &bytes);
    }

    #[test]
    fn mangled_real_lines(picks in proptest::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), proptest::collection::vec(any::<u8>(), 0..6)), 1..20)) {
        let lines = sample_lines();
        let mut text = Vec::new();
        for (line, at, junk) in picks {
            let mut l = lines[line.index(lines.len())].clone().into_bytes();
            let cut = at.index(l.len() + 1);
            l.splice(cut..(cut + junk.len()).min(l.len()), junk);
            text.extend_from_slice(&l);
            text.push(b'\n');
        }
        let dir = Scratch::new("fuzz-lines");
        parse_all_ways(&dir, &text);
    }

    #[test]
    fn framed_records_with_random_fields(
        records in proptest::collection::vec((any::<u32>(), any::<u64>(), any::<u32>(), any::<u32>(), any::<u16>(), proptest::collection::vec(any::<u8>(), 0..40)), 1..30),
        big_endian in any::<bool>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = Vec::new();
        for (action, time, device, pid, error, pdu) in records {
            let r = RawRecord { action, time, device, pid, error, pdu, sector: time.rotate_left(7), bytes: action, ..Default::default() };
            writer::write_record(&mut bytes, &r, big_endian, 7);
        }
        let dir = Scratch::new("fuzz-records");
        parse_all_ways(&dir, &bytes);
        let cut = cut.index(bytes.len());
        parse_all_ways(&dir, &bytes[..cut]);
    }
}
