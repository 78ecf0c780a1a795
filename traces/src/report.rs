//! What a parse saw besides the events: counts, losses, skipped records.
use std::collections::BTreeMap;

use crate::table::{Action, EventTable, Operation, RecordKind};

/// Keep at most this many bad-record messages (the count is exact).
pub const MAX_BAD_MESSAGES: usize = 20;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParseReport {
    /// Per input file: (path, detected format).
    pub files: Vec<(String, String)>,
    pub events: u64,
    /// Records that could not be parsed and were skipped (only in lenient mode).
    pub bad_records: u64,
    pub bad_messages: Vec<String>,
    /// Events the tracer itself says it lost (ftrace `[LOST n EVENTS]`).
    pub lost_events: u64,
    /// Header, comment and summary lines of text formats, deliberately not events.
    pub skipped_lines: u64,
    /// blktrace binary: process-notify records read (they name pids, they are not rows).
    pub notify_records: u64,
    /// blktrace binary: records blkparse does not print either (driver data).
    pub skipped_records: u64,
    /// blktrace binary: the earliest record time, which blkparse subtracts from every time.
    pub time_base_ns: Option<u64>,
    /// blktrace binary: wall-clock time of the trace start (TN timestamp record), ns since epoch.
    pub wall_clock_start_ns: Option<u64>,
    pub per_action: BTreeMap<String, u64>,
    pub per_operation: BTreeMap<String, u64>,
    pub per_kind: BTreeMap<String, u64>,
}

impl ParseReport {
    pub fn note_bad(&mut self, message: String) {
        self.bad_records += 1;
        if self.bad_messages.len() < MAX_BAD_MESSAGES {
            self.bad_messages.push(message);
        }
    }

    /// Fills the event count and the per-action / per-operation / per-kind counts.
    pub fn count(&mut self, table: &EventTable) {
        self.events = table.len() as u64;
        let mut actions = [0u64; Action::ALL.len()];
        let mut ops = [0u64; Operation::ALL.len()];
        let mut kinds = [0u64; RecordKind::ALL.len()];
        // Without a branch on the kind, which text traces mix at random.
        for ((&kind, &action), &op) in table.kind.iter().zip(&table.action).zip(&table.operation) {
            let block = (kind == RecordKind::Block as u8) as u64;
            kinds[kind as usize] += 1;
            actions[action as usize] += block;
            ops[op as usize] += block;
        }
        self.per_action = nonzero(Action::ALL.map(Action::name), actions);
        self.per_operation = nonzero(Operation::ALL.map(Operation::name), ops);
        self.per_kind = nonzero(RecordKind::ALL.map(RecordKind::name), kinds);
    }
}

/// Name → count for the names counted at least once.
fn nonzero<const N: usize>(names: [&str; N], counts: [u64; N]) -> BTreeMap<String, u64> {
    names.into_iter().zip(counts).filter(|&(_, n)| n > 0).map(|(name, n)| (name.to_string(), n)).collect()
}
