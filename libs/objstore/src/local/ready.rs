//! Staging files made ahead of the puts that take them. Making a file is much of a direct
//! put's time on some file systems (ext4 without a journal looks over the inodes it freed
//! lately before it hands one out: 0.4 ms of a 2 ms put of a megabyte here), so a put takes a
//! file made ahead, and the next one is made on the blocking pool while it writes and waits
//! for the disk, off its path.
//!
//! One file is kept ready per directory, for the few directories put to last. They are named
//! as staging files are (`ready#N`), so listings leave them out; the store removes its own
//! when dropped, and a crash leaves at most one empty one per directory.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use parking_lot::Mutex;

/// Directories files are kept ready for (the most recently put to).
const DIRS: usize = 4;

/// Staging files made ahead, by directory.
#[derive(Debug, Default)]
pub(super) struct Ready {
    /// The most recently put to last.
    dirs: Mutex<Vec<Dir>>,
}

#[derive(Debug)]
struct Dir {
    path: PathBuf,
    /// The file ready, and its path.
    file: Option<(File, PathBuf)>,
    /// Whether one is being made.
    making: bool,
}

impl Ready {
    /// The file ready in `dir`, if one is; the next is made on the blocking pool (not waited
    /// for). Called on the blocking pool as the put begins: the file is made while the put
    /// writes and waits for the disk (made first, it would hold the CPU the put wants).
    pub(super) fn take_and_make(
        self: &Arc<Self>,
        dir: &Path,
        direct: &Arc<AtomicBool>,
    ) -> Option<(File, PathBuf)> {
        let runtime = tokio::runtime::Handle::try_current().ok();
        let (taken, make, forgotten) = {
            // `dir` becomes the most recent; the least recent past [`DIRS`] is forgotten.
            let mut dirs = self.dirs.lock();
            let mut d = match dirs.iter().position(|d| d.path == dir) {
                Some(i) => dirs.remove(i),
                None => Dir { path: dir.to_path_buf(), file: None, making: false },
            };
            let taken = d.file.take();
            let make = runtime.filter(|_| !d.making);
            d.making |= make.is_some();
            dirs.push(d);
            (taken, make, (dirs.len() > DIRS).then(|| dirs.remove(0)))
        };
        if let Some((_, path)) = forgotten.and_then(|d| d.file) {
            let _ = std::fs::remove_file(path);
        }
        if let Some(runtime) = make {
            let (ready, dir, direct) = (self.clone(), dir.to_owned(), direct.clone());
            drop(runtime.spawn_blocking(move || ready.make(&dir, &direct)));
        }
        taken
    }

    /// Makes the file [`Self::take_and_make`] asked for in `dir` (blocking). Not made (the
    /// directory gone, direct I/O refused): the next put makes its own.
    fn make(&self, dir: &Path, direct: &AtomicBool) {
        let made = super::open_staging(&dir.join("ready"), direct).ok().flatten();
        let spare = {
            let mut dirs = self.dirs.lock();
            match dirs.iter_mut().find(|d| d.path == dir) {
                Some(d) if d.file.is_none() => {
                    d.making = false;
                    d.file = made;
                    None
                }
                // Forgotten meanwhile, or one made twice.
                _ => made,
            }
        };
        if let Some((_, path)) = spare {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        for d in self.dirs.get_mut().drain(..) {
            if let Some((_, path)) = d.file {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
