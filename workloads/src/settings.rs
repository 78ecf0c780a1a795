//! Run settings: journal mode, synchronous level, locking mode and the other PRAGMAs a
//! run can choose. Parsing errors list the allowed values.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::EngineError;

/// Declares a settings enum whose variants map 1:1 to lower-case PRAGMA values.
macro_rules! pragma_enum {
    ($(#[$doc:meta])* $name:ident, $setting:literal, { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn allowed() -> Vec<String> {
                Self::ALL.iter().map(|v| v.as_str().to_string()).collect()
            }
        }

        impl FromStr for $name {
            type Err = EngineError;
            fn from_str(s: &str) -> Result<Self, EngineError> {
                let wanted = s.trim().to_ascii_lowercase();
                Self::ALL.iter().copied().find(|v| v.as_str() == wanted).ok_or_else(|| {
                    EngineError::InvalidSetting {
                        name: $setting.into(),
                        value: s.into(),
                        allowed: Self::allowed(),
                    }
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pragma_enum!(
    /// `PRAGMA journal_mode`.
    JournalMode, "journal_mode", {
        Delete => "delete", Truncate => "truncate", Persist => "persist",
        Memory => "memory", Wal => "wal", Off => "off",
    }
);

pragma_enum!(
    /// `PRAGMA synchronous`.
    SyncMode, "synchronous", { Off => "off", Normal => "normal", Full => "full", Extra => "extra" }
);

pragma_enum!(
    /// `PRAGMA locking_mode`.
    LockingMode, "locking_mode", { Normal => "normal", Exclusive => "exclusive" }
);

impl SyncMode {
    /// The number `PRAGMA synchronous` reads back as.
    pub fn level(self) -> i64 {
        match self {
            SyncMode::Off => 0,
            SyncMode::Normal => 1,
            SyncMode::Full => 2,
            SyncMode::Extra => 3,
        }
    }
}

/// Everything a run can choose besides the scenario. `None` means "the scenario's own
/// value" (txns, warmup, seed, think time, page_size) or "SQLite's default".
#[derive(Clone, Debug, Serialize)]
pub struct RunSettings {
    pub journal: JournalMode,
    pub sync: SyncMode,
    pub txns: Option<u64>,
    pub warmup: Option<u64>,
    pub seed: Option<u64>,
    pub page_size: Option<u32>,
    pub cache_size: Option<i64>,
    pub wal_autocheckpoint: Option<i64>,
    pub journal_size_limit: Option<i64>,
    pub locking_mode: Option<LockingMode>,
    pub mmap_size: Option<i64>,
    /// "name=value" or "name" each, applied after all other settings.
    pub extra_pragmas: Vec<String>,
    /// false = the plain unix VFS (benchmark baseline); no VFS counts, no sync markers.
    pub count_vfs: bool,
    pub think_time_ms: Option<f64>,
    /// Write `extents` markers (FIEMAP of the file) after each xSync, before each
    /// xTruncate/xDelete, and for the db/wal/shm at the end of the run: lets the analyzer
    /// tell which block ranges belonged to which file. Needs `count_vfs` and a marker
    /// file; costs an open+ioctl+close per marker, so off by default.
    pub map_extents: bool,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            journal: JournalMode::Delete,
            sync: SyncMode::Full,
            txns: None,
            warmup: None,
            seed: None,
            page_size: None,
            cache_size: None,
            wal_autocheckpoint: None,
            journal_size_limit: None,
            locking_mode: None,
            mmap_size: None,
            extra_pragmas: Vec::new(),
            count_vfs: true,
            think_time_ms: None,
            map_extents: false,
        }
    }
}

/// One `PRAGMA name[=value]` statement, checked so free-form input cannot smuggle in
/// other SQL.
pub(crate) fn pragma_statement(spec: &str) -> Result<String, EngineError> {
    let invalid = || EngineError::InvalidSetting {
        name: "extra pragma".into(),
        value: spec.into(),
        allowed: vec!["name=value".into(), "name".into()],
    };
    let (name, value) = match spec.split_once('=') {
        Some((n, v)) => (n.trim(), Some(v.trim())),
        None => (spec.trim(), None),
    };
    let is_ident = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    };
    let value_ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-+.'\"".contains(c))
    };
    if !is_ident(name) || value.is_some_and(|v| !value_ok(v)) {
        return Err(invalid());
    }
    Ok(match value {
        Some(v) => format!("PRAGMA {name}={v}"),
        None => format!("PRAGMA {name}"),
    })
}

/// The pragmas read back after setup, in this order, into `RunInfo::pragmas`.
pub(crate) const REPORTED_PRAGMAS: &[&str] = &[
    "journal_mode",
    "synchronous",
    "page_size",
    "cache_size",
    "wal_autocheckpoint",
    "journal_size_limit",
    "locking_mode",
    "mmap_size",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_case_insensitively() {
        assert_eq!("WAL".parse::<JournalMode>().unwrap(), JournalMode::Wal);
        assert_eq!("normal".parse::<SyncMode>().unwrap(), SyncMode::Normal);
        assert_eq!(
            "Exclusive".parse::<LockingMode>().unwrap(),
            LockingMode::Exclusive
        );
    }

    #[test]
    fn bad_value_lists_allowed_values() {
        let err = "wall".parse::<JournalMode>().unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("'wall'") && text.contains("journal_mode"),
            "{text}"
        );
        assert!(
            text.contains("delete, truncate, persist, memory, wal, off"),
            "{text}"
        );
        let err = "fsync".parse::<SyncMode>().unwrap_err();
        assert!(err.to_string().contains("off, normal, full, extra"));
        assert!(err.hint().contains("off, normal, full, extra"));
    }

    #[test]
    fn extra_pragmas_are_checked() {
        assert_eq!(
            pragma_statement("temp_store=memory").unwrap(),
            "PRAGMA temp_store=memory"
        );
        assert_eq!(pragma_statement("optimize").unwrap(), "PRAGMA optimize");
        assert!(pragma_statement("x=1; DROP TABLE t").is_err());
        assert!(pragma_statement("").is_err());
    }
}
