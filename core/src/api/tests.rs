use super::*;
use crate::budget::{Clock, StoppedClock};
use crate::smtp::Envelope;
use crate::smtp::Incoming;
use serde_json::Value;

const NOW: u64 = 1_763_779_327_000;

/// The API with a label per parked wait as the host's handle.
type TestApi = Api<u64>;

fn api() -> TestApi {
    Api::new(ApiConfig::default())
}

/// Parks a wait under a fresh label: the handle its answer comes back with.
fn park(api: &mut TestApi, parking: Parking) -> (WaitSpec, u64) {
    static LABELS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let label = LABELS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (api.park(parking, label), label)
}

fn message(to: &[&str], subject: &str) -> Prepared {
    Prepared::new(Incoming {
        envelope: Envelope {
            from: "sender@app.test".into(),
            to: to.iter().map(|s| s.to_string()).collect(),
        },
        raw: format!("From: App <sender@app.test>\r\nSubject: {subject}\r\n\r\nHello\r\n")
            .into_bytes(),
        helo: None,
        session: Default::default(),
    })
}

fn deliver(api: &mut TestApi, to: &[&str], subject: &str) -> Delivered<u64> {
    api.deliver_and_wake(message(to, subject), NOW, [9; 10], &StoppedClock)
}

fn ready(api: &mut TestApi, method: &str, target: &str) -> (u16, Value) {
    match api.answer(&Request::new(method, target), NOW, &StoppedClock) {
        Outcome::Ready(r) => (
            r.status,
            serde_json::from_str(&r.into_text()).expect("JSON body"),
        ),
        Outcome::Wait(w) => panic!("{target} parked as {w:?}"),
        Outcome::Subscribe(s) => panic!("{target} subscribed as {s:?}"),
    }
}

