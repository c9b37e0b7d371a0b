//! A price sweep (coloc-sweep): one `coloc-demo` run per wait price, each with the
//! shipped default policy whose `online` class's `waitPrice` is set, on one cluster or
//! trace; and, asked for, kube-scheduler alone and requeue-only on the same.
//!
//! Prices are given in real units (offline CPU-seconds one second of an online pod's wait
//! is worth). `--time-scale F` makes every grace period and stop time F times as long, so
//! waits are F times as long while the work a choice throws away (pods' ages) is not: a
//! run at F tests the real price P with a policy saying P / F.

/// The `waitPrice` the policy of a run at `time_scale` says for the real price `real`.
pub fn policy_price(real: f64, time_scale: f64) -> f64 {
    real / time_scale
}

/// `policy` (a policy file's text) with the class `class`'s `waitPrice` set to `price`:
/// the line replaced where the class has one, else added after its `name`. Comments and
/// every other line are kept. `None` if the file lists no such class.
pub fn with_wait_price(policy: &str, class: &str, price: f64) -> Option<String> {
    let lines: Vec<&str> = policy.lines().collect();
    let start = lines.iter().position(|l| {
        let t = l.trim_start();
        t.strip_prefix("- name:").is_some_and(|n| n.trim() == class)
    })?;
    let indent = lines[start].len() - lines[start].trim_start().len() + 2;
    // The class's block: to the next line as little indented as its `- name:` (the next
    // class, or the end of the list), comments and blank lines inside included.
    let end = lines[start + 1..]
        .iter()
        .position(|l| {
            let t = l.trim_start();
            !t.is_empty() && !t.starts_with('#') && l.len() - t.len() < indent
        })
        .map_or(lines.len(), |i| start + 1 + i);
    let field = format!("{}waitPrice: {price}", " ".repeat(indent));
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    match (start + 1..end).find(|i| lines[*i].trim_start().starts_with("waitPrice:")) {
        Some(i) => out[i] = field,
        None => out.insert(start + 1, field),
    }
    let mut text = out.join("\n");
    if policy.ends_with('\n') {
        text.push('\n');
    }
    Some(text)
}

/// A file name for a price: `price-1000`, `price-1e12`.
pub fn file_stem(real: f64) -> String {
    let p = if real >= 1e7 { format!("{real:e}") } else { format!("{real}") };
    format!("price-{}", p.replace('.', "_"))
}
