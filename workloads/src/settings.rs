//! Run settings: journal mode, synchronous level, locking mode and the other PRAGMAs a
//! run can choose. Parsing errors list the allowed values.
//!
//! [`RunSettings`] is the one definition of the settings contract: the Python layer hands
//! its settings dict to [`RunSettings::deserialize_named`] (serde), and reads the field
//! names, defaults and allowed enum values back from this module.
//!
//! ```
//! use sqlwa_workloads::{EngineError, JournalMode, RunSettings};
//!
//! let settings = RunSettings::deserialize_named(serde_json::json!({
//!     "journal": "WAL",     // case-insensitive, through FromStr
//!     "sync": null,         // null keeps the default
//!     "extra_pragmas": ["temp_store=memory"],
//! }))?;
//! assert_eq!(settings.journal, JournalMode::Wal);
//! assert_eq!(settings.sync.as_str(), "full");
//! assert!(settings.count_vfs); // absent: the default
//!
//! let err = RunSettings::deserialize_named(serde_json::json!({"journal": "fast"})).unwrap_err();
//! assert!(matches!(&err, EngineError::BadSetting { name, .. } if name == "journal"));
//! assert!(err.to_string().contains("allowed: delete, truncate, persist, memory, wal, off"));
//! # Ok::<(), EngineError>(())
//! ```

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use crate::EngineError;

/// Declares a settings enum whose variants map 1:1 to lower-case PRAGMA values.
macro_rules! pragma_enum {
    ($(#[$doc:meta])* $name:ident, $setting:literal, {
        $($(#[$attr:meta])* $variant:ident => $text:literal),+ $(,)?
    }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$attr])* #[doc = concat!("`", $text, "`")] $variant),+ }

        impl $name {
            /// Every value, in the order SQLite's documentation lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Every value's PRAGMA text, in the order of [`Self::ALL`].
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The lower-case PRAGMA value.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// The PRAGMA values allowed, as `as_str()` gives them (for error messages).
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

        /// The lower-case PRAGMA value, as `as_str()`.
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        /// Through `FromStr`: case-insensitive, and a bad value lists the allowed ones.
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                String::deserialize(deserializer)?.parse().map_err(de::Error::custom)
            }
        }
    };
}

pragma_enum!(
    /// `PRAGMA journal_mode`. The default is `RunSettings::default()`'s.
    #[derive(Default)]
    JournalMode, "journal_mode", {
        #[default] Delete => "delete", Truncate => "truncate", Persist => "persist",
        Memory => "memory", Wal => "wal", Off => "off",
    }
);

