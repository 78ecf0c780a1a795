//! Prints a parsed trace one event per line, in blkparse's `-q` column order, for eyeballing
//! and differential tests: `cargo run --example dump -- TRACE...`.
use blktrace_parse::{parse_paths, Format};

fn main() {
    let args: Vec<std::path::PathBuf> = std::env::args_os().skip(1).map(Into::into).collect();
    match parse_paths(&args, Format::Auto, false) {
        Ok((t, report)) => {
            let base = report.time_base_ns.unwrap_or(0);
            for i in 0..t.len() {
                let ns = t.time_ns[i] - base;
                println!(
                    "{},{} {} {} {}.{:09} {} {} {} {} {} [{}] err={} aux={} remap={:?} {:?} {}",
                    t.dev_major[i],
                    t.dev_minor[i],
                    t.cpu[i],
                    t.sequence[i],
                    ns / 1_000_000_000,
                    ns % 1_000_000_000,
                    t.pid[i],
                    t.action_at(i).name(),
                    t.rwbs_at(i),
                    t.sector[i],
                    t.sectors[i],
                    t.comm_at(i),
                    t.error[i],
                    t.aux_at(i),
                    t.remap_at(i),
                    t.kind_at(i),
                    t.text_at(i)
                );
            }
            eprintln!("{report:?}");
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
