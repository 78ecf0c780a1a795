//! `sqlwa-fuse LOWER MOUNTPOINT [--writeback-cache] [--kernel-passthrough]`: a FUSE
//! daemon that mirrors the directory LOWER at MOUNTPOINT, passing every operation SQLite
//! needs to the lower filesystem as the same call (an fdatasync stays an fdatasync), so
//! that what the layer itself adds is what a trace of it shows.
//!
//! Once mounted and negotiated with the kernel it prints one JSON line on stdout: the
//! options in effect as the kernel granted them (see [`negotiate`]). It runs until the
//! mount goes away. Exit codes: 0 after an unmount, 2 when the kernel cannot give what
//! was asked (no FUSE, no /dev/fuse, passthrough refused) with one line on stderr saying
//! so, 1 for any other failure.

mod mirror;
mod negotiate;
mod nodes;

use std::path::PathBuf;
use std::process::ExitCode;

use fuser::{Config, MountOption, Session};

use crate::mirror::Mirror;
use crate::negotiate::{Requested, Verdict};

const USAGE: &str = "usage: sqlwa-fuse LOWER MOUNTPOINT [--writeback-cache] [--kernel-passthrough] [--fsname NAME] \
     [--delay-write-us N] [--delay-flush-us N]";

/// What the command line asks for.
struct Args {
    lower: PathBuf,
    mountpoint: PathBuf,
    fsname: String,
    requested: Requested,
}

fn parse_args(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut positional = Vec::new();
    let mut requested = Requested::default();
    let mut fsname = String::from("sqlwa-fuse");
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "--writeback-cache" => requested.writeback_cache = true,
            "--kernel-passthrough" => requested.passthrough = true,
            // Only tests use it: a depth of 0 makes the kernel refuse passthrough.
            "--max-stack-depth" => {
                let value = argv.next().ok_or("--max-stack-depth needs a value")?;
                let depth = value
                    .parse()
                    .map_err(|_| format!("--max-stack-depth {value:?}"))?;
                requested.max_stack_depth = Some(depth);
            }
            "--fsname" => fsname = argv.next().ok_or("--fsname needs a value")?,
            "--delay-write-us" => requested.delay_write = micros(&arg, argv.next())?,
            "--delay-flush-us" => requested.delay_flush = micros(&arg, argv.next())?,
            other if other.starts_with("--") => return Err(format!("unknown option {other}")),
            _ => positional.push(PathBuf::from(arg)),
        }
    }
    let [lower, mountpoint]: [PathBuf; 2] = positional.try_into().map_err(|_| USAGE.to_string())?;
    Ok(Args {
        lower,
        mountpoint,
        fsname,
        requested,
    })
}

/// A delay option's value: whole microseconds, at most ten seconds.
fn micros(option: &str, value: Option<String>) -> Result<std::time::Duration, String> {
    let value = value.ok_or(format!("{option} needs a value"))?;
    match value.parse::<u64>() {
        Ok(us) if us <= 10_000_000 => Ok(std::time::Duration::from_micros(us)),
        _ => Err(format!(
            "{option} {value:?}: whole microseconds, at most 10000000"
        )),
    }
}

fn config(fsname: &str) -> Config {
    let mut config = Config::default();
    // The kernel checks permissions itself, as on a plain filesystem; one event loop
    // thread, as the workload is one SQL thread.
    config.mount_options = vec![
        MountOption::FSName(fsname.to_string()),
        MountOption::DefaultPermissions,
    ];
    config.n_threads = Some(1);
    config
}

fn run(args: Args) -> Result<(), (u8, String)> {
    let mirror = Mirror::new(&args.lower, args.requested)
        .map_err(|e| (1, format!("{}: {e}", args.lower.display())))?;
    let negotiated = mirror.negotiated();
    let session = Session::new(mirror, &args.mountpoint, &config(&args.fsname))
        .map_err(|e| mount_failure(&args, &e))?;
    let report = negotiate::confirm(&negotiated, &session, &args.lower);
    match report.verdict(&args.requested) {
        Verdict::Refused(why) => return Err((2, why)), // dropping the session unmounts
        Verdict::Granted => println!("{}", report.to_json()),
    }
    session
        .run()
        .map_err(|e| (1, format!("the FUSE session ended with an error: {e}")))
}

/// The kernel's own reasons first: no FUSE in the kernel or no /dev/fuse is exit 2.
fn mount_failure(args: &Args, error: &std::io::Error) -> (u8, String) {
    let where_ = args.mountpoint.display();
    if !std::path::Path::new("/dev/fuse").exists() {
        return (2, "there is no /dev/fuse: load the fuse module (modprobe fuse) or use a kernel with CONFIG_FUSE_FS".into());
    }
    match error.raw_os_error() {
        Some(libc::ENODEV) => (
            2,
            format!("mounting {where_}: the kernel has no FUSE filesystem (CONFIG_FUSE_FS)"),
        ),
        Some(libc::EACCES | libc::EPERM) => (
            2,
            format!("mounting {where_}: {error} (FUSE mounts need root here)"),
        ),
        _ => (1, format!("mounting {where_}: {error}")),
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("sqlwa-fuse: {message}");
            return ExitCode::from(1);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("sqlwa-fuse: {message}");
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn options_in_any_order() {
        let args = parse(&["--writeback-cache", "/lower", "/mnt", "--fsname", "x"]).unwrap();
        assert_eq!(
            (args.lower, args.mountpoint),
            (PathBuf::from("/lower"), PathBuf::from("/mnt"))
        );
        assert!(args.requested.writeback_cache && !args.requested.passthrough);
        assert_eq!(args.fsname, "x");
    }

    #[test]
    fn two_directories_and_known_options_only() {
        assert!(parse(&["/lower"]).is_err());
        assert!(parse(&["/a", "/b", "/c"]).is_err());
        assert!(parse(&["/a", "/b", "--direct-io"]).is_err());
        assert!(parse(&["/a", "/b", "--max-stack-depth", "x"]).is_err());
    }

    #[test]
    fn delays_in_whole_microseconds() {
        let args = parse(&[
            "/a",
            "/b",
            "--delay-write-us",
            "1500",
            "--delay-flush-us",
            "0",
        ])
        .unwrap();
        assert_eq!(
            args.requested.delay_write,
            std::time::Duration::from_micros(1500)
        );
        assert!(args.requested.delay_flush.is_zero());
        assert!(parse(&["/a", "/b", "--delay-write-us"]).is_err());
        assert!(parse(&["/a", "/b", "--delay-write-us", "-1"]).is_err());
        assert!(parse(&["/a", "/b", "--delay-flush-us", "1.5"]).is_err());
        assert!(parse(&["/a", "/b", "--delay-flush-us", "10000001"]).is_err());
    }
}
