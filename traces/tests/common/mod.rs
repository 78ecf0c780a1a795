//! Helpers shared by the integration tests.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::Command;

use blktrace_parse::EventTable;

pub fn sample(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("samples")
        .join(rel)
}

/// A fresh temporary directory named for its test, removed when dropped (also when the
/// test fails).
pub struct Scratch(tempfile::TempDir);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        Scratch(
            tempfile::Builder::new()
                .prefix(&format!("blktrace-parse-{name}-"))
                .tempdir()
                .unwrap(),
        )
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

/// Whether `program` is an executable file in a directory of PATH.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program)).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
    })
}

/// `blkparse -q -i BASE` output, or None (with a note) if blkparse is not installed.
pub fn run_blkparse(dir: &Path, base: &str) -> Option<Vec<u8>> {
    run_blkparse_args(dir, &["-q", "-i", base])
}

/// `blkparse ARGS` output in `dir`, or None (with a note) if blkparse is not installed.
///
/// Presence is looked up on PATH first: under valgrind, spawning a missing program does
/// not fail at spawn but gives a child that exits 127, which read as "blkparse failed".
pub fn run_blkparse_args(dir: &Path, args: &[&str]) -> Option<Vec<u8>> {
    if !on_path("blkparse") {
        eprintln!("SKIPPED: blkparse is not installed (Debian package `blktrace`); differential check not run");
        return None;
    }
    match Command::new("blkparse")
        .current_dir(dir)
        .args(args)
        .output()
    {
        Ok(out) if out.status.success() => Some(out.stdout),
        Ok(out) => panic!("blkparse failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("running blkparse failed: {e}"),
    }
}

/// One event as blkparse's default output can show it, for field-by-field comparison.
#[derive(Debug, PartialEq)]
pub struct Shown {
    pub dev: (u32, u32),
    pub cpu: u32,
    pub seq: u64,
    pub time_ns: u64,
    pub pid: u32,
    pub action: String,
    pub rwbs: String,
    pub sector: u64,
    pub sectors: u32,
    /// comm, or for completions and requeues the error code as blkparse prints it.
    pub tail: String,
    pub aux: u64,
    pub remap: Option<(u32, u32, u64)>,
    pub text: String,
}

/// The events of `t` as blkparse shows them; `time_base` is subtracted from times and
/// `from_binary` says the errors are raw (printed by blkparse as unsigned 16-bit).
pub fn shown(t: &EventTable, time_base: u64, from_binary: bool) -> Vec<Shown> {
    (0..t.len())
        .map(|i| {
            let action = t.action_at(i).name().to_string();
            let is_completion = matches!(action.as_str(), "C" | "R");
            // blkparse prints no length for splits and no process name for remaps.
            let sectors = if action == "X" { 0 } else { t.sectors[i] };
            let tail = if action == "A" {
                String::new()
            } else if is_completion {
                let err = if from_binary {
                    t.error[i] as u16 as i64
                } else {
                    t.error[i] as i64
                };
                err.to_string()
            } else {
                t.comm_at(i).to_string()
            };
            let remap = t.remap_at(i);
            Shown {
                dev: (t.dev_major[i], t.dev_minor[i]),
                cpu: t.cpu[i],
                seq: t.sequence[i],
                time_ns: t.time_ns[i] - time_base,
                // blkparse prints pid 0 on message lines.
                pid: if action == "m" { 0 } else { t.pid[i] },
                action,
                rwbs: t.rwbs_at(i).to_string(),
                sector: t.sector[i],
                sectors,
                tail,
                aux: t.aux_at(i),
                remap,
                text: t.text_at(i).to_string(),
            }
        })
        .collect()
}

/// Asserts two event lists are equal, printing the first differences readably.
pub fn assert_same(ours: &[Shown], theirs: &[Shown]) {
    let mut shown_diffs = 0;
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        if a != b && shown_diffs < 5 {
            eprintln!("event {i} differs:\n  ours:     {a:?}\n  blkparse: {b:?}");
            shown_diffs += 1;
        }
    }
    assert_eq!(ours.len(), theirs.len(), "event counts differ");
    assert_eq!(shown_diffs, 0, "events differ (see above)");
}

/// `n` cases, or as many as `PROPTEST_CASES` says where it is set (proptest itself reads it
/// only for tests that leave the number at its default): `./scripts/test` runs fewer
/// under valgrind.
pub fn proptest_cases(n: u32) -> u32 {
    std::env::var("PROPTEST_CASES").map_or(n, |v| v.parse().unwrap_or(n))
}
