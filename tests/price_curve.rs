//! The wait price's sweep and curve (coloc-sweep, coloc-curve): the policy each price's
//! run takes, and the figures, table and SVG read from coloc-demo's results.

use std::path::Path;

use coloc_testbed::curve::{self, Entry, Manifest};
use coloc_testbed::sweep;

#[test]
fn a_real_price_is_said_divided_by_the_time_scale() {
    // Waits at ×0.1 are a tenth as long, the work thrown away is not.
    assert_eq!(sweep::policy_price(100.0, 0.1), 1000.0);
    assert_eq!(sweep::policy_price(100.0, 1.0), 100.0);
}

#[test]
fn the_price_is_set_in_the_named_class_only_and_every_other_line_kept() {
    let policy = "mode: shadow\nclasses:\n  - name: online\n    # a comment\n    preempts: [batch]\n    waitPrice: 5\n\n  - name: batch\n    waitPrice: 7\n";
    let set = sweep::with_wait_price(policy, "online", 1000.0).unwrap();
    assert_eq!(
        set,
        "mode: shadow\nclasses:\n  - name: online\n    # a comment\n    preempts: [batch]\n    waitPrice: 1000\n\n  - name: batch\n    waitPrice: 7\n"
    );
    let added = sweep::with_wait_price("classes:\n  - name: online\n    preempts: [batch]\n", "online", 0.5).unwrap();
    assert_eq!(added, "classes:\n  - name: online\n    waitPrice: 0.5\n    preempts: [batch]\n");
    assert_eq!(sweep::with_wait_price(policy, "mid", 1.0), None);
}

#[test]
fn the_shipped_policy_takes_a_price_in_its_online_class() {
    let shipped = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/policy/default.yaml")).unwrap();
    let set = sweep::with_wait_price(&shipped, "online", 12345.0).unwrap();
    let online = set.split("  - name: online").nth(1).unwrap().split("  - name: mid").next().unwrap();
    assert!(online.contains("\n    waitPrice: 12345\n"), "{online}");
    assert_eq!(set.matches("waitPrice: 12345").count(), 1);
}

/// A coloc-demo result of `runs`: (kind, online p99 s, work thrown away CPU-s).
fn result(runs: &[(&str, f64, f64)]) -> serde_json::Value {
    serde_json::json!({"runs": runs.iter().map(|(kind, p99, work)| serde_json::json!({
        "kind": kind,
        "time_to_place_by_class": {
            "online-prod": {"arrived": 3, "placed": 2, "p50_s": 0.5, "p99_s": p99, "max_s": p99 + 1.0},
            "offline-batch": {"placed": 1, "p50_s": 9.0, "p99_s": 99.0, "max_s": 99.0},
        },
        "work_thrown_away_cpu_s": work,
        "pods_interrupted": 3,
        "bare_lost": 0,
        "pdb_violations": 0,
        "jobs_failed": 0,
    })).collect::<Vec<_>>()})
}

fn entry(price: Option<f64>, json: &str) -> Entry {
    Entry { series: "window-a".into(), price, policy_price: price.map(|p| p * 10.0), json: json.into() }
}

#[test]
fn a_price_file_gives_its_extender_runs_and_a_baseline_file_its_stock_and_requeue_only() {
    let both = result(&[("stock", 4.0, 900.0), ("requeue-only", 6.0, 700.0), ("names", 0.3, 1400.0)]);
    let base = curve::points(&entry(None, "b.json"), &both, Path::new("b.json")).unwrap();
    assert_eq!(base.iter().map(|p| p.kind.as_str()).collect::<Vec<_>>(), ["stock", "requeue-only"]);
    let priced = curve::points(&entry(Some(100.0), "p.json"), &both, Path::new("p.json")).unwrap();
    assert_eq!(priced.len(), 1);
    let p = &priced[0];
    // The online class's figures, not every arrival's.
    assert_eq!((p.kind.as_str(), p.price, p.p99_s, p.max_s, p.work_cpu_s), ("names", Some(100.0), 0.3, 1.3, 1400.0));
    assert_eq!((p.placed, p.arrived, p.interrupted), (2, 3, 3));
    let broken = serde_json::json!({"runs": [{"kind": "names", "time_to_place_by_class": {
        "online-prod": {"arrived": 1, "placed": 1, "p50_s": 0.1, "p99_s": 0.1, "max_s": 0.1}}}]});
    let err = curve::points(&entry(Some(1.0), "x.json"), &broken, Path::new("x.json")).unwrap_err();
    assert!(err.contains("x.json") && err.contains("work_thrown_away_cpu_s"), "{err}");
}

