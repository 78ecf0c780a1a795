//! What a parse saw besides the events: counts, losses, skipped records.
use std::collections::BTreeMap;

use crate::table::{Action, EventTable, Operation, RecordKind};

/// Keep at most this many bad-record messages (the count is exact).
pub(crate) const MAX_BAD_MESSAGES: usize = 20;

#[derive(Clone, Debug, Default, PartialEq)]
/// What a parse saw besides the events: the files and their formats, rows per kind, action and
/// operation, and what was lost, skipped or bad.
pub struct ParseReport {
    /// Per input file: (path, detected format).
    pub files: Vec<(String, String)>,
    /// Rows in the table.
    pub events: u64,
    /// Records that could not be parsed and were skipped (only in lenient mode).
    pub bad_records: u64,
    /// The first 20 of their error messages.
    pub bad_messages: Vec<String>,
    /// Events the tracer itself says it lost (ftrace: per file the larger of the header's
    /// overwritten entries and the `[LOST n EVENTS]` lines' sum, plus one per uncounted
    /// `[LOST EVENTS]`).
    pub lost_events: u64,
    /// Header, comment and summary lines of text formats, deliberately not events.
    pub skipped_lines: u64,
    /// blktrace binary: process-notify records read (they name pids, they are not rows).
    pub notify_records: u64,
    /// blktrace binary: records blkparse does not print either (driver data).
    pub skipped_records: u64,
    /// blktrace binary: the earliest record time, which blkparse subtracts from every time.
    pub time_base_ns: Option<u64>,
    /// blkparse text: events printed with a time blkparse wrapped around (before the
    /// trace's first event), unwrapped.
    pub unwrapped_times: u64,
    /// blkparse text: how far the earliest event was before the first, by which every
    /// time of the file was moved on (so that the earliest is at 0).
    pub time_shift_ns: u64,
    /// blktrace binary: wall-clock time of the trace start (TN timestamp record), ns since epoch.
    pub wall_clock_start_ns: Option<u64>,
    /// Block rows per action letter (`"Q"`, `"D"`, `"C"`, …).
    pub per_action: BTreeMap<String, u64>,
    /// Block rows per operation (`"read"`, `"write"`, `"flush"`, …).
    pub per_operation: BTreeMap<String, u64>,
    /// Rows per record kind (`"block"`, `"marker"`, `"syscall_enter"`, …).
    pub per_kind: BTreeMap<String, u64>,
    /// Bytes of the block rows per action.
    pub bytes_per_action: BTreeMap<String, u64>,
    /// Bytes of the block rows per operation. Every stage of a request adds its bytes
    /// (queued, inserted, issued, completed): what completed is in [`ParseReport::devices`].
    pub bytes_per_operation: BTreeMap<String, u64>,
    /// Per device (major, minor): the requests that completed and the events of each
    /// stage. Block rows whose trace names no device (ftrace's `block_plug` and
    /// `block_unplug`) are under (0, 0).
    pub devices: BTreeMap<(u32, u32), DeviceTotals>,
}

/// A count of rows and the bytes they cover.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Rows: requests (completions) or events (stages).
    pub count: u64,
    /// Their bytes, added up.
    pub bytes: u64,
}

/// What one device's block rows say: the requests it completed per operation, and its
/// events per stage (action), as blkparse's per-device summary and btt count them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceTotals {
    /// Completions (action `C`: blktrace's complete, ftrace's `block_rq_complete` and
    /// `block_bio_complete`) per operation name (`"write"`, `"flush"`, …), each request
    /// once, with the bytes it completed.
    pub completed: BTreeMap<String, Tally>,
    /// Events per action letter (`"Q"`, `"G"`, `"I"`, `"D"`, `"C"`, `"M"`, `"A"`, …)
    /// with their bytes: the stages one request passes through, counted apart.
    pub stages: BTreeMap<String, Tally>,
}

impl DeviceTotals {
    /// Adds one (action, operation) cell of this device's rows.
    fn add(&mut self, action: Action, op: Operation, cell: Tally) {
        if action == Action::Complete {
            tally(&mut self.completed, op.name(), cell);
        }
        tally(&mut self.stages, action.name(), cell);
    }
}

fn tally(tallies: &mut BTreeMap<String, Tally>, name: &str, cell: Tally) {
    let t = tallies.entry(name.to_string()).or_default();
    t.count += cell.count;
    t.bytes += cell.bytes;
}

impl ParseReport {
    pub(crate) fn note_bad(&mut self, message: String) {
        self.bad_records += 1;
        if self.bad_messages.len() < MAX_BAD_MESSAGES {
            self.bad_messages.push(message);
        }
    }

    /// Fills the event count, the per-action / per-operation / per-kind counts and the
    /// block bytes per action and operation.
    pub fn count(&mut self, table: &EventTable) {
        self.take_counts(ParseReport::default());
        self.add_counts(table);
    }

