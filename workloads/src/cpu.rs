//! The calling thread's CPU time, user and system apart: what a commit cost the CPU
//! beside what it cost the clock.
//!
//! `getrusage(RUSAGE_THREAD)` splits the time into user and system, but on its own its
//! total lags: the kernel adds a running thread's time to its account only at a
//! scheduler tick or when the thread stops running, and getrusage reads that account as
//! it is. `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` brings the account up to date first
//! (the scheduler's update_curr), so read right before getrusage it makes getrusage's
//! user + system the thread's exact CPU time (to the microsecond of its timeval).
//!
//! The split itself is the kernel's: without CONFIG_VIRT_CPU_ACCOUNTING_GEN it divides
//! the exact total in the proportion of the ticks that found the thread in user or in
//! system mode over its whole life (kernel/sched/cputime.c, cputime_adjust), kept
//! monotonic. So one commit's user / system share is only as good as a tick (4 ms at
//! HZ=250); sums and means over many commits are what the split is good for.

use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeValLike;
use serde::Serialize;

/// CPU time of one thread (a reading, or the difference of two), nanoseconds.
///
/// A commit's ([`CommitRecord::cpu`](crate::CommitRecord::cpu)) is read with
/// `getrusage(RUSAGE_THREAD)` right after `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, which
/// brings the kernel's account of the running thread up to date (getrusage alone lags by
/// up to a scheduler tick), just after the commit's `start_ns` and just before its
/// `end_ns`: a commit's CPU time never exceeds its latency, and `user_ns + sys_ns` is
/// exact to the microsecond. The split between user and system is the kernel's, sampled at
/// scheduler ticks over the thread's life: good in sums and means over many commits, not
/// for one commit (a tick is 4 ms at HZ=250).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuTime {
    /// time in user mode
    pub user_ns: u64,
    /// time in the kernel
    pub sys_ns: u64,
}

impl CpuTime {
    /// User plus system time.
    pub fn total_ns(&self) -> u64 {
        self.user_ns + self.sys_ns
    }

    /// The CPU time from `earlier` to this reading. Both parts are monotonic in the
    /// kernel; saturating so that a violation shows as 0, never as a wrapped huge value.
    pub fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            sys_ns: self.sys_ns.saturating_sub(earlier.sys_ns),
        }
    }
}

/// The calling thread's CPU time so far (see the module doc for why two calls).
pub(crate) fn thread_cpu() -> std::io::Result<CpuTime> {
    let _ = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    let usage = getrusage(UsageWho::RUSAGE_THREAD).map_err(std::io::Error::from)?;
    let ns = |micros: i64| u64::try_from(micros).unwrap_or(0) * 1_000;
    Ok(CpuTime {
        user_ns: ns(usage.user_time().num_microseconds()),
        sys_ns: ns(usage.system_time().num_microseconds()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn clock_ns() -> u64 {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// Spins without a syscall, so nothing but a tick updates the thread's account.
    fn spin(wall: Duration) -> u64 {
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < wall {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        x
    }

    #[test]
    fn user_plus_system_is_the_threads_exact_cpu_time_even_between_ticks() {
        // Several tries: each spin ends at a random point between two ticks; without the
        // clock_gettime first, getrusage's total would lag the clock by up to a tick.
        for _ in 0..20 {
            spin(Duration::from_micros(1_700));
            let reading = thread_cpu().unwrap();
            let clock = clock_ns();
            let lag = clock.saturating_sub(reading.total_ns());
            assert!(
                reading.total_ns() <= clock,
                "{reading:?} past the clock {clock}"
            );
            assert!(lag < 200_000, "getrusage lags the clock by {lag} ns");
        }
    }

    #[test]
    fn a_spin_is_user_time_and_a_sleep_is_no_time() {
        let before = thread_cpu().unwrap();
        let start = Instant::now();
        spin(Duration::from_millis(200));
        let spun = thread_cpu().unwrap().since(&before);
        let wall = start.elapsed().as_nanos() as u64;
        assert!(
            spun.total_ns() <= wall,
            "{spun:?} in {wall} ns of wall time"
        );
        // another process may take the CPU from this thread, never give it more
        assert!(spun.total_ns() > 0);
        // the split follows this thread's ticks: 200 ms of spinning is mostly user mode
        assert!(spun.user_ns > spun.sys_ns, "{spun:?}");
        let before = thread_cpu().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let slept = thread_cpu().unwrap().since(&before);
        assert!(
            slept.total_ns() < 5_000_000,
            "a 100 ms sleep cost {slept:?}"
        );
    }

    #[test]
    fn since_never_wraps() {
        let a = CpuTime {
            user_ns: 5,
            sys_ns: 1,
        };
        let b = CpuTime {
            user_ns: 3,
            sys_ns: 4,
        };
        assert_eq!(
            a.since(&b),
            CpuTime {
                user_ns: 2,
                sys_ns: 0
            }
        );
    }
}
