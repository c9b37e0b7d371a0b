//! Quantiles of a Prometheus histogram from the text exposition format (kube-scheduler's
//! `/metrics`), computed as PromQL's `histogram_quantile` does.

/// The cumulative buckets `(le, count)` of histogram `name`, summed over every series
/// whose labels contain all of `labels` (`key="value"` strings), sorted by `le`.
pub fn buckets(text: &str, name: &str, labels: &[&str]) -> Vec<(f64, f64)> {
    let bucket = format!("{name}_bucket{{");
    let mut sums: Vec<(f64, f64)> = Vec::new();
    for line in text.lines().filter(|l| l.starts_with(&bucket)) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some(label_text) = series[bucket.len()..].strip_suffix('}') else {
            continue;
        };
        if !labels.iter().all(|l| label_text.split(',').any(|kv| kv == *l)) {
            continue;
        }
        let Some(le) = label_text.split(',').find_map(|kv| kv.strip_prefix("le=\"")?.strip_suffix('"')) else {
            continue;
        };
        let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::NAN) };
        let Ok(count) = value.parse::<f64>() else {
            continue;
        };
        match sums.iter_mut().find(|(b, _)| *b == le) {
            Some((_, c)) => *c += count,
            None => sums.push((le, count)),
        }
    }
    sums.retain(|(le, _)| !le.is_nan());
    sums.sort_by(|a, b| a.0.total_cmp(&b.0));
    sums
}

/// The `q` quantile (0..=1) by linear interpolation inside the bucket that holds it; the
/// largest finite bound when it falls in `+Inf`; `None` without observations.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            let width = count - lower.1;
            let within = if width > 0.0 { (rank - lower.1) / width } else { 1.0 };
            return Some(lower.0 + (le - lower.0) * within);
        }
        lower = (le, count);
    }
    Some(lower.0)
}

/// The number of observations (the `+Inf` bucket).
pub fn count(buckets: &[(f64, f64)]) -> f64 {
    buckets.last().map_or(0.0, |b| b.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# TYPE h histogram
h_bucket{le="0.001",profile="a"} 0
h_bucket{le="0.01",profile="a"} 50
h_bucket{le="0.1",profile="a"} 90
h_bucket{le="+Inf",profile="a"} 100
h_bucket{le="0.001",profile="b"} 10
h_bucket{le="0.01",profile="b"} 10
h_bucket{le="0.1",profile="b"} 10
h_bucket{le="+Inf",profile="b"} 10
h_sum{profile="a"} 3
"#;

    #[test]
    fn sums_matching_series_and_interpolates() {
        let a = buckets(TEXT, "h", &["profile=\"a\""]);
        assert_eq!(a, vec![(0.001, 0.0), (0.01, 50.0), (0.1, 90.0), (f64::INFINITY, 100.0)]);
        let near = |got: Option<f64>, want: f64| assert!((got.unwrap() - want).abs() < 1e-12, "{got:?} vs {want}");
        near(quantile(&a, 0.25), 0.0055);
        assert_eq!(quantile(&a, 0.99), Some(0.1));
        let all = buckets(TEXT, "h", &[]);
        assert_eq!(count(&all), 110.0);
        near(quantile(&all, 0.05), 0.00055);
        assert_eq!(quantile(&buckets(TEXT, "other", &[]), 0.5), None);
    }
}
