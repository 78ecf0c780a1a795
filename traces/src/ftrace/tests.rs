//! The grammars together: the fast path against the general one, line by line.
use super::block::block_body;
use super::*;
use crate::table::{flags, Operation};

fn parse(text: &str) -> (EventTable, ParseReport) {
    let mut t = EventTable::new();
    let mut counts = LineCounts::default();
    for line in text.lines() {
        parse_line(line.as_bytes(), &mut t.writer(), &mut counts)
            .unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    let r = ParseReport {
        lost_events: counts.losses.total(),
        skipped_lines: counts.skipped_lines,
        ..ParseReport::default()
    };
    (t, r)
}

#[test]
fn block_tracepoints_with_and_without_ioprio() {
    let (t, _) = parse(
        "          sqlite-1234    [001] d..1.  1234.567890: block_rq_issue: 7,0 WS 4096 () 1234 + 8 be,0,4 [sqlite]\n\
         <idle>-0       [001] ..s1.  1234.567990: block_rq_complete: 7,0 WS () 1234 + 8 be,0,4 [0]\n\
         jbd2/loop0-8-77 [000] ....  1234.600000: block_rq_issue: 7,0 FF 0 () 0 + 0 [jbd2/loop0-8]\n\
         kworker/0:1-40 (     40) [000] .... 5.000001: block_rq_complete: 7,0 FWFS () 88 + 8 [-5]\n\
         dd-9 [000] 5.000002: block_bio_queue: 7,0 W 88 + 8 [dd]\n\
         dd-9 [000] 5.000003: block_plug: [dd]\n\
         dd-9 [000] 5.000004: block_unplug: [dd] 1\n\
         dd-9 [000] 5.000005: block_split: 7,0 W 88 / 96 [dd]\n\
         dd-9 [000] 5.000006: block_bio_remap: 7,0 W 88 + 8 <- (253,1) 80\n\
         dd-9 [000] 5.000007: block_dirty_buffer: 7,0 sector=12 size=4096\n",
    );
    assert_eq!(t.len(), 10);
    assert_eq!(
        (t.action_at(0), t.time_ns[0], t.cpu[0], t.pid[0]),
        (Action::Issue, 1_234_567_890_000, 1, 1234)
    );
    assert_eq!(
        (t.sector[0], t.sectors[0], t.bytes[0], t.comm_at(0)),
        (1234, 8, 4096, "sqlite")
    );
    assert_eq!(
        (t.action_at(1), t.error[1], t.comm_at(1)),
        (Action::Complete, 0, "<idle>")
    );
    assert_eq!(
        (t.operation_at(2), t.flags[2]),
        (Operation::Flush, flags::PREFLUSH)
    );
    assert_eq!(t.pid[2], 77);
    assert_eq!(
        (t.error[3], t.flags[3]),
        (-5, flags::PREFLUSH | flags::FUA | flags::SYNC)
    );
    assert_eq!(t.comm_at(3), "kworker/0:1");
    assert_eq!(t.action_at(4), Action::Queue);
    assert_eq!(t.action_at(5), Action::Plug);
    assert_eq!((t.action_at(6), t.aux_at(6)), (Action::Unplug, 1));
    assert_eq!((t.action_at(7), t.aux_at(7)), (Action::Split, 96));
    assert_eq!(t.remap_at(8), Some((253, 1, 80)));
    assert_eq!(
        (t.action_at(9), t.text_at(9)),
        (Action::OtherBlock, "7,0 sector=12 size=4096")
    );
    assert_eq!(t.name_at(0), "block_rq_issue");
}

#[test]
fn markers_syscalls_and_losses() {
    let (t, r) = parse(
        "# tracer: nop\n\
         # entries-in-buffer/entries-written: 1578/1600   #P:2\n\
         sqlwa-run-500 [001] ..... 10.000001: tracing_mark_write: sqlwa txn_begin i=3 warmup=0 t=123\n\
         sqlwa-run-500 [001] ..... 10.000002: sys_enter_fsync: fd: 0x00000003\n\
         sqlwa-run-500 [001] ..... 10.000003: sys_exit_fsync: 0x0\n\
         sqlwa-run-500 [001] ..... 10.000004: sys_enter_pwrite64: fd: 0x00000004, buf: 0x7f00, count: 0x00001000, pos: 0x00002000\n\
         sqlwa-run-500 [001] ..... 10.000005: sys_exit_unlink: 0xfffffffffffffffe\n\
         CPU:1 [LOST 42 EVENTS]\n\
         sqlwa-run-500 [001] ..... 10.000006: sched_switch: prev_comm=a\n",
    );
    assert_eq!(r.lost_events, 42);
    assert_eq!(
        (t.kind_at(0), t.name_at(0), t.text_at(0)),
        (
            RecordKind::Marker,
            "txn_begin",
            "sqlwa txn_begin i=3 warmup=0 t=123"
        )
    );
    assert_eq!(
        (t.kind_at(1), t.name_at(1), t.fd_at(1)),
        (RecordKind::SyscallEnter, "fsync", Some(3))
    );
    assert_eq!(
        (t.kind_at(2), t.ret_at(2)),
        (RecordKind::SyscallExit, Some(0))
    );
    assert_eq!((t.fd_at(3), t.aux_at(3)), (Some(4), 4096));
    assert_eq!(t.ret_at(4), Some(-2));
    assert_eq!(t.comm_at(0), "sqlwa-run");
    assert_eq!(
        (t.kind_at(5), t.name_at(5)),
        (RecordKind::Other, "sched_switch")
    );
}

#[test]
fn syscall_print_format_of_newer_kernels() {
    let (t, _) = parse(
        "         python3-21901   [001] .....  7285.608394: sys_openat(dfd: 0xffffff9c, filename: 0x7fc27dd9f4d0, flags: 0x80001, mode: 0)\n\
                  python3-21901   [001] .....  7285.608417: sys_openat -> 0x3\n\
                  python3-21901   [001] .....  7285.608437: sys_write(fd: 3, buf: 0x7fc27e0175c0, count: 0x28)\n\
                  python3-21901   (-------) [001]   7285.608439: sys_unlink -> 0xfffffffffffffffe\n",
    );
    assert_eq!(
        (t.kind_at(0), t.name_at(0), t.fd_at(0)),
        (RecordKind::SyscallEnter, "openat", None)
    );
    assert_eq!(
        (t.kind_at(1), t.name_at(1), t.ret_at(1)),
        (RecordKind::SyscallExit, "openat", Some(3))
    );
    assert_eq!(
        (t.fd_at(2), t.aux_at(2), t.text_at(2)),
        (Some(3), 0x28, "fd: 3, buf: 0x7fc27e0175c0, count: 0x28")
    );
    assert_eq!((t.name_at(3), t.ret_at(3)), ("unlink", Some(-2)));
}

/// Debian's 6.1 kernel prints syscall arguments as bare hex: SQLite's 4096-byte page
/// writes as `count: 1000` and fd 11 as `fd: b` (lines from a `sqlwa run --vm` trace, in
/// which the VFS shim counted 4096-byte writes).
#[test]
fn syscall_print_format_of_older_kernels_is_bare_hex() {
    let (t, _) = parse(
        "          python-122     [000] ...1.    21.843627: sys_pwrite64(fd: b, buf: 55c10acc4548, count: 1000, pos: 0)\n\
                   python-122     [000] ...1.    21.822521: sys_fdatasync -> 0x0\n",
    );
    assert_eq!((t.fd_at(0), t.aux_at(0)), (Some(11), 4096));
    assert_eq!(t.ret_at(1), Some(0));
}

#[test]
fn blk_tracer_lines() {
    let (t, _) = parse(
        "  kworker/0:1-40    [000] ....   123.456000:   8,0    D   W 1234 + 8 [kworker/0:1]\n\
           kworker/0:1-40    [000] ....   123.456001:   8,0    m   N cfq40 slice\n",
    );
    assert_eq!(
        (t.action_at(0), t.dev_major[0], t.sector[0]),
        (Action::Issue, 8, 1234)
    );
    assert_eq!(
        (t.kind_at(1), t.text_at(1)),
        (RecordKind::Message, "cfq40 slice")
    );
}

/// Every column of every row, with dictionary codes resolved, plus the sparse fields.
fn rows(t: &EventTable) -> Vec<String> {
    (0..t.len()).map(|i| t.row_text(i)).collect()
}

/// Each line through the fast and the general path: same verdict, same rows, same
/// dictionaries, same report.
fn assert_paths_agree(lines: &[&[u8]]) {
    let (mut fast, mut general) = (EventTable::new(), EventTable::new());
    let (mut rf, mut rg) = (LineCounts::default(), LineCounts::default());
    let mut caches = FastPath::default();
    for &line in lines {
        let a = parse_line_fast(line, &mut fast.writer(), &mut rf, &mut caches);
        let b = parse_line(line, &mut general.writer(), &mut rg);
        assert_eq!(a, b, "{}", String::from_utf8_lossy(line));
    }
    assert_eq!(rows(&fast), rows(&general));
    assert_eq!(fast.comms.values, general.comms.values);
    assert_eq!(fast.rwbs_values.values, general.rwbs_values.values);
    assert_eq!(fast.names.values, general.names.values);
    assert_eq!(rf, rg);
}

const ODD_LINES: &[&str] = &[
    "         sqlite3-4242    [003] .....  7000.000002: block_rq_issue: 259,0 FWS 4096 () 96672995 + 8 be,0,4 [sqlite3]",
    "          <idle>-0       [002] d.h1.  7000.000083: block_rq_complete: 259,0 W () 15155303 + 64 be,0,4 [0]",
    "         sqlite3-4242    [001] .....  7000.000090: sys_fdatasync(fd: 3)",
    "         sqlite3-4242    [001] ...1.  7000.000091: tracing_mark_write: sqlwa txn_end i=9 t=7000000091",
    "  kworker/u8:2-btrfs-endio-meta-123 [001] ..... 12.5: block_rq_complete: 8,16 WFS () 18446744073709551615 + 8 none,0,0 [-5]",
    "  kworker/u8:2-btrfs-endio-meta-123 [001] ..... 12.000001: block_rq_issue: 8,16 FF 0 () 0 + 0 none,0,0 [kworker/u8:2]",
    "   my task name-77 [000] .... 1.000000001: block_rq_issue: 7,0 W 4096 () 1234 + 8 [my task]",
    "   my [weird] task-77 [000] .... 1.000000001: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x]",
    "   x-7 [1] 1.1: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x]",
    "   x-7 [12345] ..... 99999.999999: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x]",
    "   x-1234567 [00012345] ..... 99999.999999: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x]",
    "   x-4294967295 [000000000012] 1.000001: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-4294967296 [000] 1.000001: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 [4294967296] 1.000001: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] 18446744073.709551615: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] 18446744074.000000000: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] 123456789012: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] 1.0000000001: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] .... 1.: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] .... .5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] ....: 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] .... 1.5:: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] \t....\t1.5:\tblock_rq_issue:\t7,0\tW\t()\t1234\t+\t8\t[x]",
    "\tx-12 [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x] ",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x] 3",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 be,0,4",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 be,0,4 rt,1,1 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 2,0,4 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 (35 00 00) 1234 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 ()1234 +8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096() 1234 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 1234 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 4294967296 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 [x]]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 []",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 [",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 ]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 1234 + 8 [a] [b]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W 4096 () 123456789012345678901 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W () 9999999999999999999 + 4294967295 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 W () 99999999999999999999 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_complete: 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_complete: 7,0 W () 1234 + 8 [-2147483649]",
    "   x-12 [000] .... 1.5: block_rq_requeue: 7,0 W () 1234 + 8 [-11]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 QQ 4096 () 1234 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0 DE 4096 () 1234 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0,1 W 4096 () 1234 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 7,0",
    "   x-12 [000] .... 1.5: block_rq_issue: 4294967296,0 W () 1 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue: 1234567890,0 W () 1 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue:",
    "   x-12 [000] .... 1.5: block_rq_issue: ",
    "   x-12 [000] .... 1.5: block_rq_complete:  7,0 W () 1234 + 8 [0]",
    "   x-12 [000] .... 1.5: block_rq_completed: 7,0 W () 1234 + 8 [0]",
    "   x-12 [000] .... 1.5: block_rq_issue:\t7,0 W () 1234 + 8 [x]",
    "   x-12 [000] .... 1.5: block_rq_issue:x 7,0 W () 1234 + 8 [x]",
    "   x-12 [000] .... 1.5: tracing_mark_write: hello",
    "   x-12 [000] .... 1.5: tracing_mark_write: sqlwa",
    "   x-12 [000] .... 1.5: tracing_mark_write:",
    "   x-12 [000] .... 1.5: tracing_mark_write: ",
    "   x-12 [000] .... 1.5: tracing_mark_writer: sqlwa x",
    "   x-12 [000] .... 1.5: block_bio_queue: 7,0 W 88 + 8 [dd]",
    "   x-12 [000] .... 1.5: block_bio_complete: 7,0 W 88 + 8 [0]",
    "   x-12 [000] .... 1.5: block_split: 7,0 W 88 / 96 [dd]",
    "   x-12 [000] .... 1.5: block_bio_remap: 7,0 W 88 + 8 <- (253,1) 80",
    "   x-12 [000] .... 1.5: block_rq_remap: 7,0 W 88 + 8 <- (253,1) 80 3",
    "   x-12 [000] .... 1.5: block_plug: [dd]",
    "   x-12 [000] .... 1.5: block_unplug: [dd] 1",
    "   x-12 [000] .... 1.5: block_dirty_buffer: 7,0 sector=12 size=4096",
    "   x-12 [000] .... 1.5: block_getrq: 7,0 RA 12934856 + 32 [bash]",
    "   x-12 [000] .... 1.5: sched_switch: prev_comm=a",
    "   x-12 [000] .... 1.5: sys_enter_pwrite64: fd: 0x00000004, buf: 0x7f00, count: 0x00001000",
    "   x-12 [000] .... 1.5: sys_exit_unlink: 0xfffffffffffffffe",
    "   x-12 [000] .... 1.5: sys_unlink -> 0xfffffffffffffffe",
    "   x-12 [000] .... 1.5: sys_read(fd: 3",
    "   x-12 [000] .... 1.5: sys_read -> zz",
    "   x-12 [000] .... 1.5: sys_read 7,0 D W 8 + 8",
    "   x-12 (     12) [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "   x-12 (-------) [000] 1.5: sys_unlink -> 0x0",
    "  kworker/0:1-40    [000] ....   123.456000:   8,0    D   W 1234 + 8 [kworker/0:1]",
    "  kworker/0:1-40    [000] ....   123.456001:   8,0    m   N cfq40 slice",
    "CPU:1 [LOST 42 EVENTS]",
    "CPU 0/KVM-1234 [001] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "# entries-in-buffer/entries-written: 1578/1600   #P:2",
    "#   x-12 [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "",
    "   ",
    "-12 [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "x- [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "x-1a [000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "x-12[000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "[000] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "x-12 [] .... 1.5: block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "x-12 [000] ....",
    "x-12 [000] .... 1.5:",
    "x-12 [000] .... 1.5:block_rq_issue: 7,0 W () 1234 + 8 [x]",
    "hello world",
];

#[test]
fn fast_and_general_paths_agree_on_odd_lines() {
    let lines: Vec<&[u8]> = ODD_LINES.iter().map(|l| l.as_bytes()).collect();
    assert_paths_agree(&lines);
    // The fast path does take the usual lines (and some odd ones).
    let takes = |single: bool| -> Vec<&str> {
        let mut t = EventTable::new();
        let mut rwbs_decoded = Decoded::default();
        ODD_LINES
            .iter()
            .filter(|l| {
                fast_header(l.as_bytes(), &mut PrefixMemo::default()).is_some_and(|h| {
                    let mut c = Cursor::new(h.rest);
                    let name = c
                        .word()
                        .and_then(|w| w.strip_suffix(b":"))
                        .unwrap_or_default();
                    c.skip_spaces();
                    let Some(action) = Action::from_tracepoint(name) else {
                        return false;
                    };
                    let read = if single {
                        block_body::<true>(c.rest()).is_some()
                    } else {
                        block_body::<false>(c.rest()).is_some()
                    };
                    read && fast_block(
                        &mut t.writer(),
                        &mut rwbs_decoded,
                        &h,
                        action,
                        name,
                        c.rest(),
                    )
                })
            })
            .copied()
            .collect()
    };
    let (any_blanks, single_spaces) = (takes(false), takes(true));
    assert!(any_blanks.len() >= 20, "{any_blanks:#?}");
    assert!(
        single_spaces.len() >= 10 && single_spaces.len() < any_blanks.len(),
        "{single_spaces:#?}"
    );
    for fast in [&any_blanks, &single_spaces] {
        assert!(
            fast.contains(&ODD_LINES[0])
                && fast.contains(&ODD_LINES[1])
                && fast.contains(&ODD_LINES[5])
        );
    }
    // And each line on its own, so one line's dictionary entries cannot hide another's.
    for line in &lines {
        assert_paths_agree(&[line]);
    }
}

#[test]
fn fast_and_general_paths_agree_on_the_samples() {
    for name in ["trace.txt", "trace-tgid-noirq.txt"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("samples/ftrace-loop-ext4")
            .join(name);
        let text = std::fs::read(path).unwrap();
        let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
        assert_paths_agree(&lines);
    }
}

/// `read` (fast path, deferred zero columns) against the general path line by line,
/// reading the sample twice into one table so the second read starts mid-table.
#[test]
fn read_matches_the_general_path_line_by_line() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/ftrace-loop-ext4/trace.txt");
    let mut mixed = ODD_LINES
        .iter()
        .filter(|l| {
            parse_line(
                l.as_bytes(),
                &mut EventTable::new().writer(),
                &mut LineCounts::default(),
            )
            .is_ok()
        })
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    mixed.push('\n');
    mixed.push_str(&std::fs::read_to_string(&path).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mixed.txt");
    std::fs::write(&file, &mixed).unwrap();
    let (mut t, mut r) = (EventTable::new(), ParseReport::default());
    read(&file, false, &mut t, &mut r).unwrap();
    read(&file, false, &mut t, &mut r).unwrap();
    let (mut g, mut rg) = (EventTable::new(), LineCounts::default());
    for _ in 0..2 {
        for line in mixed.lines() {
            parse_line(line.as_bytes(), &mut g.writer(), &mut rg).unwrap();
        }
    }
    assert!(t.error.iter().any(|&e| e != 0));
    assert_eq!((t.sequence.len(), t.error.len()), (t.len(), t.len()));
    assert_eq!(rows(&t), rows(&g));
    assert_eq!(
        (r.lost_events, r.skipped_lines),
        (rg.losses.total(), rg.skipped_lines)
    );
}

/// `n` cases, or as many as `PROPTEST_CASES` says where it is set (proptest itself reads it
/// only for tests that leave the number at its default): `./scripts/test` runs fewer
/// under valgrind.
fn proptest_cases(n: u32) -> u32 {
    std::env::var("PROPTEST_CASES").map_or(n, |v| v.parse().unwrap_or(n))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: proptest_cases(2000), .. Default::default() })]

    /// Real and odd lines with a few bytes replaced or inserted anywhere.
    #[test]
    fn fast_and_general_paths_agree_on_mangled_lines(
        picks in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<proptest::sample::Index>(), proptest::collection::vec(proptest::sample::select(b" \t0123456789-+,.:()[]<>#/aFWSx\xff".to_vec()), 0..4), proptest::prelude::any::<bool>()), 1..8)
    ) {
        let mut owned = Vec::new();
        for (line, at, junk, insert) in picks {
            let mut l = ODD_LINES[line.index(ODD_LINES.len())].as_bytes().to_vec();
            let cut = at.index(l.len() + 1);
            let end = if insert { cut } else { (cut + junk.len()).min(l.len()) };
            l.splice(cut..end, junk);
            owned.push(l);
        }
        let lines: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        assert_paths_agree(&lines);
    }
}

