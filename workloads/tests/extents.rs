//! `extents` markers (RunSettings::map_extents) and FIEMAP, checked against filefrag.
//! Needs a FIEMAP-capable filesystem for the temp dir (ext4, xfs, btrfs; not tmpfs).

use std::io::Write;
use std::process::Command;

use sqlwa_workloads::vfs::{file_extents, map_database_files};
use sqlwa_workloads::{JournalMode, RunSettings, SyncMode};

mod common;

fn fiemap_works(parent: &std::path::Path) -> bool {
    let dir = tempfile::tempdir_in(parent).unwrap();
    let probe = dir.path().join("probe");
    std::fs::write(&probe, b"x").unwrap();
    std::fs::File::open(&probe).unwrap().sync_all().unwrap();
    file_extents(&probe).is_ok()
}

/// filefrag -e -v: "ext: logical_offset: physical_offset: length: ..." in filesystem
/// blocks (the -b flag is not portable, so read the block size it prints).
fn filefrag_sectors(path: &std::path::Path) -> Option<Vec<(u64, u64)>> {
    let out = Command::new("filefrag")
        .arg("-e")
        .arg("-v")
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "File size of X is N (K blocks of 4096 bytes)"
    let block: u64 = text
        .split(" blocks of ")
        .nth(1)?
        .split(' ')
        .next()?
        .parse()
        .ok()?;
    let mut ranges = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split(':').map(str::trim).collect();
        if cols.len() < 4 || cols[0].parse::<u64>().is_err() {
            continue;
        }
        let start: u64 = cols[2].split("..").next()?.trim().parse().ok()?;
        let len: u64 = cols[3].parse().ok()?;
        ranges.push((start * block / 512, len * block / 512));
    }
    Some(ranges)
}

#[test]
fn file_extents_match_filefrag() {
    let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    if !fiemap_works(dir.path()) {
        eprintln!("skipped: no FIEMAP on this filesystem");
        return;
    }
    let path = dir.path().join("data");
    let mut f = std::fs::File::create(&path).unwrap();
    for _ in 0..16 {
        f.write_all(&[7u8; 4096]).unwrap();
    }
    f.sync_all().unwrap();
    let ours: Vec<(u64, u64)> = file_extents(&path)
        .unwrap()
        .iter()
        .map(|e| (e.sector, e.sectors))
        .collect();
    assert_eq!(ours.iter().map(|r| r.1).sum::<u64>(), 128, "{ours:?}");
    match filefrag_sectors(&path) {
        Some(theirs) => assert_eq!(merge(&ours), merge(&theirs)),
        None => assert!(
            Command::new("filefrag").arg("-V").output().is_err(),
            "filefrag is installed but its output was not understood"
        ),
    }
}

/// Adjacent ranges merged (filefrag and FIEMAP may split extents differently).
fn merge(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(s, n) in ranges {
        match out.last_mut() {
            Some(last) if last.0 + last.1 == s => last.1 += n,
            _ => out.push((s, n)),
        }
    }
    out
}

fn run_lines(journal: JournalMode, map_extents: bool) -> Vec<String> {
    let settings = RunSettings {
        journal,
        sync: SyncMode::Full,
        txns: Some(3),
        warmup: Some(1),
        map_extents,
        ..Default::default()
    };
    // under the crate, not /tmp: FIEMAP needs a real filesystem (not tmpfs)
    let parent = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    common::run_with_markers(&settings, Some(parent)).1
}

fn extents_lines<'a>(lines: &'a [String], prefix: &str) -> Vec<&'a String> {
    lines.iter().filter(|l| l.starts_with(prefix)).collect()
}

#[test]
fn journal_extents_after_each_sync_and_before_delete() {
    if !fiemap_works(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))) {
        eprintln!("skipped: no FIEMAP on this filesystem");
        return;
    }
    let lines = run_lines(JournalMode::Delete, true);
    // per commit: journal synced twice, db once, journal deleted
    for i in 1..4 {
        let p = format!("sqlwa extents i={i} ");
        let kinds: Vec<String> = extents_lines(&lines, &p)
            .iter()
            .map(|l| l.split(' ').skip(3).take(2).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(
            kinds,
            [
                "kind=journal at=sync",
                "kind=journal at=sync",
                "kind=db at=sync",
                "kind=journal at=delete"
            ],
            "{lines:#?}"
        );
        for l in extents_lines(&lines, &p) {
            let ranges = l
                .split(" ranges=")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap();
            assert!(
                ranges.split(',').all(|r| r.split_once('+').is_some()),
                "{l}"
            );
        }
    }
    // the extents marker follows the sync_end it belongs to
    let sync_end = lines
        .iter()
        .position(|l| l.starts_with("sqlwa sync_end i=1 kind=journal"))
        .unwrap();
    assert!(lines[sync_end + 1].starts_with("sqlwa extents i=1 kind=journal at=sync"));
    // the db is mapped at the end and after closing
    assert_eq!(
        extents_lines(&lines, "sqlwa extents i=-1 kind=db at=end").len(),
        1
    );
    assert_eq!(
        extents_lines(&lines, "sqlwa extents i=-1 kind=db at=close").len(),
        1
    );
}