    /// Adds a table's rows to the counts (a trace parsed in pieces).
    pub(crate) fn add_counts(&mut self, table: &EventTable) {
        self.events += table.len() as u64;
        let (rows, bytes, devices) = count_cells(table);
        self.add_devices(devices);
        for (cell, (n, b)) in rows.into_iter().zip(bytes).enumerate() {
            let (kind, action, op) = (
                cell / (ACTIONS * OPERATIONS),
                cell / OPERATIONS % ACTIONS,
                cell % OPERATIONS,
            );
            if n == 0 {
                continue;
            }
            add(&mut self.per_kind, RecordKind::ALL[kind].name(), n);
            // Actions, operations and bytes count block rows only.
            if kind == RecordKind::Block as usize {
                add(&mut self.per_action, Action::ALL[action].name(), n);
                add(&mut self.per_operation, Operation::ALL[op].name(), n);
                add(&mut self.bytes_per_action, Action::ALL[action].name(), b);
                add(&mut self.bytes_per_operation, Operation::ALL[op].name(), b);
            }
        }
    }

    /// Adds each device's (action, operation) cells to [`ParseReport::devices`].
    fn add_devices(&mut self, devices: Vec<DeviceCells>) {
        for (device, cells) in devices {
            let totals = self.devices.entry(device).or_default();
            for (cell, &[count, bytes]) in cells.iter().enumerate() {
                if count > 0 {
                    let (action, op) = (cell / OPERATIONS, cell % OPERATIONS);
                    totals.add(
                        Action::ALL[action],
                        Operation::ALL[op],
                        Tally { count, bytes },
                    );
                }
            }
        }
    }

    /// Takes the event count and every count from `other`.
    pub(crate) fn take_counts(&mut self, other: ParseReport) {
        self.events = other.events;
        self.per_action = other.per_action;
        self.per_operation = other.per_operation;
        self.per_kind = other.per_kind;
        self.bytes_per_action = other.bytes_per_action;
        self.bytes_per_operation = other.bytes_per_operation;
        self.devices = other.devices;
    }
}

fn add(counts: &mut BTreeMap<String, u64>, name: &str, n: u64) {
    *counts.entry(name.to_string()).or_insert(0) += n;
}

/// How many actions, operations and record kinds there are: the count cells' dimensions.
const ACTIONS: usize = Action::ALL.len();
const OPERATIONS: usize = Operation::ALL.len();
const KINDS: usize = RecordKind::ALL.len();

/// One device's block rows and bytes per (action, operation) cell.
type DeviceCells = ((u32, u32), Vec<[u64; 2]>);

/// Rows and block bytes per (kind, action, operation) cell, and per device the block
/// rows' cells; big tables counted in slices on all cores.
fn count_cells(table: &EventTable) -> (Vec<u64>, Vec<u64>, Vec<DeviceCells>) {
    let n = table.len();
    let slices = if n < 1 << 20 {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |c| c.get())
            .min(8)
    };
    let bounds: Vec<usize> = (0..=slices).map(|k| n * k / slices).collect();
    let counted: Vec<SliceCounts> = std::thread::scope(|s| {
        let handles: Vec<_> = bounds
            .windows(2)
            .skip(1)
            .map(|w| s.spawn(move || count_slice(table, w[0]..w[1])))
            .collect();
        let mut all = vec![count_slice(table, 0..bounds[1])];
        all.extend(
            handles
                .into_iter()
                .map(|h| h.join().expect("counting thread panicked")),
        );
        all
    });
    let mut cells = vec![0u64; KINDS * ACTIONS * OPERATIONS];
    let mut bytes = vec![0u64; KINDS * ACTIONS * OPERATIONS];
    let mut devices = Vec::new();
    for (part, part_bytes, part_devices) in counted {
        for (total, lanes) in cells.iter_mut().zip(&part) {
            *total += lanes.iter().sum::<u64>();
        }
        for (total, b) in bytes.iter_mut().zip(&part_bytes) {
            *total += b;
        }
        devices.extend(part_devices);
    }
    (cells, bytes, devices)
}

/// One slice's cells (row counts in four lanes, bytes) and its devices' cells.
type SliceCounts = (Vec<[u64; 4]>, Vec<u64>, Vec<DeviceCells>);

/// The (action, operation) cells of each device a slice's block rows name. Consecutive
/// rows mostly name the same device, and a trace names few: the last one is looked at
/// first, then the others in turn.
struct DeviceCounter {
    devices: Vec<DeviceCells>,
    last: usize,
}

impl DeviceCounter {
    fn new() -> DeviceCounter {
        DeviceCounter {
            devices: Vec::new(),
            last: 0,
        }
    }

    fn add(&mut self, device: (u32, u32), cell: usize, bytes: u64) {
        if self.devices.get(self.last).map(|d| d.0) != Some(device) {
            self.last = match self.devices.iter().position(|d| d.0 == device) {
                Some(found) => found,
                None => {
                    self.devices
                        .push((device, vec![[0u64; 2]; ACTIONS * OPERATIONS]));
                    self.devices.len() - 1
                }
            };
        }
        let counts = &mut self.devices[self.last].1[cell];
        counts[0] += 1;
        counts[1] += bytes;
    }
}

