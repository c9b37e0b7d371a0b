//! Heap accounting: the system allocator, counting live bytes while asked to, and the
//! process's resident memory.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

use coloc_bench::procstat::status_kib;

/// The system allocator, counting live bytes while `COUNTING` is on (sharded counters, so
/// threads do not fight over one cache line). Off during the timed phases.
pub(crate) struct Counting;

pub(crate) static COUNTING: AtomicBool = AtomicBool::new(false);

#[repr(align(128))]
pub(crate) struct Shard(AtomicIsize);

pub(crate) static SHARDS: [Shard; 16] = [const { Shard(AtomicIsize::new(0)) }; 16];

pub(crate) fn shard() -> &'static AtomicIsize {
    thread_local! { static TAG: u8 = const { 0 }; }
    let addr = TAG.with(|t| t as *const u8 as usize);
    &SHARDS[((addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) & 15].0
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            shard().fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            shard().fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        if COUNTING.load(Ordering::Relaxed) {
            shard().fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            shard().fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
pub(crate) static ALLOC: Counting = Counting;

pub(crate) fn heap_live() -> isize {
    SHARDS.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
}

/// Returns freed heap pages to the OS (glibc), so RSS shows what is live.
pub(crate) fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        unsafe { malloc_trim(0) };
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mem {
    pub(crate) rss_kb: u64,
    pub(crate) hwm_kb: u64,
}

pub(crate) fn mem() -> Mem {
    let field = |name: &str| status_kib("self", name).unwrap_or(0);
    Mem { rss_kb: field("VmRSS:"), hwm_kb: field("VmHWM:") }
}

pub(crate) fn mib_kb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

pub(crate) fn mib_b(b: isize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}
