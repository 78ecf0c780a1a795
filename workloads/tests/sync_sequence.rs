//! VFS-level sync sequence of steady-state single-row autocommit inserts, checked against
//! SQLite's documented commit sequence (docs/reference/sqlite-commit-syncs.md):
//! independent truth, not the code's own output.

use sqlwa_workloads::{CommitRecord, JournalMode, RunSettings, Scenario, SyncMode};

mod common;

/// One 100-byte row per autocommit insert into a plain rowid table, 4 KiB pages.
const SINGLE_ROW_INSERT: &str = include_str!("data/single-row-insert.toml");

fn measured(journal: JournalMode, sync: SyncMode) -> Vec<CommitRecord> {
    let scenario = Scenario::from_toml_str(SINGLE_ROW_INSERT, "test").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = RunSettings {
        journal,
        sync,
        ..Default::default()
    };
    let out = common::run_quiet(&scenario, &settings, dir.path()).unwrap();
    out.commits.into_iter().filter(|c| !c.warmup).collect()
}

/// (journal xSyncs, db xSyncs, wal xSyncs) of every measured commit, asserted equal.
fn syncs_per_commit(journal: JournalMode, sync: SyncMode) -> (u64, u64, u64) {
    let commits = measured(journal, sync);
    assert_eq!(commits.len(), 20);
    let per = |c: &CommitRecord| {
        (
            c.vfs.journal.sync_calls,
            c.vfs.db.sync_calls,
            c.vfs.wal.sync_calls,
        )
    };
    let first = per(&commits[0]);
    for c in &commits {
        assert_eq!(
            per(c),
            first,
            "{journal}/{sync} commit {} differs: {:?}",
            c.index,
            c.vfs
        );
        let others = c.vfs.total().sync_calls - first.0 - first.1 - first.2;
        assert_eq!(others, 0, "{journal}/{sync}: syncs on shm/temp/other files");
    }
    first
}

#[test]
fn wal_normal_has_no_sync_in_an_ordinary_commit() {
    assert_eq!(
        syncs_per_commit(JournalMode::Wal, SyncMode::Normal),
        (0, 0, 0)
    );
}

#[test]
fn wal_full_syncs_the_wal_exactly_once() {
    assert_eq!(
        syncs_per_commit(JournalMode::Wal, SyncMode::Full),
        (0, 0, 1)
    );
    assert_eq!(
        syncs_per_commit(JournalMode::Wal, SyncMode::Extra),
        (0, 0, 1)
    );
}

#[test]
fn delete_mode_syncs() {
    assert_eq!(
        syncs_per_commit(JournalMode::Delete, SyncMode::Full),
        (2, 1, 0)
    );
    assert_eq!(
        syncs_per_commit(JournalMode::Delete, SyncMode::Normal),
        (1, 1, 0)
    );
    // EXTRA's additional directory sync is inside xDelete (syncDir), not an xSync.
    assert_eq!(
        syncs_per_commit(JournalMode::Delete, SyncMode::Extra),
        (2, 1, 0)
    );
}

#[test]
fn truncate_mode_syncs() {
    assert_eq!(
        syncs_per_commit(JournalMode::Truncate, SyncMode::Full),
        (3, 1, 0)
    );
    assert_eq!(
        syncs_per_commit(JournalMode::Truncate, SyncMode::Normal),
        (1, 1, 0)
    );
}

#[test]
fn persist_mode_syncs() {
    assert_eq!(
        syncs_per_commit(JournalMode::Persist, SyncMode::Full),
        (3, 1, 0)
    );
    assert_eq!(
        syncs_per_commit(JournalMode::Persist, SyncMode::Normal),
        (2, 1, 0)
    );
}

#[test]
fn synchronous_off_never_syncs() {
    for journal in JournalMode::ALL {
        assert_eq!(
            syncs_per_commit(*journal, SyncMode::Off),
            (0, 0, 0),
            "{journal}"
        );
    }
}

#[test]
fn delete_mode_creates_and_deletes_the_journal_every_commit() {
    for c in measured(JournalMode::Delete, SyncMode::Full) {
        assert_eq!(c.vfs.journal.open_calls, 1);
        assert_eq!(c.vfs.journal.delete_calls, 1);
    }
    for c in measured(JournalMode::Truncate, SyncMode::Full) {
        assert_eq!(
            (c.vfs.journal.truncate_calls, c.vfs.journal.delete_calls),
            (1, 0)
        );
    }
}

#[test]
fn wal_commit_writes_one_frame() {
    for c in measured(JournalMode::Wal, SyncMode::Full) {
        // one 4 KiB page + 24-byte frame header, nothing written to the database
        assert_eq!(c.vfs.wal.write_bytes, 4120, "{:?}", c.vfs);
        assert_eq!(c.vfs.db.write_bytes, 0);
        assert_eq!(c.logical_bytes, 100);
    }
}

#[test]
fn rollback_commit_writes_two_pages_and_their_journal() {
    for journal in [
        JournalMode::Delete,
        JournalMode::Truncate,
        JournalMode::Persist,
    ] {
        for c in measured(journal, SyncMode::Full) {
            // page 1 (change counter) and the table's leaf page
            assert_eq!(c.vfs.db.write_bytes, 8192, "{journal}: {:?}", c.vfs);
            // both original pages with their 8-byte frames, plus the header (~8.7 KB)
            let j = c.vfs.journal.write_bytes;
            assert!((8192..=9400).contains(&j), "{journal}: journal bytes {j}");
        }
    }
}
