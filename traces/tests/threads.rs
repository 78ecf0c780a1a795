//! The binary reader's parallel second pass: any number of decoding threads (which take
//! batches of rows while the merge is still handing them on) yields the same table, row
//! for row, including long single-file stretches (split into several runs), notify
//! records, messages, payloads and errors.
mod common;

use blktrace_parse::binary::{read_in_chunks, read_with_threads, ta};
use blktrace_parse::rwbs::category as c;
use blktrace_parse::writer::{self, act, dev, RawRecord};
use blktrace_parse::{EventTable, ParseReport};
use common::*;

/// Three per-CPU files: CPU 0 and 1 interleave, CPU 2 runs alone long after them (one
/// stretch of 40 000 records, longer than a run), CPU 1 names its pid late.
fn write_trace(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let d = dev(8, 0);
    let mut files = vec![Vec::new(), Vec::new(), Vec::new()];
    let mut seq = 0u32;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for (cpu, out) in files.iter_mut().enumerate() {
        let cpu = cpu as u32;
        let big = cpu == 1;
        let mut time = if cpu == 2 {
            10_000_000_000
        } else {
            1_000 + cpu as u64
        };
        let count = if cpu == 2 { 40_000 } else { 30_000 };
        if cpu != 1 {
            writer::write_record(
                out,
                &writer::process_notify(time, 100 + cpu, cpu, d, &format!("p{cpu}")),
                big,
                7,
            );
        }
        for k in 0..count {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            time += 1 + rng % 50;
            seq += 1;
            let (code, cats, pdu) = match rng % 11 {
                0 => (
                    ta::REMAP,
                    c::QUEUE | c::WRITE,
                    writer::remap_pdu(dev(253, 1), d, rng % 999),
                ),
                1 => (ta::UNPLUG_IO, c::QUEUE, writer::be64_pdu(rng % 7 + 1)),
                2 => (ta::COMPLETE, c::COMPLETE | c::READ, vec![]),
                3 => (ta::DRV_DATA, c::DRV_DATA, vec![1, 2, 3]),
                4 => (
                    ta::SPLIT,
                    c::QUEUE | c::WRITE | c::SYNC,
                    writer::be64_pdu(rng % 1000),
                ),
                5 => (ta::ISSUE, c::ISSUE | c::WRITE | c::FUA | c::FLUSH, vec![]),
                _ => (ta::QUEUE, c::QUEUE | c::WRITE, vec![]),
            };
            let mut r = RawRecord {
                sequence: seq,
                time,
                sector: rng % 1_000_000,
                bytes: if rng % 13 == 0 { 0 } else { 4096 },
                action: act(code, cats),
                pid: 100 + cpu,
                device: d,
                cpu,
                error: if rng % 97 == 0 { (-5i16) as u16 } else { 0 },
                pdu,
            };
            if rng % 89 == 0 {
                r = writer::with_cgroup(r, rng % 1000 + 1, big);
            }
            writer::write_record(out, &r, big, 7);
            if k % 5000 == 17 {
                writer::write_record(
                    out,
                    &writer::message(time, 100 + cpu, cpu, d, &format!("msg {k}")),
                    big,
                    7,
                );
            }
            if cpu == 1 && k == 20_000 {
                writer::write_record(
                    out,
                    &writer::process_notify(time, 101, cpu, d, "late-name"),
                    big,
                    7,
                );
            }
        }
    }
    let dir_files: Vec<_> = (0..3)
        .map(|n| dir.join(format!("t.blktrace.{n}")))
        .collect();
    for (path, bytes) in dir_files.iter().zip(&files) {
        std::fs::write(path, bytes).unwrap();
    }
    dir_files
}

fn read(paths: &[std::path::PathBuf], threads: usize) -> (EventTable, ParseReport) {
    let mut t = EventTable::new();
    let mut r = ParseReport::default();
    read_with_threads(paths, false, &mut t, &mut r, Some(threads)).unwrap();
    (t, r)
}

