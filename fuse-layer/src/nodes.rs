//! The daemon's tables: FUSE inode numbers ↔ lower paths, and open file handles.
//!
//! Inode numbers are the daemon's own (1 is the root), handed out per lower (dev, ino),
//! so a lower inode number that happens to be 1 cannot clash with the root. An entry lives
//! while the kernel holds lookups on it (FUSE_FORGET drops them), and holds the lower
//! inode with an O_PATH descriptor meanwhile: the kernel still sets the times of a file
//! SQLite has deleted (a journal, the WAL) when it writes the inode back, and a deleted
//! file has no path.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use fuser::BackingId;

pub const ROOT: u64 = 1;

struct Node {
    path: PathBuf,
    lower: (u64, u64),
    lookups: u64,
    pin: Option<Arc<File>>,
}

pub struct Nodes {
    by_ino: HashMap<u64, Node>,
    by_lower: HashMap<(u64, u64), u64>,
    next: u64,
}

impl Nodes {
    pub fn new(root: &Path) -> Self {
        let root_node = Node {
            path: root.to_path_buf(),
            lower: (0, 0),
            lookups: 1,
            pin: None,
        };
        Nodes {
            by_ino: HashMap::from([(ROOT, root_node)]),
            by_lower: HashMap::new(),
            next: ROOT + 1,
        }
    }

    pub fn path(&self, ino: u64) -> Option<PathBuf> {
        self.by_ino.get(&ino).map(|n| n.path.clone())
    }

    /// The O_PATH descriptor that holds the lower inode (none for the root).
    pub fn pin(&self, ino: u64) -> Option<Arc<File>> {
        self.by_ino.get(&ino).and_then(|n| n.pin.clone())
    }

    pub fn child(&self, parent: u64, name: &OsStr) -> Option<PathBuf> {
        self.by_ino.get(&parent).map(|n| n.path.join(name))
    }

    /// The inode number for the lower file (dev, ino) now at `path`, one lookup more; a
    /// new entry keeps `pin`.
    pub fn remember(&mut self, path: PathBuf, lower: (u64, u64), pin: Option<File>) -> u64 {
        if let Some(&ino) = self.by_lower.get(&lower) {
            let node = self.by_ino.get_mut(&ino).expect("the two maps agree");
            node.lookups += 1;
            node.path = path;
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.by_ino.insert(
            ino,
            Node {
                path,
                lower,
                lookups: 1,
                pin: pin.map(Arc::new),
            },
        );
        self.by_lower.insert(lower, ino);
        ino
    }

    pub fn forget(&mut self, ino: u64, count: u64) {
        let Some(node) = self.by_ino.get_mut(&ino) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(count);
        if node.lookups == 0 && ino != ROOT {
            let lower = node.lower;
            self.by_ino.remove(&ino);
            self.by_lower.remove(&lower);
        }
    }

    /// After a rename: the entry and everything below it (a directory) now live at `to`.
    pub fn moved(&mut self, from: &Path, to: &Path) {
        for node in self.by_ino.values_mut() {
            if let Ok(rest) = node.path.strip_prefix(from) {
                node.path = if rest.as_os_str().is_empty() {
                    to.to_path_buf()
                } else {
                    to.join(rest)
                };
            }
        }
    }
}

/// One open lower file; with passthrough also the backing id the kernel reads and writes
/// through, shared by every handle of the inode (the kernel refuses two backing files for
/// one inode with EBUSY).
pub struct Handle {
    pub file: Arc<File>,
    pub ino: u64,
    pub backing: Option<Arc<BackingId>>,
}

pub struct Handles {
    open: HashMap<u64, Handle>,
    backing_by_ino: HashMap<u64, Weak<BackingId>>,
    next: u64,
}

impl Handles {
    pub fn new() -> Self {
        Handles {
            open: HashMap::new(),
            backing_by_ino: HashMap::new(),
            next: 1,
        }
    }

    pub fn insert(&mut self, handle: Handle) -> u64 {
        let fh = self.next;
        self.next += 1;
        if let Some(backing) = &handle.backing {
            self.backing_by_ino
                .insert(handle.ino, Arc::downgrade(backing));
        }
        self.open.insert(fh, handle);
        fh
    }

    /// The backing id already open for `ino`, if a handle still holds it.
    pub fn backing_of(&self, ino: u64) -> Option<Arc<BackingId>> {
        self.backing_by_ino.get(&ino).and_then(Weak::upgrade)
    }

    pub fn file(&self, fh: u64) -> Option<Arc<File>> {
        self.open.get(&fh).map(|h| Arc::clone(&h.file))
    }

    /// Close the handle (the last handle of an inode also closes its backing id).
    pub fn remove(&mut self, fh: u64) {
        if let Some(handle) = self.open.remove(&fh) {
            drop(handle);
            self.backing_by_ino
                .retain(|_, weak| weak.strong_count() > 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inode_lives_until_its_lookups_are_forgotten() {
        let mut nodes = Nodes::new(Path::new("/lower"));
        let a = nodes.remember(PathBuf::from("/lower/a"), (7, 12), None);
        assert_eq!(nodes.remember(PathBuf::from("/lower/a"), (7, 12), None), a);
        nodes.forget(a, 1);
        assert_eq!(nodes.path(a), Some(PathBuf::from("/lower/a")));
        nodes.forget(a, 1);
        assert_eq!(nodes.path(a), None);
        assert_ne!(
            nodes.remember(PathBuf::from("/lower/a"), (7, 12), None),
            ROOT
        );
    }

    #[test]
    fn a_rename_moves_the_entry_and_what_lies_below() {
        let mut nodes = Nodes::new(Path::new("/l"));
        let dir = nodes.remember(PathBuf::from("/l/d"), (1, 2), None);
        let file = nodes.remember(PathBuf::from("/l/d/f"), (1, 3), None);
        let other = nodes.remember(PathBuf::from("/l/dd"), (1, 4), None);
        nodes.moved(Path::new("/l/d"), Path::new("/l/e"));
        assert_eq!(nodes.path(dir), Some(PathBuf::from("/l/e")));
        assert_eq!(nodes.path(file), Some(PathBuf::from("/l/e/f")));
        assert_eq!(nodes.path(other), Some(PathBuf::from("/l/dd")));
    }
}
