//! Thin PyO3 layer over sqlwa's Rust crates: it converts types and maps errors to the
//! exception hierarchy below, nothing else. Logic belongs in `workloads/` or `traces/`.
//! `analyzer/sqlwa/_native.pyi` describes this module to type checkers; mypy's stubtest
//! checks the two agree (tests/unit/test_native_contract.py).
use std::io::ErrorKind;
use std::sync::{Arc, Mutex};

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

mod workloads;

mod traces;

/// Python code run from inside Rust work done without the GIL: the signal handlers
/// (check_signals runs them on the main thread, the one doing the work) and progress
/// callbacks. The first exception one of them raises (KeyboardInterrupt, the Interrupted
/// of sqlwa's SIGTERM guard, a callback's error) stops the work and is raised once the
/// Rust code has unwound.
#[derive(Clone, Default)]
struct Raised(Arc<Mutex<Option<PyErr>>>);

impl Raised {
    /// Whether `call` raised; its exception is kept (the first one only).
    fn caught(&self, call: impl FnOnce(Python<'_>) -> PyResult<()>) -> bool {
        let Err(err) = Python::attach(call) else {
            return false;
        };
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(err);
        true
    }

    /// The kept exception, taken out (None if nothing raised).
    fn take(&self) -> Option<PyErr> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// What to raise for the work's `result`: the kept exception first (also after work
    /// that finished: the Ctrl-C still counts), else the work's own error, mapped.
    fn result<T, E>(&self, result: Result<T, E>, map: impl FnOnce(E) -> PyErr) -> PyResult<T> {
        match self.0.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(err) => Err(err),
            None => result.map_err(map),
        }
    }
}

// The module path makes the classes' `__module__` "sqlwa._native", where they live (and
// where pickle finds them).
create_exception!(
    sqlwa._native,
    SqlwaError,
    PyException,
    "Base of every error sqlwa raises."
);
create_exception!(
    sqlwa._native,
    ScenarioError,
    SqlwaError,
    "A scenario is unknown, unreadable or invalid."
);
create_exception!(
    sqlwa._native,
    ConfigError,
    SqlwaError,
    "A setting has a value sqlwa cannot use."
);
create_exception!(
    sqlwa._native,
    WorkloadError,
    SqlwaError,
    "The workload failed while running (SQL or I/O)."
);
create_exception!(
    sqlwa._native,
    TraceParseError,
    SqlwaError,
    "A trace file could not be parsed: `path`, `line` and `byte_offset` say where (None where \
     not known)."
);
create_exception!(
    sqlwa._native,
    Interrupted,
    SqlwaError,
    "The run was interrupted (Ctrl-C or a signal)."
);

/// A trace error that is also a built-in `OSError` subclass.
struct TraceOsError {
    name: &'static str,
    /// the built-in base
    os_base: &'static str,
    /// the I/O errors it stands for; None: every other one
    kind: Option<ErrorKind>,
    /// the `errno` name for an error of this kind that has no OS code
    errno: Option<&'static str>,
}

/// Trace files that cannot be read: each class is a `TraceParseError` and the built-in
/// `OSError` subclass for the error, so `except FileNotFoundError` works as well as
/// `except SqlwaError`. The last is the fallback for every other I/O error.
const TRACE_OS_ERRORS: [TraceOsError; 4] = [
    TraceOsError {
        name: "TraceFileNotFoundError",
        os_base: "FileNotFoundError",
        kind: Some(ErrorKind::NotFound),
        errno: Some("ENOENT"),
    },
    TraceOsError {
        name: "TracePermissionError",
        os_base: "PermissionError",
        kind: Some(ErrorKind::PermissionDenied),
        errno: Some("EACCES"),
    },
    TraceOsError {
        name: "TraceIsADirectoryError",
        os_base: "IsADirectoryError",
        kind: Some(ErrorKind::IsADirectory),
        errno: Some("EISDIR"),
    },
    TraceOsError {
        name: "TraceOSError",
        os_base: "OSError",
        kind: None,
        errno: None,
    },
];

/// The classes of `TRACE_OS_ERRORS`, in its order. `create_exception!` takes one base,
/// so they are made with Python's `type(name, bases, namespace)`.
fn trace_os_error_classes(py: Python<'_>) -> PyResult<&'static [Py<PyType>]> {
    static CLASSES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();
    let classes = CLASSES.get_or_try_init(py, || {
        let builtins = py.import("builtins")?;
        TRACE_OS_ERRORS
            .iter()
            .map(|e| {
                let bases = (
                    py.get_type::<TraceParseError>(),
                    builtins.getattr(e.os_base)?,
                );
                let namespace = PyDict::new(py);
                namespace.set_item("__module__", "sqlwa._native")?;
                namespace.set_item(
                    "__doc__",
                    format!(
                        "A trace file could not be read (a TraceParseError and {}).",
                        e.os_base
                    ),
                )?;
                Ok(builtins
                    .getattr("type")?
                    .call1((e.name, bases, namespace))?
                    .cast_into::<PyType>()?
                    .unbind())
            })
            .collect::<PyResult<Vec<_>>>()
    })?;
    Ok(classes)
}

/// Where an I/O error of this kind stands in `TRACE_OS_ERRORS`.
fn trace_os_error_index(kind: ErrorKind) -> usize {
    TRACE_OS_ERRORS
        .iter()
        .position(|e| e.kind == Some(kind))
        .unwrap_or(TRACE_OS_ERRORS.len() - 1)
}

/// The `TRACE_OS_ERRORS` class for an I/O error of this kind.
pub(crate) fn trace_os_error_class(py: Python<'_>, kind: ErrorKind) -> PyResult<Bound<'_, PyType>> {
    Ok(trace_os_error_classes(py)?[trace_os_error_index(kind)]
        .bind(py)
        .clone())
}

/// The errno number for an I/O error of this kind that carries no OS code (None for the
/// kinds without a class of their own).
pub(crate) fn errno_of(py: Python<'_>, kind: ErrorKind) -> PyResult<Option<Bound<'_, PyAny>>> {
    TRACE_OS_ERRORS[trace_os_error_index(kind)]
        .errno
        .map(|name| py.import("errno")?.getattr(name))
        .transpose()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    blktrace_parse::one_malloc_arena_per_core();
    // setattr, not add: add would list it in __all__
    m.setattr("__version__", env!("CARGO_PKG_VERSION"))?;
    // the commit it was built from (build.rs) and the SQLite bundled into it, for `sqlwa --version`
    m.setattr("__git_commit__", env!("SQLWA_GIT_COMMIT"))?;
    m.setattr("__sqlite_version__", rusqlite::version())?;
    m.add("SqlwaError", py.get_type::<SqlwaError>())?;
    m.add("ScenarioError", py.get_type::<ScenarioError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("WorkloadError", py.get_type::<WorkloadError>())?;
    let trace_parse_error = py.get_type::<TraceParseError>();
    // Class-level None for the location attributes that instances raised here set, so a
    // TraceParseError raised by Python code reads them too.
    for attribute in ["path", "line", "byte_offset"] {
        trace_parse_error.setattr(attribute, py.None())?;
    }
    m.add("TraceParseError", trace_parse_error)?;
    m.add("Interrupted", py.get_type::<Interrupted>())?;
    for (e, class) in TRACE_OS_ERRORS.iter().zip(trace_os_error_classes(py)?) {
        m.add(e.name, class.bind(py))?;
    }
    workloads::register(m)?;
    traces::register(m)?;
    Ok(())
}
