//! The background thread that prepares the next segment file before it is needed: written as
//! a temp file full of zeros, fsynced, renamed into place, directory fsynced. Appends then
//! only overwrite zeros inside a file whose size and extents never change.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use super::format::{segment_path, segment_tmp_path};
use crate::storage::fsutil::fsync_dir;
use crate::storage::zeros;

struct Slot {
    /// The seq the thread should prepare next.
    want: Option<u64>,
    /// A prepared file (or the error preparing it) waiting to be taken.
    ready: Option<(u64, io::Result<File>)>,
    shutdown: bool,
}

struct Shared {
    slot: Mutex<Slot>,
    cv: Condvar,
}

pub(crate) struct Preallocator {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Preallocator {
    /// Starts the thread, preparing segment `first_seq` right away.
    pub fn start(dir: PathBuf, size: u64, first_seq: u64) -> io::Result<Preallocator> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot {
                want: Some(first_seq),
                ready: None,
                shutdown: false,
            }),
            cv: Condvar::new(),
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("raft-log-prealloc".into())
            .spawn(move || run(thread_shared, dir, size))?;
        Ok(Preallocator {
            shared,
            thread: Some(thread),
        })
    }

    /// The prepared file for `seq`, waiting for it if need be; then starts on `seq + 1`.
    pub fn take(&self, seq: u64) -> io::Result<File> {
        let mut slot = self.shared.slot.lock();
        loop {
            match slot.ready.take() {
                Some((ready_seq, result)) if ready_seq == seq => {
                    slot.want = Some(seq + 1);
                    self.shared.cv.notify_all();
                    return result;
                }
                // Prepared for another seq (cannot happen with one writer); prepare again.
                Some(_) => slot.want = Some(seq),
                None if slot.want.is_none() => slot.want = Some(seq),
                None => {}
            }
            self.shared.cv.notify_all();
            self.shared.cv.wait(&mut slot);
        }
    }
}

impl Drop for Preallocator {
    fn drop(&mut self) {
        self.shared.slot.lock().shutdown = true;
        self.shared.cv.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(shared: Arc<Shared>, dir: PathBuf, size: u64) {
    loop {
        let seq = {
            let mut slot = shared.slot.lock();
            loop {
                if slot.shutdown {
                    return;
                }
                if slot.ready.is_none() {
                    if let Some(seq) = slot.want.take() {
                        break seq;
                    }
                }
                shared.cv.wait(&mut slot);
            }
        };
        let result = prepare(&dir, seq, size);
        if let Err(e) = &result {
            tracing::error!(
                "raft log: preparing segment {seq} in {}: {e}",
                dir.display()
            );
        }
        let mut slot = shared.slot.lock();
        slot.ready = Some((seq, result));
        shared.cv.notify_all();
    }
}

/// Creates `{seq}.seg` full of zeros, durably.
pub(crate) fn prepare(dir: &std::path::Path, seq: u64, size: u64) -> io::Result<File> {
    let tmp = segment_tmp_path(dir, seq);
    let path = segment_path(dir, seq);
    {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        // Real zeros, not a hole or fallocate's unwritten extents: the first write into
        // them would otherwise make fdatasync journal an extent conversion. Written directly
        // where possible (see `storage::zeros`: appends then pad to page boundaries).
        zeros::fill(&file, 0, size)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, &path)?;
    fsync_dir(dir)?;
    OpenOptions::new().read(true).write(true).open(&path)
}
