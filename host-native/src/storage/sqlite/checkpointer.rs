//! The thread that copies the write-ahead log into the database.

use std::path::Path;

use super::{error, open_exclusive};
use crate::storage::StorageError;

/// A thread with its own connection that copies the write-ahead log into the
/// database (`wal_checkpoint(PASSIVE)`) when woken, so the writer's commits
/// never wait for the disk's syncs. Stopped and joined when dropped.
pub(super) struct Checkpointer {
    wake: Option<std::sync::mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    pub(super) fn start(path: &Path, synchronous: &str) -> Result<Checkpointer, StorageError> {
        let connection = open_exclusive(path)?;
        connection
            .execute_batch(&format!("PRAGMA synchronous = {synchronous};"))
            .map_err(|e| error(path, e))?;
        // One wake-up pending at most: a pass copies everything logged until it starts.
        let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
        let shown = path.display().to_string();
        let thread = std::thread::Builder::new()
            .name("mailjar-checkpoint".into())
            .spawn(move || {
                while woken.recv().is_ok() {
                    let pass =
                        connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    if let Err(e) = pass {
                        tracing::debug!("{shown}: checkpoint: {e}");
                    }
                }
            })
            .map_err(|e| error(path, format!("cannot start the checkpoint thread: {e}")))?;
        Ok(Checkpointer {
            wake: Some(wake),
            thread: Some(thread),
        })
    }

    pub(super) fn wake(&self) {
        if let Some(wake) = &self.wake {
            let _ = wake.try_send(());
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
