//! A child process of the test bed: output to a log file, killed when the handle drops
//! (and by the kernel if the test process dies first).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Proc {
    pub name: String,
    child: Option<Child>,
    pub log: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Proc {
    /// Starts `program args`, appending its stdout and stderr to `<log_dir>/<name>.log`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> anyhow::Result<Proc> {
        let mut p = Proc {
            name: name.to_string(),
            child: None,
            log: log_dir.join(format!("{name}.log")),
            program: program.to_path_buf(),
            args: args.to_vec(),
            env: env.to_vec(),
        };
        p.start()?;
        Ok(p)
    }

    fn start(&mut self) -> anyhow::Result<()> {
        let out = File::options().create(true).append(true).open(&self.log)?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args).envs(self.env.iter().cloned()).stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to SIGKILL the child
        // when the thread that spawned it ends, so no control-plane process outlives a
        // killed test run. Spawn from long-lived threads (the test's or a runtime worker).
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child =
            cmd.spawn().map_err(|e| anyhow::anyhow!("cannot start {} ({}): {e}", self.name, self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Has it exited? (e.g. a flag the binary does not know)
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP: frozen, as a process starved of CPU or stuck in a long GC pause would be;
    /// its connections stay open and unread.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`Proc::pause`].
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as i32, sig);
            }
        }
    }

    /// Starts it again with the same command line (after `kill` or `stop`).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.start()
    }

    /// The last `bytes` of its log, for failure messages.
    pub fn log_tail(&self, bytes: u64) -> String {
        tail(&self.log, bytes)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn tail(path: &Path, bytes: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(bytes)));
    let mut s = String::new();
    let _ = f.read_to_string(&mut s);
    s
}
