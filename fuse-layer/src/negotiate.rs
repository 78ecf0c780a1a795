//! What the daemon asks of the kernel at FUSE_INIT, and what it got.
//!
//! The kernel offers capabilities in its INIT request and uses those the daemon's reply
//! asks for (offered ∩ requested). The writeback cache is in effect when both hold.
//! Passthrough needs more: the kernel turns it on only if the reply also gives a stack
//! depth of 1 or 2 and no writeback cache (the two exclude each other), and a backing
//! file needs CAP_SYS_ADMIN. Nothing tells the daemon that verdict, so it asks: a
//! FUSE_DEV_IOC_BACKING_OPEN of the lower directory fails with EPERM while passthrough is
//! off, and with EISDIR (a directory is no backing file) once it is on; no backing id is
//! made either way.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::{Arc, Mutex};

use fuser::{BackingId, InitFlags, KernelConfig};

/// What the command line asked for.
#[derive(Clone, Copy, Debug, Default)]
pub struct Requested {
    pub writeback_cache: bool,
    pub passthrough: bool,
    /// None: 1, the depth a backing file on a plain filesystem needs.
    pub max_stack_depth: Option<u32>,
    /// Slept in every write before it is passed on: with the flush delay, a slow device of
    /// known latency under a loop device whose image lives here (sqlwa's prediction tests).
    pub delay_write: std::time::Duration,
    /// Slept in every fsync and fdatasync before it is passed on (the loop device's cache
    /// flush reaches its image as an fsync).
    pub delay_flush: std::time::Duration,
}

/// What INIT settled.
#[derive(Clone, Debug, Default)]
pub struct InitFacts {
    pub kernel_abi: String,
    pub offered_writeback_cache: bool,
    pub offered_passthrough: bool,
    pub writeback_cache: bool,
    pub passthrough_requested: bool,
    pub max_stack_depth: u32,
}

/// Shared between the filesystem (which sees INIT) and main (which reports).
pub type Negotiated = Arc<Mutex<Option<InitFacts>>>;

/// Ask for what was requested and the kernel offers; record both.
pub fn init(requested: &Requested, config: &mut KernelConfig) -> InitFacts {
    let offered = config.capabilities();
    let mut facts = InitFacts {
        kernel_abi: config.kernel_abi().to_string(),
        offered_writeback_cache: offered.contains(InitFlags::FUSE_WRITEBACK_CACHE),
        offered_passthrough: offered.contains(InitFlags::FUSE_PASSTHROUGH),
        ..InitFacts::default()
    };
    if requested.writeback_cache && facts.offered_writeback_cache {
        facts.writeback_cache = config
            .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
            .is_ok();
    }
    if requested.passthrough && facts.offered_passthrough {
        facts.passthrough_requested = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok();
        let depth = requested.max_stack_depth.unwrap_or(1);
        facts.max_stack_depth = config
            .set_max_stack_depth(depth)
            .map(|_| depth)
            .unwrap_or(0);
    }
    facts
}

/// The options in effect, once the session is mounted.
#[derive(Debug)]
pub struct Report {
    facts: InitFacts,
    /// None: not asked for; Some(Ok) granted; Some(Err(reason)) refused.
    passthrough: Option<Result<(), String>>,
}

pub enum Verdict {
    Granted,
    Refused(String),
}

/// Probe passthrough (see the module's comment) and put the report together.
pub fn confirm(negotiated: &Negotiated, session: &impl AsFd, lower: &Path) -> Report {
    let facts = negotiated
        .lock()
        .map(|f| f.clone().unwrap_or_default())
        .unwrap_or_default();
    let passthrough = facts
        .passthrough_requested
        .then(|| probe_passthrough(session, lower));
    Report { facts, passthrough }
}

fn probe_passthrough(session: &impl AsFd, lower: &Path) -> Result<(), String> {
    let dir = File::open(lower).map_err(|e| format!("opening {}: {e}", lower.display()))?;
    match BackingId::create_raw(session, dir.as_fd()) {
        Ok(_) => Ok(()), // not reached for a directory; would mean it is on
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            Err("the kernel did not turn passthrough on for this connection (FUSE_DEV_IOC_BACKING_OPEN: EPERM)".into())
        }
        Err(e) => Err(format!("FUSE_DEV_IOC_BACKING_OPEN failed: {e}")),
    }
}

impl Report {
    pub fn verdict(&self, requested: &Requested) -> Verdict {
        if requested.writeback_cache && !self.facts.writeback_cache {
            return Verdict::Refused(
                "the kernel offers no FUSE writeback cache (FUSE_WRITEBACK_CACHE)".into(),
            );
        }
        if requested.passthrough && !self.facts.offered_passthrough {
            return Verdict::Refused(
                "the kernel offers no FUSE passthrough (FUSE_PASSTHROUGH: Linux 6.9+ with CONFIG_FUSE_PASSTHROUGH=y)"
                    .into(),
            );
        }
        match &self.passthrough {
            Some(Err(why)) => Verdict::Refused(format!("FUSE passthrough refused: {why}")),
            _ => Verdict::Granted,
        }
    }

    /// One JSON object; hand-written, its fields are flat and few.
    pub fn to_json(&self) -> String {
        let f = &self.facts;
        format!(
            concat!(
                "{{\"pid\":{},\"kernel_abi\":\"{}\",\"writeback_cache\":{},\"passthrough\":{},",
                "\"offered\":{{\"writeback_cache\":{},\"passthrough\":{}}},\"max_stack_depth\":{},\"threads\":1}}"
            ),
            std::process::id(),
            f.kernel_abi,
            f.writeback_cache,
            matches!(self.passthrough, Some(Ok(()))),
            f.offered_writeback_cache,
            f.offered_passthrough,
            f.max_stack_depth,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(facts: InitFacts, passthrough: Option<Result<(), String>>) -> Report {
        Report { facts, passthrough }
    }

    #[test]
    fn passthrough_needs_the_offer_and_the_probe() {
        let asked = Requested {
            passthrough: true,
            ..Requested::default()
        };
        let not_offered = report(InitFacts::default(), None);
        assert!(
            matches!(not_offered.verdict(&asked), Verdict::Refused(why) if why.contains("offers no"))
        );
        let offered = InitFacts {
            offered_passthrough: true,
            passthrough_requested: true,
            ..InitFacts::default()
        };
        let refused = report(offered.clone(), Some(Err("EPERM".into())));
        assert!(matches!(refused.verdict(&asked), Verdict::Refused(why) if why.contains("EPERM")));
        let granted = report(offered, Some(Ok(())));
        assert!(matches!(granted.verdict(&asked), Verdict::Granted));
        assert!(granted.to_json().contains("\"passthrough\":true"));
    }

    #[test]
    fn writeback_cache_is_in_effect_only_where_offered() {
        let asked = Requested {
            writeback_cache: true,
            ..Requested::default()
        };
        assert!(matches!(
            report(InitFacts::default(), None).verdict(&asked),
            Verdict::Refused(_)
        ));
        let on = report(
            InitFacts {
                writeback_cache: true,
                ..InitFacts::default()
            },
            None,
        );
        assert!(matches!(on.verdict(&asked), Verdict::Granted));
        assert!(on
            .to_json()
            .contains("\"writeback_cache\":true,\"passthrough\":false"));
    }
}
