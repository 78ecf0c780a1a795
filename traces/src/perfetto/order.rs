//! The rows of every CPU in one time order, by an external sort: sorted runs of
//! `RUN_ROWS` rows go one after another to an anonymous temporary file (gone when closed,
//! even if the process is killed) and are merged as the lines are written, so a trace of any length is
//! ordered in the memory of one run. Events of one nanosecond keep their reading order,
//! with the syscalls after the rest.
//!
//! (The `extsort` crate does this too, but its 0.5.0 returns nothing at all when the row
//! count is a multiple of its run length plus one: a run spilled and an empty buffer are
//! taken for "everything fits in memory".)
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::lines::{Call, Syscall};

/// Rows sorted in memory before a run is written (~60 MB of rows and their lines).
pub const RUN_ROWS: usize = 1 << 19;
/// The reading order of syscall rows starts here, after every other row's: ties in time
/// put the syscalls last, as the kernel's text output of a Perfetto capture did.
pub const SYSCALL_SEQ: u64 = 1 << 62;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub ts: u64,
    /// Reading order (ties in time are broken by it).
    pub seq: u64,
    /// Byte offset of the packet the event came from (said in errors about it).
    pub packet: u64,
    pub body: Body,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// The event's ftrace line.
    Line(Box<[u8]>),
    /// A syscall, named once the trace's machine is known.
    Syscall(Box<Syscall>),
}

pub fn by_time(a: &Row, b: &Row) -> Ordering {
    (a.ts, a.seq).cmp(&(b.ts, b.seq))
}

const LINE: u8 = 0;
const ENTER: u8 = 1;
const EXIT: u8 = 2;

impl Row {
    fn key(&self) -> (u64, u64) {
        (self.ts, self.seq)
    }

    fn encode<W: Write>(&self, w: &mut W) -> io::Result<()> {
        w.write_all(&self.ts.to_le_bytes())?;
        w.write_all(&self.seq.to_le_bytes())?;
        w.write_all(&self.packet.to_le_bytes())?;
        match &self.body {
            Body::Line(line) => {
                w.write_all(&[LINE])?;
                w.write_all(&(line.len() as u32).to_le_bytes())?;
                w.write_all(line)
            }
            Body::Syscall(s) => {
                let exit;
                let (tag, values): (u8, &[u64]) = match &s.call {
                    Call::Enter(args) => (ENTER, args),
                    Call::Exit(ret) => {
                        exit = [*ret as u64];
                        (EXIT, &exit)
                    }
                };
                w.write_all(&[tag])?;
                w.write_all(&s.cpu.to_le_bytes())?;
                w.write_all(&s.pid.to_le_bytes())?;
                w.write_all(&s.number.to_le_bytes())?;
                w.write_all(&(values.len() as u32).to_le_bytes())?;
                values
                    .iter()
                    .try_for_each(|v| w.write_all(&v.to_le_bytes()))
            }
        }
    }

    /// The next row of a run; None at its end.
    fn decode<R: Read>(r: &mut R) -> io::Result<Option<Row>> {
        let ts = match u64_of(r) {
            Ok(ts) => ts,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        };
        let seq = u64_of(r)?;
        let packet = u64_of(r)?;
        let mut tag = [0u8];
        r.read_exact(&mut tag)?;
        let body = if tag[0] == LINE {
            let mut line = vec![0u8; u32_of(r)? as usize];
            r.read_exact(&mut line)?;
            Body::Line(line.into_boxed_slice())
        } else {
            let (cpu, pid, number) = (u64_of(r)?, u64_of(r)? as i64, u64_of(r)? as i64);
            let values = (0..u32_of(r)?)
                .map(|_| u64_of(r))
                .collect::<io::Result<Vec<u64>>>()?;
            let call = match tag[0] {
                ENTER => Call::Enter(values),
                _ => Call::Exit(values.first().copied().unwrap_or(0) as i64),
            };
            Body::Syscall(Box::new(Syscall {
                cpu,
                pid,
                number,
                call,
            }))
        };
        Ok(Some(Row {
            ts,
            seq,
            packet,
            body,
        }))
    }
}

/// Rows pushed in any order, read back in time order.
pub struct Sorter {
    run_rows: usize,
    dir: PathBuf,
    held: Vec<Row>,
    /// One anonymous file holds every run, one after another (one descriptor whatever
    /// the trace's length), and each run's byte range in it.
    spill: Option<Arc<File>>,
    runs: Vec<(u64, u64)>,
}

