//! Bindings for blktrace-parse: `parse_trace(paths, format="auto", lenient=False,
//! task_names=None)` returns
//! `(pyarrow.Table, report dict)`. The table crosses into Python through the Arrow C Data
//! Interface without copying the columns. `parse_trace_to_parquet(paths, output, ...)`
//! writes the table to a Parquet file instead, in bounded memory, and returns the report.
//! `render_perfetto(...)` prints a Perfetto trace's events as ftrace text for those two.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use blktrace_parse::parquet::{parse_to_parquet_until, ParquetOptions};
use blktrace_parse::perfetto::{self, Output, Reading, SyscallTables, Tuning};
use blktrace_parse::{parse_paths, Format, Location, ParseError, ParseReport, Tally, TaskNames};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};
use pyo3_arrow::PyTable;

use crate::{errno_of, trace_os_error_class, Raised, TraceParseError};

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parse_trace_to_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(render_perfetto, m)?)?;
    m.add("PERFETTO_UNNAMED", perfetto::UNNAMED)?;
    m.add_function(wrap_pyfunction!(parse_trace, m)?)
}

/// A `TraceParseError` per variant, its message (`args[0]`) the error's one line, with
/// `path`, `line` and `byte_offset` as data (None where not known). An I/O error is a
/// `TraceParseError` that is also the matching `OSError` subclass (lib.rs), with `errno`,
/// `strerror` and `filename` set as Python's own would have them.
fn to_py_err(py: Python<'_>, e: ParseError) -> PyErr {
    let message = e.to_string();
    let raised = match &e {
        ParseError::Bad { file, location, .. } => {
            let (line, byte_offset) = match location {
                Location::Line(line) => (Some(*line), None),
                Location::ByteOffset(offset) => (None, Some(*offset)),
                Location::Whole => (None, None),
            };
            let class = py.get_type::<TraceParseError>();
            new_trace_error(&class, message, Some(file), line, byte_offset)
        }
        ParseError::Io { file, source } => new_trace_os_error(py, message, file, source),
        ParseError::Usage(_) => {
            new_trace_error(&py.get_type::<TraceParseError>(), message, None, None, None)
        }
    };
    raised.map_or_else(|failed| failed, PyErr::from_value)
}

fn new_trace_error<'py>(
    class: &Bound<'py, PyType>,
    message: String,
    path: Option<&Path>,
    line: Option<u64>,
    byte_offset: Option<u64>,
) -> PyResult<Bound<'py, PyAny>> {
    let err = class.call1((message,))?;
    err.setattr("path", path.map(|p| p.to_string_lossy().into_owned()))?;
    err.setattr("line", line)?;
    err.setattr("byte_offset", byte_offset)?;
    Ok(err)
}

fn new_trace_os_error<'py>(
    py: Python<'py>,
    message: String,
    file: &Path,
    source: &std::io::Error,
) -> PyResult<Bound<'py, PyAny>> {
    let class = trace_os_error_class(py, source.kind())?;
    let err = new_trace_error(&class, message, Some(file), None, None)?;
    // An error of our own (no OS code) gets the errno of its kind, as the built-in would.
    let (errno, strerror) = match source.raw_os_error() {
        Some(code) => (
            Some(code.into_pyobject(py)?.into_any()),
            py.import("os")?.call_method1("strerror", (code,))?,
        ),
        None => (
            errno_of(py, source.kind())?,
            source.to_string().into_pyobject(py)?.into_any(),
        ),
    };
    err.setattr("errno", errno)?;
    err.setattr("strerror", strerror)?;
    err.setattr("filename", file.to_string_lossy().into_owned())?;
    Ok(err)
}

/// `task_names=(placeholder, {pid: name})`: the rows a trace left unnamed get their
/// task's name (Perfetto's events carry only a pid; its process tree names them).
fn task_names(names: Option<(String, HashMap<u32, String>)>) -> Option<TaskNames> {
    names.map(|(placeholder, by_pid)| TaskNames {
        placeholder,
        by_pid,
    })
}

