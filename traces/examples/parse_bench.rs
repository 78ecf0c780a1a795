//! Times one parse → Arrow conversion and reports events/s, table size and peak memory:
//! `parse_bench FORMAT PATH...` prints one JSON line. The binary reader decodes on
//! `threads` threads (all cores; `BLKTRACE_PARSE_THREADS=N` sets it); text readers use one.
use std::time::Instant;

use blktrace_parse::{parse_paths, Format};

fn peak_rss_bytes() -> u64 {
    // VmHWM: the process's peak resident set size.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let format: Format = args.next().expect("FORMAT").parse().unwrap();
    let paths: Vec<std::path::PathBuf> = args.map(Into::into).collect();
    let start = Instant::now();
    let (table, report) = parse_paths(&paths, format, false).unwrap();
    let parsed = start.elapsed().as_secs_f64();
    let batch = blktrace_parse::arrow::to_record_batch(table).unwrap();
    let total = start.elapsed().as_secs_f64();
    let table_bytes = batch.get_array_memory_size();
    let threads = if format == Format::Blktrace {
        blktrace_parse::binary::threads_for(report.events as usize)
    } else {
        1
    };
    println!(
        "{{\"events\": {}, \"parse_s\": {:.4}, \"total_s\": {:.4}, \"events_per_s\": {:.0}, \"table_bytes\": {}, \"peak_rss_bytes\": {}, \"threads\": {}}}",
        report.events,
        parsed,
        total,
        report.events as f64 / total,
        table_bytes,
        peak_rss_bytes(),
        threads
    );
}