#[test]
fn remembered_prefixes_answer_as_the_scan_does() {
    // The usual lines with one byte changed anywhere in their first 48: starts that
    // agree up to, into and past the CPU column and the timestamp's start.
    let mut lines: Vec<Vec<u8>> = ODD_LINES.iter().map(|l| l.as_bytes().to_vec()).collect();
    for l in &ODD_LINES[..4] {
        for at in 0..48 {
            for b in [b' ', b'[', b'-', b'7', b'x', b'\t'] {
                let mut v = l.as_bytes().to_vec();
                v[at] = b;
                lines.push(v);
            }
        }
    }
    let header = |line: &[u8], memo: &mut PrefixMemo| {
        fast_header(line, memo).map(|h| (h.comm.to_vec(), h.pid, h.cpu, h.time_ns, h.rest.to_vec()))
    };
    let (mut remembered, mut hits) = (0, 0);
    for a in &lines {
        let mut memo = PrefixMemo::default();
        if header(a, &mut memo).is_none() || memo.find(a).is_none() {
            continue;
        }
        remembered += 1;
        for b in &lines {
            let hit = memo.find(b).is_some();
            // Where the remembered start answers, as the scan does; or not at all (a
            // blank more before the timestamp), leaving the line to the general path.
            let got = header(b, &mut memo.clone());
            if got.is_some() {
                assert_eq!(
                    got,
                    header(b, &mut PrefixMemo::default()),
                    "{:?} after {:?}",
                    String::from_utf8_lossy(b),
                    String::from_utf8_lossy(a)
                );
            }
            hits += (hit && got.is_some()) as usize;
        }
    }
    // Lines changed past their timestamp's start share the remembered start.
    assert!(
        hits > 3 * remembered,
        "{hits} hits for {remembered} remembered"
    );
}