pragma_enum!(
    /// `PRAGMA synchronous`. The default is `RunSettings::default()`'s.
    #[derive(Default)]
    SyncMode, "synchronous", {
        Off => "off", Normal => "normal", #[default] Full => "full", Extra => "extra",
    }
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
///
/// Deserialised strictly: an unknown name or a value of the wrong type is an error, and
/// an absent setting or a null value keeps the default (the Python layer sends every
/// setting, unset ones as `None`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSettings {
    /// `PRAGMA journal_mode` (default delete)
    #[serde(deserialize_with = "null_is_default")]
    pub journal: JournalMode,
    /// `PRAGMA synchronous` (default full)
    #[serde(deserialize_with = "null_is_default")]
    pub sync: SyncMode,
    /// measured transactions (a replay: stop after that many)
    pub txns: Option<u64>,
    /// Run the transactions (warm-up included) for at most this many seconds from the
    /// first one's start: none starts after that. With `txns`, whichever comes first;
    /// alone, their number is unbounded. A positive finite number; a replay refuses it.
    #[serde(deserialize_with = "duration")]
    pub duration_s: Option<f64>,
    /// transactions run first, not measured (a replay: the log's first ones; default 0)
    pub warmup: Option<u64>,
    /// the seed of the scenario's values
    pub seed: Option<u64>,
    /// `PRAGMA page_size`, applied before anything is written
    pub page_size: Option<u32>,
    /// `PRAGMA cache_size`
    pub cache_size: Option<i64>,
    /// `PRAGMA wal_autocheckpoint`
    pub wal_autocheckpoint: Option<i64>,
    /// `PRAGMA journal_size_limit`
    pub journal_size_limit: Option<i64>,
    /// `PRAGMA locking_mode`
    pub locking_mode: Option<LockingMode>,
    /// `PRAGMA mmap_size`
    pub mmap_size: Option<i64>,
    /// "name=value" or "name" each, applied after all other settings.
    #[serde(deserialize_with = "null_is_default")]
    pub extra_pragmas: Vec<String>,
    /// false = the plain unix VFS (benchmark baseline); no VFS counts, no sync markers.
    #[serde(deserialize_with = "null_is_default_count_vfs")]
    pub count_vfs: bool,
    /// Pause between transactions, ms: a number in `0..=`[`MAX_THINK_TIME_MS`]. A replay
    /// refuses it (the log's own gaps are kept).
    #[serde(deserialize_with = "think_time")]
    pub think_time_ms: Option<f64>,
    /// Write `extents` markers (FIEMAP of the file) after each xSync, before each
    /// xTruncate/xDelete, and for the db/wal/shm at the end of the run: lets the analyzer
    /// tell which block ranges belonged to which file. Needs `count_vfs` and a marker
    /// file; costs an open+ioctl+close per marker, so off by default.
    #[serde(deserialize_with = "null_is_default")]
    pub map_extents: bool,
    /// With `map_extents`: take each file's extents from the file of the same name in this
    /// directory instead of the run's own, when the run's directory is a FUSE mount that
    /// mirrors it (FUSE answers no FIEMAP; the files' blocks are the lower files'). None:
    /// the run's own files.
    pub extents_from: Option<PathBuf>,
    /// The name of a device-mapper `log-writes` target under the run's filesystem: the
    /// engine marks its log after the schema (`sqlwa-setup`) and after every commit
    /// (`sqlwa-txn-<index>`), outside the latency window (see `dmmark`). Needs root.
    pub dm_mark: Option<String>,
    /// A directory (existing, empty) to receive a copy of the database (`VACUUM INTO`)
    /// after the schema (`setup.db`) and after every commit (`txn-<index>.db`): the
    /// contents a crash state is compared with (`sqlwa.durability`). For untraced runs:
    /// each copy costs a read of the whole database.
    pub snapshot_dir: Option<PathBuf>,
    /// A replay only (`replay`): a snapshot of the app's database (and its `-wal` beside
    /// it) copied into the run's directory before the log is replayed. None: the log's own
    /// CREATE statements make the schema.
    pub from_db: Option<PathBuf>,
    /// A replay only: "recorded" (the log's gaps between transactions kept; the default),
    /// "back-to-back", or a positive number scaling the recorded gaps (2 = twice as long).
    pub timing: Option<String>,
    /// A replay only: stop at the first statement that fails on replay.
    #[serde(deserialize_with = "null_is_default")]
    pub strict: bool,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            journal: JournalMode::default(),
            sync: SyncMode::default(),
            txns: None,
            duration_s: None,
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
            extents_from: None,
            dm_mark: None,
            snapshot_dir: None,
            from_db: None,
            timing: None,
            strict: false,
        }
    }
}

impl RunSettings {
    /// Settings from any serde data format (the Python layer passes its settings dict).
    /// An error is an `EngineError::BadSetting` naming the setting: an unknown one, or
    /// the one whose value has the wrong type or is not allowed.
    pub fn deserialize_named<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Self, EngineError> {
        serde_path_to_error::deserialize(deserializer).map_err(|err| EngineError::BadSetting {
            name: err.path().to_string(),
            message: err.into_inner().to_string(),
        })
    }

    /// What the engine refuses in these settings before it opens a database, beyond what
    /// deserialising checked: the extra pragmas' form. A caller checks this before it makes
    /// anything for a run (its output and scratch directories, a lab filesystem).
    pub fn check(&self) -> Result<(), EngineError> {
        self.extra_pragmas
            .iter()
            .try_for_each(|spec| pragma_statement(spec).map(drop))?;
        self.timing
            .as_deref()
            .map_or(Ok(()), |t| Timing::parse(t).map(drop))
    }

    /// The settings only a replay takes, with the values given (None when none is given).
    pub(crate) fn replay_only(&self) -> Option<&'static str> {
        match () {
            _ if self.from_db.is_some() => Some("from_db"),
            _ if self.timing.is_some() => Some("timing"),
            _ if self.strict => Some("strict"),
            _ => None,
        }
    }
}

/// The type of a setting's value, as the settings dict carries it (JSON, a Python dict).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettingType {
    /// true or false
    Bool,
    /// a whole number
    Int,
    /// a number
    Float,
    /// text
    Text,
    /// a path, as text
    Path,
    /// a list of text
    TextList,
    /// one of these values (a PRAGMA's, as its enum's `NAMES`), read case-insensitively
    Choice(&'static [&'static str]),
}

