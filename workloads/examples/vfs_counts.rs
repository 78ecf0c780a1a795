//! Prints the mean VFS counts per measured commit of a scenario for each journal mode
//! with synchronous=FULL: a quick look at what one commit costs at the VFS layer.
//! Usage: vfs_counts [SCENARIO] [DIR]

use sqlwa_workloads::{run, FileKind, JournalMode, RunSettings, Scenario, SyncMode};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args
        .get(1)
        .map(String::as_str)
        .unwrap_or("mobibench-insert");
    let base = std::path::PathBuf::from(
        args.get(2)
            .map(String::as_str)
            .unwrap_or("/tmp/sqlwa-vfs-counts"),
    );
    let scenario = Scenario::builtin(name).unwrap_or_else(|e| panic!("{e}"));
    for journal in [
        JournalMode::Delete,
        JournalMode::Truncate,
        JournalMode::Persist,
        JournalMode::Wal,
    ] {
        let dir = base.join(format!("{name}-{journal}-{}", std::process::id()));
        let settings = RunSettings {
            journal,
            sync: SyncMode::Full,
            txns: Some(100),
            warmup: Some(10),
            ..Default::default()
        };
        let out =
            run(&scenario, &settings, &dir, None, &mut |_| true).unwrap_or_else(|e| panic!("{e}"));
        std::fs::remove_dir_all(&dir).ok();
        let measured: Vec<_> = out.commits.iter().filter(|c| !c.warmup).collect();
        let n = measured.len() as f64;
        let mean = |f: &dyn Fn(&sqlwa_workloads::CommitRecord) -> u64| {
            measured.iter().map(|c| f(c)).sum::<u64>() as f64 / n
        };
        print!(
            "{name} {journal:<8} logical {:>7.0} B |",
            mean(&|c| c.logical_bytes)
        );
        for kind in [FileKind::Db, FileKind::Journal, FileKind::Wal] {
            let w = mean(&|c| c.vfs.get(kind).write_bytes);
            let s = mean(&|c| c.vfs.get(kind).sync_calls);
            print!(" {}: {w:>8.0} B {s:.2} sync |", kind.as_str());
        }
        println!();
    }
}
