//! The view cell: a live source changes one staged view in place, and readers get every
//! change made before their read, without a copy per change.

use std::sync::Arc;
use std::time::Duration;

use coloc_extender::cluster::{View, ViewCell};
use coloc_extender::model::PriorityClass;

fn add_class(view: &mut View, name: &str) {
    view.apply_priority_class(PriorityClass { name: name.into(), value: 1 });
}

fn classes(view: &View) -> Vec<String> {
    let mut names: Vec<String> = view.priority_class_names().map(str::to_string).collect();
    names.sort();
    names
}

#[test]
fn readers_see_nothing_until_the_source_opens_the_staged_view() {
    let cell = ViewCell::default();
    cell.change(|v| add_class(v, "batch"));
    assert!(cell.load().is_none() && !cell.is_ready());
    cell.open();
    assert!(cell.is_ready());
    assert_eq!(classes(&cell.load().unwrap()), ["batch"]);
}

#[test]
fn a_read_includes_every_change_made_before_it() {
    let cell = ViewCell::default();
    cell.open();
    let before = cell.load().unwrap();
    cell.change(|v| add_class(v, "a"));
    cell.change(|v| add_class(v, "b"));
    assert_eq!(classes(&cell.load().unwrap()), ["a", "b"]);
    assert!(classes(&before).is_empty(), "a view handed out never changes under its reader");
}

#[test]
fn reads_with_no_change_between_them_share_one_view() {
    let cell = ViewCell::default();
    cell.open();
    cell.change(|v| add_class(v, "a"));
    assert!(Arc::ptr_eq(&cell.load().unwrap(), &cell.load().unwrap()));
}

#[test]
fn a_change_lets_go_of_the_last_clone_once_no_reader_holds_it() {
    let cell = ViewCell::default();
    cell.open();
    cell.change(|v| add_class(v, "a"));
    let read = Arc::downgrade(&cell.load().unwrap());
    assert!(read.upgrade().is_some(), "kept for the next reader while nothing changes");
    cell.change(|v| add_class(v, "b"));
    assert!(read.upgrade().is_none(), "let go before the change, which then shares nothing with it");
    assert_eq!(classes(&cell.load().unwrap()), ["a", "b"]);
}

#[test]
fn a_clone_a_reader_still_holds_is_kept_as_it_was() {
    let cell = ViewCell::default();
    cell.open();
    cell.change(|v| add_class(v, "a"));
    let held = cell.load().unwrap();
    cell.change(|v| add_class(v, "b"));
    assert_eq!(classes(&held), ["a"]);
    assert_eq!(classes(&cell.load().unwrap()), ["a", "b"]);
}

#[test]
fn readers_racing_a_writer_always_get_a_view_and_never_an_older_one() {
    let cell = Arc::new(ViewCell::default());
    cell.open();
    // Enough rounds to meet, now and then, a reader between a release and its load.
    const CHANGES: usize = 20_000;
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let cell = cell.clone();
            std::thread::spawn(move || {
                let mut seen = 0;
                while seen < CHANGES {
                    let view = cell.load().expect("an open, fresh cell always has a view");
                    let now = view.priority_class_names().count();
                    assert!(now >= seen, "went back from {seen} to {now} classes");
                    seen = now;
                }
            })
        })
        .collect();
    for i in 0..CHANGES {
        cell.change(|v| add_class(v, &format!("c{i}")));
    }
    for reader in readers {
        reader.join().unwrap();
    }
}

#[test]
fn a_reader_during_a_long_change_gets_the_last_view_at_once() {
    let cell = Arc::new(ViewCell::default());
    cell.open();
    cell.change(|v| add_class(v, "a"));
    let (started, wait) = std::sync::mpsc::channel();
    let (release, hold) = std::sync::mpsc::channel::<()>();
    let writer = {
        let cell = cell.clone();
        std::thread::spawn(move || {
            cell.change_long(|v| {
                started.send(()).unwrap();
                hold.recv().unwrap();
                add_class(v, "b");
            })
        })
    };
    wait.recv().unwrap();
    assert_eq!(classes(&cell.load().unwrap()), ["a"], "the long change is not waited for");
    release.send(()).unwrap();
    writer.join().unwrap();
    assert_eq!(classes(&cell.load().unwrap()), ["a", "b"], "and is seen once done");
}

#[tokio::test]
async fn a_waiting_decision_is_woken_by_a_staged_change() {
    let cell = Arc::new(ViewCell::default());
    cell.open();
    let mut changed = cell.subscribe();
    let source = cell.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        source.change(|v| add_class(v, "a"));
    });
    tokio::time::timeout(Duration::from_secs(5), changed.changed()).await.expect("woken").unwrap();
    assert_eq!(classes(&cell.load().unwrap()), ["a"]);
}

#[test]
fn background_work_reads_the_newest_view_in_place_once_readers_may() {
    let cell = ViewCell::default();
    cell.change(|v| add_class(v, "a"));
    assert_eq!(cell.read_latest(classes), None, "not before the source has synced");
    cell.open();
    cell.change(|v| add_class(v, "b"));
    assert_eq!(cell.read_latest(classes), Some(vec!["a".to_string(), "b".to_string()]));
    cell.set_stale(true);
    assert_eq!(cell.read_latest(classes), None, "nor while the view is stale");
}

#[test]
fn a_snapshot_cell_is_read_in_place_too() {
    let cell = ViewCell::default();
    let mut view = View::default();
    add_class(&mut view, "a");
    cell.publish(view);
    assert_eq!(cell.read_latest(classes), Some(vec!["a".to_string()]));
}
