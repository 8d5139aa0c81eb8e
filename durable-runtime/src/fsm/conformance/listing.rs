//! The checks of [`FsmStore::list`]: the filters, id order, keyset paging and the bound on a
//! page.

use super::{FsmStore, InstanceId, Status, at, commit_one, done, insert, outcome, pick, row};
use crate::fsm::store::{ListFilter, MAX_LIST_LIMIT};

async fn list<S: FsmStore + ?Sized>(store: &S, filter: &ListFilter) -> Vec<InstanceId> {
    store
        .list(filter)
        .await
        .expect("list")
        .iter()
        .map(|record| record.id)
        .collect()
}

/// Name and status filters select exactly their rows, in id order, with every field read
/// back as `get` reads it.
pub async fn list_filters_by_name_and_status<S: FsmStore + ?Sized>(store: &S) {
    let mut other = row(None);
    other.fsm = "other".to_owned();
    let ids = insert(
        store,
        &[row(None), other.clone(), row(None), row(None), other],
    )
    .await;
    let mut ids_sorted = ids.clone();
    ids_sorted.sort();
    // The lowest id of the conformance FSM ends done; the others stay runnable.
    let claimed = pick(store, 5, at(0)).await;
    let first = claimed
        .iter()
        .filter(|claimed| claimed.fsm == super::FSM)
        .min_by_key(|claimed| claimed.id)
        .expect("a conformance row is picked")
        .clone();
    commit_one(store, outcome(&first, done()), at(1)).await;
    for claimed in claimed.iter().filter(|claimed| claimed.id != first.id) {
        commit_one(
            store,
            outcome(claimed, super::next("again", r#"{"n":3}"#)),
            at(1),
        )
        .await;
    }

    assert_eq!(
        list(store, &ListFilter::default()).await,
        ids_sorted,
        "no filter lists every row in id order"
    );
    let records = store
        .list(&ListFilter::default().fsm(super::FSM))
        .await
        .expect("list");
    assert_eq!(
        records.len(),
        3,
        "the name filter keeps the FSM's rows only"
    );
    assert!(records.windows(2).all(|pair| pair[0].id < pair[1].id));
    for record in &records {
        assert_eq!(record.fsm, super::FSM);
        assert_eq!(
            Some(record),
            store.get(record.id).await.expect("get").as_ref(),
            "a listed row reads as `get` reads it"
        );
    }
    assert_eq!(
        list(
            store,
            &ListFilter::default().fsm(super::FSM).status(Status::Done)
        )
        .await,
        vec![first.id],
        "name and status filters combine"
    );
    assert_eq!(
        list(store, &ListFilter::default().status(Status::Runnable))
            .await
            .len(),
        4,
        "the status filter alone spans FSMs"
    );
    assert!(
        list(store, &ListFilter::default().fsm("nobody"))
            .await
            .is_empty(),
        "an unknown FSM lists nothing"
    );
    assert!(
        list(store, &ListFilter::default().status(Status::Failed))
            .await
            .is_empty(),
        "a status nobody is in lists nothing"
    );
}

/// Pages follow each other by the last id, without gaps or repeats, and a page is never
/// larger than its limit nor than [`MAX_LIST_LIMIT`].
pub async fn list_pages_by_keyset<S: FsmStore + ?Sized>(store: &S) {
    let rows = vec![row(None); MAX_LIST_LIMIT + 5];
    let mut ids = insert(store, &rows).await;
    ids.sort();
    assert_eq!(ids.len(), MAX_LIST_LIMIT + 5);

    let mut seen = Vec::new();
    let mut filter = ListFilter::default().limit(300);
    loop {
        let page = list(store, &filter).await;
        assert!(page.len() <= 300, "a page holds at most its limit");
        match page.last() {
            Some(last) => filter = filter.after(*last),
            None => break,
        }
        seen.extend(page);
    }
    assert_eq!(
        seen, ids,
        "the pages together are every row once, in id order"
    );

    assert_eq!(
        list(store, &ListFilter::default().limit(usize::MAX)).await,
        ids[..MAX_LIST_LIMIT],
        "a page is bounded by MAX_LIST_LIMIT"
    );
    assert!(
        list(store, &ListFilter::default().limit(0))
            .await
            .is_empty(),
        "a limit of 0 lists nothing"
    );
    assert_eq!(
        list(store, &ListFilter::default().after(ids[ids.len() - 3])).await,
        ids[ids.len() - 2..],
        "after an id lists the greater ids only"
    );
    assert!(
        list(store, &ListFilter::default().after(ids[ids.len() - 1]))
            .await
            .is_empty(),
        "after the last id lists nothing"
    );
}