impl SettingType {
    /// The type's name in [`RunSettings::FIELDS`]' exported form: `bool`, `int`,
    /// `float`, `str`, `path`, `list[str]` or `choice`.
    pub fn name(self) -> &'static str {
        match self {
            SettingType::Bool => "bool",
            SettingType::Int => "int",
            SettingType::Float => "float",
            SettingType::Text => "str",
            SettingType::Path => "path",
            SettingType::TextList => "list[str]",
            SettingType::Choice(_) => "choice",
        }
    }

    /// The values a [`SettingType::Choice`] allows; None for the other types.
    pub fn choices(self) -> Option<&'static [&'static str]> {
        match self {
            SettingType::Choice(names) => Some(names),
            _ => None,
        }
    }
}

/// One field of [`RunSettings`], as [`RunSettings::FIELDS`] describes it to the other
/// sides of the contract (the Python dataclass and the `.pyi`, whose tests check
/// theirs against it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingField {
    /// the field's name, as serde reads and writes it
    pub name: &'static str,
    /// its value's type
    pub kind: SettingType,
    /// whether it is an `Option` (None: the scenario's or SQLite's own value)
    pub optional: bool,
}

/// A setting that is an `Option` of `kind`.
const fn optional(name: &'static str, kind: SettingType) -> SettingField {
    SettingField {
        name,
        kind,
        optional: true,
    }
}

/// A setting that always has a value of `kind`.
const fn required(name: &'static str, kind: SettingType) -> SettingField {
    SettingField {
        name,
        kind,
        optional: false,
    }
}

impl RunSettings {
    /// Every field, in declaration order: its name, type and whether it is optional (its
    /// default is [`RunSettings::default`]'s, as [`SettingField::default_value`] gives
    /// it). The one description of the settings the Python side is checked against; a
    /// test holds it to the struct (names, types, what deserialising accepts).
    pub const FIELDS: &'static [SettingField] = {
        use SettingType::*;
        &[
            required("journal", Choice(JournalMode::NAMES)),
            required("sync", Choice(SyncMode::NAMES)),
            optional("txns", Int),
            optional("duration_s", Float),
            optional("warmup", Int),
            optional("seed", Int),
            optional("page_size", Int),
            optional("cache_size", Int),
            optional("wal_autocheckpoint", Int),
            optional("journal_size_limit", Int),
            optional("locking_mode", Choice(LockingMode::NAMES)),
            optional("mmap_size", Int),
            required("extra_pragmas", TextList),
            required("count_vfs", Bool),
            optional("think_time_ms", Float),
            required("map_extents", Bool),
            optional("extents_from", Path),
            optional("dm_mark", Text),
            optional("snapshot_dir", Path),
            optional("from_db", Path),
            optional("timing", Text),
            required("strict", Bool),
        ]
    };
}

impl SettingField {
    /// The field's default, as the settings dict carries it: its value in
    /// `RunSettings::default()`, serialised (null for None).
    pub fn default_value(&self) -> serde_json::Value {
        let defaults = serde_json::to_value(RunSettings::default()).unwrap_or_default();
        defaults.get(self.name).cloned().unwrap_or_default()
    }
}

/// How a replay paces the log's transactions (`RunSettings::timing`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Timing {
    /// the recorded gaps between transactions, multiplied by the factor (1 = as recorded)
    Recorded(f64),
    /// no pause at all
    BackToBack,
}

impl Timing {
    /// "recorded", "back-to-back" or a positive finite factor on the recorded gaps.
    pub fn parse(text: &str) -> Result<Timing, EngineError> {
        let invalid = || EngineError::InvalidSetting {
            name: "timing".into(),
            value: text.into(),
            allowed: vec![
                "recorded".into(),
                "back-to-back".into(),
                "a positive factor on the recorded gaps, e.g. 0.5".into(),
            ],
        };
        match text.trim().to_ascii_lowercase().as_str() {
            "recorded" => Ok(Timing::Recorded(1.0)),
            "back-to-back" => Ok(Timing::BackToBack),
            other => match other.parse::<f64>() {
                Ok(f) if f.is_finite() && f > 0.0 && f <= 1e6 => Ok(Timing::Recorded(f)),
                Ok(0.0) => Ok(Timing::BackToBack),
                _ => Err(invalid()),
            },
        }
    }
}

