//! The binary reader against blkparse itself: same events, same order, same fields.
//! blkparse's text output is read back with this crate's blkparse reader (which has its
//! own tests against hand-written lines), then compared field by field.
mod common;

use std::path::PathBuf;

use blktrace_parse::binary::ta;
use blktrace_parse::rwbs::category as c;
use blktrace_parse::table::EventTable;
use blktrace_parse::writer::{self, act, dev, RawRecord};
use blktrace_parse::{parse_paths, Format};
use common::*;

fn compare_with_blkparse_text(
    binary_paths: Vec<PathBuf>,
    blkparse_text: &[u8],
    dir: &std::path::Path,
) {
    let (ours, report) = parse_paths(&binary_paths, Format::Blktrace, false).unwrap();
    let text_path = dir.join("blkparse-q.txt");
    std::fs::write(&text_path, blkparse_text).unwrap();
    let (theirs, _) = parse_paths(&[text_path], Format::Blkparse, false).unwrap();
    assert_same(
        &shown(&ours, report.time_base_ns.unwrap_or(0), true),
        &shown(&theirs, 0, false),
    );
}

#[test]
fn keks_matches_blkparse() {
    let keks: Vec<PathBuf> = (0..8)
        .map(|n| sample(&format!("blktrace-keks/keks.blktrace.{n}")))
        .collect();
    let dir = Scratch::new("keks");
    for p in &keks {
        std::fs::copy(p, dir.join(p.file_name().unwrap())).unwrap();
    }
    // Reference: live blkparse when installed, else its recorded output.
    let reference = run_blkparse(&dir, "keks")
        .unwrap_or_else(|| std::fs::read(sample("blktrace-keks/keks.blkparse-q.txt")).unwrap());
    compare_with_blkparse_text(keks, &reference, &dir);
    let (t, report) = parse_paths(&[dir.join("keks")], Format::Auto, false).unwrap();
    assert_eq!(report.events, 2398);
    assert_eq!(t.len(), 2398);
}

/// Every action, every RWBS flag and every payload kind, spread over two CPUs and two
/// devices, in the given byte order.
fn synthetic_records(cpu: u32) -> Vec<RawRecord> {
    let d = dev(8, 16);
    let dm = dev(253, 2);
    let pid = 1000 + cpu;
    let mut time = 1_000_000 + cpu as u64 * 7;
    let mut seq = 0;
    let mut out = vec![writer::process_notify(
        time,
        pid,
        cpu,
        d,
        &format!("worker{cpu}"),
    )];
    let mut rec = |ta_code: u32, cats: u32, sector: u64, bytes: u32, pdu: Vec<u8>, device: u32| {
        time += 1_000 + (seq as u64 % 3) * 333;
        seq += 1;
        RawRecord {
            sequence: seq,
            time,
            sector,
            bytes,
            action: act(ta_code, cats),
            pid,
            device,
            cpu,
            error: 0,
            pdu,
        }
    };
    let mut v = Vec::new();
    let data_categories = [
        c::WRITE,
        c::READ,
        c::WRITE | c::SYNC,
        c::WRITE | c::FUA,
        c::WRITE | c::FLUSH | c::FUA | c::SYNC,
        c::READ | c::AHEAD,
        c::WRITE | c::META | c::SYNC,
        c::DISCARD,
        c::DISCARD | c::SYNC,
    ];
    for (k, &cats) in data_categories.iter().enumerate() {
        let s = 1000 * (k as u64 + 1);
        v.push(rec(ta::QUEUE, cats | c::QUEUE, s, 4096, vec![], d));
        v.push(rec(ta::BACKMERGE, cats | c::QUEUE, s + 8, 4096, vec![], d));
        v.push(rec(ta::FRONTMERGE, cats | c::QUEUE, s - 8, 4096, vec![], d));
        v.push(rec(ta::GETRQ, cats | c::QUEUE, s, 4096, vec![], d));
        v.push(rec(ta::SLEEPRQ, cats | c::QUEUE, s, 4096, vec![], d));
        v.push(rec(ta::INSERT, cats | c::QUEUE, s, 8192, vec![], d));
        v.push(rec(ta::ISSUE, cats | c::ISSUE, s, 8192, vec![], d));
        v.push(rec(ta::REQUEUE, cats | c::REQUEUE, s, 8192, vec![], d));
        v.push(rec(ta::COMPLETE, cats | c::COMPLETE, s, 8192, vec![], d));
        v.push(rec(ta::BOUNCE, cats | c::QUEUE, s, 4096, vec![], d));
    }
    // A cache flush (FN), plugs, splits, remaps, an error completion.
    v.push(rec(ta::ISSUE, c::FLUSH | c::ISSUE, 0, 0, vec![], d));
    let mut failed = rec(ta::COMPLETE, c::WRITE | c::COMPLETE, 64, 4096, vec![], d);
    failed.error = (-5i16) as u16;
    v.push(failed);
    v.push(rec(ta::PLUG, c::QUEUE, 0, 0, vec![], d));
    v.push(rec(ta::UNPLUG_IO, c::QUEUE, 0, 0, writer::be64_pdu(3), d));
    v.push(rec(
        ta::UNPLUG_TIMER,
        c::QUEUE,
        0,
        0,
        writer::be64_pdu(7),
        d,
    ));
    v.push(rec(
        ta::SPLIT,
        c::WRITE | c::QUEUE,
        4000,
        8192,
        writer::be64_pdu(4008),
        d,
    ));
    v.push(rec(
        ta::REMAP,
        c::WRITE | c::QUEUE,
        5000,
        4096,
        writer::remap_pdu(dm, d, 77),
        d,
    ));
    let last = v.last().unwrap().time;
    v.push(writer::message(
        last + 500,
        pid,
        cpu,
        d,
        &format!("message from cpu {cpu}"),
    ));
    out.extend(v);
    out
}

