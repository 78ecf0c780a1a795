//! Bindings for the workload engine: scenarios, settings and `run`, converted to plain
//! Python values. Commit records go out column-wise (dict of lists) so Python builds
//! one Polars frame from them without looping.
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sqlwa_workloads::engine::{self, Progress};
use sqlwa_workloads::error::EngineError;
use sqlwa_workloads::scenario::{self, Scenario};
use sqlwa_workloads::settings::{JournalMode, LockingMode, RunSettings, SyncMode};
use sqlwa_workloads::{CommitRecord, FileKind, KindCounts};

use crate::{ConfigError, Interrupted, ScenarioError, WorkloadError};

/// A loaded, validated scenario.
#[pyclass(name = "Scenario", module = "sqlwa._native", frozen)]
pub struct PyScenario {
    inner: Scenario,
}

#[pymethods]
impl PyScenario {
    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    #[getter]
    fn description(&self) -> String {
        self.inner.description.clone()
    }

    fn __repr__(&self) -> String {
        format!("Scenario({:?})", self.inner.name)
    }
}

/// Raise the exception class that matches the engine error, with (message, hint).
fn to_pyerr(err: EngineError) -> PyErr {
    let args = (err.to_string(), err.hint());
    match err {
        EngineError::UnknownScenario { .. }
        | EngineError::ScenarioParse { .. }
        | EngineError::InvalidScenario { .. } => ScenarioError::new_err(args),
        EngineError::InvalidSetting { .. } => ConfigError::new_err(args),
        EngineError::Interrupted => Interrupted::new_err(args),
        _ => WorkloadError::new_err(args),
    }
}

#[pyfunction]
fn builtin_scenario(name: &str) -> PyResult<PyScenario> {
    Scenario::builtin(name)
        .map(|inner| PyScenario { inner })
        .map_err(to_pyerr)
}

#[pyfunction]
fn scenario_from_file(path: PathBuf) -> PyResult<PyScenario> {
    Scenario::from_file(&path)
        .map(|inner| PyScenario { inner })
        .map_err(to_pyerr)
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

/// Settings arrive as a dict of optional values; absent or None keeps the default.
fn settings_from_dict(d: &Bound<'_, PyDict>) -> PyResult<RunSettings> {
    let mut s = RunSettings::default();
    if let Some(v) = get::<String>(d, "journal")? {
        s.journal = v.parse::<JournalMode>().map_err(to_pyerr)?;
    }
    if let Some(v) = get::<String>(d, "sync")? {
        s.sync = v.parse::<SyncMode>().map_err(to_pyerr)?;
    }
    if let Some(v) = get::<String>(d, "locking_mode")? {
        s.locking_mode = Some(v.parse::<LockingMode>().map_err(to_pyerr)?);
    }
    s.txns = get(d, "txns")?;
    s.warmup = get(d, "warmup")?;
    s.seed = get(d, "seed")?;
    s.page_size = get(d, "page_size")?;
    s.cache_size = get(d, "cache_size")?;
    s.wal_autocheckpoint = get(d, "wal_autocheckpoint")?;
    s.journal_size_limit = get(d, "journal_size_limit")?;
    s.mmap_size = get(d, "mmap_size")?;
    s.think_time_ms = get(d, "think_time_ms")?;
    s.extra_pragmas = get(d, "extra_pragmas")?.unwrap_or_default();
    s.count_vfs = get(d, "count_vfs")?.unwrap_or(true);
    s.map_extents = get(d, "map_extents")?.unwrap_or(false);
    Ok(s)
}

fn get<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<T>> {
    match d.get_item(key)? {
        Some(v) if !v.is_none() => v.extract::<T>().map(Some).map_err(|e| {
            let e: PyErr = Into::into(e);
            ConfigError::new_err((
                format!("setting {key}: {e}"),
                "pass a value of the right type",
            ))
        }),
        _ => Ok(None),
    }
}

/// Commit records as columns: index, warmup, start_ns, end_ns, logical_bytes,
/// statements, then `vfs_<kind>_<field>` for every file kind and counter.
fn commit_columns<'py>(py: Python<'py>, commits: &[CommitRecord]) -> PyResult<Bound<'py, PyDict>> {
    let cols = PyDict::new(py);
    cols.set_item("index", commits.iter().map(|c| c.index).collect::<Vec<_>>())?;
    cols.set_item(
        "warmup",
        commits.iter().map(|c| c.warmup).collect::<Vec<_>>(),
    )?;
    cols.set_item(
        "start_ns",
        commits.iter().map(|c| c.start_ns).collect::<Vec<_>>(),
    )?;
    cols.set_item(
        "end_ns",
        commits.iter().map(|c| c.end_ns).collect::<Vec<_>>(),
    )?;
    cols.set_item(
        "logical_bytes",
        commits.iter().map(|c| c.logical_bytes).collect::<Vec<_>>(),
    )?;
    cols.set_item(
        "statements",
        commits.iter().map(|c| c.statements).collect::<Vec<_>>(),
    )?;
    for kind in FileKind::ALL {
        for (i, (field, _)) in KindCounts::default().fields().into_iter().enumerate() {
            let values: Vec<u64> = commits
                .iter()
                .map(|c| c.vfs.get(kind).fields()[i].1)
                .collect();
            cols.set_item(format!("vfs_{}_{field}", kind.as_str()), values)?;
        }
    }
    Ok(cols)
}

/// Run a scenario. Returns {"info": {...}, "commits": {column: [values]}}.
/// The GIL is released while SQL runs; `progress(done, total)` is called from time to
/// time and Ctrl-C stops the run at the next transaction boundary.
#[pyfunction]
#[pyo3(signature = (scenario, settings, dir, marker_path=None, progress=None))]
fn run_workload<'py>(
    py: Python<'py>,
    scenario: &PyScenario,
    settings: &Bound<'py, PyDict>,
    dir: PathBuf,
    marker_path: Option<PathBuf>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let settings = settings_from_dict(settings)?;
    let mut report = |p: Progress| -> bool {
        Python::attach(|py| {
            if py.check_signals().is_err() {
                return false;
            }
            match &progress {
                Some(cb) => cb.call1(py, (p.done, p.total)).is_ok(),
                None => true,
            }
        })
    };
    let output = py
        .detach(|| {
            engine::run(
                &scenario.inner,
                &settings,
                &dir,
                marker_path.as_deref(),
                &mut report,
            )
        })
        .map_err(to_pyerr)?;

    let info = PyDict::new(py);
    let i = &output.info;
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

    let out = PyDict::new(py);
    out.set_item("info", info)?;
    out.set_item("commits", commit_columns(py, &output.commits)?)?;
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyScenario>()?;
    m.add_function(wrap_pyfunction!(builtin_scenario, m)?)?;
    m.add_function(wrap_pyfunction!(scenario_from_file, m)?)?;
    m.add_function(wrap_pyfunction!(builtin_scenarios, m)?)?;
    m.add_function(wrap_pyfunction!(run_workload, m)?)?;
    Ok(())
}