/// A null value keeps the type's default (which `RunSettings::default()` uses too).
fn null_is_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// The longest pause between transactions a run or a scenario may ask for (an hour):
/// beyond it a run is a mistake, and a huge value overflows the sleep's `Duration`.
pub const MAX_THINK_TIME_MS: f64 = 3_600_000.0;

/// Whether `ms` is a pause the engine can sleep: finite, not negative, at most an hour.
pub(crate) fn think_time_ok(ms: f64) -> bool {
    (0.0..=MAX_THINK_TIME_MS).contains(&ms)
}

/// `think_time_ms`: null keeps the scenario's; otherwise it must pass `think_time_ok`.
fn think_time<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    match Option::<f64>::deserialize(deserializer)? {
        Some(ms) if !think_time_ok(ms) => Err(serde::de::Error::custom(format!(
            "must be a pause between 0 and {MAX_THINK_TIME_MS} ms"
        ))),
        given => Ok(given),
    }
}

/// The longest [`RunSettings::duration_s`]: a year.
pub const MAX_DURATION_S: f64 = 366.0 * 86_400.0;

/// `duration_s`: null is no duration; otherwise positive, finite, at most a year.
fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    match Option::<f64>::deserialize(deserializer)? {
        Some(s) if !(s > 0.0 && s <= MAX_DURATION_S) => Err(serde::de::Error::custom(format!(
            "must be a positive number of seconds, at most {MAX_DURATION_S}"
        ))),
        given => Ok(given),
    }
}

