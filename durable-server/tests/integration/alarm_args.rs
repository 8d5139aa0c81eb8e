//! Alarms set over HTTP with an argument: checked against the argument type of the alarm's
//! handler (`400 invalid_arguments` when it does not fit, nothing written), stored with the
//! alarm, shown in listings and handed to the handler; the same name replaces the pending
//! alarm; a stored object that is not live is not started; a new alarm beyond the limit is
//! `422 too_many_alarms`. The typed client sets one too.

use crate::common;

use std::time::Duration;

use common::{TestServer, code, open_config, within};
use durable_runtime::{AlarmSettings, MemoryStorage, ObjectStatus, Runtime, durable_object};
use durable_server::client::Client;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Reminder {
    text: String,
}

#[durable_object]
pub struct Planner {
    said: Vec<String>,
}

#[durable_object(expose)]
impl Planner {
    #[handler]
    fn handle_said(&self) -> Vec<String> {
        self.said.clone()
    }

    #[alarm]
    fn remind(&mut self, reminder: Reminder) {
        self.said.push(reminder.text);
    }

    #[alarm]
    fn ring(&mut self) {
        self.said.push("ring".to_owned());
    }
}

async fn server(settings: AlarmSettings) -> TestServer {
    let runtime = Runtime::builder(MemoryStorage::new())
        .expose::<Planner>()
        .alarm_settings(settings)
        .build();
    TestServer::start(runtime, open_config()).await
}

const LATER: &str = "2099-01-01T00:00:00Z";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_argument_is_stored_listed_replaced_and_delivered() {
    let server = server(AlarmSettings::default()).await;
    let path = "/v1/objects/Planner/p/alarms";
    let set = json!({"name": "remind", "args": {"text": "first"}, "fire_at": LATER});
    let (status, body) = server.post(path, &set).await;
    assert_eq!(status, 200, "{body}");
    let (_, listed) = server.get(path).await;
    assert_eq!(listed["alarms"][0]["args"], json!({"text": "first"}));

    // The specification's shape: `method` names the alarm; the same name replaces the pending one.
    let again = json!({"method": "remind", "args": {"text": "second"}, "delay": "0s"});
    let (status, body) = server.post(path, &again).await;
    assert_eq!(status, 200, "{body}");
    within("the alarm fires", async {
        loop {
            let said = Planner::said(&server.runtime, "p").await.unwrap();
            if !said.is_empty() {
                assert_eq!(said, ["second"]);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_do_not_fit_are_refused_with_nothing_written() {
    let server = server(AlarmSettings::default()).await;
    let path = "/v1/objects/Planner/p/alarms";
    for args in [
        json!({"text": 5}),
        json!({"words": "x"}),
        json!(null),
        json!("text"),
    ] {
        let body = json!({"name": "remind", "args": args, "fire_at": LATER});
        let (status, reply) = server.post(path, &body).await;
        assert_eq!(
            (status, code(&reply)),
            (400, "invalid_arguments"),
            "{args}: {reply}"
        );
    }
    let body = json!({"name": "ring", "args": {"n": 1}, "fire_at": LATER});
    let (status, reply) = server.post(path, &body).await;
    assert_eq!(
        (status, code(&reply)),
        (400, "invalid_arguments"),
        "{reply}"
    );
    let (_, listed) = server.get(path).await;
    assert_eq!(listed, json!({"alarms": []}));

    // An alarm without an argument takes none, `null` or `{}`.
    for args in [None, Some(json!(null)), Some(json!({}))] {
        let mut body = json!({"name": "ring", "fire_at": LATER});
        if let Some(args) = args {
            body["args"] = args;
        }
        assert_eq!(server.post(path, &body).await.0, 200);
    }
    let (_, listed) = server.get(path).await;
    assert_eq!(listed["alarms"][0].get("args"), None);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_object_is_not_started_and_the_limit_holds() {
    let settings = AlarmSettings::default().with_max_alarms_per_object(1);
    let storage = MemoryStorage::new();
    // Stored by another runtime: not live in the server's.
    let other = Runtime::builder(storage.clone()).manual_alarms().build();
    other
        .schedule_alarm_with(
            "p",
            Planner::REMIND,
            &Reminder { text: "x".into() },
            Duration::from_secs(3600),
        )
        .await
        .unwrap();
    other.shutdown().await;
    let runtime = Runtime::builder(storage)
        .expose::<Planner>()
        .alarm_settings(settings)
        .build();
    let server = TestServer::start(runtime, open_config()).await;
    let path = "/v1/objects/Planner/p/alarms";

    let body = json!({"name": "remind", "args": {"text": "y"}, "fire_at": LATER});
    assert_eq!(
        server.post(path, &body).await.0,
        200,
        "replacing is not a new alarm"
    );
    let body = json!({"name": "ring", "fire_at": LATER});
    let (status, reply) = server.post(path, &body).await;
    assert_eq!((status, code(&reply)), (422, "too_many_alarms"), "{reply}");
    let (_, listed) = server.get(path).await;
    assert_eq!(listed["alarms"].as_array().unwrap().len(), 1);
    assert_eq!(listed["alarms"][0]["args"], json!({"text": "y"}));
    assert_eq!(
        server.runtime.status::<Planner>("p").await.unwrap(),
        ObjectStatus::Stored
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_sets_an_alarm_with_its_argument() {
    let server = server(AlarmSettings::default()).await;
    let client = Client::new(&server.url(""));
    let args = json!({"text": "from the client"});
    let later = Duration::from_secs(3600);
    let alarm = client
        .alarms()
        .set_with("Planner", "p", "remind", Some(&args), later)
        .await
        .unwrap();
    assert_eq!(alarm.name, "remind");
    let listed = client.alarms().list("Planner", "p").await.unwrap();
    assert_eq!(listed[0].args, Some(args));
    let wrong = json!({"text": 1});
    let error = client
        .alarms()
        .set_with("Planner", "p", "remind", Some(&wrong), later)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("invalid_arguments"), "{error}");
    server.stop().await;
}