impl Sorter {
    /// Runs of `run_rows` rows spill to an anonymous file in `dir`.
    pub fn new(run_rows: usize, dir: &Path) -> Sorter {
        Sorter {
            run_rows: run_rows.max(1),
            dir: dir.to_path_buf(),
            held: Vec::new(),
            spill: None,
            runs: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Row) -> io::Result<()> {
        self.held.push(row);
        if self.held.len() >= self.run_rows {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> io::Result<()> {
        self.held.sort_unstable_by(by_time);
        let file = match &self.spill {
            Some(file) => file.clone(),
            None => self
                .spill
                .insert(Arc::new(tempfile::tempfile_in(&self.dir)?))
                .clone(),
        };
        let start = self.runs.last().map_or(0, |&(_, end)| end);
        let mut run = BufWriter::with_capacity(1 << 20, &*file);
        self.held
            .drain(..)
            .try_for_each(|row| row.encode(&mut run))?;
        let end = run.stream_position()?;
        run.flush()?;
        self.runs.push((start, end));
        Ok(())
    }

    /// Every row pushed, in time order: the held rows sorted where no run was spilled,
    /// else the runs merged (one row of each in memory, and its reader's buffer).
    pub fn sorted(mut self) -> io::Result<Sorted> {
        if self.runs.is_empty() {
            self.held.sort_unstable_by(by_time);
            return Ok(Sorted(Merge::Held(self.held.into_iter())));
        }
        if !self.held.is_empty() {
            self.spill()?;
        }
        let file = self.spill.take().expect("runs were spilled");
        let mut runs: Vec<_> = self
            .runs
            .iter()
            .map(|&(pos, end)| {
                let run = Run {
                    file: file.clone(),
                    pos,
                    end,
                };
                BufReader::with_capacity(1 << 16, run)
            })
            .collect();
        let mut heads = BinaryHeap::with_capacity(runs.len());
        for (i, run) in runs.iter_mut().enumerate() {
            if let Some(row) = Row::decode(run)? {
                heads.push(Reverse(Head {
                    key: row.key(),
                    run: i,
                    row,
                }));
            }
        }
        Ok(Sorted(Merge::Merged { runs, heads }))
    }
}

/// One run's bytes in the spill file, read at its own position (pread): the runs share
/// the file, not a file offset.
struct Run {
    file: Arc<File>,
    pos: u64,
    end: u64,
}

impl Read for Run {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let want = buf
            .len()
            .min(usize::try_from(self.end - self.pos).unwrap_or(usize::MAX));
        let got = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

/// A run's next row in the merge, ordered by its key (keys are unique: `seq` is).
struct Head {
    key: (u64, u64),
    run: usize,
    row: Row,
}

impl PartialEq for Head {
    fn eq(&self, other: &Head) -> bool {
        self.key == other.key
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Head) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    fn cmp(&self, other: &Head) -> Ordering {
        self.key.cmp(&other.key)
    }
}

/// The rows in time order (an iterator over them).
pub struct Sorted(Merge);

enum Merge {
    Held(std::vec::IntoIter<Row>),
    Merged {
        runs: Vec<BufReader<Run>>,
        heads: BinaryHeap<Reverse<Head>>,
    },
}

impl Iterator for Sorted {
    type Item = io::Result<Row>;

    fn next(&mut self) -> Option<io::Result<Row>> {
        match &mut self.0 {
            Merge::Held(rows) => rows.next().map(Ok),
            Merge::Merged { runs, heads } => {
                let Reverse(head) = heads.pop()?;
                match Row::decode(&mut runs[head.run]) {
                    Ok(Some(row)) => heads.push(Reverse(Head {
                        key: row.key(),
                        run: head.run,
                        row,
                    })),
                    Ok(None) => {}
                    Err(e) => return Some(Err(e)),
                }
                Some(Ok(head.row))
            }
        }
    }
}

fn u64_of<R: Read>(r: &mut R) -> io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn u32_of<R: Read>(r: &mut R) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn row(ts: u64, seq: u64, syscall: bool) -> Row {
        let body = if syscall {
            Body::Syscall(Box::new(Syscall {
                cpu: 1,
                pid: 2,
                number: 82,
                call: Call::Exit(-4),
            }))
        } else {
            Body::Line(format!("line {seq}\n").into_bytes().into_boxed_slice())
        };
        Row {
            ts,
            seq,
            packet: seq * 10,
            body,
        }
    }

    proptest! {
        /// Any rows, any run length (the row count a multiple of it, or one more, among
        /// them): read back they are the rows sorted by time, then reading order.
        #[test]
        fn the_merge_of_the_runs_is_the_sort(
            times in proptest::collection::vec((0u64..5, any::<bool>()), 0..40),
            run_rows in 1usize..6,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let rows: Vec<Row> = times.iter().enumerate().map(|(i, &(ts, sys))| row(ts, i as u64, sys)).collect();
            let mut sorter = Sorter::new(run_rows, dir.path());
            rows.iter().cloned().try_for_each(|r| sorter.push(r)).unwrap();
            let got: Vec<Row> = sorter.sorted().unwrap().collect::<io::Result<_>>().unwrap();
            let mut expected = rows;
            expected.sort_by(by_time);
            prop_assert_eq!(got, expected);
            // The runs' file is anonymous: nothing is left in the directory.
            prop_assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }
}
