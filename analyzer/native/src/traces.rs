//! Bindings for blktrace-parse: `parse_trace(paths, format="auto", lenient=False)` returns
//! `(pyarrow.Table, report dict)`. The table crosses into Python through the Arrow C Data
//! Interface without copying the columns.
use std::path::PathBuf;

use blktrace_parse::{parse_paths, Format, ParseError, ParseReport};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::PyTable;

use crate::TraceParseError;

pub fn register(m: &Bound<PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parse_trace, m)?)
}

fn to_py_err(e: ParseError) -> PyErr {
    TraceParseError::new_err(e.to_string())
}

/// Parse block traces (blktrace binary per-CPU files or their base name, blkparse text,
/// ftrace text) into one Arrow table; returns (pyarrow.Table, report dict).
#[pyfunction]
#[pyo3(signature = (paths, format = "auto", lenient = false))]
fn parse_trace<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
    format: &str,
    lenient: bool,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
    let format: Format = format.parse().map_err(to_py_err)?;
    let (batch, report) = py
        .detach(|| {
            let (table, report) = parse_paths(&paths, format, lenient)?;
            let batch = blktrace_parse::arrow::to_record_batch(table)
                .map_err(|e| ParseError::Usage(format!("building the Arrow table failed: {e}")))?;
            Ok::<_, ParseError>((batch, report))
        })
        .map_err(to_py_err)?;
    let schema = batch.schema();
    let table = PyTable::try_new(vec![batch], schema)?.into_pyarrow(py)?;
    Ok((table, report_dict(py, &report)?))
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
    d.set_item("wall_clock_start_ns", r.wall_clock_start_ns)?;
    d.set_item("per_action", r.per_action.clone())?;
    d.set_item("per_operation", r.per_operation.clone())?;
    d.set_item("per_kind", r.per_kind.clone())?;
    Ok(d)
}