#[test]
fn the_memo_keeps_the_starts_a_capture_interleaves() {
    // sqlite on four CPUs with and without a preemption-depth flag, and the idle task:
    // starts that agree in their first 32 bytes, seen in turns.
    let mut lines = Vec::new();
    for cpu in 0..4 {
        for (comm, pid, flags) in [
            ("sqlite3", 4242, "....."),
            ("sqlite3", 4242, "...1."),
            ("<idle>", 0, "d.h1."),
        ] {
            lines.push(format!("{comm:>16}-{pid:<7} [{cpu:03}] {flags}  7000.000172: block_rq_issue: 259,0 W 4096 () 8 + 8 be,0,4 [x]"));
        }
    }
    let mut memo = PrefixMemo::default();
    for line in &lines {
        assert!(fast_header(line.as_bytes(), &mut memo).is_some(), "{line}");
    }
    for line in &lines {
        assert!(memo.find(line.as_bytes()).is_some(), "forgotten: {line}");
    }
}

#[test]
fn garbage_is_an_error() {
    let mut t = EventTable::new();
    let mut r = LineCounts::default();
    assert!(parse_line(b"hello world", &mut t.writer(), &mut r).is_err());
    assert!(parse_line(
        b"x-1 [000] 1.0: block_rq_issue: 7,0 QQ 1 + 8 [x]",
        &mut t.writer(),
        &mut r
    )
    .is_err());
}

