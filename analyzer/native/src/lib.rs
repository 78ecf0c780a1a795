//! Thin PyO3 layer over sqlwa's Rust crates: it converts types and maps errors to the
//! exception hierarchy below, nothing else. Logic belongs in `workloads/` or `traces/`.
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

mod workloads;

mod traces;

create_exception!(
    _native,
    SqlwaError,
    PyException,
    "Base of every error sqlwa raises."
);
create_exception!(
    _native,
    ScenarioError,
    SqlwaError,
    "A scenario is unknown, unreadable or invalid."
);
create_exception!(
    _native,
    ConfigError,
    SqlwaError,
    "A setting has a value sqlwa cannot use."
);
create_exception!(
    _native,
    WorkloadError,
    SqlwaError,
    "The workload failed while running (SQL or I/O)."
);
create_exception!(
    _native,
    TraceParseError,
    SqlwaError,
    "A trace file could not be parsed."
);
create_exception!(
    _native,
    Interrupted,
    SqlwaError,
    "The run was interrupted (Ctrl-C or a signal)."
);

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SqlwaError", py.get_type::<SqlwaError>())?;
    m.add("ScenarioError", py.get_type::<ScenarioError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("WorkloadError", py.get_type::<WorkloadError>())?;
    m.add("TraceParseError", py.get_type::<TraceParseError>())?;
    m.add("Interrupted", py.get_type::<Interrupted>())?;
    workloads::register(m)?;
    traces::register(m)?;
    Ok(())
}
