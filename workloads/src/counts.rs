//! VFS call counts per file kind (plain data; the counting itself is in `vfs`).

use serde::Serialize;

/// Which file a VFS call went to, from the xOpen flags (or, for xDelete, the name suffix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// the main database file
    Db,
    /// the rollback journal (`-journal`)
    Journal,
    /// the write-ahead log (`-wal`)
    Wal,
    /// the WAL index (`-shm`), shared memory
    Shm,
    /// temporary files: temp databases, statement and temp journals
    Temp,
    /// anything else (a super-journal)
    Other,
}

impl FileKind {
    /// Every kind, in declaration order (the order of [`VfsCounts`]' fields).
    pub const ALL: [FileKind; 6] = [
        FileKind::Db,
        FileKind::Journal,
        FileKind::Wal,
        FileKind::Shm,
        FileKind::Temp,
        FileKind::Other,
    ];

    /// The lower-case name: "db", "journal", "wal", "shm", "temp", "other" (as serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::Db => "db",
            FileKind::Journal => "journal",
            FileKind::Wal => "wal",
            FileKind::Shm => "shm",
            FileKind::Temp => "temp",
            FileKind::Other => "other",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Counts of the VFS calls to files of one kind.
///
/// For `shm` (the WAL index): xShmMap calls are counted as `open_calls` (each maps one
/// 32 KiB region), xShmUnmap with delete as `delete_calls`; stores into the mapping are
/// not file I/O and are not counted. xFetch/xUnfetch (mmap reads, with `mmap_size` > 0)
/// are not counted as reads.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq, Serialize)]
pub struct KindCounts {
    /// xWrite calls
    pub write_calls: u64,
    /// bytes xWrite was asked to write
    pub write_bytes: u64,
    /// xRead calls
    pub read_calls: u64,
    /// bytes read (a read past the end of a file counts what the file had)
    pub read_bytes: u64,
    /// every xSync
    pub sync_calls: u64,
    /// xSync with SQLITE_SYNC_FULL
    pub sync_full: u64,
    /// xSync with SQLITE_SYNC_DATAONLY
    pub sync_dataonly: u64,
    /// xTruncate calls
    pub truncate_calls: u64,
    /// xDelete, kind from the file name suffix
    pub delete_calls: u64,
    /// successful xOpen calls
    pub open_calls: u64,
}

impl KindCounts {
    fn zip(&self, other: &KindCounts, f: impl Fn(u64, u64) -> u64) -> KindCounts {
        KindCounts {
            write_calls: f(self.write_calls, other.write_calls),
            write_bytes: f(self.write_bytes, other.write_bytes),
            read_calls: f(self.read_calls, other.read_calls),
            read_bytes: f(self.read_bytes, other.read_bytes),
            sync_calls: f(self.sync_calls, other.sync_calls),
            sync_full: f(self.sync_full, other.sync_full),
            sync_dataonly: f(self.sync_dataonly, other.sync_dataonly),
            truncate_calls: f(self.truncate_calls, other.truncate_calls),
            delete_calls: f(self.delete_calls, other.delete_calls),
            open_calls: f(self.open_calls, other.open_calls),
        }
    }