/// Older kernels (2.6.3x to 4.x) fill the block tracepoints' bytes field for passthrough
/// requests only and print 0 for every other (an Android eMMC trace of 3.x): the
/// request's bytes are then its sectors × 512, on both paths. A passthrough request keeps
/// its bytes.
#[test]
fn a_zero_bytes_field_takes_the_sectors() {
    let lines = [
        "         mmcqd/0-123   [000] ...1   100.000001: block_rq_issue: 179,0 WFS 0 () 4717976 + 8 [mmcqd/0]",
        "         mmcqd/0-123   [000] ...1   100.000002: block_rq_issue: 179,0 R 0 () 1000 + 16 [mmcqd/0]",
        "         mmcqd/0-123   [000] ...1   100.000003: block_rq_issue: 179,0 FWFS 0 () 0 + 0 [mmcqd/0]",
        "         scsi_id-77    [001] ...1   100.000004: block_rq_issue: 8,0 R 36 (12 00 00 00 24 00) 0 + 0 [scsi_id]",
    ];
    let (t, _) = parse(&lines.join("\n"));
    assert_eq!(t.bytes, [4096, 8192, 0, 36]);
    assert_eq!(t.operation_at(2), Operation::Flush);
    let as_bytes: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
    assert_paths_agree(&as_bytes);
}