/// `count_vfs`: a null value keeps `RunSettings::default()`'s (counting on).
fn null_is_default_count_vfs<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(deserializer)?
        .unwrap_or_else(|| RunSettings::default().count_vfs))
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
    use serde_json::json;

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

    fn from_json(value: serde_json::Value) -> Result<RunSettings, EngineError> {
        RunSettings::deserialize_named(value)
    }

    /// (name, message) of the setting error `value` must give.
    fn setting_error(value: serde_json::Value) -> (String, String) {
        match from_json(value) {
            Err(EngineError::BadSetting { name, message }) => (name, message),
            other => panic!("expected a BadSetting error, got {other:?}"),
        }
    }

    #[test]
    fn absent_and_null_settings_keep_the_defaults() {
        assert_eq!(from_json(json!({})).unwrap(), RunSettings::default());
        // Python sends every setting, the unset ones as None.
        let mut all_null = serde_json::to_value(RunSettings::default()).unwrap();
        for value in all_null.as_object_mut().unwrap().values_mut() {
            *value = serde_json::Value::Null;
        }
        assert_eq!(all_null.as_object().unwrap().len(), 22);
        assert_eq!(from_json(all_null).unwrap(), RunSettings::default());
    }

    #[test]
    fn defaults_round_trip_with_lower_case_enum_values() {
        let value = serde_json::to_value(RunSettings::default()).unwrap();
        assert_eq!(
            (value["journal"].as_str(), value["sync"].as_str()),
            (Some("delete"), Some("full"))
        );
        assert_eq!(value["count_vfs"], json!(true));
        assert_eq!(from_json(value).unwrap(), RunSettings::default());
    }

    #[test]
    fn given_settings_are_read() {
        let s = from_json(json!({
            "journal": "WAL", "sync": "normal", "locking_mode": "exclusive", "txns": 5,
            "page_size": 8192, "cache_size": -2000, "think_time_ms": 2,
            "extra_pragmas": ["temp_store=memory"], "count_vfs": false, "map_extents": true,
        }))
        .unwrap();
        assert_eq!((s.journal, s.sync), (JournalMode::Wal, SyncMode::Normal));
        assert_eq!(s.locking_mode, Some(LockingMode::Exclusive));
        assert_eq!(
            (s.txns, s.page_size, s.cache_size),
            (Some(5), Some(8192), Some(-2000))
        );
        assert_eq!(s.think_time_ms, Some(2.0));
        for bad in [-1.0, 1e300] {
            let err = RunSettings::deserialize_named(serde_json::json!({ "think_time_ms": bad }))
                .unwrap_err()
                .to_string();
            assert!(err.contains("think_time_ms"), "{err}");
        }
        assert_eq!(s.extra_pragmas, ["temp_store=memory"]);
        assert!(!s.count_vfs && s.map_extents);
        assert_eq!(s.warmup, None);
    }

    #[test]
    fn bad_settings_name_the_setting() {
        let (name, message) = setting_error(json!({"jounral": "wal"}));
        assert_eq!(name, "jounral");
        assert!(
            message.contains("unknown field `jounral`") && message.contains("`journal`"),
            "{message}"
        );

        let (name, message) = setting_error(json!({"txns": "5"}));
        assert_eq!(name, "txns");
        assert!(message.contains("invalid type: string"), "{message}");

        let (name, message) = setting_error(json!({"page_size": 1u64 << 40}));
        assert_eq!(name, "page_size");
        assert!(message.contains("expected u32"), "{message}");

        let (name, _) = setting_error(json!({"extra_pragmas": ["optimize", 3]}));
        assert_eq!(name, "extra_pragmas[1]");

        // An enum's bad value keeps FromStr's message, with the allowed values.
        let err = from_json(json!({"journal": "wall"})).unwrap_err();
        assert_eq!(
            err.to_string(),
            "setting journal: invalid value 'wall' for journal_mode (allowed: delete, truncate, persist, memory, wal, off)"
        );
        assert!(err.hint().contains("journal"), "{}", err.hint());
        assert_eq!(
            setting_error(json!({"locking_mode": "shared"})).0,
            "locking_mode"
        );
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
        let mut settings = RunSettings {
            extra_pragmas: vec!["temp_store=memory".into()],
            ..RunSettings::default()
        };
        assert!(settings.check().is_ok());
        settings.extra_pragmas.push("x=1; DROP TABLE t".into());
        assert!(settings.check().is_err());
    }

    /// A value of `kind` the settings accept, and one of another type they refuse.
    fn accepted_and_refused(kind: SettingType) -> (serde_json::Value, serde_json::Value) {
        match kind {
            SettingType::Bool => (json!(true), json!("yes")),
            SettingType::Int => (json!(4096), json!("4096")),
            SettingType::Float => (json!(1.5), json!("1.5")),
            SettingType::Text | SettingType::Path => (json!("/tmp/x"), json!(5)),
            SettingType::TextList => (json!(["temp_store=memory"]), json!("temp_store")),
            SettingType::Choice(names) => (json!(names[names.len() - 1]), json!("nope")),
        }
    }

    #[test]
    fn the_fields_table_is_the_struct() {
        // names: the struct's own, as serde writes them, each once
        let defaults = serde_json::to_value(RunSettings::default()).unwrap();
        let mut serialised: Vec<&str> = defaults
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        let mut listed: Vec<&str> = RunSettings::FIELDS.iter().map(|f| f.name).collect();
        serialised.sort_unstable();
        listed.sort_unstable();
        assert_eq!(listed, serialised);
        for field in RunSettings::FIELDS {
            let (good, bad) = accepted_and_refused(field.kind);
            let given = |value: serde_json::Value| {
                RunSettings::deserialize_named(json!({ field.name: value }))
            };
            // a value of the type is taken and written back as given, as is null (the
            // default); a value of another type is refused, naming the setting
            let taken = given(good.clone()).unwrap_or_else(|e| panic!("{}: {e}", field.name));
            let back = serde_json::to_value(&taken).unwrap()[field.name].clone();
            assert_eq!(back, good, "{}", field.name);
            assert!(given(serde_json::Value::Null).is_ok(), "{}", field.name);
            let err = given(bad).expect_err(field.name);
            assert!(
                matches!(&err, EngineError::BadSetting { name, .. } if name == field.name),
                "{}: {err}",
                field.name
            );
            // an Option's default is None; another's is a value of its type
            let default = field.default_value();
            assert_eq!(default.is_null(), field.optional, "{}", field.name);
        }
    }

    #[test]
    fn the_choices_are_the_enums_values() {
        let kind = |name: &str| {
            RunSettings::FIELDS
                .iter()
                .find(|f| f.name == name)
                .unwrap()
                .kind
        };
        assert_eq!(kind("journal").choices().unwrap(), JournalMode::allowed());
        assert_eq!(kind("sync").choices().unwrap(), SyncMode::allowed());
        assert_eq!(
            kind("locking_mode").choices().unwrap(),
            LockingMode::allowed()
        );
        assert_eq!(kind("txns").choices(), None);
        assert_eq!(RunSettings::FIELDS[0].default_value(), json!("delete"));
    }
}