/// Parse block traces (blktrace binary per-CPU files or their base name, blkparse text,
/// ftrace text) into one Arrow table; returns (pyarrow.Table, report dict). The parse runs
/// on a thread of its own while this one runs Python's signal handlers every tenth of a
/// second: an exception of theirs (Ctrl-C's KeyboardInterrupt) is raised at once, and the
/// parse, which cannot be stopped part-way, is abandoned (its table dropped when done).
#[pyfunction]
#[pyo3(signature = (paths, format = "auto", lenient = false, task_names = None))]
fn parse_trace<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
    format: &str,
    lenient: bool,
    task_names: Option<(String, HashMap<u32, String>)>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
    let format: Format = format.parse().map_err(|e| to_py_err(py, e))?;
    let names = self::task_names(task_names);
    let (done, parsed) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("sqlwa parse".into())
        .spawn(move || {
            // Nobody receives it once the parse was abandoned: nothing to do then.
            let _ = done.send(parse_to_batch(&paths, format, lenient, names.as_ref()));
        })?;
    let (batch, report) = wait_for(py, parsed)?.map_err(|e| to_py_err(py, e))?;
    let schema = batch.schema();
    let table = PyTable::try_new(vec![batch], schema)?.into_pyarrow(py)?;
    Ok((table, report_dict(py, &report)?))
}

fn parse_to_batch(
    paths: &[PathBuf],
    format: Format,
    lenient: bool,
    names: Option<&TaskNames>,
) -> Result<(RecordBatch, ParseReport), ParseError> {
    let (mut table, report) = parse_paths(paths, format, lenient)?;
    if let Some(names) = names {
        table.name_tasks(names);
    }
    let batch = blktrace_parse::arrow::to_record_batch(table)
        .map_err(|e| ParseError::Usage(format!("building the Arrow table failed: {e}")))?;
    Ok((batch, report))
}

/// What the worker sends on `parsed`, the GIL released meanwhile; Python's signal handlers
/// run every tenth of a second, and their exception is the answer.
fn wait_for<T: Send>(py: Python<'_>, parsed: std::sync::mpsc::Receiver<T>) -> PyResult<T> {
    use std::sync::mpsc::RecvTimeoutError;
    let mut parsed = parsed;
    loop {
        let (back, received) = py.detach(move || {
            let received = parsed.recv_timeout(std::time::Duration::from_millis(100));
            (parsed, received)
        });
        parsed = back;
        match received {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "the parse thread panicked",
                ))
            }
        }
    }
}

/// Parse block traces as `parse_trace` does and write the event table to a Parquet file,
/// row group by row group, in bounded memory; returns the report dict. The GIL is released
/// meanwhile; Python's signal handlers run before each row group, and an exception of
/// theirs (Ctrl-C's KeyboardInterrupt) stops the parse with `output` left as it was.
#[pyfunction]
#[pyo3(signature = (paths, output, format = "auto", lenient = false, task_names = None))]
fn parse_trace_to_parquet<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
    output: PathBuf,
    format: &str,
    lenient: bool,
    task_names: Option<(String, HashMap<u32, String>)>,
) -> PyResult<Bound<'py, PyDict>> {
    let format: Format = format.parse().map_err(|e| to_py_err(py, e))?;
    let options = ParquetOptions {
        task_names: self::task_names(task_names),
        ..ParquetOptions::default()
    };
    let raised = Raised::default();
    let mut go_on = || match raised.caught(|py| py.check_signals()) {
        true => Err(ParseError::Usage("stopped".into())),
        false => Ok(()),
    };
    let parsed = py
        .detach(|| parse_to_parquet_until(&paths, (format, lenient), &output, options, &mut go_on));
    let report = raised.result(parsed, |e| to_py_err(py, e))?;
    report_dict(py, &report)
}

/// `(numbers by machine, argument names by call, the machine assumed without system_info)`
type Syscalls = (
    HashMap<String, HashMap<i64, String>>,
    HashMap<String, Vec<String>>,
    String,
);

