//! Deterministic ids for synthetic clusters, shared by `coloc-viewload` and the view
//! benchmark so that both build the same objects.

/// splitmix64: a well-spread 64-bit hash of `x`.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A UUID-shaped id (version 4 layout), one per (`tag`, `i`).
pub fn uuid(tag: u64, i: u64) -> String {
    let a = mix(tag.wrapping_mul(0x1000_0000_0000) ^ i);
    let b = mix(a);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}