/// The kernel's counts (kernel/trace/trace.c): the `trace` file's header says how many
/// events were overwritten before it was read (entries written − entries in the buffer);
/// a consuming read (`trace_pipe`) says `[LOST k EVENTS]` from the same overrun counter,
/// so a file that has both counts those events once; the `trace` file of 5.7 on says
/// `[LOST EVENTS]` (no count) for events overwritten while it was read.
#[test]
fn losses_are_counted_once() {
    let header = "# entries-in-buffer/entries-written: 1578/1600   #P:2\n";
    let pipe = "CPU:0 [LOST 15 EVENTS]\nCPU:1 [LOST 7 EVENTS]\n";
    let event = "sqlwa-run-500 [001] ..... 10.000006: sched_switch: prev_comm=a\n";
    for (text, lost) in [
        (format!("{header}{event}"), 22),
        (format!("{pipe}{event}"), 22),
        (format!("{header}{pipe}{event}"), 22),
        (format!("{header}CPU:1 [LOST EVENTS]\n{event}"), 23),
    ] {
        assert_eq!(parse(&text).1.lost_events, lost, "{text}");
    }
}

/// `perf script` prints `comm pid [cpu] time: subsystem:event: …`: refused in one line
/// that says what it is and what to capture instead, also with `lenient`.
#[test]
fn perf_script_output_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("perf.txt");
    std::fs::write(
        &path,
        "       supervise  1691 [000]     1.127413: block:block_rq_insert: 202,1 W 0 () 12263376 + 8 [supervise]\n\
         \x20        sqlite3  4242 [003]  7000.000002:          1 block:block_rq_issue: 259,0 WS 4096 () 96672995 + 8 [sqlite3]\n",
    )
    .unwrap();
    for lenient in [false, true] {
        let (mut t, mut r) = (EventTable::new(), ParseReport::default());
        let err = read(&path, lenient, &mut t, &mut r)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("perf.txt line 1: this is `perf script` output")
                && err.contains("blktrace -d"),
            "{err}"
        );
    }
    assert!(!perf_script_line(
        b"  sqlite-1234 [001] d..1. 1234.567890: block_rq_issue: 7,0 WS 4096 () 1234 + 8 [sqlite]"
    ));
}
