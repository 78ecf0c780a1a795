//! `sqlwa-engine`: sqlwa's workload engine (the library `sqlwa-workloads`) as a program of
//! its own, for a machine without sqlwa's Python side — a phone, reached over adb. It runs
//! a scenario (a built-in's name or a TOML file) or replays a SQL log with the flat
//! settings the Python side hands the native module, in a directory, writes the engine's
//! markers to a file (a phone's tracefs `trace_marker`) and its result as JSON: the
//! `{"info", "commits"}` that `sqlwa._native.run_workload` returns, the same keys in the
//! same order, commits column-wise.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use sqlwa_workloads::engine::{Closing, WroteNothing};
use sqlwa_workloads::{
    builtin_names, commit_columns, Column, CommitRecord, EngineError, ErrorClass, ReplaySummary,
    RunSettings, Scenario, Stop, Workload,
};

const HELP: &str = "\
sqlwa-engine: run one of sqlwa's workloads and measure every commit

Usage: sqlwa-engine [OPTIONS] --dir DIR WORKLOAD

WORKLOAD is a built-in scenario's name, a scenario file (.toml), or a SQL log
(format 1: a file whose first line is its header) to replay. The engine creates
DIR if missing and its database(s) in it (never over an existing one), runs the
workload through its counting VFS, and writes the result: one JSON object,
{\"info\": {...}, \"commits\": {column: [values]}}, as sqlwa's native module
returns it (info: what ran and SQLite's settings; commits: one entry per
transaction in each column: index, warmup, start_ns, end_ns, logical_bytes,
statements, cpu_user_ns, cpu_sys_ns, vfs_<kind>_<counter>).

Options:
  -d, --dir DIR          where the run's database files go (required)
  -s, --settings FILE    the run's settings: a JSON object, sqlwa's flat settings
                         (journal, sync, txns, warmup, seed, page_size, ...; see
                         below); '-' reads it from standard input [default: {}]
      --settings-json TEXT
                         the same object given on the command line
  -m, --markers FILE     append the engine's markers (workloads/MARKERS.md) to FILE:
                         on a phone /sys/kernel/tracing/trace_marker (or
                         /sys/kernel/debug/tracing/trace_marker); a plain file works
  -o, --out FILE         write the result to FILE (whole or not at all: written
                         beside it, then renamed) [default: standard output]
      --list             print the built-in scenarios, one 'name<TAB>description'
                         a line, and exit
  -h, --help             print this help
  -V, --version          print the version

Settings: every key is optional; an unknown key, a wrong type or a value not
allowed is refused, naming the key. For example
  {\"journal\": \"wal\", \"sync\": \"normal\", \"txns\": 200, \"warmup\": 10}
journal: delete truncate persist memory wal off; sync: off normal full extra.

Stopping: SIGINT or SIGTERM is seen within about 50 ms. Between a scenario's
transactions it ends the run there, and what was measured is written, with
info.stopped_by \"interrupted\" and info.interruption \"interrupted\" (SIGINT) or
\"terminated by SIGTERM\"; elsewhere (the schema, the setup, a replay) the run
ends with nothing written. A transaction under way is never cut short.

Exit status:
  0    the run ended at its bound (its transactions, its duration, the log's end)
  2    the command line is wrong
  3    the workload: an unknown scenario, a scenario or SQL log that does not load
       or that fails on replay
  4    the settings: not JSON, an unknown key, a value not allowed
  5    the run failed: a file or directory, a statement, the storage, the CPU clock
  6    the result could not be written
  130  stopped by SIGINT, 143 by SIGTERM (the result is written if the run kept it)
Every error is one line on standard error: the problem, then the fix.

Examples:
  sqlwa-engine --dir /data/local/tmp/sqlwa-run --settings-json '{\"journal\":\"wal\"}' \\
      --markers /sys/kernel/tracing/trace_marker --out /data/local/tmp/sqlwa-run.json \\
      kv-prefs
  sqlwa-engine -d run -s settings.json app.sqllog.jsonl > result.json
";

/// A failure of the command, with its exit status.
enum Failure {
    Usage(String),
    Engine(EngineError),
    Output(String),
}

impl Failure {
    fn status(&self) -> u8 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Engine(err) => engine_status(err),
            Failure::Output(_) => 6,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(message) => {
                write!(f, "{message}; hint: see sqlwa-engine --help")
            }
            Failure::Engine(err) => write!(f, "{err}; hint: {}", err.hint()),
            Failure::Output(message) => write!(
                f,
                "{message}; hint: choose a writable --out, on a filesystem with space"
            ),
        }
    }
}

impl From<lexopt::Error> for Failure {
    fn from(err: lexopt::Error) -> Self {
        Failure::Usage(err.to_string())
    }
}

/// The exit status of an engine error: one per kind, as the native module raises one
/// exception class per kind.
fn engine_status(err: &EngineError) -> u8 {
    match err.class() {
        ErrorClass::Workload => 3,
        ErrorClass::Settings => 4,
        // the signal's own status, set by main
        ErrorClass::Interrupted => 130,
        ErrorClass::Run => 5,
    }
}

/// Where the settings come from.
enum SettingsSource {
    Default,
    File(PathBuf),
    Text(String),
}

struct Args {
    workload: String,
    dir: PathBuf,
    settings: SettingsSource,
    markers: Option<PathBuf>,
    out: Option<PathBuf>,
}

enum Command {
    Run(Args),
    Help,
    Version,
    List,
}

fn parse_args() -> Result<Command, Failure> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_env();
    let (mut workload, mut dir, mut markers, mut out) = (None, None, None, None);
    let mut settings = SettingsSource::Default;
    let mut set_settings = |source: SettingsSource| -> Result<(), Failure> {
        if !matches!(settings, SettingsSource::Default) {
            return Err(Failure::Usage(
                "give the settings once: --settings or --settings-json".into(),
            ));
        }
        settings = source;
        Ok(())
    };
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Short('V') | Long("version") => return Ok(Command::Version),
            Long("list") => return Ok(Command::List),
            Short('d') | Long("dir") => dir = Some(PathBuf::from(parser.value()?)),
            Short('s') | Long("settings") => {
                set_settings(SettingsSource::File(PathBuf::from(parser.value()?)))?;
            }
            Long("settings-json") => {
                set_settings(SettingsSource::Text(parser.value()?.string()?))?;
            }
            Short('m') | Long("markers") => markers = Some(PathBuf::from(parser.value()?)),
            Short('o') | Long("out") => out = Some(PathBuf::from(parser.value()?)),
            Value(value) if workload.is_none() => workload = Some(value.string()?),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let workload = workload.ok_or_else(|| {
        Failure::Usage("no WORKLOAD given (a built-in name, a .toml file or a SQL log)".into())
    })?;
    let dir = dir.ok_or_else(|| Failure::Usage("--dir DIR is required".into()))?;
    let out = out.filter(|path| path.as_os_str() != "-");
    Ok(Command::Run(Args {
        workload,
        dir,
        settings,
        markers,
        out,
    }))
}

