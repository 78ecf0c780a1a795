//! Cost of the counting VFS shim: commits/s of `mobibench-insert` with synchronous=OFF
//! with and without the shim, in interleaved repetitions (so drift in machine load hits
//! both equally). Run it on tmpfs (see bench/shim_overhead.sh) so the device does not
//! hide the CPU cost. Usage: shim_overhead DIR [TXNS] [REPS]

use std::path::{Path, PathBuf};

use sqlwa_workloads::{run, JournalMode, RunSettings, Scenario, SyncMode};

/// CPU time of this thread (user + system), in ns: unlike wall time, barely disturbed by
/// other processes competing for the cores.
fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

struct Sample {
    commits_per_s: f64,
    cpu_us_per_commit: f64,
}

fn measure(dir: &Path, journal: JournalMode, count_vfs: bool, txns: u64) -> Sample {
    let scenario = Scenario::builtin("mobibench-insert").expect("built-in scenario");
    let settings = RunSettings {
        journal,
        sync: SyncMode::Off,
        txns: Some(txns),
        warmup: Some(100),
        count_vfs,
        ..Default::default()
    };
    let cpu_start = thread_cpu_ns();
    let out = run(&scenario, &settings, dir, None, &mut |_| true).unwrap_or_else(|e| panic!("{e}"));
    let cpu_ns = thread_cpu_ns() - cpu_start;
    let measured: Vec<_> = out.commits.iter().filter(|c| !c.warmup).collect();
    let span_ns = measured.last().unwrap().end_ns - measured.first().unwrap().start_ns;
    Sample {
        commits_per_s: measured.len() as f64 / (span_ns as f64 / 1e9),
        // whole run (setup and warm-up included: negligible next to 20k commits)
        cpu_us_per_commit: cpu_ns as f64 / 1e3 / out.commits.len() as f64,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let base = PathBuf::from(
        args.get(1)
            .map(String::as_str)
            .unwrap_or("/dev/shm/sqlwa-shim-bench"),
    );
    let txns: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(7);
    println!(
        "mobibench-insert, synchronous=OFF, {txns} txns x {reps} interleaved repetitions, in {}",
        base.display()
    );
    let mut worst_cost = f64::NEG_INFINITY;
    for journal in [JournalMode::Delete, JournalMode::Wal] {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        let (mut cpu_with, mut cpu_without) = (Vec::new(), Vec::new());
        for rep in 0..reps {
            // alternate which variant goes first
            for count_vfs in if rep % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            } {
                let dir = base.join(format!("{journal}-{rep}-{count_vfs}"));
                let sample = measure(&dir, journal, count_vfs, txns);
                std::fs::remove_dir_all(&dir).ok();
                if count_vfs {
                    with.push(sample.commits_per_s);
                    cpu_with.push(sample.cpu_us_per_commit);
                } else {
                    without.push(sample.commits_per_s);
                    cpu_without.push(sample.cpu_us_per_commit);
                }
            }
        }
        let (w, wo) = (median(with.clone()), median(without.clone()));
        // Each repetition's pair ran back to back: the median of the pairs' ratios is
        // robust against load changes between repetitions on a shared machine.
        let ratio = median(with.iter().zip(&without).map(|(a, b)| a / b).collect());
        let cost = (1.0 - ratio) * 100.0;
        worst_cost = worst_cost.max(cost);
        println!("journal={journal:<6} without shim: {wo:>9.0} commits/s   with shim: {w:>9.0} commits/s   (medians)");
        println!("  with/without ratio {ratio:.3} (median of paired runs): shim cost {cost:+.2}%");
        let cpu_ratio = median(
            cpu_with
                .iter()
                .zip(&cpu_without)
                .map(|(a, b)| a / b)
                .collect(),
        );
        println!(
            "  CPU per commit: without {:.2} us, with {:.2} us (medians): shim CPU cost {:+.2}%",
            median(cpu_without.clone()),
            median(cpu_with.clone()),
            (cpu_ratio - 1.0) * 100.0
        );
        println!(
            "  runs without: {:?}",
            without.iter().map(|r| r.round()).collect::<Vec<_>>()
        );
        println!(
            "  runs with:    {:?}",
            with.iter().map(|r| r.round()).collect::<Vec<_>>()
        );
    }
    let verdict = if worst_cost <= 5.0 { "within" } else { "OVER" };
    println!("worst shim cost {worst_cost:+.2}% ({verdict} the 5% target)");
}