fn write_trace(dir: &std::path::Path, base: &str, big_endian: bool, cgroup: bool) -> Vec<PathBuf> {
    (0..2)
        .map(|cpu| {
            let mut bytes = Vec::new();
            for r in synthetic_records(cpu) {
                // blkparse 1.2 does not skip the cgroup prefix before U/X/A payloads, so the
                // prefix goes only on records whose payload it does not read.
                let plain_payload = r.pdu.is_empty() && r.action >> 16 & c::NOTIFY == 0;
                let r = if cgroup && plain_payload {
                    writer::with_cgroup(r, 0x1234_5678_9abc, big_endian)
                } else {
                    r
                };
                writer::write_record(&mut bytes, &r, big_endian, 7);
            }
            let path = dir.join(format!("{base}.blktrace.{cpu}"));
            std::fs::write(&path, bytes).unwrap();
            path
        })
        .collect()
}

fn synthetic_case(name: &str, big_endian: bool, cgroup: bool) {
    let dir = Scratch::new(name);
    let paths = write_trace(&dir, "synth", big_endian, cgroup);
    let (t, report) = parse_paths(&[dir.join("synth")], Format::Auto, false).unwrap();
    assert_eq!(report.notify_records, 2);
    assert_eq!(t.len(), 2 * (9 * 10 + 8));
    assert!(t.comms.values.iter().any(|c| c == "worker1"));
    if cgroup {
        // blkparse 1.2 prints no record that has the cgroup bit ("Bad fs action"), so the
        // reference here is the same trace without cgroup ids.
        assert!(t
            .sparse
            .cgroup_id
            .0
            .iter()
            .any(|&(_, id)| id == 0x1234_5678_9abc));
        let plain_dir = Scratch::new(&format!("{name}-plain"));
        write_trace(&plain_dir, "synth", big_endian, false);
        let (plain, plain_report) =
            parse_paths(&[plain_dir.join("synth")], Format::Auto, false).unwrap();
        assert_same(
            &shown(&t, report.time_base_ns.unwrap(), true),
            &shown(&plain, plain_report.time_base_ns.unwrap(), true),
        );
    } else if let Some(text) = run_blkparse(&dir, "synth") {
        compare_with_blkparse_text(paths, &text, &dir);
    }
}

#[test]
fn synthetic_little_endian_matches_blkparse() {
    synthetic_case("synth-le", false, false);
}

#[test]
fn synthetic_big_endian_matches_blkparse() {
    synthetic_case("synth-be", true, false);
}

#[test]
fn synthetic_with_cgroup_ids_matches_blkparse() {
    synthetic_case("synth-cg", false, true);
}

