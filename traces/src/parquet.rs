//! Traces straight to a Parquet file of the event table ([`crate::arrow::schema`]), written
//! row group by row group as the rows are decoded: a trace of any length, blktrace binary
//! or text (ftrace, blkparse), is parsed in the memory of a few row groups.
//!
//! Each row group's columns are encoded on all cores while the next row group is decoded.
//! Every column is compressed with zstd. The integer columns are delta-encoded
//! (DELTA_BINARY_PACKED): times and sequence numbers rise by small steps and most other
//! integers repeat, so zstd gets a twelfth of the bytes plain encoding gives it (10^7
//! events: 15% less time, a 22% smaller file, read as fast by Polars). The Arrow
//! dictionary columns (kind, comm, action, operation, rwbs, name) are written plain:
//! Parquet's dictionary encoding interns every row's string again (the Arrow dictionary's
//! keys are not reused), which took a third of the write's CPU, and zstd makes their
//! repeats almost as small. Column statistics (min/max, which readers use to
//! skip row groups, e.g. by time) are kept for the numeric columns: for the dictionary and
//! text columns the writer works them out row by row, which doubled the write time.
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;

use crate::{binary, blkparse_text, ftrace};
use crate::{detect, EventTable, Format, ParseError, ParseReport, TaskNames};

/// How the file is written; [`Default`] is what `sqlwa parse -o` uses.
#[derive(Clone, Debug)]
pub struct ParquetOptions {
    /// Rows per row group (binary traces: about as many, in whole batches of the merge),
    /// which sets the memory a parse holds: a few row groups.
    pub row_group_rows: usize,
    /// Threads decoding and encoding each row group (0: the available cores).
    pub threads: usize,
    /// Names for the rows a trace left unnamed ([`EventTable::name_tasks`]).
    pub task_names: Option<TaskNames>,
}

/// Rows per row group unless asked otherwise: Polars' own default, and a parse of any
/// length then peaks at about 200 MB here.
pub const ROW_GROUP_ROWS: usize = 1 << 18;

impl Default for ParquetOptions {
    fn default() -> Self {
        ParquetOptions {
            row_group_rows: ROW_GROUP_ROWS,
            threads: 0,
            task_names: None,
        }
    }
}

/// The columns kept without statistics: Arrow's dictionary columns, and the text.
const STRING_COLUMNS: [&str; 7] = [
    "kind",
    "comm",
    "action",
    "operation",
    "rwbs",
    "name",
    "text",
];

/// Parses the traces as [`crate::parse_paths`] does and writes the event table to `out`.
/// The file is written beside `out` without a name (O_TMPFILE) and given `out`'s name once
/// whole, so a failed parse leaves `out` as it was (a file already there is not lost) and
/// no partial file behind, even when the process is killed. Returns the report, with the
/// counts of every row written.
///
/// ```
/// use blktrace_parse::parquet::{parse_to_parquet, ParquetOptions};
/// use blktrace_parse::Format;
/// use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
/// # let trace = "\
/// #     sqlite-1234 [001] d..1. 1234.567890: block_rq_issue: 7,0 WS 4096 () 1234 + 8 [sqlite]
/// #     <idle>-0    [001] ..s1. 1234.567990: block_rq_complete: 7,0 WS () 1234 + 8 [0]
/// # ";
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("trace.txt");
/// # std::fs::write(&path, trace)?;
/// // `path`: the two-line ftrace trace of the crate's example (an issue and a completion).
/// let out = dir.path().join("events.parquet");
/// let report = parse_to_parquet(&[path], Format::Auto, false, &out, ParquetOptions::default())?;
/// assert_eq!(report.events, 2);
///
/// let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&out)?)?;
/// assert_eq!(reader.schema(), &blktrace_parse::arrow::schema());
/// assert_eq!(reader.metadata().file_metadata().num_rows(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_to_parquet(
    paths: &[PathBuf],
    format: Format,
    lenient: bool,
    out: &Path,
    options: ParquetOptions,
) -> Result<ParseReport, ParseError> {
    parse_to_parquet_until(paths, (format, lenient), out, options, &mut || Ok(()))
}

/// [`parse_to_parquet`], asking `go_on` before each row group is written whether to go on:
/// its error stops the parse (within a row group's time: a tenth of a second here) and is
/// the answer, and `out` is left as it was.
pub fn parse_to_parquet_until(
    paths: &[PathBuf],
    (format, lenient): (Format, bool),
    out: &Path,
    options: ParquetOptions,
    go_on: &mut dyn FnMut() -> Result<(), ParseError>,
) -> Result<ParseReport, ParseError> {
    let dir = match out.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let partial = Partial::new_in(dir).map_err(|e| ParseError::io(out, e))?;
    let file = partial
        .file()
        .try_clone()
        .map_err(|e| ParseError::io(out, e))?;
    let report = write((paths, format, lenient), file, out, options, go_on)?;
    go_on()?; // a stop asked for while the footer was written still leaves `out` alone
    partial.persist(out).map_err(|e| ParseError::io(out, e))?;
    Ok(report)
}

