//! The decision workers: a fixed set of threads for decisions too large to make on the
//! I/O threads. A job holds its request's admission until it ends, so abandoned work still
//! counts against the limits; a job whose request was given up stops at its next check.
//!
//! The workers run at a lower CPU priority than the I/O threads (Linux), so that probes,
//! metrics and small requests are answered while a large body is being decoded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

pub struct Workers {
    jobs: Mutex<mpsc::Sender<Job>>,
}

/// Nice value of the worker threads (higher is lower priority).
const WORKER_NICENESS: i32 = 10;

impl Workers {
    /// `threads` workers (at least one).
    pub fn new(threads: usize) -> std::io::Result<Workers> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new().name(format!("decide-{i}")).spawn(move || {
                lower_priority();
                loop {
                    // The lock is held only to take the next job.
                    let job = match rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                }
            })?;
        }
        Ok(Workers { jobs: Mutex::new(tx) })
    }

    /// Runs `work` on a worker, without waiting for it.
    pub fn detach(&self, work: impl FnOnce() + Send + 'static) {
        if let Ok(jobs) = self.jobs.lock() {
            let _ = jobs.send(Box::new(work));
        }
    }

    /// Runs `work` on a worker; `None` if the workers are gone.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(work());
        });
        self.jobs.lock().ok()?.send(job).ok()?;
        rx.await.ok()
    }
}

#[cfg(target_os = "linux")]
fn lower_priority() {
    // SAFETY: plain system calls on the calling thread; a failure leaves the priority as is.
    unsafe {
        let tid = libc::gettid();
        if libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, WORKER_NICENESS) != 0 {
            tracing::debug!("decision workers keep the default CPU priority (setpriority failed)");
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

/// Raised when a request's answer is no longer wanted: the request future was dropped
/// (timeout, client gone) before its work finished.
#[derive(Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn flag(&self) -> &AtomicBool {
        &self.0
    }

    /// A guard that raises the flag when dropped, unless disarmed.
    pub fn on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(Some(self.clone()))
    }
}

pub struct CancelOnDrop(Option<Cancel>);

impl CancelOnDrop {
    /// The request was answered: nothing to cancel.
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &self.0 {
            c.0.store(true, Ordering::Relaxed);
        }
    }
}
