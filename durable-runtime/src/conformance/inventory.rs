//! Checks on what a store lists across objects, for tools that know no Rust type: the types
//! with stored objects, and the dead alarms of every object, in order and a page at a time.

use super::support::{at, claim, commit_ok, insert, set};
use crate::storage::{AlarmKey, AlarmRecord, ObjectKey, Storage};

/// `list_object_types` lists each type with a stored object once, in byte order, leaving out
/// a type whose objects were all deleted until one is stored again.
pub async fn list_object_types_skips_deleted<S: Storage + ?Sized>(store: &S) {
    assert!(
        store.list_object_types().await.unwrap().is_empty(),
        "a fresh store has no types"
    );
    let types = [
        "conf.b",
        "conf.B",
        "conf.a",
        "conf.é",
        "conf.a b",
        "conf.🦀",
    ];
    let batch: Vec<_> = types
        .iter()
        .flat_map(|ty| ["x", "y"].map(|id| insert(&ObjectKey::new(*ty, id), b"{}")))
        .collect();
    commit_ok(store, &batch).await;
    let mut expected: Vec<String> = types.iter().map(|ty| ty.to_string()).collect();
    expected.sort();
    assert_eq!(
        store.list_object_types().await.unwrap(),
        expected,
        "each type once, in byte order"
    );

    // One object of a type deleted: the type stays; both: it goes (its tombstones stay).
    let gone = |id| ObjectKey::new("conf.a", id);
    assert!(store.delete(&gone("x")).await.unwrap());
    assert!(
        store
            .list_object_types()
            .await
            .unwrap()
            .contains(&"conf.a".to_owned())
    );
    assert!(store.delete(&gone("y")).await.unwrap());
    let listed = store.list_object_types().await.unwrap();
    assert!(!listed.contains(&"conf.a".to_owned()), "{listed:?}");
    assert_eq!(listed.len(), types.len() - 1);

    // Recreated over its tombstone: listed again.
    let mut recreate = insert(&gone("x"), b"{}");
    recreate.expected_version = 2;
    commit_ok(store, &[recreate]).await;
    assert_eq!(store.list_object_types().await.unwrap(), expected);
}