#[test]
fn files_of_every_format_in_one_parse_keep_their_own_rows() {
    // Text files are appended in the order given (each through its own row writer, their
    // text after the previous file's), binary files merged and appended after them.
    let ftrace = sample("ftrace-loop-ext4/trace.txt");
    let blkparse = sample("blkparse-nvme-dmcrypt/nvme0n1.blktrace.txt");
    // A binary trace with remaps, unplug depths, messages and cgroup ids: sparse fields
    // whose rows the append moves past the text files' rows.
    let dir = Scratch::new("every-format");
    let binary = write_trace(&dir, "synth", false, true);
    let alone = |paths: &[std::path::PathBuf]| {
        let (t, _) = parse_paths(paths, Format::Auto, false).unwrap();
        (0..t.len()).map(|i| t.row_text(i)).collect::<Vec<_>>()
    };
    let mut want = alone(std::slice::from_ref(&ftrace));
    want.extend(alone(std::slice::from_ref(&blkparse)));
    want.extend(alone(std::slice::from_ref(&ftrace)));
    let binary_rows = alone(&binary);
    let base = want.len();
    want.extend(binary_rows);
    let all: Vec<std::path::PathBuf> = [ftrace.clone(), blkparse, ftrace]
        .into_iter()
        .chain(binary)
        .collect();
    let got = alone(&all);
    assert_eq!(got.len(), want.len());
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        panic!("row {i}: {} vs {}", got[i], want[i]);
    }
    assert!(
        want[base..].iter().any(|r| r.contains("Some(("))
            && want[base..].iter().any(|r| !r.contains(" aux0 ")),
        "binary remap and aux rows"
    );
    assert!(
        want[base..].iter().any(|r| !r.contains(" cg0 "))
            && want[..base].iter().any(|r| r.contains("Marker")),
        "cgroup and marker rows"
    );
}

#[test]
fn per_process_statistics_of_blkparse_s_are_skipped() {
    let dir = Scratch::new("keks-s");
    for n in 0..8 {
        let name = format!("keks.blktrace.{n}");
        std::fs::copy(sample(&format!("blktrace-keks/{name}")), dir.join(&name)).unwrap();
    }
    let Some(with_stats) = run_blkparse_args(&dir, &["-q", "-s", "-i", "keks"]) else {
        return;
    };
    let plain = run_blkparse(&dir, "keks").unwrap();
    let read_text = |name: &str, text: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        parse_paths(&[path], Format::Blkparse, false).unwrap()
    };
    let (stats, report) = read_text("s.txt", &with_stats);
    let (events, _) = read_text("q.txt", &plain);
    assert_same(&shown(&stats, 0, false), &shown(&events, 0, false));
    assert!(report.skipped_lines > 0 && report.events == 2398);
}

/// Per-CPU files whose clocks disagree (CPU 1's second record 4 ms before the first record
/// of all) and pids no process-notify record names, as blkparse itself prints them: the
/// wrapped time unwrapped to the binary files' own.
#[test]
fn wrapped_times_and_unnamed_pids_as_blkparse_prints_them() {
    let dir = Scratch::new("wrapped");
    let d = dev(8, 0);
    let issue = |sequence: u32, time: u64, sector: u64, pid: u32, cpu: u32| RawRecord {
        sequence,
        time,
        sector,
        bytes: 4096,
        action: act(ta::ISSUE, c::WRITE | c::ISSUE),
        pid,
        device: d,
        cpu,
        ..Default::default()
    };
    let cpus = [
        [
            issue(1, 10_000_000, 8, 1, 0),
            issue(2, 20_000_000, 16, 1, 0),
        ],
        [issue(1, 5_000_000, 24, 2, 1), issue(2, 1_000_000, 32, 2, 1)],
    ];
    for (cpu, records) in cpus.iter().enumerate() {
        let mut bytes = Vec::new();
        for r in records {
            writer::write_record(&mut bytes, r, false, 7);
        }
        std::fs::write(dir.join(format!("w.blktrace.{cpu}")), bytes).unwrap();
    }
    let (binary, binary_report) = parse_paths(&[dir.join("w")], Format::Auto, false).unwrap();
    assert!((0..binary.len()).all(|i| binary.comm_at(i).is_empty()));
    let Some(text) = run_blkparse(&dir, "w") else {
        return;
    };
    let path = dir.join("w.txt");
    std::fs::write(&path, &text).unwrap();
    let printed = String::from_utf8_lossy(&text);
    assert!(printed.contains(" 1266874889.705551616 ") && printed.contains("[(null)]"));
    // Unwrapped, the text's events are the binary files' (whose times count from the
    // earliest record, as blkparse counts them): in time order, the same requests at the
    // same times.
    let (t, report) = parse_paths(&[path], Format::Blkparse, false).unwrap();
    let in_time_order = |t: &EventTable, base: u64| {
        let mut rows: Vec<_> = (0..t.len())
            .map(|i| (t.time_ns[i] - base, t.sector[i], t.cpu[i]))
            .collect();
        rows.sort();
        rows
    };
    assert_eq!(t.len(), 4);
    let base = binary_report.time_base_ns.unwrap();
    assert_eq!(in_time_order(&t, 0), in_time_order(&binary, base));
    assert_eq!(
        in_time_order(&t, 0).iter().map(|r| r.0).collect::<Vec<_>>(),
        [0, 4_000_000, 9_000_000, 19_000_000]
    );
    assert_eq!(
        (report.unwrapped_times, report.time_shift_ns),
        (1, 4_000_000)
    );
    assert!((0..t.len()).all(|i| t.comm_at(i).is_empty()));
}