/// Panics with the first differing row, not two whole columns.
fn same<T: PartialEq + std::fmt::Debug>(name: &str, a: &[T], b: &[T]) {
    assert_eq!(a.len(), b.len(), "{name}: lengths");
    if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
        panic!("{name}: row {i} differs: {:?} vs {:?}", a[i], b[i]);
    }
}

/// Panics at the first column (and row) where the tables differ.
fn same_table(t: &EventTable, one: &EventTable) {
    same("kind", &t.kind, &one.kind);
    same("time_ns", &t.time_ns, &one.time_ns);
    same("dev_major", &t.dev_major, &one.dev_major);
    same("dev_minor", &t.dev_minor, &one.dev_minor);
    same("cpu", &t.cpu, &one.cpu);
    same("sequence", &t.sequence, &one.sequence);
    same("pid", &t.pid, &one.pid);
    same("comm", &t.comm, &one.comm);
    same("action", &t.action, &one.action);
    same("operation", &t.operation, &one.operation);
    same("flags", &t.flags, &one.flags);
    same("sector", &t.sector, &one.sector);
    same("sectors", &t.sectors, &one.sectors);
    same("bytes", &t.bytes, &one.bytes);
    same("error", &t.error, &one.error);
    same("rwbs", &t.rwbs, &one.rwbs);
    same("name", &t.name, &one.name);
    assert_eq!(t.sparse, one.sparse, "sparse fields");
    assert_eq!(t.comms.values, one.comms.values);
    assert_eq!(t.rwbs_values.values, one.rwbs_values.values);
    assert_eq!(t.names.values, one.names.values);
}

#[test]
fn any_thread_count_gives_the_same_table() {
    let dir = Scratch::new("threads");
    let paths = write_trace(&dir);
    let (one, report_one) = read(&paths, 1);
    assert!(one.len() > 90_000);
    assert!(one.comm_at(one.len() - 1) == "p2");
    assert!((0..one.len()).any(|i| one.comm_at(i) == "late-name"));
    for threads in [2, 3, 7] {
        let (t, report) = read(&paths, threads);
        assert_eq!(report, report_one);
        assert_eq!(t.len(), one.len());
        same_table(&t, &one);
    }
}

/// The streamed reader: chunks of any size (smaller than a batch, between, bigger than the
/// trace), decoded on any number of threads, append to the table the whole read gives,
/// with the same report, counts included.
#[test]
fn chunks_of_any_size_append_to_the_whole_table() {
    let dir = Scratch::new("chunks");
    let paths = write_trace(&dir);
    let (whole, mut report_whole) = read(&paths, 1);
    report_whole.count(&whole);
    for (chunk_rows, threads) in [(1_000, 1), (20_000, 2), (40_000, 3), (1 << 20, 2)] {
        let mut joined = EventTable::new();
        let mut report = ParseReport::default();
        let mut sizes = Vec::new();
        read_in_chunks(
            &paths,
            false,
            &mut report,
            (chunk_rows, threads),
            &mut |chunk| {
                sizes.push(chunk.len());
                joined.append(&chunk);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(report, report_whole, "report, chunks of {chunk_rows}");
        assert!(sizes[..sizes.len() - 1].iter().all(|&n| n >= chunk_rows));
        // Whole batches of 16 Ki rows or more: the last chunk may take what is left.
        assert_eq!(sizes.len() > 1, chunk_rows < whole.len() / 2, "{sizes:?}");
        same_table(&joined, &whole);
    }
}

/// A sink's error ends the read (and the merge) and is the answer.
#[test]
fn a_failing_sink_stops_the_read_with_its_error() {
    let dir = Scratch::new("sink-error");
    let paths = write_trace(&dir);
    let mut chunks = 0;
    let err = read_in_chunks(
        &paths,
        false,
        &mut ParseReport::default(),
        (1_000, 2),
        &mut |_| {
            chunks += 1;
            Err(blktrace_parse::ParseError::Usage("disk full".into()))
        },
    )
    .unwrap_err();
    assert_eq!(chunks, 1);
    assert!(err.to_string().contains("disk full"), "{err}");
}

/// Written to Parquet in row groups and read back with the Parquet library's own reader,
/// the table equals the one the whole read converts to Arrow, and the report is the
/// whole parse's: for the binary trace and a text trace.
#[cfg(feature = "parquet")]
#[test]
fn parquet_output_reads_back_as_the_arrow_table() {
    use blktrace_parse::parquet::{parse_to_parquet, ParquetOptions};
    use blktrace_parse::{parse_paths, Format};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let dir = Scratch::new("parquet");
    let binary = write_trace(&dir);
    let text = vec![sample("ftrace-loop-ext4/trace.txt")];
    for (paths, row_group_rows) in [(&binary, 7_000), (&binary, 1 << 20), (&text, 500)] {
        let (table, report) = parse_paths(paths, Format::Auto, false).unwrap();
        let want = blktrace_parse::arrow::to_record_batch(table).unwrap();
        let out = dir.join("events.parquet");
        let options = ParquetOptions {
            row_group_rows,
            threads: 2,
            ..ParquetOptions::default()
        };
        let written = parse_to_parquet(paths, Format::Auto, false, &out, options).unwrap();
        assert_eq!(written, report);
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&out).unwrap()).unwrap();
        let groups = reader.metadata().row_groups();
        assert!(groups
            .iter()
            .all(|g| g.num_rows() as usize <= row_group_rows));
        assert_eq!(groups.len() > 1, want.num_rows() > row_group_rows);
        assert_encodings(groups, &want.schema());
        assert_reads_back_as(reader, &want, "");
    }
}

