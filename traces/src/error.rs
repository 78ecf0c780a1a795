//! Parse errors: every one names the file and where in it the problem is.
use std::fmt;
use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq, Eq)]
/// Where in a file a [`ParseError::Bad`] is.
pub enum Location {
    /// Byte offset of the bad record (binary traces, Perfetto packets).
    ByteOffset(u64),
    /// Line number, from 1 (text traces).
    Line(u64),
    /// The file as a whole (its format, a version it does not support).
    Whole,
}

#[derive(Debug, thiserror::Error)]
/// Why a parse failed; each kind names the file it is about, except a usage error.
pub enum ParseError {
    #[error("{}{}: {message}", file.display(), location)]
    /// The trace is malformed at `location` (strict mode; lenient mode counts it instead).
    Bad {
        /// The trace file.
        file: PathBuf,
        /// Where in it.
        location: Location,
        /// What is wrong, in one line.
        message: String,
    },
    #[error("{}: {source}", file.display())]
    /// Reading `file` failed (missing, unreadable, a directory, cut short).
    Io {
        /// The file that could not be read.
        file: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    #[error("{0}")]
    /// The caller asked for something impossible (no paths, an unknown format) or stopped the
    /// parse.
    Usage(String),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::ByteOffset(o) => write!(f, " at byte offset {o}"),
            Location::Line(l) => write!(f, " line {l}"),
            Location::Whole => Ok(()),
        }
    }
}

impl ParseError {
    pub(crate) fn bad(
        file: &std::path::Path,
        location: Location,
        message: impl Into<String>,
    ) -> Self {
        ParseError::Bad {
            file: file.to_path_buf(),
            location,
            message: message.into(),
        }
    }
    pub(crate) fn io(file: &std::path::Path, source: std::io::Error) -> Self {
        ParseError::Io {
            file: file.to_path_buf(),
            source,
        }
    }
}