/// The output while it is written: an unnamed file where the filesystem makes them
/// (O_TMPFILE: gone with the process, whatever ends it), else a named temporary file
/// (removed when dropped, so on every error, but left by a kill -9).
enum Partial {
    Unnamed(File),
    Named(tempfile::NamedTempFile),
}

impl Partial {
    fn new_in(dir: &Path) -> std::io::Result<Partial> {
        use std::os::unix::fs::OpenOptionsExt;
        let unnamed = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .mode(0o644)
            .open(dir);
        match unnamed {
            Ok(file) => Ok(Partial::Unnamed(file)),
            // EOPNOTSUPP, EISDIR (kernels or filesystems without O_TMPFILE): a named file.
            Err(_) => tempfile::Builder::new()
                .prefix(".sqlwa-parse-")
                .suffix(".parquet.partial")
                .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
                .tempfile_in(dir)
                .map(Partial::Named),
        }
    }

    fn file(&self) -> &File {
        match self {
            Partial::Unnamed(file) => file,
            Partial::Named(named) => named.as_file(),
        }
    }

    /// Names the whole file `out`, replacing what was there in one step (rename).
    fn persist(self, out: &Path) -> std::io::Result<()> {
        match self {
            Partial::Named(named) => named.persist(out).map(drop).map_err(|e| e.error),
            Partial::Unnamed(file) => {
                // linkat of /proc/self/fd/N (AT_SYMLINK_FOLLOW) gives an O_TMPFILE file a
                // name without privileges; it cannot replace a file, so the name is a
                // fresh one beside `out`, renamed onto it at once.
                use std::os::unix::ffi::OsStrExt;
                use std::os::unix::io::AsRawFd;
                let beside = out.with_file_name(format!(
                    ".sqlwa-parse-{}-{}.parquet",
                    std::process::id(),
                    file.as_raw_fd()
                ));
                let cstring = |p: &Path| {
                    std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other)
                };
                let source = cstring(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())))?;
                let target = cstring(&beside)?;
                // SAFETY: both paths are NUL-terminated C strings that outlive the call.
                let linked = unsafe {
                    libc::linkat(
                        libc::AT_FDCWD,
                        source.as_ptr(),
                        libc::AT_FDCWD,
                        target.as_ptr(),
                        libc::AT_SYMLINK_FOLLOW,
                    )
                };
                if linked != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                std::fs::rename(&beside, out).inspect_err(|_| {
                    let _ = std::fs::remove_file(&beside);
                })
            }
        }
    }
}

/// Writes the table into `file`; errors name `out`, the file the user asked for.
fn write(
    (paths, format, lenient): (&[PathBuf], Format, bool),
    file: File,
    out: &Path,
    options: ParquetOptions,
    go_on: &mut dyn FnMut() -> Result<(), ParseError>,
) -> Result<ParseReport, ParseError> {
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let writer = ArrowWriter::try_new(file, crate::arrow::schema(), Some(properties()))
        .map_err(|e| parquet_error(out, e))?;
    // The same file and properties (the Arrow schema in the footer, which gives readers
    // the dictionary types back), its columns then encoded in parallel.
    let (writer, columns) = writer
        .into_serialized_writer()
        .map_err(|e| parquet_error(out, e))?;
    let mut report = ParseReport::default();
    let (batches, queue) = crossbeam_channel::bounded::<RecordBatch>(1);
    let parsed = std::thread::scope(|s| {
        let encoder = s.spawn(move || {
            encode(writer, &columns, queue, threads).map_err(|e| parquet_error(out, e))
        });
        let mut write_table = |mut table: EventTable| -> Result<(), ParseError> {
            if let Some(names) = &options.task_names {
                table.name_tasks(names);
            }
            let batch = crate::arrow::to_record_batch(table)
                .map_err(|e| ParseError::Usage(format!("building the Arrow table failed: {e}")))?;
            // A trace of binary and text files comes whole: cut into row groups (slices
            // share the columns); a text chunk can also run past a row group by a segment.
            for start in (0..batch.num_rows()).step_by(options.row_group_rows.max(1)) {
                go_on()?;
                let rows = options.row_group_rows.min(batch.num_rows() - start);
                // Fails only once the encoder has stopped, whose error is the answer.
                batches
                    .send(batch.slice(start, rows))
                    .map_err(|_| ParseError::Usage("the Parquet encoder stopped".into()))?;
            }
            Ok(())
        };
        let read = read_all(
            paths,
            (format, lenient),
            (options.row_group_rows, threads),
            &mut report,
            &mut write_table,
        );
        drop(batches);
        let encoded = encoder.join().expect("Parquet encoder panicked");
        // The encoder's error explains a read stopped by it.
        encoded.and(read)
    });
    parsed?;
    Ok(report)
}