/// `list_dead_alarms` lists the dead alarms of every object (or of one type) by type, id and
/// name in byte order, with their attempts and last error, a page at a time; live, retried and
/// claimed alarms are left out.
pub async fn dead_alarms_listed_in_order_and_paged<S: Storage + ?Sized>(store: &S) {
    let dead = [
        ("conf.job", "b", "run"),
        ("conf.job", "a", "run"),
        ("conf.job", "a", "report"),
        ("conf.Job", "z", "run"),
        ("conf.job", "é", "run"),
        ("conf.mail", "a", "send"),
    ];
    // Due now, and made dead below: every alarm due at 0 is claimed and failed for good.
    let mut batch = Vec::new();
    for (ty, id, name) in dead {
        let key = ObjectKey::new(ty, id);
        match batch
            .iter_mut()
            .find(|write: &&mut crate::storage::ObjectWrite| write.key == key)
        {
            Some(write) => write.alarms.push(set(name, at(0))),
            None => {
                let mut write = insert(&key, b"{}");
                write.alarms.push(set(name, at(0)));
                batch.push(write);
            }
        }
    }
    // Alive: due later, or failed with a retry, or claimed.
    let mut alive = insert(&ObjectKey::new("conf.job", "c"), b"{}");
    alive.alarms = vec![set("run", at(60_000)), set("retried", at(0))];
    batch.push(alive);
    commit_ok(store, &batch).await;
    let claimed = claim(store, at(0), at(60_000), 100).await;
    assert_eq!(claimed.len(), dead.len() + 1);
    for alarm in &claimed {
        let retry_at = (alarm.name == "retried").then(|| at(120_000));
        let failed = store
            .fail_alarm(&alarm.key, &alarm.name, at(0), 3, "boom", retry_at)
            .await
            .unwrap();
        assert!(failed, "fail {}#{}", alarm.key, alarm.name);
    }
    let mut claimed_alive = insert(&ObjectKey::new("conf.job", "d"), b"{}");
    claimed_alive.alarms = vec![set("run", at(1))];
    commit_ok(store, &[claimed_alive]).await;
    assert_eq!(claim(store, at(1), at(60_000), 10).await.len(), 1);

    let mut expected: Vec<AlarmKey> = dead
        .iter()
        .map(|(ty, id, name)| AlarmKey::new(ObjectKey::new(*ty, *id), *name))
        .collect();
    expected.sort();
    let keys = |alarms: &[AlarmRecord]| alarms.iter().map(AlarmKey::from).collect::<Vec<_>>();

    let all = store.list_dead_alarms(None, None, 100).await.unwrap();
    assert_eq!(
        keys(&all.alarms),
        expected,
        "by type, id, name in byte order"
    );
    assert_eq!(all.next, None, "the last page has no cursor");
    for alarm in &all.alarms {
        assert_eq!(
            (alarm.dead, alarm.attempts, alarm.last_error.as_deref()),
            (true, 3, Some("boom")),
            "{alarm:?}"
        );
        assert_eq!((alarm.due_at, alarm.claimed_at), (at(0), None), "{alarm:?}");
    }
    let exact = store
        .list_dead_alarms(None, None, expected.len())
        .await
        .unwrap();
    assert_eq!(exact.alarms.len(), expected.len());
    assert_eq!(
        exact.next, None,
        "a page holding exactly the rest has no cursor"
    );

    // Two at a time: each page resumes after the last alarm of the one before.
    let mut paged = Vec::new();
    let mut after: Option<AlarmKey> = None;
    loop {
        let page = store
            .list_dead_alarms(None, after.as_ref(), 2)
            .await
            .unwrap();
        assert!(page.alarms.len() <= 2);
        paged.extend(keys(&page.alarms));
        match page.next {
            Some(next) => {
                assert_eq!(
                    Some(&next),
                    paged.last(),
                    "the cursor is the last alarm listed"
                );
                after = Some(next);
            }
            None => break,
        }
    }
    assert_eq!(paged, expected, "paging");

    // One type only; a cursor need not be an alarm that exists.
    let jobs = store
        .list_dead_alarms(Some("conf.job"), None, 100)
        .await
        .unwrap();
    let job_keys: Vec<AlarmKey> = expected
        .iter()
        .filter(|alarm| alarm.key.object_type == "conf.job")
        .cloned()
        .collect();
    assert_eq!(keys(&jobs.alarms), job_keys);
    let between = AlarmKey::new(ObjectKey::new("conf.job", "a"), "rf");
    let rest = store
        .list_dead_alarms(Some("conf.job"), Some(&between), 1)
        .await
        .unwrap();
    assert_eq!(keys(&rest.alarms), job_keys[1..2]);
    assert_eq!(rest.next.as_ref(), Some(&job_keys[1]));
    let rest = store
        .list_dead_alarms(None, Some(&between), 100)
        .await
        .unwrap();
    assert_eq!(
        keys(&rest.alarms),
        expected[expected.iter().position(|k| *k > between).unwrap()..]
    );
    let nothing = store
        .list_dead_alarms(Some("conf.nothing"), None, 10)
        .await
        .unwrap();
    assert!(
        nothing.alarms.is_empty() && nothing.next.is_none(),
        "{nothing:?}"
    );
    let last = expected.last().unwrap();
    let after_last = store.list_dead_alarms(None, Some(last), 10).await.unwrap();
    assert!(after_last.alarms.is_empty() && after_last.next.is_none());
}

/// A dead alarm set again is alive (listed no more), and a deleted object's dead alarms go
/// with it.
pub async fn dead_alarms_leave_when_set_again_or_deleted<S: Storage + ?Sized>(store: &S) {
    let a = ObjectKey::new("conf.dead", "a");
    let b = ObjectKey::new("conf.dead", "b");
    let mut write_a = insert(&a, b"{}");
    write_a.alarms = vec![set("run", at(0))];
    let mut write_b = insert(&b, b"{}");
    write_b.alarms = vec![set("run", at(0))];
    commit_ok(store, &[write_a, write_b]).await;
    for alarm in claim(store, at(0), at(60_000), 10).await {
        let failed = store.fail_alarm(&alarm.key, "run", at(0), 1, "boom", None);
        assert!(failed.await.unwrap());
    }
    assert_eq!(
        store
            .list_dead_alarms(None, None, 10)
            .await
            .unwrap()
            .alarms
            .len(),
        2
    );

    let mut again = insert(&a, b"{}");
    again.expected_version = 1;
    again.state = None;
    again.alarms = vec![set("run", at(5))];
    commit_ok(store, &[again]).await;
    let listed = store.list_dead_alarms(None, None, 10).await.unwrap();
    assert_eq!(
        listed.alarms.iter().map(AlarmKey::from).collect::<Vec<_>>(),
        [AlarmKey::new(b.clone(), "run")],
        "a dead alarm set again is alive"
    );
    assert!(store.delete(&b).await.unwrap());
    let listed = store.list_dead_alarms(None, None, 10).await.unwrap();
    assert!(listed.alarms.is_empty(), "{listed:?}");
}