/// The settings object, read as the native module reads its dict (serde, naming the key).
fn load_settings(source: &SettingsSource) -> Result<RunSettings, Failure> {
    let text = match source {
        SettingsSource::Default => "{}".to_string(),
        SettingsSource::Text(text) => text.clone(),
        SettingsSource::File(path) if path.as_os_str() == "-" => {
            std::io::read_to_string(std::io::stdin()).map_err(|e| {
                Failure::Engine(EngineError::BadSetting {
                    name: "settings".into(),
                    message: format!("cannot read standard input: {e}"),
                })
            })?
        }
        SettingsSource::File(path) => std::fs::read_to_string(path).map_err(|e| {
            Failure::Engine(EngineError::BadSetting {
                name: "settings".into(),
                message: format!("cannot read {}: {e}", path.display()),
            })
        })?,
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Failure::Engine(EngineError::BadSetting {
            name: "settings".into(),
            message: format!("not a JSON object: {e}"),
        })
    })?;
    if !value.is_object() {
        return Err(Failure::Engine(EngineError::BadSetting {
            name: "settings".into(),
            message: "not a JSON object".into(),
        }));
    }
    let settings = RunSettings::deserialize_named(value).map_err(Failure::Engine)?;
    settings.check().map_err(Failure::Engine)?;
    Ok(settings)
}