/// The encodings the write's speed rests on: integer columns delta-encoded, no column
/// with a dictionary page (Parquet's dictionary interns every row's string again).
#[cfg(feature = "parquet")]
fn assert_encodings(
    groups: &[parquet::file::metadata::RowGroupMetaData],
    schema: &arrow_schema::Schema,
) {
    use parquet::basic::Encoding;
    for group in groups {
        for (column, field) in group.columns().iter().zip(schema.fields()) {
            let encodings: Vec<Encoding> = column.encodings().collect();
            assert!(
                column.dictionary_page_offset().is_none(),
                "{}",
                field.name()
            );
            assert_eq!(
                encodings.contains(&Encoding::DELTA_BINARY_PACKED),
                field.data_type().is_integer(),
                "{}: {encodings:?}",
                field.name()
            );
        }
    }
}

/// The Parquet file's rows, read by the Parquet library's own reader, equal `want`
/// column by column.
#[cfg(feature = "parquet")]
fn assert_reads_back_as(
    reader: parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder<std::fs::File>,
    want: &arrow_array::RecordBatch,
    what: &str,
) {
    let batches: Vec<_> = reader.build().unwrap().map(Result::unwrap).collect();
    let got = arrow_select::concat::concat_batches(&want.schema(), &batches).unwrap();
    assert_eq!(got.num_rows(), want.num_rows(), "{what}");
    for (i, field) in want.schema().fields().iter().enumerate() {
        assert_eq!(
            got.column(i).as_ref(),
            want.column(i).as_ref(),
            "{what} column {}",
            field.name()
        );
    }
}