fn properties() -> WriterProperties {
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::Chunk);
    for column in STRING_COLUMNS {
        props = props.set_column_statistics_enabled(column.into(), EnabledStatistics::None);
    }
    for field in crate::arrow::schema().fields() {
        if field.data_type().is_integer() {
            props = props
                .set_column_encoding(field.name().as_str().into(), Encoding::DELTA_BINARY_PACKED);
        }
    }
    props.build()
}

/// Hands every row of the traces to `sink` in tables of about a row group: binary traces
/// merged, text files one after another in the order given. Binary and text files given
/// together are parsed whole first (the in-memory read's order: text rows, then the merged
/// binary ones).
fn read_all(
    paths: &[PathBuf],
    (format, lenient): (Format, bool),
    (row_group_rows, threads): (usize, usize),
    report: &mut ParseReport,
    sink: &mut dyn FnMut(EventTable) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let files = formats_of(paths, format)?;
    report.files = files
        .iter()
        .map(|(p, f)| (p.display().to_string(), f.name().to_string()))
        .collect();
    let binary: Vec<PathBuf> = files
        .iter()
        .filter(|(_, f)| *f == Format::Blktrace)
        .map(|(p, _)| p.clone())
        .collect();
    if binary.len() == files.len() {
        return binary::read_in_chunks(&binary, lenient, report, (row_group_rows, threads), sink);
    }
    if !binary.is_empty() {
        let (table, parsed) = crate::parse_paths(paths, format, lenient)?;
        *report = parsed;
        return sink(table);
    }
    for (path, fmt) in &files {
        match fmt {
            Format::Ftrace => ftrace::read_in_chunks(path, lenient, report, row_group_rows, sink)?,
            _ => blkparse_text::read_in_chunks(path, lenient, report, row_group_rows, sink)?,
        }
    }
    Ok(())
}
/// Writes each batch as a row group as they come, its columns encoded on `threads`
/// threads, then the file's footer.
fn encode(
    mut writer: SerializedFileWriter<File>,
    columns: &ArrowRowGroupWriterFactory,
    queue: crossbeam_channel::Receiver<RecordBatch>,
    threads: usize,
) -> Result<(), ParquetError> {
    for (index, batch) in queue.into_iter().enumerate() {
        let mut row_group = writer.next_row_group()?;
        for chunk in encode_columns(&batch, columns.create_column_writers(index)?, threads)? {
            chunk.append_to_row_group(&mut row_group)?;
        }
        row_group.close()?;
    }
    writer.close()?;
    Ok(())
}

/// The batch's columns encoded, in schema order: column k on thread k mod `threads`.
fn encode_columns(
    batch: &RecordBatch,
    writers: Vec<ArrowColumnWriter>,
    threads: usize,
) -> Result<Vec<ArrowColumnChunk>, ParquetError> {
    let schema: SchemaRef = batch.schema();
    // Every column of this schema is one leaf (no nesting): writer k is column k's.
    let mut shares: Vec<Vec<(usize, ArrowColumnWriter)>> =
        (0..threads).map(|_| Vec::new()).collect();
    for (k, writer) in writers.into_iter().enumerate() {
        shares[k % threads].push((k, writer));
    }
    let encoded: Vec<Result<Vec<(usize, ArrowColumnChunk)>, ParquetError>> =
        std::thread::scope(|s| {
            let handles: Vec<_> = shares
                .into_iter()
                .map(|share| {
                    let schema = Arc::clone(&schema);
                    s.spawn(move || {
                        share
                            .into_iter()
                            .map(|(k, mut writer)| {
                                for leaf in compute_leaves(schema.field(k), batch.column(k))? {
                                    writer.write(&leaf)?;
                                }
                                Ok((k, writer.close()?))
                            })
                            .collect()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("column encoder panicked"))
                .collect()
        });
    let mut chunks = Vec::with_capacity(schema.fields().len());
    for share in encoded {
        chunks.extend(share?);
    }
    chunks.sort_unstable_by_key(|&(k, _)| k);
    Ok(chunks.into_iter().map(|(_, chunk)| chunk).collect())
}

/// Every file to read (binary base names expanded to their per-CPU files) with its format.
fn formats_of(paths: &[PathBuf], format: Format) -> Result<Vec<(PathBuf, Format)>, ParseError> {
    if paths.is_empty() {
        return Err(ParseError::Usage("no trace files given".into()));
    }
    binary::expand_paths(paths)?
        .into_iter()
        .map(|path| {
            let fmt = match format {
                Format::Auto => detect(&path)?,
                given => given,
            };
            Ok((path, fmt))
        })
        .collect()
}

/// A failed write as the I/O error it is (a full disk names the file and ENOSPC), else
/// the Parquet library's message.
fn parquet_error(out: &Path, e: ParquetError) -> ParseError {
    match e {
        ParquetError::External(inner) => match inner.downcast::<std::io::Error>() {
            Ok(io) => ParseError::io(out, *io),
            Err(other) => ParseError::Usage(format!("writing {}: {other}", out.display())),
        },
        other => ParseError::Usage(format!("writing {}: {other}", out.display())),
    }
}
