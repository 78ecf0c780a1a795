//! Cost of the counting VFS shim: commits/s of `mobibench-insert` with synchronous=OFF
//! with and without the shim, in interleaved repetitions (so drift in machine load hits
//! both equally). Run it on tmpfs (see bench/shim_overhead.sh) so the device does not
//! hide the CPU cost. Usage: shim_overhead DIR [TXNS] [REPS]

use std::path::{Path, PathBuf};

use sqlwa_workloads::{run, JournalMode, RunSettings, Scenario, SyncMode};

fn commits_per_second(dir: &Path, journal: JournalMode, count_vfs: bool, txns: u64) -> f64 {
    let scenario = Scenario::builtin("mobibench-insert").expect("built-in scenario");
    let settings = RunSettings { journal, sync: SyncMode::Off, txns: Some(txns), warmup: Some(100), count_vfs, ..Default::default() };
    let out = run(&scenario, &settings, dir, None, &mut |_| true).unwrap_or_else(|e| panic!("{e}"));
    let measured: Vec<_> = out.commits.iter().filter(|c| !c.warmup).collect();
    let span_ns = measured.last().unwrap().end_ns - measured.first().unwrap().start_ns;
    measured.len() as f64 / (span_ns as f64 / 1e9)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let base = PathBuf::from(args.get(1).map(String::as_str).unwrap_or("/dev/shm/sqlwa-shim-bench"));
    let txns: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(7);
    println!("mobibench-insert, synchronous=OFF, {txns} txns x {reps} interleaved repetitions, in {}", base.display());
    let mut worst_cost: f64 = 0.0;
    for journal in [JournalMode::Delete, JournalMode::Wal] {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for rep in 0..reps {
            // alternate which variant goes first
            for count_vfs in if rep % 2 == 0 { [true, false] } else { [false, true] } {
                let dir = base.join(format!("{journal}-{rep}-{count_vfs}"));
                let rate = commits_per_second(&dir, journal, count_vfs, txns);
                std::fs::remove_dir_all(&dir).ok();
                if count_vfs { with.push(rate) } else { without.push(rate) }
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
        println!("  runs without: {:?}", without.iter().map(|r| r.round()).collect::<Vec<_>>());
        println!("  runs with:    {:?}", with.iter().map(|r| r.round()).collect::<Vec<_>>());
    }
    let verdict = if worst_cost <= 5.0 { "within" } else { "OVER" };
    println!("worst shim cost {worst_cost:+.2}% ({verdict} the 5% target)");
}
