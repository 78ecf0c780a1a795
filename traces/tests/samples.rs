//! Every committed real sample parses completely, with the counts its origin states.
mod common;

use blktrace_parse::{parse_paths, Action, Format, Operation, RecordKind, Tally};
use common::sample;

#[test]
fn blkparse_nvme_dmcrypt_parses_completely() {
    let path = sample("blkparse-nvme-dmcrypt/nvme0n1.blktrace.txt");
    let (t, report) = parse_paths(&[path], Format::Auto, false).unwrap();
    // blkparse's own summary line: "Events (nvme0n1): 1,364 entries".
    assert_eq!(report.events, 1364);
    assert_eq!(report.bad_records, 0);
    assert_eq!(report.per_action["A"], 473);
    assert_eq!(report.per_action["Q"], 248);
    assert_eq!(report.per_action["C"], 165);
    // Its "Total (nvme0n1):" block: Writes Completed 142, 1,154KiB; Reads Completed 23
    // (the cache flushes, FN: blkparse counts what does not write as a read).
    let nvme = &report.devices[&(259, 0)];
    let writes = &nvme.completed["write"];
    assert_eq!((writes.count, writes.bytes / 1024), (142, 1154));
    assert_eq!(
        nvme.completed["flush"],
        Tally {
            count: 23,
            bytes: 0
        }
    );
    assert_eq!(nvme.completed.len(), 2);
    assert_eq!(nvme.stages["C"].count, 165);
    let fwfs = (0..t.len()).filter(|&i| t.rwbs_at(i) == "FWFS").count();
    assert!(fwfs > 0);
    assert!((0..t.len()).any(|i| t.rwbs_at(i) == "FN" && t.operation_at(i) == Operation::Flush));
}

#[test]
fn ftrace_samples_parse_completely_with_markers_and_syscalls() {
    for name in [
        "ftrace-loop-ext4/trace.txt",
        "ftrace-loop-ext4/trace-tgid-noirq.txt",
    ] {
        let (t, report) = parse_paths(&[sample(name)], Format::Auto, false).unwrap();
        assert_eq!(report.bad_records, 0, "{name}");
        assert_eq!(report.per_kind["marker"], 8, "{name}");
        assert_eq!(
            report.per_kind["syscall_enter"], report.per_kind["syscall_exit"],
            "{name}"
        );
        let fsyncs = (0..t.len())
            .filter(|&i| t.kind_at(i) == RecordKind::SyscallEnter && t.name_at(i) == "fsync")
            .count();
        assert_eq!(fsyncs, 4, "{name}");
        let issues = (0..t.len())
            .filter(|&i| t.action_at(i) == Action::Issue)
            .count();
        assert!(issues > 100, "{name}");
        let flushes = (0..t.len())
            .filter(|&i| t.action_at(i) == Action::Issue && t.operation_at(i) == Operation::Flush)
            .count();
        assert!(flushes > 0, "{name}: fsync on ext4 must show cache flushes");
    }
}

#[test]
fn both_ftrace_column_layouts_give_the_same_events() {
    let (a, _) = parse_paths(
        &[sample("ftrace-loop-ext4/trace.txt")],
        Format::Ftrace,
        false,
    )
    .unwrap();
    let (b, _) = parse_paths(
        &[sample("ftrace-loop-ext4/trace-tgid-noirq.txt")],
        Format::Ftrace,
        false,
    )
    .unwrap();
    // The second read of the buffer may have lost a few lines at its start to overwrite.
    let offset = a.len() - b.len();
    for i in 0..b.len() {
        assert_eq!(a.time_ns[i + offset], b.time_ns[i]);
        assert_eq!(a.action[i + offset], b.action[i]);
        assert_eq!(a.sector[i + offset], b.sector[i]);
        assert_eq!(a.comm_at(i + offset), b.comm_at(i));
    }
}

#[test]
fn keks_completions_per_device_match_blkparse_summary() {
    let path = sample("blktrace-keks/keks");
    let (_, report) = parse_paths(&[path], Format::Auto, false).unwrap();
    // `blkparse -i keks` (blktrace 1.2.0), "Total (keks):": Writes Completed 1158,
    // 12960KiB (its writes are every request that writes: the discards too); Reads
    // Completed 48, 0KiB (the cache flushes FN and the no-data NS requests).
    assert_eq!(report.devices.keys().collect::<Vec<_>>(), [&(8, 52)]);
    let disk = &report.devices[&(8, 52)];
    let (write, discard) = (disk.completed["write"], disk.completed["discard"]);
    assert_eq!(write.count + discard.count, 1158);
    assert_eq!((write.bytes + discard.bytes) / 1024, 12960);
    assert_eq!(
        disk.completed["flush"].count + disk.completed["none"].count,
        48
    );
    // Its Write Dispatches 1168, 13208KiB: the D stage, kept apart from what completed.
    assert_eq!(disk.stages["D"].count, 1192);
    assert_eq!(disk.stages["C"].count, 1206);
}