/// The cells of one slice of rows, their row counts in four interleaved copies
/// (consecutive rows mostly fall in the same cell, and one copy would make each increment
/// wait for the one before), their bytes, and the block rows' cells per device.
fn count_slice(table: &EventTable, rows: std::ops::Range<usize>) -> SliceCounts {
    let mut cells = vec![[0u64; 4]; KINDS * ACTIONS * OPERATIONS];
    let mut bytes = vec![0u64; KINDS * ACTIONS * OPERATIONS];
    let mut devices = DeviceCounter::new();
    let (kinds, actions, ops, row_bytes) = (
        &table.kind[rows.clone()],
        &table.action[rows.clone()],
        &table.operation[rows.clone()],
        &table.bytes[rows.clone()],
    );
    let (majors, minors) = (&table.dev_major[rows.clone()], &table.dev_minor[rows]);
    for (i, (((&kind, &action), &op), &b)) in kinds
        .iter()
        .zip(actions)
        .zip(ops)
        .zip(row_bytes)
        .enumerate()
    {
        let action_op = action as usize * OPERATIONS + op as usize;
        let cell = kind as usize * ACTIONS * OPERATIONS + action_op;
        cells[cell][i % 4] += 1;
        bytes[cell] += b;
        if kind == RecordKind::Block as u8 {
            devices.add((majors[i], minors[i]), action_op, b);
        }
    }
    (cells, bytes, devices.devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts of a table big enough to be counted in slices, against a plain tally.
    #[test]
    fn counts_equal_a_plain_tally_of_the_rows() {
        let n = (1 << 20) + 12_345;
        let mut t = EventTable::new();
        let mut x = 0x9e37_79b9u32;
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            t.time_ns.push(0);
            t.kind.push((x % RecordKind::ALL.len() as u32) as u8);
            t.action.push((x / 7 % Action::ALL.len() as u32) as u8);
            t.operation
                .push((x / 151 % Operation::ALL.len() as u32) as u8);
            t.bytes.push((x % 9) as u64 * 512);
            // Three devices, in runs and interleaved, as dm over a disk traces.
            t.dev_major.push([8, 8, 253][(x / 1013 % 3) as usize]);
            t.dev_minor.push([0, 16, 0][(x / 1013 % 3) as usize]);
        }
        let mut want = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        let mut want_bytes = (BTreeMap::new(), BTreeMap::new());
        for i in 0..n {
            let kind = t.kind_at(i);
            *want.2.entry(kind.name().to_string()).or_insert(0u64) += 1;
            if kind == RecordKind::Block {
                *want
                    .0
                    .entry(t.action_at(i).name().to_string())
                    .or_insert(0u64) += 1;
                *want
                    .1
                    .entry(t.operation_at(i).name().to_string())
                    .or_insert(0u64) += 1;
                *want_bytes
                    .0
                    .entry(t.action_at(i).name().to_string())
                    .or_insert(0u64) += t.bytes[i];
                *want_bytes
                    .1
                    .entry(t.operation_at(i).name().to_string())
                    .or_insert(0u64) += t.bytes[i];
            }
        }
        let mut want_devices: BTreeMap<(u32, u32), DeviceTotals> = BTreeMap::new();
        for i in 0..n {
            if t.kind_at(i) != RecordKind::Block {
                continue;
            }
            let device = want_devices
                .entry((t.dev_major[i], t.dev_minor[i]))
                .or_default();
            let (action, op) = (t.action_at(i), t.operation_at(i));
            let stage = device.stages.entry(action.name().to_string()).or_default();
            stage.count += 1;
            stage.bytes += t.bytes[i];
            if action == Action::Complete {
                let done = device.completed.entry(op.name().to_string()).or_default();
                done.count += 1;
                done.bytes += t.bytes[i];
            }
        }
        let mut r = ParseReport::default();
        r.count(&t);
        assert_eq!(r.events, n as u64);
        assert_eq!(r.devices, want_devices);
        assert_eq!(r.devices.len(), 3);
        assert_eq!(
            (&r.per_action, &r.per_operation, &r.per_kind),
            (&want.0, &want.1, &want.2)
        );
        assert_eq!(
            (&r.bytes_per_action, &r.bytes_per_operation),
            (&want_bytes.0, &want_bytes.1)
        );
        // A trace parsed in pieces adds up: here the same table twice.
        r.add_counts(&t);
        assert_eq!(r.events, 2 * n as u64);
        assert!(r.per_kind.iter().all(|(k, &v)| v == 2 * want.2[k]));
        assert!(r
            .bytes_per_action
            .iter()
            .all(|(k, &v)| v == 2 * want_bytes.0[k]));
        let twice = |t: &Tally| Tally {
            count: 2 * t.count,
            bytes: 2 * t.bytes,
        };
        for (device, totals) in &r.devices {
            let want = &want_devices[device];
            assert!(totals
                .completed
                .iter()
                .all(|(k, v)| *v == twice(&want.completed[k])));
            assert!(totals
                .stages
                .iter()
                .all(|(k, v)| *v == twice(&want.stages[k])));
        }
    }
}
