//! Giving memory back after large requests (glibc). By default glibc keeps freed heap
//! pages, and raises its mmap threshold up to 32 MiB after the first large free, so the
//! memory of one hostile 16 MiB request stayed resident for the life of the process.
//! With a fixed threshold, buffers of 1 MiB and more are mapped and unmapped on their
//! own; after a large request the workers trim what remains free in the heaps.

/// Bodies at least this large trigger a trim once their decision ends.
pub const TRIM_AFTER_BODY_BYTES: usize = 4 << 20;

/// Sets the fixed mmap threshold; once, before serving.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune() {
    // SAFETY: mallopt only changes allocator parameters; a failure leaves the defaults.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// Returns free heap pages to the OS (costs about a millisecond; run on a worker).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim() {
    // SAFETY: malloc_trim only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune() {}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() {}