/// Text traces longer than a few segments (8 MB of lines each) are written chunk by chunk
/// as they are read: ftrace and blkparse text, the table and report equal to the whole
/// read's, in more than one chunk of rows.
#[cfg(feature = "parquet")]
#[test]
fn long_text_traces_stream_to_parquet_as_the_whole_read() {
    use blktrace_parse::parquet::{parse_to_parquet, ParquetOptions};
    use blktrace_parse::{parse_paths, Format};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let dir = Scratch::new("parquet-text");
    for (name, sample_file) in [
        ("ftrace.txt", "ftrace-loop-ext4/trace.txt"),
        ("blkparse.txt", "blktrace-keks/keks.blkparse-q.txt"),
    ] {
        let one = std::fs::read(sample(sample_file)).unwrap();
        let long = dir.join(name);
        std::fs::write(&long, one.repeat((20 << 20) / one.len() + 1)).unwrap();
        let paths = vec![long];
        let (table, report) = parse_paths(&paths, Format::Auto, false).unwrap();
        let want = blktrace_parse::arrow::to_record_batch(table).unwrap();
        let out = dir.join("events.parquet");
        let options = ParquetOptions {
            row_group_rows: 40_000,
            threads: 2,
            ..ParquetOptions::default()
        };
        let written = parse_to_parquet(&paths, Format::Auto, false, &out, options).unwrap();
        assert_eq!(written, report, "{name}");
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&out).unwrap()).unwrap();
        assert!(reader.metadata().row_groups().len() > 3, "{name}");
        assert_reads_back_as(reader, &want, name);
    }
}

/// A write that fails leaves no file behind and says what failed.
#[cfg(feature = "parquet")]
#[test]
fn a_failed_parquet_write_removes_the_file() {
    use blktrace_parse::parquet::{parse_to_parquet, ParquetOptions};
    let dir = Scratch::new("parquet-bad");
    let bad = dir.join("bad.blktrace.0");
    std::fs::write(&bad, [b'x'; 96]).unwrap();
    let out = dir.join("events.parquet");
    let err = parse_to_parquet(
        std::slice::from_ref(&bad),
        blktrace_parse::Format::Blktrace,
        false,
        &out,
        ParquetOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("bad magic"), "{err}");
    assert!(!out.exists());
    // A file already at the output stays as it was, and no partial file is left beside it.
    std::fs::write(&out, b"an earlier table").unwrap();
    parse_to_parquet(
        &[bad],
        blktrace_parse::Format::Blktrace,
        false,
        &out,
        ParquetOptions::default(),
    )
    .unwrap_err();
    assert_eq!(std::fs::read(&out).unwrap(), b"an earlier table");
    let mut left: Vec<_> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["bad.blktrace.0", "events.parquet"]);
}

/// The output has no name in its directory until it is whole: a parse killed part-way
/// (which no cleanup sees) leaves nothing, and an earlier file there is replaced at once.
#[cfg(feature = "parquet")]
#[test]
fn the_output_has_no_name_until_it_is_whole() {
    use blktrace_parse::parquet::{parse_to_parquet, ParquetOptions};
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = Scratch::new("parquet-unnamed");
    let binary = write_trace(&dir);
    let out = dir.join("events.parquet");
    std::fs::write(&out, b"an earlier table").unwrap();
    let names = || -> BTreeSet<std::ffi::OsString> {
        std::fs::read_dir(&*dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect()
    };
    let before = names();
    let done = AtomicBool::new(false);
    let seen = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let mut seen = BTreeSet::new();
            while !done.load(Ordering::Relaxed) {
                seen.extend(names());
                std::thread::yield_now();
            }
            seen
        });
        let options = ParquetOptions {
            row_group_rows: 7_000,
            ..ParquetOptions::default()
        };
        let parsed = parse_to_parquet(&binary, blktrace_parse::Format::Auto, false, &out, options);
        done.store(true, Ordering::Relaxed); // before any unwrap: the watcher must end
        (parsed, watcher.join().unwrap())
    });
    let (parsed, seen) = seen;
    parsed.unwrap();
    // The whole file's fresh name may flash by between link and rename; nothing else
    // (a named partial file, `.sqlwa-parse-*.parquet.partial`, is what this rules out).
    let extra: Vec<_> = seen.difference(&before).collect();
    let whole = |n: &&std::ffi::OsString| {
        let n = n.to_string_lossy();
        n.starts_with(".sqlwa-parse-") && n.ends_with(".parquet")
    };
    assert!(extra.iter().all(whole) && extra.len() <= 1, "{extra:?}");
    assert_eq!(names(), before);
    assert_eq!(&std::fs::read(&out).unwrap()[..4], b"PAR1");
}