    /// Every counter with its field name, in declaration order (for column-wise output).
    pub fn fields(&self) -> [(&'static str, u64); 10] {
        [
            ("write_calls", self.write_calls),
            ("write_bytes", self.write_bytes),
            ("read_calls", self.read_calls),
            ("read_bytes", self.read_bytes),
            ("sync_calls", self.sync_calls),
            ("sync_full", self.sync_full),
            ("sync_dataonly", self.sync_dataonly),
            ("truncate_calls", self.truncate_calls),
            ("delete_calls", self.delete_calls),
            ("open_calls", self.open_calls),
        ]
    }

    /// `self + other`, counter by counter.
    pub fn add(&self, other: &KindCounts) -> KindCounts {
        self.zip(other, |a, b| a + b)
    }

    /// `self - earlier`, for counter snapshots taken before and after a commit.
    pub fn since(&self, earlier: &KindCounts) -> KindCounts {
        self.zip(earlier, u64::wrapping_sub)
    }
}

/// One [`KindCounts`] per [`FileKind`].
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq, Serialize)]
pub struct VfsCounts {
    /// [`FileKind::Db`]
    pub db: KindCounts,
    /// [`FileKind::Journal`]
    pub journal: KindCounts,
    /// [`FileKind::Wal`]
    pub wal: KindCounts,
    /// [`FileKind::Shm`]
    pub shm: KindCounts,
    /// [`FileKind::Temp`]
    pub temp: KindCounts,
    /// [`FileKind::Other`]
    pub other: KindCounts,
}

impl VfsCounts {
    /// The counts of one kind.
    pub fn get(&self, kind: FileKind) -> &KindCounts {
        match kind {
            FileKind::Db => &self.db,
            FileKind::Journal => &self.journal,
            FileKind::Wal => &self.wal,
            FileKind::Shm => &self.shm,
            FileKind::Temp => &self.temp,
            FileKind::Other => &self.other,
        }
    }

    pub(crate) fn get_mut(&mut self, kind: FileKind) -> &mut KindCounts {
        match kind {
            FileKind::Db => &mut self.db,
            FileKind::Journal => &mut self.journal,
            FileKind::Wal => &mut self.wal,
            FileKind::Shm => &mut self.shm,
            FileKind::Temp => &mut self.temp,
            FileKind::Other => &mut self.other,
        }
    }

    /// All kinds added up.
    pub fn total(&self) -> KindCounts {
        FileKind::ALL
            .iter()
            .fold(KindCounts::default(), |acc, k| acc.add(self.get(*k)))
    }

    /// Whether these calls changed a database file: an xWrite, xTruncate or xSync of the
    /// database, its rollback journal or its WAL, or the deletion of a journal or WAL.
    /// What a transaction that changed no page makes none of (SQLite opens no journal and
    /// writes no WAL frame for it), whatever its statements: an UPDATE or DELETE matching
    /// no row, a write only to a TEMP table (whose pages live in the `temp` files), a row
    /// rewritten unchanged. Reads, `-shm` (WAL index) and `temp` calls do not count.
    pub fn wrote_database(&self) -> bool {
        let changed = |k: &KindCounts| k.write_calls + k.truncate_calls + k.sync_calls > 0;
        changed(&self.db)
            || changed(&self.journal)
            || changed(&self.wal)
            || self.journal.delete_calls + self.wal.delete_calls > 0
    }

    /// `self + other`, per kind.
    pub fn add(&self, other: &VfsCounts) -> VfsCounts {
        let mut sum = *self;
        for kind in FileKind::ALL {
            *sum.get_mut(kind) = self.get(kind).add(other.get(kind));
        }
        sum
    }

    /// `self - earlier`, per kind.
    pub fn since(&self, earlier: &VfsCounts) -> VfsCounts {
        let mut out = VfsCounts::default();
        for kind in FileKind::ALL {
            *out.get_mut(kind) = self.get(kind).since(earlier.get(kind));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_name_every_serialized_field_in_order() {
        let c = KindCounts {
            write_calls: 1,
            write_bytes: 2,
            read_calls: 3,
            read_bytes: 4,
            sync_calls: 5,
            sync_full: 6,
            sync_dataonly: 7,
            truncate_calls: 8,
            delete_calls: 9,
            open_calls: 10,
        };
        let ours: serde_json::Map<String, serde_json::Value> = c
            .fields()
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        assert_eq!(
            serde_json::to_value(c).unwrap(),
            serde_json::Value::Object(ours)
        );
        let values: Vec<u64> = c.fields().iter().map(|f| f.1).collect();
        assert_eq!(values, (1..=10).collect::<Vec<u64>>(), "declaration order");
    }
}