/// Print the Perfetto trace `path`'s events as ftrace lines in time order into `text`,
/// with each line's packet offset (8 bytes, little-endian) into `origins`; the sort's
/// runs go to a directory in `sort_dir` while it lasts. Returns what the packets said
/// (task names, losses, the machine) as a dict. The GIL is released meanwhile;
/// `progress(message)` is called from time to time, and Ctrl-C stops the work.
/// `run_rows` and `lines_per_report` change the sort's run length and how often the
/// writing is reported (tests make both small).
#[pyfunction]
#[pyo3(signature = (path, text, origins, sort_dir, syscalls, lenient = false, progress = None, run_rows = None, lines_per_report = None))]
#[allow(clippy::too_many_arguments)]
fn render_perfetto<'py>(
    py: Python<'py>,
    path: PathBuf,
    text: PathBuf,
    origins: PathBuf,
    sort_dir: PathBuf,
    syscalls: Syscalls,
    lenient: bool,
    progress: Option<Py<PyAny>>,
    run_rows: Option<usize>,
    lines_per_report: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let (numbers, arguments, default_machine) = syscalls;
    let default = Tuning::default();
    let tuning = Tuning {
        run_rows: run_rows.unwrap_or(default.run_rows).max(1),
        lines_per_report: lines_per_report.unwrap_or(default.lines_per_report).max(1),
    };
    let tables = SyscallTables {
        numbers,
        arguments,
        default_machine,
    };
    let out = Output {
        text: &text,
        origins: &origins,
        sort_dir: &sort_dir,
    };
    let raised = Raised::default();
    let mut tell = |message: &str| {
        let stopped = raised.caught(|py| {
            if let Some(callback) = &progress {
                callback.call1(py, (message,))?;
            }
            py.check_signals()
        });
        match stopped {
            true => Err(ParseError::Usage("stopped".into())),
            false => Ok(()),
        }
    };
    let rendered = py.detach(|| perfetto::render(&path, &out, lenient, &tables, tuning, &mut tell));
    let reading = raised.result(rendered, |e| to_py_err(py, e))?;
    reading_dict(py, &reading)
}

fn reading_dict<'py>(py: Python<'py>, r: &Reading) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("machine", r.machine.clone())?;
    d.set_item("names", r.names.clone())?;
    d.set_item("sched_names", r.sched_names.clone())?;
    d.set_item("lost_events", r.lost_events())?;
    d.set_item("bundles", r.bundles)?;
    d.set_item("cpus", r.cpus.iter().copied().collect::<Vec<u64>>())?;
    d.set_item("ftrace_events", r.ftrace_events)?;
    d.set_item("block_events", r.block_events)?;
    d.set_item("packets", r.packets)?;
    d.set_item("rows", r.rows)?;
    d.set_item("bad_records", r.bad_records)?;
    d.set_item("bad_messages", r.bad_messages.clone())?;
    d.set_item("syscall_machine", &r.syscall_machine)?;
    d.set_item("unknown_syscalls", r.unknown_syscalls)?;
    Ok(d)
}

fn report_dict<'py>(py: Python<'py>, r: &ParseReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let files: Vec<(String, String)> = r.files.clone();
    d.set_item("files", files)?;
    d.set_item("events", r.events)?;
    d.set_item("bad_records", r.bad_records)?;
    d.set_item("bad_messages", r.bad_messages.clone())?;
    d.set_item("lost_events", r.lost_events)?;
    d.set_item("skipped_lines", r.skipped_lines)?;
    d.set_item("notify_records", r.notify_records)?;
    d.set_item("skipped_records", r.skipped_records)?;
    d.set_item("time_base_ns", r.time_base_ns)?;
    d.set_item("unwrapped_times", r.unwrapped_times)?;
    d.set_item("time_shift_ns", r.time_shift_ns)?;
    d.set_item("wall_clock_start_ns", r.wall_clock_start_ns)?;
    d.set_item("per_action", r.per_action.clone())?;
    d.set_item("per_operation", r.per_operation.clone())?;
    d.set_item("per_kind", r.per_kind.clone())?;
    d.set_item("bytes_per_action", r.bytes_per_action.clone())?;
    d.set_item("bytes_per_operation", r.bytes_per_operation.clone())?;
    let (completed, stages) = (PyDict::new(py), PyDict::new(py));
    for (&(major, minor), totals) in &r.devices {
        let device = format!("{major},{minor}");
        // (0, 0) holds the rows that name no device (ftrace's plugs): none completes.
        if (major, minor) != (0, 0) || !totals.completed.is_empty() {
            completed.set_item(&device, tallies_dict(py, &totals.completed, "requests")?)?;
        }
        stages.set_item(&device, tallies_dict(py, &totals.stages, "events")?)?;
    }
    d.set_item("completed", completed)?;
    d.set_item("stages", stages)?;
    Ok(d)
}

/// `{name: {count_key: n, "bytes": b}}`: one device's completions per operation
/// (`"requests"`) or events per stage (`"events"`).
fn tallies_dict<'py>(
    py: Python<'py>,
    tallies: &BTreeMap<String, Tally>,
    count_key: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, tally) in tallies {
        let entry = PyDict::new(py);
        entry.set_item(count_key, tally.count)?;
        entry.set_item("bytes", tally.bytes)?;
        d.set_item(name, entry)?;
    }
    Ok(d)
}
