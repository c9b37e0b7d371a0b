//! The decision workers: a fixed set of threads for decisions too large to make on the
//! I/O threads. A job holds its request's admission until it ends, so abandoned work still
//! counts against the limits; a job whose request was given up stops at its next check.
//!
//! Answers run at the I/O threads' CPU priority: kube-scheduler waits for them inside its
//! scheduling cycle, so they must not queue behind the API server and kube-scheduler
//! itself on a busy node (at nice 10, a storm's objects-mode preempt took twice as long,
//! its p99 ten times its p50). Work nobody waits for (returning memory, shadow mode's
//! decisions) has a thread of its own at a lower priority (Linux): an unprivileged thread
//! cannot raise its priority again once lowered. Probes keep their own thread and port.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

pub struct Workers {
    jobs: Mutex<mpsc::Sender<Job>>,
    housekeeping: Mutex<mpsc::Sender<Job>>,
}

/// Nice value of the housekeeping thread (higher is lower priority).
const HOUSEKEEPING_NICENESS: i32 = 10;

impl Workers {
    /// `threads` workers for answers (at least one), and one for housekeeping.
    pub fn new(threads: usize) -> std::io::Result<Workers> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new().name(format!("decide-{i}")).spawn(move || serve(&rx))?;
        }
        let (housekeeping, rx) = mpsc::channel::<Job>();
        let rx = Mutex::new(rx);
        std::thread::Builder::new().name("housekeeping".into()).spawn(move || {
            lower_priority();
            serve(&rx);
        })?;
        Ok(Workers { jobs: Mutex::new(tx), housekeeping: Mutex::new(housekeeping) })
    }

    /// Runs housekeeping `work`, at a lower priority, without waiting for it.
    pub fn detach(&self, work: impl FnOnce() + Send + 'static) {
        if let Ok(jobs) = self.housekeeping.lock() {
            let _ = jobs.send(Box::new(work));
        }
    }

    /// Runs an answer's `work` on a worker; `None` if the workers are gone.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        Self::run_on(&self.jobs, work).await
    }

    /// Runs `work` nobody waits for an answer from (shadow mode's decisions) on the
    /// housekeeping thread, at its lower priority; `None` if it is gone.
    pub async fn run_background<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        Self::run_on(&self.housekeeping, work).await
    }

    async fn run_on<T: Send + 'static>(
        jobs: &Mutex<mpsc::Sender<Job>>,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(work());
        });
        jobs.lock().ok()?.send(job).ok()?;
        rx.await.ok()
    }
}

/// Runs jobs until the sender is gone.
fn serve(jobs: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        // The lock is held only to take the next job.
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

#[cfg(target_os = "linux")]
fn lower_priority() {
    // SAFETY: plain system calls on the calling thread; a failure leaves the priority as is.
    unsafe {
        let tid = libc::gettid();
        if libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, HOUSEKEEPING_NICENESS) != 0 {
            tracing::debug!("housekeeping keeps the default CPU priority (setpriority failed)");
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn own_nice() -> i32 {
        // SAFETY: plain system calls on the calling thread.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[tokio::test]
    async fn an_answer_runs_at_the_callers_priority_and_housekeeping_below_it() {
        let workers = Workers::new(1).unwrap();
        let caller = own_nice();
        assert_eq!(workers.run(own_nice).await, Some(caller), "an answer kube-scheduler waits for is not niced");
        let (tx, rx) = std::sync::mpsc::channel();
        workers.detach(move || {
            let _ = tx.send(own_nice());
        });
        let housekeeping = rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        // A runner already at nice 10 or more cannot show it (a thread never raises its own).
        if caller < HOUSEKEEPING_NICENESS {
            assert_eq!(housekeeping, HOUSEKEEPING_NICENESS, "housekeeping at {housekeeping}, the caller at {caller}");
        }
        assert_eq!(workers.run(own_nice).await, Some(caller), "and answers stay where they were after it");
    }
}