/// As the Python side decides (`sqlwa.measure.engine.looks_like_path`): a path is a file
/// (a SQL log or a scenario, [`Workload::from_file`]), anything else a built-in's name.
fn load_workload(name: &str, stop: &Stop) -> Result<Workload, EngineError> {
    let path = Path::new(name);
    let is_path = name.contains('/') || name.ends_with(".toml") || path.is_file();
    if !is_path {
        return Scenario::builtin(name).map(Workload::Scenario);
    }
    Workload::from_file(path, stop)
}

/// `PRAGMA`s read back, as a JSON object in their order.
struct Pragmas<'a>(&'a [(String, String)]);

impl Serialize for Pragmas<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// The run's information, keyed and ordered as the native module's `info_dict`.
#[derive(Serialize)]
struct Info<'a> {
    scenario: &'a str,
    seed: u64,
    sqlite_version: &'a str,
    sqlite_source_id: &'a str,
    sqlite_compile_options: &'a [String],
    pragmas: Pragmas<'a>,
    vfs_counting: bool,
    db_path: String,
    pid: u32,
    tid: u32,
    stopped_by: &'a str,
    wrote_nothing: &'a WroteNothing,
    close: &'a Closing,
    #[serde(skip_serializing_if = "Option::is_none")]
    interruption: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replay: Option<&'a ReplaySummary>,
}

/// Commit records as columns ([`commit_columns`]: the native module's names and order).
struct Columns<'a>(&'a [CommitRecord]);

impl Serialize for Columns<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (name, column) in commit_columns(self.0) {
            match column {
                Column::U64(values) => map.serialize_entry(&name, &values)?,
                Column::Bool(values) => map.serialize_entry(&name, &values)?,
            }
        }
        map.end()
    }
}

/// What the program writes: as `run_workload` returns it.
#[derive(Serialize)]
struct Output<'a> {
    info: Info<'a>,
    commits: Columns<'a>,
}

/// The result as one line of JSON, to `out` (beside it, then renamed) or standard output.
fn write_result(out: Option<&Path>, result: &Output<'_>) -> Result<(), Failure> {
    let mut text = serde_json::to_vec(result).map_err(|e| Failure::Output(e.to_string()))?;
    text.push(b'\n');
    let Some(out) = out else {
        let mut stdout = std::io::stdout().lock();
        return stdout
            .write_all(&text)
            .and_then(|()| stdout.flush())
            .map_err(|e| Failure::Output(format!("cannot write the result: {e}")));
    };
    let mut partial = out.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    std::fs::write(&partial, &text)
        .and_then(|()| std::fs::rename(&partial, out))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            Failure::Output(format!("cannot write the result to {}: {e}", out.display()))
        })
}

/// SIGINT and SIGTERM, as flags.
struct Signals {
    interrupt: Arc<AtomicBool>,
    terminate: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> Result<Signals, Failure> {
        let signals = Signals {
            interrupt: Arc::new(AtomicBool::new(false)),
            terminate: Arc::new(AtomicBool::new(false)),
        };
        for (signal, flag) in [
            (signal_hook::consts::SIGINT, &signals.interrupt),
            (signal_hook::consts::SIGTERM, &signals.terminate),
        ] {
            signal_hook::flag::register(signal, flag.clone())
                .map_err(|e| Failure::Usage(format!("cannot handle signal {signal}: {e}")))?;
        }
        Ok(signals)
    }

