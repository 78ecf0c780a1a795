//! Marker file content and order (format: ../MARKERS.md).

use std::collections::HashMap;

use sqlwa_workloads::{JournalMode, RunOutput, RunSettings, SyncMode};

mod common;

struct Marker {
    event: String,
    fields: HashMap<String, String>,
}

impl Marker {
    fn parse(line: &str) -> Marker {
        let mut parts = line.split(' ');
        assert_eq!(parts.next(), Some("sqlwa"), "{line}");
        let event = parts.next().unwrap().to_string();
        let fields = parts.map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("bad field in {line}"));
            (k.to_string(), v.to_string())
        });
        Marker {
            event,
            fields: fields.collect(),
        }
    }

    fn get(&self, key: &str) -> &str {
        &self.fields[key]
    }

    fn num(&self, key: &str) -> i64 {
        self.get(key).parse().unwrap()
    }
}

fn run_with_markers(
    journal: JournalMode,
    sync: SyncMode,
    count_vfs: bool,
) -> (RunOutput, Vec<String>) {
    let settings = RunSettings {
        journal,
        sync,
        txns: Some(6),
        warmup: Some(2),
        count_vfs,
        ..Default::default()
    };
    common::run_with_markers(&settings, None)
}

#[test]
fn markers_frame_every_transaction_and_vfs_call() {
    let (out, lines) = run_with_markers(JournalMode::Delete, SyncMode::Full, true);
    let markers: Vec<Marker> = lines.iter().map(|l| Marker::parse(l)).collect();

    let first = &markers[0];
    assert_eq!(first.event, "run_begin");
    assert_eq!(first.num("pid"), i64::from(out.info.pid));
    assert_eq!(first.num("tid"), i64::from(out.info.tid));
    assert_eq!(markers.last().unwrap().event, "run_end");

    // timestamps never go backwards
    let times: Vec<i64> = markers.iter().map(|m| m.num("t")).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{lines:#?}");

    // every marker between txn_begin i=N and txn_end i=N carries i=N; outside, i=-1
    let mut current: i64 = -1;
    let mut syncs_in_txn: HashMap<i64, u64> = HashMap::new();
    let mut open_pair: Option<String> = None;
    for (m, line) in markers.iter().zip(&lines) {
        match m.event.as_str() {
            "txn_begin" => {
                assert_eq!(current, -1, "{line}");
                current = m.num("i");
                let commit = &out.commits[current as usize];
                assert_eq!(m.get("warmup"), if commit.warmup { "1" } else { "0" });
                assert_eq!(m.num("t") as u64, commit.start_ns);
            }
            "txn_end" => {
                assert_eq!(m.num("i"), current, "{line}");
                assert_eq!(m.num("t") as u64, out.commits[current as usize].end_ns);
                current = -1;
            }
            "run_begin" | "run_end" => {}
            // the connection's closing, outside every transaction, its VFS markers i=-1
            "close_begin" | "close_end" => assert_eq!(current, -1, "{line}"),
            event => {
                assert_eq!(m.num("i"), current, "{line}");
                assert!(
                    ["db", "journal", "wal", "shm", "temp", "other"].contains(&m.get("kind")),
                    "{line}"
                );
                let (op, phase) = event.rsplit_once('_').unwrap();
                assert!(["sync", "trunc", "delete"].contains(&op), "{line}");
                if phase == "begin" {
                    assert!(
                        open_pair.replace(op.to_string()).is_none(),
                        "nested: {line}"
                    );
                    if op == "sync" {
                        assert!(["normal", "full", "dataonly", "full+dataonly"]
                            .contains(&m.get("flags")));
                        *syncs_in_txn.entry(current).or_default() += 1;
                    }
                } else {
                    assert_eq!(open_pair.take().as_deref(), Some(op), "unpaired: {line}");
                    assert_eq!(m.get("rc"), "0");
                }
            }
        }
    }
    assert_eq!(current, -1);
    assert!(
        syncs_in_txn.get(&-1).copied().unwrap_or(0) > 0,
        "setup syncs carry i=-1"
    );
    for commit in &out.commits {
        assert_eq!(
            syncs_in_txn[&(commit.index as i64)],
            commit.vfs.total().sync_calls
        );
        assert_eq!(commit.vfs.total().sync_calls, 3);
    }
    let txn_begins = markers.iter().filter(|m| m.event == "txn_begin").count();
    assert_eq!(txn_begins, 8);
    let at = |event: &str| markers.iter().position(|m| m.event == event).unwrap();
    let last_end = markers.iter().rposition(|m| m.event == "txn_end").unwrap();
    assert!(last_end < at("close_begin") && at("close_begin") < at("close_end"));
    // DELETE mode: the journal is unlinked within each commit
    let deletes = lines
        .iter()
        .filter(|l| l.starts_with("sqlwa delete_begin i=3 kind=journal "))
        .count();
    assert_eq!(deletes, 1);
}

#[test]
fn truncate_markers_in_truncate_mode() {
    let (_, lines) = run_with_markers(JournalMode::Truncate, SyncMode::Normal, true);
    assert!(lines
        .iter()
        .any(|l| l.starts_with("sqlwa trunc_begin i=4 kind=journal t=")));
    assert!(lines
        .iter()
        .any(|l| l.starts_with("sqlwa trunc_end i=4 kind=journal rc=0 t=")));
}

#[test]
fn without_counting_only_run_and_txn_markers() {
    let (out, lines) = run_with_markers(JournalMode::Wal, SyncMode::Full, false);
    assert!(!out.info.vfs_counting);
    // run_begin/run_end, txn_begin/txn_end each transaction, close_begin/close_end
    assert_eq!(lines.len(), 2 + 2 * 8 + 2, "{lines:#?}");
    assert!(out
        .commits
        .iter()
        .all(|c| c.vfs.total().sync_calls == 0 && c.vfs.total().write_calls == 0));
}
