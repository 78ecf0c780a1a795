//! How a caller stops long work (Ctrl-C): a hook the engine asks from time to time,
//! between statements and from inside long ones (a SQLite progress handler), so that a
//! stop request is honoured within a fraction of a second even while one statement, or
//! the creation of a large schema, runs for minutes.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::EngineError;

/// The hook is asked at most this often: asking may cost (the Python layer takes the GIL
/// to run its signal handlers).
pub(crate) const STOP_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// SQLite virtual-machine instructions between two looks at the clock in a long statement.
const VM_INSTRUCTIONS: c_int = 1000;

/// A stop request hook, shared by the loader, the engine and SQLite's progress handlers.
/// Once the hook has said stop, the answer stays yes.
#[derive(Clone)]
pub struct Stop {
    inner: Arc<Inner>,
}

struct Inner {
    requested: Box<dyn Fn() -> bool + Send + Sync>,
    last_asked: Mutex<Option<Instant>>,
    stopped: AtomicBool,
    /// not asking (inside a measured transaction)
    quiet: AtomicBool,
    /// a stop between transactions ends the run with them (`keep_measured`)
    keep: AtomicBool,
}

impl Stop {
    /// `requested` answers whether to stop now.
    pub fn new(requested: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Stop {
            inner: Arc::new(Inner {
                requested: Box::new(requested),
                last_asked: Mutex::new(None),
                stopped: AtomicBool::new(false),
                quiet: AtomicBool::new(false),
                keep: AtomicBool::new(false),
            }),
        }
    }

    /// A stop asked for between a scenario's transactions ends the run there with the
    /// transactions done (`RunInfo::stopped_by` "interrupted"), not with
    /// [`EngineError::Interrupted`]: what was measured is kept. Elsewhere (the schema, the
    /// setup, a replay) a stop is still the error.
    pub fn keep_measured(self) -> Self {
        self.inner.keep.store(true, Ordering::SeqCst);
        self
    }

    /// Whether [`Stop::keep_measured`] was asked.
    pub fn keeps_measured(&self) -> bool {
        self.inner.keep.load(Ordering::SeqCst)
    }

    /// Never stops.
    pub fn never() -> Self {
        Stop::new(|| false)
    }

    /// Whether to stop: the hook's answer, asked if 50 ms have passed since
    /// it was last asked (and not inside a measured transaction, which is not interrupted).
    pub fn requested(&self) -> bool {
        if self.stopped() || self.inner.quiet.load(Ordering::SeqCst) {
            return self.stopped();
        }
        {
            let mut last = self
                .inner
                .last_asked
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| t.elapsed() < STOP_CHECK_INTERVAL) {
                return false;
            }
            *last = Some(Instant::now());
        }
        if (self.inner.requested)() {
            self.inner.stopped.store(true, Ordering::SeqCst);
        }
        self.stopped()
    }

    /// Whether the hook has said stop (an SQL error after that is the interruption).
    pub fn stopped(&self) -> bool {
        self.inner.stopped.load(Ordering::SeqCst)
    }

    /// Runs `f` without asking the hook: a measured transaction, whose time and syscalls
    /// must be the SQL's alone (asking may take Python's GIL). A stop asked for before
    /// still counts; one asked for during `f` is seen after it.
    pub(crate) fn quietly<T>(&self, f: impl FnOnce() -> T) -> T {
        self.inner.quiet.store(true, Ordering::SeqCst);
        let result = f();
        self.inner.quiet.store(false, Ordering::SeqCst);
        result
    }

    /// Sleeps for `pause`, or less if a stop is requested meanwhile.
    pub(crate) fn sleep(&self, pause: Duration) -> Result<(), EngineError> {
        let until = Instant::now() + pause;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(STOP_CHECK_INTERVAL));
            self.check()?;
        }
    }

    /// `EngineError::Interrupted` if a stop is requested.
    pub(crate) fn check(&self) -> Result<(), EngineError> {
        if self.requested() {
            Err(EngineError::Interrupted)
        } else {
            Ok(())
        }
    }

    /// Makes SQLite ask from inside long statements: a statement stopped so fails with
    /// SQLITE_INTERRUPT.
    pub(crate) fn install(&self, conn: &mut Connection) -> Result<(), EngineError> {
        let stop = self.clone();
        conn.progress_handler(VM_INSTRUCTIONS, Some(move || stop.requested()))
            .map_err(|e| EngineError::sql("(installing the progress handler)", e))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn the_hook_is_asked_at_most_every_interval_and_a_stop_sticks() {
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        let stop = Stop::new(move || counter.fetch_add(1, Ordering::SeqCst) >= 1);
        assert!(!stop.requested());
        assert!(!stop.requested(), "too soon to ask again");
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        std::thread::sleep(STOP_CHECK_INTERVAL);
        assert!(stop.requested() && stop.stopped() && stop.requested());
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn the_hook_is_not_asked_quietly() {
        let stop = Stop::new(|| panic!("asked"));
        assert!(!stop.quietly(|| stop.requested()));
    }

    #[test]
    fn a_long_statement_is_stopped_from_inside() {
        let mut conn = Connection::open_in_memory().unwrap();
        let started = Instant::now();
        let stop = Stop::new(move || started.elapsed() > Duration::from_millis(100));
        stop.install(&mut conn).unwrap();
        // about a minute of work without the stop
        let endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) \
                       SELECT count(*) FROM n WHERE i < 10000000000";
        let err = conn.query_row(endless, [], |_| Ok(())).unwrap_err();
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::OperationInterrupted)
        );
        assert!(stop.stopped() && started.elapsed() < Duration::from_secs(2));
    }
}
