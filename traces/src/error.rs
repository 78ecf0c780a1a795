//! Parse errors: every one names the file and where in it the problem is.
use std::fmt;
use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    ByteOffset(u64),
    Line(u64),
    Whole,
}

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{}{}: {message}", file.display(), location)]
    Bad {
        file: PathBuf,
        location: Location,
        message: String,
    },
    #[error("{}: {source}", file.display())]
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
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
    pub fn bad(file: &std::path::Path, location: Location, message: impl Into<String>) -> Self {
        ParseError::Bad {
            file: file.to_path_buf(),
            location,
            message: message.into(),
        }
    }
    pub fn io(file: &std::path::Path, source: std::io::Error) -> Self {
        ParseError::Io {
            file: file.to_path_buf(),
            source,
        }
    }
}
