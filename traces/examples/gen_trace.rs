//! Generates large synthetic traces for the benchmark:
//! `gen_trace blktrace DIR/NAME EVENTS CPUS` writes NAME.blktrace.0..CPUS-1 (v7, little-endian);
//! `gen_trace ftrace FILE LINES` writes ftrace `trace` text of block, syscall and marker lines.
//! The mix imitates a database workload: queue, getrq, insert, issue, complete of writes
//! with sync/FUA/preflush variants, reads, flushes, discards, remaps, plugs and unplugs.
use std::io::{BufWriter, Write};

use blktrace_parse::binary::ta;
use blktrace_parse::rwbs::category as c;
use blktrace_parse::writer::{self, act, dev, RawRecord};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("blktrace") => {
            gen_blktrace(&args[2], args[3].parse().unwrap(), args[4].parse().unwrap())
        }
        Some("ftrace") => gen_ftrace(&args[2], args[3].parse().unwrap()),
        _ => {
            eprintln!("usage: gen_trace blktrace BASE EVENTS CPUS | gen_trace ftrace FILE LINES");
            std::process::exit(2);
        }
    }
}

/// Cheap deterministic pseudo-random numbers (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const WRITE_KINDS: [u32; 5] = [
    c::WRITE,
    c::WRITE | c::SYNC,
    c::WRITE | c::SYNC | c::FUA,
    c::WRITE | c::FLUSH | c::SYNC,
    c::WRITE | c::META | c::SYNC,
];

fn gen_blktrace(base: &str, events: u64, cpus: u32) {
    let d = dev(259, 0);
    let mut outs: Vec<BufWriter<std::fs::File>> = (0..cpus)
        .map(|n| {
            BufWriter::with_capacity(
                1 << 20,
                std::fs::File::create(format!("{base}.blktrace.{n}")).unwrap(),
            )
        })
        .collect();
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut buf = Vec::with_capacity(256);
    let mut seq = 0u32;
    let mut time = 1_000_000_000u64;
    for cpu in 0..cpus {
        buf.clear();
        writer::write_record(
            &mut buf,
            &writer::process_notify(time, 100 + cpu, cpu, d, &format!("sqlite-{cpu}")),
            false,
            7,
        );
        outs[cpu as usize].write_all(&buf).unwrap();
    }
    let mut written = 0u64;
    while written < events {
        let r = rng.next();
        let cpu = (r % cpus as u64) as u32;
        let pid = 100 + cpu;
        let sector = (r >> 8) % 100_000_000;
        let kind = match (r >> 40) % 20 {
            0 => c::READ,
            1 => c::FLUSH,
            2 => c::DISCARD,
            k => WRITE_KINDS[(k % 5) as usize],
        };
        let bytes = if kind == c::FLUSH {
            0
        } else {
            4096 * (1 + (r >> 50) as u32 % 8)
        };
        let sequence_of = |actions: &[(u32, u32, Vec<u8>)]| actions.len();
        let mut steps: Vec<(u32, u32, Vec<u8>)> = vec![
            (ta::QUEUE, c::QUEUE, vec![]),
            (ta::GETRQ, c::QUEUE, vec![]),
            (ta::INSERT, c::QUEUE, vec![]),
            (ta::ISSUE, c::ISSUE, vec![]),
            (ta::COMPLETE, c::COMPLETE, vec![]),
        ];
        if r % 16 == 0 {
            steps.insert(
                0,
                (
                    ta::REMAP,
                    c::QUEUE,
                    writer::remap_pdu(dev(253, 1), d, sector / 2),
                ),
            );
            steps.insert(2, (ta::PLUG, c::QUEUE, vec![]));
            steps.insert(3, (ta::UNPLUG_IO, c::QUEUE, writer::be64_pdu(1)));
        }
        let _ = sequence_of(&steps);
        for (code, cat, pdu) in steps {
            seq += 1;
            time += 50 + (rng.next() % 200);
            let no_data = code == ta::PLUG || code == ta::UNPLUG_IO;
            let rec = RawRecord {
                sequence: seq,
                time,
                sector: if no_data { 0 } else { sector },
                bytes: if no_data { 0 } else { bytes },
                action: act(code, if no_data { cat } else { cat | kind }),
                pid,
                device: d,
                cpu,
                error: 0,
                pdu,
            };
            buf.clear();
            writer::write_record(&mut buf, &rec, false, 7);
            outs[cpu as usize].write_all(&buf).unwrap();
            written += 1;
        }
    }
    for o in &mut outs {
        o.flush().unwrap();
    }
    eprintln!("wrote {written} events into {cpus} files");
}

fn gen_ftrace(path: &str, lines: u64) {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    writeln!(out, "# tracer: nop\n#\n#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n#              | |         |   |||||     |         |").unwrap();
    let mut rng = Rng(0x2545f4914f6cdd1d);
    let mut t = 7_000_000_000u64; // µs
    let rwbs = ["W", "WS", "WFS", "FWS", "R", "FF", "DS", "WSM"];
    for i in 0..lines {
        let r = rng.next();
        t += 1 + r % 50;
        let (secs, us) = (t / 1_000_000, t % 1_000_000);
        let cpu = r % 4;
        let sector = (r >> 8) % 100_000_000;
        let n = 8 * (1 + (r >> 40) % 8);
        let w = rwbs[((r >> 50) % 8) as usize];
        match i % 10 {
            0..=3 => writeln!(out, "         sqlite3-4242    [{cpu:03}] ..... {secs:5}.{us:06}: block_rq_issue: 259,0 {w} {} () {sector} + {n} be,0,4 [sqlite3]", n * 512),
            4..=7 => writeln!(out, "          <idle>-0       [{cpu:03}] d.h1. {secs:5}.{us:06}: block_rq_complete: 259,0 {w} () {sector} + {n} be,0,4 [0]"),
            8 => writeln!(out, "         sqlite3-4242    [{cpu:03}] ..... {secs:5}.{us:06}: sys_fdatasync(fd: 3)"),
            _ => writeln!(out, "         sqlite3-4242    [{cpu:03}] ...1. {secs:5}.{us:06}: tracing_mark_write: sqlwa txn_end i={i} t={t}"),
        }
        .unwrap();
    }
    out.flush().unwrap();
}