#[test]
fn the_table_lists_the_baselines_then_the_prices_in_order() {
    let dir = std::env::temp_dir().join(format!("price-curve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = [
        ("b.json", result(&[("stock", 4.0, 900.0), ("requeue-only", 6.0, 700.0)])),
        ("p1000.json", result(&[("names", 2.0, 750.0)])),
        ("p0.json", result(&[("names", 0.3, 1400.0)])),
    ];
    for (f, v) in &files {
        std::fs::write(dir.join(f), v.to_string()).unwrap();
    }
    let m = Manifest {
        time_scale: 0.1,
        entries: vec![entry(Some(1000.0), "p1000.json"), entry(None, "b.json"), entry(Some(0.0), "p0.json")],
    };
    let points = curve::read(&m, &dir).unwrap();
    let table = curve::table(&points, m.time_scale);
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| run")).collect();
    assert_eq!(rows.len(), 4, "{table}");
    assert!(rows[0].starts_with("| stock | - | 2/3 | 0.50 / 4.00 / 5.00 | 900 |"), "{}", rows[0]);
    assert!(rows[1].starts_with("| requeue-only | - |"), "{}", rows[1]);
    assert!(rows[2].starts_with("| names | 0 |"), "{}", rows[2]);
    assert!(rows[3].starts_with("| names | 1,000 | 2/3 | 0.50 / 2.00 / 3.00 | 750 |"), "{}", rows[3]);
    let svg = dir.join("curve.svg");
    curve::draw(&points, "test", &svg).unwrap();
    let drawn = std::fs::read_to_string(&svg).unwrap();
    for label in ["window-a", "stock", "requeue-only", "1,000", "online p99 time to place, s"] {
        assert!(drawn.contains(label), "the SVG lacks {label:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn both_modes_in_one_panel_are_told_apart_by_name_and_colour() {
    let dir = std::env::temp_dir().join(format!("price-curve-modes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let one = |modes: &[(&str, f64, f64)]| {
        std::fs::write(dir.join("p.json"), result(modes).to_string()).unwrap();
        let m = Manifest { time_scale: 0.1, entries: vec![entry(Some(300.0), "p.json")] };
        let svg = dir.join("curve.svg");
        curve::draw(&curve::read(&m, &dir).unwrap(), "test", &svg).unwrap();
        std::fs::read_to_string(&svg).unwrap()
    };
    let both = one(&[("names", 2.0, 750.0), ("objects", 3.0, 800.0)]);
    for label in ["names 300", "objects 300", "#1F5EAD", "#D67814"] {
        assert!(both.to_uppercase().contains(&label.to_uppercase()), "the SVG lacks {label:?}");
    }
    // One mode: its points carry the price alone.
    let names = one(&[("names", 2.0, 750.0)]);
    assert!(!names.contains("names 300") && names.lines().any(|l| l.trim() == "300"), "{names}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn prices_are_labelled_as_people_write_them() {
    assert_eq!(curve::price_label(0.0), "0");
    assert_eq!(curve::price_label(10000.0), "10,000");
    assert_eq!(curve::price_label(1e12), "1e12");
    assert_eq!(sweep::file_stem(1e12), "price-1e12");
    assert_eq!(sweep::file_stem(0.5), "price-0_5");
}
