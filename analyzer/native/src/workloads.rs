//! Bindings for the workload engine: scenarios, settings and `run`, converted to plain
//! Python values. Commit records go out column-wise (dict of lists) so Python builds
//! one Polars frame from them without looping.
use std::path::PathBuf;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyDict, PyList, PyTuple};
use sqlwa_workloads::engine::Progress;
use sqlwa_workloads::error::{EngineError, ErrorClass};
use sqlwa_workloads::scenario::{self, Scenario};
use sqlwa_workloads::settings::{
    JournalMode, LockingMode, RunSettings, SyncMode, MAX_DURATION_S, MAX_THINK_TIME_MS,
};
use sqlwa_workloads::{
    Column, CommitRecord, CommitSink, FileKind, KindCounts, RunInfo, Stop, Workload,
};

use crate::{ConfigError, Interrupted, Raised, ScenarioError, WorkloadError};

/// A loaded, validated scenario, or a checked SQL log (a recorded workload).
#[pyclass(name = "Scenario", module = "sqlwa._native", frozen)]
pub struct PyScenario {
    inner: Workload,
}

#[pymethods]
impl PyScenario {
    #[getter]
    fn name(&self) -> String {
        match &self.inner {
            Workload::Scenario(s) => s.name.clone(),
            Workload::Replay(log) => log.name.clone(),
        }
    }

    #[getter]
    fn description(&self) -> String {
        match &self.inner {
            Workload::Scenario(s) => s.description.clone(),
            Workload::Replay(log) => format!(
                "recorded SQL log ({}): {} statements on {} database file(s)",
                log.header.source,
                log.statements,
                log.databases.len()
            ),
        }
    }

    /// The database files a run of it makes in the run's directory, by name.
    #[getter]
    fn database_files(&self) -> Vec<String> {
        match &self.inner {
            Workload::Scenario(s) => vec![format!("{}.db", s.name)],
            Workload::Replay(log) => log.databases.iter().map(|d| d.file_name.clone()).collect(),
        }
    }

    /// Whether this is a recorded SQL log, replayed.
    #[getter]
    fn is_replay(&self) -> bool {
        matches!(self.inner, Workload::Replay(_))
    }

    fn __repr__(&self) -> String {
        format!("Scenario({:?})", self.name())
    }
}

/// Raise the exception class that matches the engine error, with (message, hint).
fn to_pyerr(err: EngineError) -> PyErr {
    let args = (err.to_string(), err.hint());
    match err.class() {
        ErrorClass::Workload => ScenarioError::new_err(args),
        ErrorClass::Settings => ConfigError::new_err(args),
        ErrorClass::Interrupted => Interrupted::new_err(args),
        ErrorClass::Run => WorkloadError::new_err(args),
    }
}

/// The engine's stop hook: a pending signal whose handler raised.
fn stop_hook(raised: &Raised) -> Stop {
    let raised = raised.clone();
    Stop::new(move || raised.caught(|py| py.check_signals()))
}

#[pyfunction]
fn builtin_scenario(name: &str) -> PyResult<PyScenario> {
    Scenario::builtin(name)
        .map(|s| PyScenario {
            inner: Workload::Scenario(s),
        })
        .map_err(to_pyerr)
}

/// Loads without the GIL: checking a large schema, or reading a long SQL log through,
/// takes seconds, during which Ctrl-C must still be honoured. A file whose first line is
/// a SQL log header (format 1) is a recorded workload, whatever its name.
#[pyfunction]
fn scenario_from_file(py: Python<'_>, path: PathBuf) -> PyResult<PyScenario> {
    let raised = Raised::default();
    let stop = stop_hook(&raised);
    let loaded = py.detach(|| Workload::from_file(&path, &stop));
    raised
        .result(loaded, to_pyerr)
        .map(|inner| PyScenario { inner })
}

/// (name, description) of every built-in scenario.
#[pyfunction]
fn builtin_scenarios() -> PyResult<Vec<(String, String)>> {
    scenario::builtin_names()
        .iter()
        .map(|name| {
            let s = Scenario::builtin(name).map_err(to_pyerr)?;
            Ok((s.name.clone(), s.description.clone()))
        })
        .collect()
}