    fn stop(&self) -> Stop {
        let (interrupt, terminate) = (self.interrupt.clone(), self.terminate.clone());
        Stop::new(move || interrupt.load(Ordering::SeqCst) || terminate.load(Ordering::SeqCst))
            .keep_measured()
    }

    /// What the signal that stopped the run says, and its exit status (128 + signal).
    fn caught(&self) -> (&'static str, u8) {
        if self.terminate.load(Ordering::SeqCst) {
            ("terminated by SIGTERM", 143)
        } else {
            ("interrupted", 130)
        }
    }
}

fn run(args: &Args, signals: &Signals) -> Result<u8, Failure> {
    let settings = load_settings(&args.settings)?;
    let stop = signals.stop();
    let workload = load_workload(&args.workload, &stop).map_err(Failure::Engine)?;
    let markers = args.markers.as_deref();
    let mut progress = |_| !stop.requested();
    let mut commits: Vec<CommitRecord> = Vec::new();
    let (info, summary) = workload
        .run_into(
            &settings,
            &args.dir,
            markers,
            &mut progress,
            &stop,
            &mut commits,
        )
        .map_err(Failure::Engine)?;
    let interrupted = info.stopped_by == "interrupted";
    let (interruption, status) = if interrupted {
        let (message, status) = signals.caught();
        (Some(message), status)
    } else {
        (None, 0)
    };
    let result = Output {
        info: Info {
            scenario: &info.scenario,
            seed: info.seed,
            sqlite_version: &info.sqlite_version,
            sqlite_source_id: &info.sqlite_source_id,
            sqlite_compile_options: &info.compile_options,
            pragmas: Pragmas(&info.pragmas),
            vfs_counting: info.vfs_counting,
            db_path: info.db_path.to_string_lossy().into_owned(),
            pid: info.pid,
            tid: info.tid,
            stopped_by: &info.stopped_by,
            wrote_nothing: &info.wrote_nothing,
            close: &info.close,
            interruption,
            replay: summary.as_ref(),
        },
        commits: Columns(&commits),
    };
    write_result(args.out.as_deref(), &result)?;
    Ok(status)
}

fn main() -> ExitCode {
    let command = match parse_args() {
        Ok(command) => command,
        Err(failure) => return fail(&failure, failure.status()),
    };
    let args = match command {
        Command::Help => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Command::Version => {
            println!("sqlwa-engine {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Command::List => {
            let mut stdout = std::io::stdout().lock();
            for name in builtin_names() {
                let scenario = match Scenario::builtin(&name) {
                    Ok(scenario) => scenario,
                    Err(err) => return fail(&Failure::Engine(err), 5),
                };
                // the description on one line
                let description = scenario.description.split_whitespace();
                let line = format!(
                    "{}\t{}\n",
                    scenario.name,
                    description.collect::<Vec<_>>().join(" ")
                );
                if stdout.write_all(line.as_bytes()).is_err() {
                    break; // a closed pipe (| head): nothing more to say
                }
            }
            return ExitCode::SUCCESS;
        }
        Command::Run(args) => args,
    };
    let signals = match Signals::install() {
        Ok(signals) => signals,
        Err(failure) => return fail(&failure, 5),
    };
    match run(&args, &signals) {
        Ok(status) => ExitCode::from(status),
        Err(Failure::Engine(EngineError::Interrupted)) => {
            let status = signals.caught().1;
            fail(&Failure::Engine(EngineError::Interrupted), status)
        }
        Err(failure) => fail(&failure, failure.status()),
    }
}

/// The one line on standard error, and the status.
fn fail(failure: &Failure, status: u8) -> ExitCode {
    eprintln!("sqlwa-engine: {failure}");
    ExitCode::from(status)
}