#[test]
fn wal_is_mapped_at_its_syncs_and_at_the_end() {
    if !fiemap_works(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))) {
        eprintln!("skipped: no FIEMAP on this filesystem");
        return;
    }
    let lines = run_lines(JournalMode::Wal, true);
    assert_eq!(
        extents_lines(&lines, "sqlwa extents i=2 kind=wal at=sync").len(),
        1,
        "{lines:#?}"
    );
    assert_eq!(
        extents_lines(&lines, "sqlwa extents i=-1 kind=wal at=end").len(),
        1
    );
    assert_eq!(
        extents_lines(&lines, "sqlwa extents i=-1 kind=shm at=end").len(),
        1
    );
}

#[test]
fn no_extents_markers_unless_asked() {
    let lines = run_lines(JournalMode::Delete, false);
    assert!(extents_lines(&lines, "sqlwa extents").is_empty());
}

#[test]
fn database_files_are_mapped_on_request_after_the_run() {
    let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    if !fiemap_works(dir.path()) {
        eprintln!("skipped: no FIEMAP on this filesystem");
        return;
    }
    let (db, markers) = (dir.path().join("x.db"), dir.path().join("markers"));
    let mut f = std::fs::File::create(&db).unwrap();
    f.write_all(&[1u8; 8192]).unwrap();
    f.sync_all().unwrap();
    std::fs::write(dir.path().join("x.db-wal"), b"").unwrap();
    map_database_files(&markers, &db, "syncfs").unwrap();
    let text = std::fs::read_to_string(&markers).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // the db with its blocks, the empty WAL with none; no journal or -shm: they do not exist
    let ranges: Vec<String> = file_extents(&db)
        .unwrap()
        .iter()
        .map(|e| format!("{}+{}", e.sector, e.sectors))
        .collect();
    let db_line = format!(
        "sqlwa extents i=-1 kind=db at=syncfs ranges={} t=",
        ranges.join(",")
    );
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with(&db_line), "{text}");
    assert!(
        lines[1].starts_with("sqlwa extents i=-1 kind=wal at=syncfs ranges=none t="),
        "{text}"
    );
    // `at` is one word of the line
    let err = map_database_files(&markers, &db, "sync fs").unwrap_err();
    assert!(err.to_string().contains("'sync fs' for at"), "{err}");
}

/// Under a FUSE layer the run's files are mapped as the lower files of the same names
/// (`extents_from`). Here the lower directory holds a stand-in database the run never
/// writes and no journal: every db marker carries the stand-in's extents, and the
/// journal, which has no lower file, gets no marker.
#[test]
fn extents_are_taken_from_the_lower_directory_when_given() {
    let parent = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if !fiemap_works(parent) {
        eprintln!("skipped: no FIEMAP on this filesystem");
        return;
    }
    let (run_dir, lower) = (
        tempfile::tempdir_in(parent).unwrap(),
        tempfile::tempdir_in(parent).unwrap(),
    );
    let stand_in = lower.path().join("mobibench-insert.db");
    let mut f = std::fs::File::create(&stand_in).unwrap();
    f.write_all(&[3u8; 16384]).unwrap();
    f.sync_all().unwrap();
    let expected: Vec<String> = file_extents(&stand_in)
        .unwrap()
        .iter()
        .map(|e| format!("{}+{}", e.sector, e.sectors))
        .collect();
    let settings = RunSettings {
        txns: Some(3),
        warmup: Some(0),
        map_extents: true,
        extents_from: Some(lower.path().to_path_buf()),
        ..Default::default()
    };
    let scenario = sqlwa_workloads::Scenario::builtin("mobibench-insert").unwrap();
    let markers = run_dir.path().join("trace_marker");
    let db_dir = run_dir.path().join("db");
    sqlwa_workloads::run(&scenario, &settings, &db_dir, Some(&markers), &mut |_| true).unwrap();
    let text = std::fs::read_to_string(&markers).unwrap();
    let extents: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("sqlwa extents "))
        .collect();
    let db_lines: Vec<&&str> = extents.iter().filter(|l| l.contains(" kind=db ")).collect();
    assert!(db_lines.len() >= 3, "{text}");
    let want = format!(" ranges={} ", expected.join(","));
    assert!(db_lines.iter().all(|l| l.contains(&want)), "{want}\n{text}");
    assert!(
        extents.iter().all(|l| !l.contains(" kind=journal ")),
        "{text}"
    );
    // the run's own database lies elsewhere: none of its blocks is in a marker
    let own = file_extents(&db_dir.join("mobibench-insert.db")).unwrap();
    let own: Vec<String> = own
        .iter()
        .map(|e| format!("{}+{}", e.sector, e.sectors))
        .collect();
    assert!(
        !own.is_empty() && own.iter().all(|r| !expected.contains(r)),
        "{own:?}"
    );
}

#[test]
fn a_lower_directory_that_is_not_there_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        extents_from: Some(dir.path().join("missing")),
        ..Default::default()
    };
    let scenario = sqlwa_workloads::Scenario::builtin("kv-prefs").unwrap();
    let err = common::run_quiet(&scenario, &settings, dir.path()).unwrap_err();
    assert!(
        err.to_string().contains("extents_from") && err.to_string().contains("not a directory"),
        "{err}"
    );
    assert!(
        !dir.path().join("kv-prefs.db").exists(),
        "refused before the database is made"
    );
}