/// The body of a response built in one piece.
fn text_of(response: &Response) -> String {
    match &response.body {
        crate::response::Body::Full(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
        crate::response::Body::Stream(_) => panic!("a streamed body; take it with into_text"),
    }
}

fn get(api: &mut TestApi, target: &str) -> (u16, Value) {
    ready(api, "GET", target)
}

fn subjects(body: &Value) -> Vec<String> {
    body["emails"]
        .as_array()
        .expect("emails array")
        .iter()
        .map(|e| e["subject"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn error_of(status_and_body: (u16, Value)) -> (u16, String) {
    let (status, body) = status_and_body;
    (
        status,
        body["error"].as_str().expect("error text").to_owned(),
    )
}

#[test]
fn health_reports_config_and_counts() {
    let mut api = api();
    deliver(&mut api, &["a@local.test"], "x");
    let (status, body) = get(&mut api, "/health");
    assert_eq!(status, 200);
    assert_eq!(body["ok"], true);
    assert_eq!(body["api"]["port"], 8025);
    assert_eq!(body["smtp"]["host"], "127.0.0.1");
    assert_eq!(body["smtp"]["port"], 1025);
    assert_eq!(body["domain"], "local.test");
    assert_eq!(body["messages"], 1);
    assert_eq!(body["limits"]["maxMessages"], 100_000);
}

#[test]
fn list_returns_receive_order_and_the_captured_email_shape() {
    let mut api = api();
    let first = deliver(&mut api, &["a@local.test"], "one").id;
    deliver(&mut api, &["b@local.test"], "two");
    let (status, body) = get(&mut api, "/api/emails");
    assert_eq!(status, 200);
    assert_eq!(subjects(&body), ["one", "two"]);
    let e = &body["emails"][0];
    assert_eq!(e["id"], first.to_string());
    assert_eq!(e["receivedAt"], "2025-11-22T02:42:07.000Z");
    assert_eq!(e["envelope"]["from"], "sender@app.test");
    assert_eq!(e["envelope"]["to"][0], "a@local.test");
    assert_eq!(e["to"][0], "a@local.test");
    assert_eq!(e["size"], e["raw"].as_str().unwrap().len());
    for field in [
        "from",
        "cc",
        "date",
        "messageId",
        "headers",
        "text",
        "html",
        "links",
        "codes",
        "attachments",
    ] {
        assert!(e.get(field).is_some(), "missing {field}");
    }
}

#[test]
fn filters_combine_with_and() {
    let mut api = api();
    deliver(&mut api, &["Alice@Local.Test"], "Reset your password");
    deliver(&mut api, &["bob@local.test"], "Reset your password");
    deliver(&mut api, &["alice@local.test"], "Welcome");
    let (_, body) = get(&mut api, "/api/emails?to=%20alice%40local.test%20");
    assert_eq!(subjects(&body), ["Reset your password", "Welcome"]);
    let (_, body) = get(&mut api, "/api/emails?to=alice@local.test&subject=RESET");
    assert_eq!(subjects(&body), ["Reset your password"]);
    let (_, body) = get(&mut api, "/api/emails?subjectPattern=%5Ewel&subjectFlags=i");
    assert_eq!(subjects(&body), ["Welcome"]);
    let (_, body) = get(&mut api, "/api/emails?subjectPattern=%5Ewel");
    assert!(subjects(&body).is_empty());
    let (_, body) = get(&mut api, "/api/emails?to=&subject=");
    assert_eq!(subjects(&body).len(), 3);
}

#[test]
fn limit_keeps_the_newest_in_receive_order() {
    let mut api = api();
    for s in ["1", "2", "3", "4"] {
        deliver(&mut api, &["a@x"], s);
    }
    let (_, body) = get(&mut api, "/api/emails?limit=2");
    assert_eq!(subjects(&body), ["3", "4"]);
    let (_, body) = get(&mut api, "/api/emails?limit=100");
    assert_eq!(subjects(&body).len(), 4);
    for bad in [
        "0",
        "101",
        "-1",
        "1.5",
        "",
        "abc",
        "+1",
        "99999999999999999999999",
    ] {
        let (status, text) = error_of(get(&mut api, &format!("/api/emails?limit={bad}")));
        assert_eq!(status, 400, "limit={bad}");
        assert!(
            text.starts_with("limit must be an integer from 1 to 100"),
            "{text}"
        );
    }
}

#[test]
fn after_id_holds_after_the_message_is_deleted() {
    let mut api = api();
    let a = deliver(&mut api, &["a@x"], "a").id;
    deliver(&mut api, &["b@x"], "b");
    let (_, body) = get(&mut api, &format!("/api/emails?afterId={a}"));
    assert_eq!(subjects(&body), ["b"]);
    let (status, body) = ready(&mut api, "DELETE", &format!("/api/emails/{a}"));
    assert_eq!((status, body["deleted"].as_u64()), (200, Some(1)));
    let (_, body) = get(&mut api, &format!("/api/emails?afterId={a}"));
    assert_eq!(subjects(&body), ["b"]);
    let (status, text) = error_of(get(&mut api, "/api/emails?afterId=nope"));
    assert_eq!(status, 400);
    assert!(text.contains("afterId"));
}

#[test]
fn latest_and_by_id() {
    let mut api = api();
    let (status, _) = get(&mut api, "/api/emails/latest");
    assert_eq!(status, 404);
    let a = deliver(&mut api, &["a@x"], "first").id;
    deliver(&mut api, &["a@x"], "second");
    let (_, body) = get(&mut api, "/api/emails/latest?to=a@x");
    assert_eq!(body["email"]["subject"], "second");
    let (_, body) = get(&mut api, "/api/emails/latest?subject=first");
    assert_eq!(body["email"]["subject"], "first");
    let (status, body) = get(&mut api, &format!("/api/emails/{a}"));
    assert_eq!(status, 200);
    assert_eq!(body["email"]["subject"], "first");
    let (status, _) = get(&mut api, "/api/emails/does-not-exist");
    assert_eq!(status, 404);
    let (status, _) = get(&mut api, "/api/emails/00000000-0000-7000-8000-000000000000");
    assert_eq!(status, 404);
}

#[test]
fn wait_returns_a_stored_match_at_once() {
    let mut api = api();
    deliver(&mut api, &["a@x"], "old");
    deliver(&mut api, &["a@x"], "new");
    let (status, body) = get(&mut api, "/api/emails/wait?to=a@x");
    assert_eq!(status, 200);
    assert_eq!(body["email"]["subject"], "old");
}

#[test]
fn wait_parks_until_a_matching_delivery() {
    let mut api = api();
    let Outcome::Wait(parking) = api.answer(
        &Request::new("GET", "/api/emails/wait?to=b@x&timeoutMs=500"),
        NOW,
        &StoppedClock,
    ) else {
        panic!("should park");
    };
    let (spec, label) = park(&mut api, parking);
    assert_eq!(spec.deadline_ms, NOW + 500);
    assert_eq!(api.pending_waits(), 1);
    assert!(deliver(&mut api, &["a@x"], "not for b").woken.is_empty());
    let delivered = deliver(&mut api, &["b@x"], "for b");
    assert_eq!(delivered.woken.len(), 1);
    let (id, response) = delivered.woken.into_iter().next().unwrap();
    assert_eq!(id, label);
    let body: Value = serde_json::from_str(&response.into_text()).unwrap();
    assert_eq!(body["email"]["subject"], "for b");
    assert_eq!(api.pending_waits(), 0);
    assert!(api.expire(spec.id).is_none());
}

#[test]
fn a_wait_whose_pattern_gives_up_on_a_delivery_ends_with_400() {
    let mut api = api();
    let Outcome::Wait(parking) = api.answer(
        &Request::new(
            "GET",
            "/api/emails/wait?subjectPattern=%5E(a%2B)%2B%5C1b%24",
        ),
        NOW,
        &StoppedClock,
    ) else {
        panic!("should park");
    };
    let (_, label) = park(&mut api, parking);
    // An ordinary subject: no match, still parked.
    assert!(deliver(&mut api, &["a@x"], "hello").woken.is_empty());
    assert_eq!(api.pending_waits(), 1);
    // A subject the pattern gives up on: answered with the 400 a list gives, and gone.
    let delivered = deliver(&mut api, &["a@x"], &"a".repeat(40));
    assert_eq!(delivered.woken.len(), 1);
    let (id, response) = &delivered.woken[0];
    assert_eq!(*id, label);
    assert_eq!(response.status, 400);
    let text = text_of(response);
    assert!(text.contains("backtracking"), "{text}");
    assert_eq!(api.pending_waits(), 0);
    let (status, _) = get(&mut api, "/api/emails?subjectPattern=%5E(a%2B)%2B%5C1b%24");
    assert_eq!(status, 400);
}

#[test]
fn wait_times_out_with_408_and_cancels() {
    let mut api = api();
    let Outcome::Wait(parking) =
        api.answer(&Request::new("GET", "/api/emails/wait"), NOW, &StoppedClock)
    else {
        panic!("should park");
    };
    let (spec, _) = park(&mut api, parking);
    assert_eq!(spec.deadline_ms, NOW + DEFAULT_WAIT_MS);
    assert_eq!(api.next_deadline(), Some(NOW + DEFAULT_WAIT_MS));
    assert!(api.expire_due(NOW + DEFAULT_WAIT_MS - 1).is_empty());
    let expired = api.expire_due(NOW + DEFAULT_WAIT_MS);
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].1.status, 408);
    assert!(text_of(&expired[0].1).contains("10000 ms"));

    let Outcome::Wait(parking) = api.answer(
        &Request::new("GET", "/api/emails/wait?afterId="),
        NOW,
        &StoppedClock,
    ) else {
        panic!("should park");
    };
    let (spec, _) = park(&mut api, parking);
    assert!(api.cancel(spec.id).is_some());
    assert!(api.cancel(spec.id).is_none());
    assert!(deliver(&mut api, &["a@x"], "late").woken.is_empty());
    for bad in ["0", "60001", "x", ""] {
        let (status, text) = error_of(get(&mut api, &format!("/api/emails/wait?timeoutMs={bad}")));
        assert_eq!(status, 400);
        assert!(text.starts_with("timeoutMs must be an integer from 1 to 60000"));
    }
}

#[test]
fn wait_after_id_skips_older_matches() {
    let mut api = api();
    let a = deliver(&mut api, &["a@x"], "a").id;
    let outcome = api.answer(
        &Request::new("GET", &format!("/api/emails/wait?afterId={a}")),
        NOW,
        &StoppedClock,
    );
    let Outcome::Wait(parking) = outcome else {
        panic!("should park");
    };
    park(&mut api, parking);
    assert_eq!(deliver(&mut api, &["a@x"], "b").woken.len(), 1);
}

#[test]
fn delete_all_and_by_recipient() {
    let mut api = api();
    deliver(&mut api, &["a@x"], "1");
    deliver(&mut api, &["b@x", "A@X"], "2");
    deliver(&mut api, &["b@x"], "3");
    let (status, text) = error_of(ready(&mut api, "DELETE", "/api/emails?to="));
    assert_eq!(status, 400);
    assert!(text.contains("to must not be empty"));
    let (_, body) = ready(&mut api, "DELETE", "/api/emails?to=a%40x");
    assert_eq!(body["deleted"], 2);
    let (_, body) = ready(&mut api, "DELETE", "/api/emails");
    assert_eq!(body["deleted"], 1);
    let (_, body) = get(&mut api, "/api/emails");
    assert!(subjects(&body).is_empty());
}

#[test]
fn routes_methods_and_bad_queries() {
    let mut api = api();
    let (status, text) = error_of(get(&mut api, "/nope"));
    assert_eq!(
        (status, text.as_str()),
        (404, "no such endpoint: GET /nope")
    );
    let response = match api.answer(&Request::new("POST", "/api/emails"), NOW, &StoppedClock) {
        Outcome::Ready(r) => r,
        Outcome::Wait(_) | Outcome::Subscribe(_) => unreachable!(),
    };
    assert_eq!(response.status, 405);
    assert_eq!(response.header("allow"), Some("GET, DELETE"));
    let (status, _) = ready(&mut api, "DELETE", "/api/emails/latest");
    assert_eq!(status, 405);
    for (target, needle) in [
        ("/api/emails?subject=%zz", "malformed percent-encoding"),
        ("/api/emails?subject=%", "malformed percent-encoding"),
        ("/api/emails?subject=%ff", "not UTF-8"),
        ("/api/emails?subjects=x", "unknown query parameter subjects"),
        (
            "/api/emails/latest?limit=1",
            "unknown query parameter limit",
        ),
        ("/api/emails?to=a&to=b", "more than once"),
        ("/api/emails?subjectPattern=(", "subjectPattern"),
        ("/api/emails?subjectFlags=i", "needs a subjectPattern"),
        ("/health?x=1", "takes none"),
    ] {
        let (status, text) = error_of(get(&mut api, target));
        assert_eq!(status, 400, "{target}");
        assert!(text.contains(needle), "{target}: {text}");
    }
    let (status, _) = get(&mut api, "/api/emails/");
    assert_eq!(status, 200);
    let (status, _) = get(&mut api, "/api/%65mails");
    assert_eq!(status, 200);
}

#[test]
fn subject_plus_is_a_space() {
    let mut api = api();
    deliver(&mut api, &["a@x"], "Order confirmed");
    let (_, body) = get(&mut api, "/api/emails?subject=order+confirmed");
    assert_eq!(subjects(&body), ["Order confirmed"]);
}

#[test]
fn openapi_document_is_served_and_names_every_route() {
    let mut api = api();
    let (status, doc) = get(&mut api, "/api/openapi.json");
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    for path in [
        "/health",
        "/api/emails",
        "/api/emails/latest",
        "/api/emails/wait",
        "/api/emails/{id}",
        "/api/emails/{id}/raw",
        "/api/emails/{id}/attachments/{index}",
        "/api/emails/{id}/html",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing");
    }
    let list = doc["paths"]["/api/emails"]["get"]["parameters"].to_string();
    let latest = doc["paths"]["/api/emails/latest"]["get"]["parameters"].to_string();
    assert!(list.contains("beforeId") && latest.contains("beforeId") && list.contains("view"));
}

#[test]
fn received_at_never_goes_back() {
    let mut api = api();
    api.deliver(message(&["a@x"], "first"), NOW, [1; 10]);
    api.deliver(message(&["a@x"], "second"), NOW - 5_000, [1; 10]);
    let (_, body) = get(&mut api, "/api/emails");
    assert_eq!(
        body["emails"][0]["receivedAt"],
        body["emails"][1]["receivedAt"]
    );
}

#[test]
fn waits_past_the_limit_get_503_at_once() {
    let mut api: TestApi = Api::new(ApiConfig {
        max_waits: 2,
        ..ApiConfig::default()
    });
    for _ in 0..2 {
        let outcome = api.answer(&Request::new("GET", "/api/emails/wait"), NOW, &StoppedClock);
        let Outcome::Wait(parking) = outcome else {
            panic!("should park");
        };
        park(&mut api, parking);
    }
    let (status, text) = error_of(get(&mut api, "/api/emails/wait"));
    assert_eq!((status, text.as_str()), (503, "too many waits"));
    let (_, health) = get(&mut api, "/health");
    assert_eq!(health["waits"], 2);
    assert_eq!(health["limits"]["maxWaits"], 2);
    assert_eq!(
        health["limits"]["patternBudgetMs"],
        DEFAULT_PATTERN_BUDGET_MS
    );
}

/// A clock that moves 100 ms every time it is read.
struct Slow(std::cell::Cell<u64>);

impl Clock for Slow {
    fn nanos(&self) -> u64 {
        let now = self.0.get();
        self.0.set(now + 100_000_000);
        now
    }
}

#[test]
fn a_pattern_that_spends_its_budget_ends_with_400_too_expensive() {
    let mut api = api();
    for i in 0..5 {
        deliver(&mut api, &["a@x"], &format!("subject {i}"));
    }
    let slow = Slow(std::cell::Cell::new(0));
    // Each match "takes" 100 ms: the third one finds the 250 ms budget spent.
    let request = Request::new("GET", "/api/emails?subjectPattern=nomatch");
    let Outcome::Ready(response) = api.answer(&request, NOW, &slow) else {
        panic!("a list never parks");
    };
    assert_eq!(response.status, 400);
    assert_eq!(
        response.into_text(),
        r#"{"error":"subjectPattern too expensive"}"#
    );
    // A parked wait spends its budget over its life, then is answered with the same 400.
    let request = Request::new("GET", "/api/emails/wait?subjectPattern=nomatch&afterId=");
    let mut api = self::api();
    let Outcome::Wait(parking) = api.answer(&request, NOW, &slow) else {
        panic!("should park");
    };
    let (_, label) = park(&mut api, parking);
    let mut woken = Vec::new();
    for i in 0..4 {
        let delivered =
            api.deliver_and_wake(message(&["a@x"], &format!("s{i}")), NOW, [1; 10], &slow);
        woken.extend(delivered.woken);
    }
    assert_eq!(woken.len(), 1);
    assert_eq!(woken[0].0, label);
    assert_eq!(woken[0].1.status, 400);
    assert_eq!(api.pending_waits(), 0);
}

#[test]
fn a_wait_looks_again_at_messages_stored_while_its_job_ran() {
    let mut api = api();
    let Step::Work(job) = api.handle(&Request::new("GET", "/api/emails/wait?to=b@x"), NOW) else {
        panic!("a wait starts with a job");
    };
    let Done::Commit(commit) = job.run(&StoppedClock) else {
        panic!("nothing stored yet: it asks to park");
    };
    // A matching message lands between the job and its commit.
    let stored = api.deliver(message(&["b@x"], "in between"), NOW, [1; 10]);
    assert!(!stored.waits_parked);
    let Step::Work(again) = api.complete(commit, NOW) else {
        panic!("it must look at the new message first");
    };
    let Done::Response(response) = again.run(&StoppedClock) else {
        panic!("the new message matches");
    };
    let body: Value = serde_json::from_str(&response.into_text()).unwrap();
    assert_eq!(body["email"]["id"], stored.id.to_string());
    assert_eq!(api.pending_waits(), 0);
}

#[test]
fn a_batch_answers_each_wait_with_its_oldest_match_and_only_once() {
    let mut api = api();
    let Outcome::Wait(parking) = api.answer(
        &Request::new("GET", "/api/emails/wait?to=c@x"),
        NOW,
        &StoppedClock,
    ) else {
        panic!("should park");
    };
    let (spec, label) = park(&mut api, parking);
    let first = api.deliver(message(&["c@x"], "first"), NOW, [1; 10]);
    api.deliver(message(&["c@x"], "second"), NOW, [1; 10]);
    assert!(first.waits_parked);
    let batch = api.match_batch().expect("two new messages, one wait");
    assert_eq!(batch.messages(), 2);
    assert!(api.match_batch().is_none());
    let matches = batch.run(&StoppedClock);
    assert_eq!(matches.len(), 1);
    let woken = api.resolve(matches);
    assert_eq!(woken.len(), 1);
    let (id, response) = woken.into_iter().next().unwrap();
    assert_eq!(id, label);
    let body: Value = serde_json::from_str(&response.into_text()).unwrap();
    assert_eq!(body["email"]["id"], first.id.to_string());
    // Resolving the same wait again (a second batch racing) answers nothing.
    let Outcome::Wait(parking) = api.answer(
        &Request::new("GET", "/api/emails/wait?to=z@x"),
        NOW,
        &StoppedClock,
    ) else {
        panic!("should park");
    };
    let (_, other) = park(&mut api, parking);
    assert_eq!(api.cancel(WaitId(spec.id.0 + 1)), Some(other));
    assert!(api.cancel(spec.id).is_none());
}

#[test]
fn deleting_hands_the_messages_back_to_free_outside_the_lock() {
    let mut api = api();
    deliver(&mut api, &["a@x"], "1");
    deliver(&mut api, &["b@x"], "2");
    assert!(api.take_trash().is_empty());
    let (status, body) = ready(&mut api, "DELETE", "/api/emails?to=a@x");
    assert_eq!((status, body["deleted"].as_u64()), (200, Some(1)));
    assert!(!api.take_trash().is_empty());
    let (_, body) = ready(&mut api, "DELETE", "/api/emails");
    assert_eq!(body["deleted"], 1);
    assert!(!api.take_trash().is_empty());
    assert!(api.take_trash().is_empty());
}

/// A response answered at once, whatever its content type.
fn raw_answer(api: &mut TestApi, target: &str) -> Response {
    match api.answer(&Request::new("GET", target), NOW, &StoppedClock) {
        Outcome::Ready(r) => r,
        Outcome::Wait(w) => panic!("{target} parked as {w:?}"),
        Outcome::Subscribe(s) => panic!("{target} subscribed as {s:?}"),
    }
}

fn ids_of(body: &Value) -> Vec<String> {
    body["emails"]
        .as_array()
        .expect("emails array")
        .iter()
        .map(|e| e["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn before_id_pages_from_newest_to_oldest() {
    let mut api = api();
    let ids: Vec<String> = (0..7)
        .map(|i| deliver(&mut api, &["a@x"], &format!("m{i}")).id.to_string())
        .collect();
    // The newest 3 before the 6th, then the range between the 2nd and the 6th.
    let (_, body) = get(
        &mut api,
        &format!("/api/emails?beforeId={}&limit=3", ids[5]),
    );
    assert_eq!(ids_of(&body), ids[2..5]);
    let (_, body) = get(
        &mut api,
        &format!("/api/emails?afterId={}&beforeId={}", ids[1], ids[5]),
    );
    assert_eq!(ids_of(&body), ids[2..5]);
    let (_, body) = get(&mut api, &format!("/api/emails?beforeId={}", ids[0]));
    assert_eq!(ids_of(&body), Vec::<String>::new());
    let (_, body) = get(&mut api, &format!("/api/emails/latest?beforeId={}", ids[3]));
    assert_eq!(body["email"]["id"], ids[2]);
    let (status, _) = get(&mut api, &format!("/api/emails/latest?beforeId={}", ids[0]));
    assert_eq!(status, 404);
    let (_, body) = get(
        &mut api,
        &format!("/api/emails?view=summary&beforeId={}&limit=2", ids[6]),
    );
    assert_eq!(ids_of(&body), ids[4..6]);
    let (status, text) = error_of(get(&mut api, "/api/emails?beforeId=nope"));
    assert_eq!(status, 400);
    assert!(text.contains("beforeId"), "{text}");
    let (status, text) = error_of(get(&mut api, "/api/emails/wait?beforeId=nope"));
    assert_eq!(status, 400);
    assert!(text.contains("unknown query parameter beforeId"), "{text}");
}

#[test]
fn summary_view_lists_summaries_with_the_filters() {
    let mut api = api();
    deliver(&mut api, &["a@x"], "one");
    let two = deliver(&mut api, &["b@x"], "two").id;
    let (status, body) = get(&mut api, "/api/emails?view=summary&to=b@x");
    assert_eq!(status, 200);
    let list = body["emails"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    let email = api.store().get(two).unwrap();
    let expected: Value = serde_json::from_slice(&email.summary()).unwrap();
    assert_eq!(list[0], expected);
    assert_eq!(list[0]["preview"], "Hello");
    assert!(list[0].get("raw").is_none());
    let (_, full) = get(&mut api, "/api/emails?view=full&to=b@x");
    assert_eq!(
        full["emails"][0]["raw"].as_str().map(|r| !r.is_empty()),
        Some(true)
    );
    let (status, text) = error_of(get(&mut api, "/api/emails?view=compact"));
    assert_eq!(status, 400);
    assert!(text.contains("view"), "{text}");
}

fn with_attachments(api: &mut TestApi) -> MessageId {
    let raw = "Subject: files\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\
               Content-Type: text/html\r\n\r\n<img src=\"cid:pic\">\r\n--b\r\n\
               Content-Type: image/png\r\nContent-ID: <pic>\r\nContent-Transfer-Encoding: base64\r\n\r\niVBORw==\r\n--b\r\n\
               Content-Type: text/html; name=\"evil.html\"\r\nContent-Disposition: attachment; filename=\"evil.html\"\r\n\r\n<script>alert(1)</script>\r\n--b--\r\n";
    let message = Prepared::new(Incoming {
        envelope: Envelope {
            from: "s@x".into(),
            to: vec!["a@x".into()],
        },
        raw: raw.as_bytes().to_vec(),
        helo: None,
        session: Default::default(),
    });
    api.deliver_and_wake(message, NOW, [9; 10], &StoppedClock)
        .id
}

#[test]
fn raw_attachments_and_html_are_downloads() {
    let mut api = api();
    let id = with_attachments(&mut api);
    let (_, body) = get(&mut api, &format!("/api/emails/{id}"));
    let attachments = body["email"]["attachments"].as_array().unwrap().clone();
    assert_eq!(attachments.len(), 2);
    for (i, a) in attachments.iter().enumerate() {
        assert_eq!(a["url"], format!("/api/emails/{id}/attachments/{i}"));
    }
    let raw = raw_answer(&mut api, &format!("/api/emails/{id}/raw"));
    assert_eq!(raw.status, 200);
    assert_eq!(raw.content_type, "message/rfc822");
    assert_eq!(raw.body.collect(), api.store().get(id).unwrap().raw());

    let evil = raw_answer(&mut api, &format!("/api/emails/{id}/attachments/1"));
    assert_eq!(evil.status, 200);
    assert_eq!(evil.content_type, "text/html");
    assert_eq!(evil.header("content-security-policy"), Some("sandbox"));
    assert_eq!(evil.header("x-content-type-options"), Some("nosniff"));
    assert!(
        evil.header("content-disposition")
            .unwrap()
            .starts_with("attachment; filename=\"evil.html\"")
    );
    assert_eq!(evil.body.collect(), b"<script>alert(1)</script>");

    let html = raw_answer(&mut api, &format!("/api/emails/{id}/html"));
    assert_eq!(html.status, 200);
    let text = String::from_utf8(html.body.collect()).unwrap();
    assert!(
        text.contains(attachments[0]["url"].as_str().unwrap()),
        "{text}"
    );

    for target in [
        format!("/api/emails/{id}/attachments/2"),
        format!("/api/emails/{id}/attachments/x"),
        format!("/api/emails/{id}/attachments/01"),
        format!("/api/emails/{id}/nope"),
        "/api/emails/0190a0a0-0000-7000-8000-000000000000/raw".to_owned(),
        "/api/emails/nope/html".to_owned(),
        "/api/emails/nope/attachments/0".to_owned(),
    ] {
        let (status, text) = error_of(get(&mut api, &target));
        assert_eq!(status, 404, "{target}: {text}");
    }
    for target in [
        format!("/api/emails/{id}/raw?x=1"),
        format!("/api/emails/{id}/attachments/0?x=1"),
        format!("/api/emails/{id}/html?remoteImages=yes"),
        format!("/api/emails/{id}/html?other=1"),
    ] {
        let (status, text) = error_of(get(&mut api, &target));
        assert_eq!(status, 400, "{target}: {text}");
    }
    let (status, _) = error_of(ready(&mut api, "DELETE", &format!("/api/emails/{id}/raw")));
    assert_eq!(status, 405);
}

#[test]
fn fault_rules_are_parsed_and_listed_outside_the_api_lock() {
    let mut api = api();
    let mut request = Request::new("POST", "/api/faults");
    request.content_type = Some("application/json".to_owned());
    request.body =
        bytes::Bytes::from_static(br#"{"stage": "rcpt", "action": {"reply": {"code": 550}}}"#);
    // handle() is what runs under the host's lock: it only hands the body over.
    let Step::Work(job) = api.handle(&request, NOW) else {
        panic!("a fault request is a job");
    };
    assert!(!job.is_heavy(), "small: it runs on the async worker");
    // The rule read outside the lock is added under it.
    let Done::Commit(commit) = job.run(&StoppedClock) else {
        panic!("a valid rule is added under the lock");
    };
    let Step::Ready(added) = api.complete(commit, NOW) else {
        panic!("adding answers at once");
    };
    assert_eq!(added.status, 200);
    assert_eq!(api.fault_count(), 1);
    let Step::Work(list) = api.handle(&Request::new("GET", "/api/faults"), NOW) else {
        panic!("listing the rules is a job too");
    };
    let Done::Response(listed) = list.run(&StoppedClock) else {
        panic!("a response");
    };
    let listed: Value = serde_json::from_str(&listed.into_text()).expect("JSON");
    assert_eq!(listed["faults"].as_array().map(Vec::len), Some(1));
}