/// The settings dict through serde, so `RunSettings` alone defines what is accepted: an
/// absent or None setting keeps the default; an unknown name, a wrong type or a value not
/// allowed is a `ConfigError` naming the setting. Python's `json` writes the dict out
/// (plain values only) and serde_json reads it back as a value to deserialise from:
/// pythonize, which would read the dict directly, has no release for pyo3 0.30.
fn settings_from_dict<'py>(settings: &Bound<'py, PyDict>) -> PyResult<RunSettings> {
    let not_plain = |name: &str, err: &dyn std::fmt::Display| {
        ConfigError::new_err((
            format!("setting {name}: {err}"),
            "give each setting a str, int, float, bool, None or a list of str",
        ))
    };
    let py = settings.py();
    let json = py.import("json")?;
    let strict = [("allow_nan", false)].into_py_dict(py)?;
    let dumps = |value: &Bound<'py, PyAny>| json.call_method("dumps", (value,), Some(&strict));
    let text: String = match dumps(settings.as_any()) {
        Ok(text) => text.extract()?,
        Err(err) => {
            // Name the setting whose value json cannot write (bytes, NaN, an object...).
            let name = settings
                .iter()
                .find(|(_, value)| dumps(value).is_err())
                .map_or_else(|| "settings".to_string(), |(key, _)| key.to_string());
            return Err(not_plain(&name, &err));
        }
    };
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| not_plain("settings", &e))?;
    RunSettings::deserialize_named(value).map_err(to_pyerr)
}

/// Checks a settings dict as `run_workload` does before it opens a database (names,
/// types, values, the extra pragmas' form), so a run refuses bad settings before it makes
/// anything.
#[pyfunction]
fn check_settings(settings: &Bound<'_, PyDict>) -> PyResult<()> {
    settings_from_dict(settings)?.check().map_err(to_pyerr)
}

/// `RunSettings::default()` as the dict `run_workload` takes: every setting's name and
/// default (None where the scenario or SQLite decides).
#[pyfunction]
fn default_settings(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let text = serde_json::to_string(&RunSettings::default())
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok(py
        .import("json")?
        .call_method1("loads", (text,))?
        .cast_into::<PyDict>()?)
}

/// `RunSettings::FIELDS`, the one description of the settings: per field, in Rust's
/// order, a dict of its `name`, `type` (`SettingType::name`: bool, int, float, str, path,
/// list[str], choice), `optional`, `default` (as `default_settings` gives it) and
/// `choices` (a choice's values, else None). The Python side's tests hold the dataclass
/// and the stub's declarations to it.
#[pyfunction]
fn settings_fields(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let fields = RunSettings::FIELDS.iter().map(|field| {
        serde_json::json!({
            "name": field.name,
            "type": field.kind.name(),
            "optional": field.optional,
            "default": field.default_value(),
            "choices": field.kind.choices(),
        })
    });
    let text = serde_json::to_string(&fields.collect::<Vec<_>>())
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok(py
        .import("json")?
        .call_method1("loads", (text,))?
        .cast_into::<PyList>()?)
}

/// Commit records as columns: index, warmup, start_ns, end_ns, logical_bytes,
/// statements, cpu_user_ns, cpu_sys_ns, then `vfs_<kind>_<field>` for every file kind and
/// counter.
fn commit_columns<'py>(py: Python<'py>, commits: &[CommitRecord]) -> PyResult<Bound<'py, PyDict>> {
    let cols = PyDict::new(py);
    for (name, column) in sqlwa_workloads::commit_columns(commits) {
        match column {
            Column::U64(values) => cols.set_item(name, values)?,
            Column::Bool(values) => cols.set_item(name, values)?,
        }
    }
    Ok(cols)
}

/// Hands a run's commit records to a Python callable, `chunk` at a time, as columns (the
/// dict [`commit_columns`] makes): the run's memory does not grow with its length. An
/// exception the callable raises ends the run and is raised once the engine has unwound.
struct ChunkSink<'a> {
    callback: &'a Py<PyAny>,
    chunk: usize,
    held: Vec<CommitRecord>,
    raised: &'a Raised,
}

impl ChunkSink<'_> {
    /// The records held so far, to the callable (none: nothing is called).
    fn flush(&mut self) -> Result<(), EngineError> {
        if self.held.is_empty() {
            return Ok(());
        }
        let failed = self.raised.caught(|py| {
            let columns = commit_columns(py, &self.held)?;
            self.callback.call1(py, (columns,)).map(drop)
        });
        self.held.clear();
        if failed {
            return Err(EngineError::Interrupted);
        }
        Ok(())
    }
}

impl CommitSink for ChunkSink<'_> {
    fn push(&mut self, commit: CommitRecord, _database: u32) -> Result<(), EngineError> {
        self.held.push(commit);
        if self.held.len() >= self.chunk {
            self.flush()?;
        }
        Ok(())
    }
}

/// Run a scenario. Returns {"info": {...}, "commits": {column: [values]}}; with
/// `commits` (a callable) the records go to it instead, `chunk_commits` at a time as the
/// run goes (the last, shorter chunk once the run has ended), and "commits" is None.
/// The GIL is released while SQL runs; `progress(done, total)` is called from time to
/// time (`total` None when only a duration bounds the run; a `figures` dict attribute of
/// the callback, if it has one, is first updated with the measured transactions so far
/// and their VFS `syncs` and `write_bytes`) and Ctrl-C stops the run within a fraction of
/// a second, inside a long statement too; its KeyboardInterrupt (or the exception the
/// progress callback raised) is raised once the engine has unwound. With
/// `keep_measured`, a Ctrl-C or SIGTERM between a scenario's measured transactions ends
/// the run there instead: its result is returned with `info["stopped_by"]`
/// "interrupted" and `info["interruption"]` the signal's message ("interrupted" for
/// Ctrl-C), and the caller raises it once it has kept what was measured.
#[pyfunction]
#[pyo3(signature = (scenario, settings, dir, marker_path=None, progress=None, keep_measured=false, commits=None, chunk_commits=8192))]
#[allow(clippy::too_many_arguments)]
fn run_workload<'py>(
    py: Python<'py>,
    scenario: &PyScenario,
    settings: &Bound<'py, PyDict>,
    dir: PathBuf,
    marker_path: Option<PathBuf>,
    progress: Option<Py<PyAny>>,
    keep_measured: bool,
    commits: Option<Py<PyAny>>,
    chunk_commits: usize,
) -> PyResult<Bound<'py, PyDict>> {
    if chunk_commits == 0 {
        return Err(PyValueError::new_err("chunk_commits must be at least 1"));
    }
    let settings = settings_from_dict(settings)?;
    let raised = Raised::default();
    let stop = stop_hook(&raised);
    let stop = if keep_measured {
        stop.keep_measured()
    } else {
        stop
    };
    let mut report = |p: Progress| -> bool {
        !stop.requested()
            && !raised.caught(|py| match &progress {
                Some(cb) => {
                    let cb = cb.bind(py);
                    if let Ok(figures) = cb.getattr("figures") {
                        if let Ok(figures) = figures.cast::<PyDict>() {
                            figures.set_item("measured", p.measured)?;
                            figures.set_item("syncs", p.syncs)?;
                            figures.set_item("write_bytes", p.write_bytes)?;
                        }
                    }
                    cb.call1((p.done, p.total)).map(drop)
                }
                None => Ok(()),
            })
    };
    let mut kept: Vec<CommitRecord> = Vec::new();
    let mut chunks = commits.as_ref().map(|callback| ChunkSink {
        callback,
        chunk: chunk_commits,
        held: Vec::with_capacity(chunk_commits.min(1 << 16)),
        raised: &raised,
    });
    let ran = py.detach(|| {
        let sink: &mut dyn CommitSink = match chunks.as_mut() {
            Some(chunks) => chunks,
            None => &mut kept,
        };
        let ran = scenario.inner.run_into(
            &settings,
            &dir,
            marker_path.as_deref(),
            &mut report,
            &stop,
            sink,
        )?;
        // the last chunk, once the run has ended well (or was stopped and kept)
        chunks.as_mut().map_or(Ok(()), ChunkSink::flush)?;
        Ok(ran)
    });
    let mut interruption = None;
    if matches!(&ran, Ok((info, _)) if info.stopped_by == "interrupted") {
        // kept: the signal that stopped it is the caller's to raise, any other error is not
        if let Some(err) = raised.take() {
            let signalled = err.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py)
                || err.is_instance_of::<Interrupted>(py);
            if !signalled {
                return Err(err);
            }
            let message = err.value(py).str()?.to_string();
            interruption = Some(if message.is_empty() {
                "interrupted".to_string()
            } else {
                message
            });
        }
    }
    let (run_info, replayed) = raised.result(ran, to_pyerr)?;
    let info = info_dict(py, &run_info)?;
    if let Some(message) = interruption {
        info.set_item("interruption", message)?;
    }
    if let Some(summary) = replayed {
        info.set_item("replay", json_value(py, &summary)?)?;
    }
    let out = PyDict::new(py);
    out.set_item("info", info)?;
    if commits.is_some() {
        out.set_item("commits", py.None())?;
    } else {
        out.set_item("commits", commit_columns(py, &kept)?)?;
    }
    Ok(out)
}

/// The run's information as the Python layer reads it.
fn info_dict<'py>(py: Python<'py>, i: &RunInfo) -> PyResult<Bound<'py, PyDict>> {
    let info = PyDict::new(py);
    info.set_item("scenario", &i.scenario)?;
    info.set_item("seed", i.seed)?;
    info.set_item("sqlite_version", &i.sqlite_version)?;
    info.set_item("sqlite_source_id", &i.sqlite_source_id)?;
    info.set_item(
        "sqlite_compile_options",
        PyList::new(py, &i.compile_options)?,
    )?;
    let pragmas = PyDict::new(py);
    for (k, v) in &i.pragmas {
        pragmas.set_item(k, v)?;
    }
    info.set_item("pragmas", pragmas)?;
    info.set_item("vfs_counting", i.vfs_counting)?;
    info.set_item("db_path", i.db_path.to_string_lossy().to_string())?;
    info.set_item("pid", i.pid)?;
    info.set_item("tid", i.tid)?;
    info.set_item("stopped_by", &i.stopped_by)?;
    info.set_item("wrote_nothing", json_value(py, &i.wrote_nothing)?)?;
    info.set_item("close", json_value(py, &i.close)?)?;
    Ok(info)
}

/// A serialisable value as Python's `json` reads it.
fn json_value<'py>(py: Python<'py>, value: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// Appends `extents` markers (`at=<at>`) for the database at `db_path` and its journal,
/// WAL and -shm files that exist to `marker_path` (MARKERS.md).
#[pyfunction]
fn map_database_files(marker_path: PathBuf, db_path: PathBuf, at: &str) -> PyResult<()> {
    sqlwa_workloads::vfs::map_database_files(&marker_path, &db_path, at).map_err(to_pyerr)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    // The values each enum setting accepts, the file kinds and the VFS counters of a
    // kind (commit columns are `vfs_<kind>_<counter>`), from the Rust definitions.
    m.add("JOURNAL_MODES", PyTuple::new(py, JournalMode::allowed())?)?;
    m.add("SYNC_MODES", PyTuple::new(py, SyncMode::allowed())?)?;
    m.add("LOCKING_MODES", PyTuple::new(py, LockingMode::allowed())?)?;
    m.add(
        "FILE_KINDS",
        PyTuple::new(py, FileKind::ALL.map(FileKind::as_str))?,
    )?;
    let counters = KindCounts::default().fields().map(|(name, _)| name);
    m.add("VFS_COUNTERS", PyTuple::new(py, counters)?)?;
    m.add("MAX_THINK_TIME_MS", MAX_THINK_TIME_MS)?;
    m.add("MAX_DURATION_S", MAX_DURATION_S)?;
    m.add_function(wrap_pyfunction!(default_settings, m)?)?;
    m.add_function(wrap_pyfunction!(settings_fields, m)?)?;
    m.add_function(wrap_pyfunction!(check_settings, m)?)?;
    m.add_class::<PyScenario>()?;
    m.add_function(wrap_pyfunction!(builtin_scenario, m)?)?;
    m.add_function(wrap_pyfunction!(scenario_from_file, m)?)?;
    m.add_function(wrap_pyfunction!(builtin_scenarios, m)?)?;
    m.add_function(wrap_pyfunction!(run_workload, m)?)?;
    m.add_function(wrap_pyfunction!(map_database_files, m)?)?;
    Ok(())
}
