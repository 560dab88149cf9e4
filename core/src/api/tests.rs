use super::*;
use crate::budget::{Clock, StoppedClock};
use crate::smtp::Envelope;
use crate::smtp::Incoming;
use serde_json::Value;

const NOW: u64 = 1_763_779_327_000;

/// The API with a label per request as the host's handle.
type TestApi = Api<u64>;

fn api() -> TestApi {
    Api::new(ApiConfig::default())
}

/// A fresh label: the handle a request's answer comes back with.
fn label() -> u64 {
    static LABELS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    LABELS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Asks for a wait that parks: its name, its deadline and its client's label.
fn wait(api: &mut TestApi, target: &str) -> (RequestId, u64, u64) {
    let label = label();
    match api.answer(label, &Request::new("GET", target), NOW, &StoppedClock) {
        Answered::Waiting { id, deadline_ms } => (id, deadline_ms, label),
        other => panic!("{target} should park, not {other:?}"),
    }
}

/// Drains the outputs, running the jobs and match batches on this thread
/// (the way a host does outside its lock); returns the rest in order.
fn settle(api: &mut TestApi, clock: &dyn Clock) -> Vec<Output<u64>> {
    let mut rest = Vec::new();
    while let Some(output) = api.poll_output() {
        match output {
            Output::Run(job) => {
                let done = job.run(clock);
                api.handle_done(done, NOW);
            }
            Output::Match(batch) => {
                let matches = batch.run(clock);
                api.handle_matches(matches);
            }
            other => rest.push(other),
        }
    }
    rest
}

/// The responses among outputs, with their clients' labels.
fn responses(outputs: Vec<Output<u64>>) -> Vec<(u64, Response)> {
    outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Respond(label, response) => Some((label, response)),
            _ => None,
        })
        .collect()
}

/// What left the store among outputs, to free (by dropping it) outside the lock.
fn removed(outputs: Vec<Output<u64>>) -> Vec<Removed> {
    outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Removed(removed) => Some(removed),
            _ => None,
        })
        .collect()
}

/// A request run through the whole contract: everything it led to.
fn request(api: &mut TestApi, method: &str, target: &str) -> (RequestId, u64, Vec<Output<u64>>) {
    let label = label();
    let id = api.handle_request(label, &Request::new(method, target), NOW);
    (id, label, settle(api, &StoppedClock))
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
        transcript: Default::default(),
    })
}

fn deliver(api: &mut TestApi, to: &[&str], subject: &str) -> Delivered<u64> {
    api.deliver_and_wake(message(to, subject), NOW, [9; 10], &StoppedClock)
}

fn ready(api: &mut TestApi, method: &str, target: &str) -> (u16, Value) {
    match api.answer(label(), &Request::new(method, target), NOW, &StoppedClock) {
        Answered::Ready(r) => (
            r.status,
            serde_json::from_str(&r.into_text()).expect("JSON body"),
        ),
        other => panic!("{target} was not answered at once: {other:?}"),
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
    let (id, deadline_ms, label) = wait(&mut api, "/api/emails/wait?to=b@x&timeoutMs=500");
    assert_eq!(deadline_ms, NOW + 500);
    assert_eq!(api.pending_waits(), 1);
    assert!(deliver(&mut api, &["a@x"], "not for b").woken.is_empty());
    let delivered = deliver(&mut api, &["b@x"], "for b");
    assert_eq!(delivered.woken.len(), 1);
    let (client, response) = delivered.woken.into_iter().next().unwrap();
    assert_eq!(client, label);
    let body: Value = serde_json::from_str(&response.into_text()).unwrap();
    assert_eq!(body["email"]["subject"], "for b");
    assert_eq!(api.pending_waits(), 0);
    // Answered once: its deadline passing answers nothing more.
    api.handle_expire(id);
    assert!(api.poll_output().is_none());
}

#[test]
fn a_wait_whose_pattern_gives_up_on_a_delivery_ends_with_400() {
    let mut api = api();
    let (_, _, label) = wait(
        &mut api,
        "/api/emails/wait?subjectPattern=%5E(a%2B)%2B%5C1b%24",
    );
    // An ordinary subject: no match, still parked.
    assert!(deliver(&mut api, &["a@x"], "hello").woken.is_empty());
    assert_eq!(api.pending_waits(), 1);
    // A subject the pattern gives up on: answered with the 400 a list gives, and gone.
    let delivered = deliver(&mut api, &["a@x"], &"a".repeat(40));
    assert_eq!(delivered.woken.len(), 1);
    let (client, response) = &delivered.woken[0];
    assert_eq!(*client, label);
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
    let (_, deadline_ms, label) = wait(&mut api, "/api/emails/wait");
    assert_eq!(deadline_ms, NOW + DEFAULT_WAIT_MS);
    assert_eq!(api.poll_timeout(), Some(NOW + DEFAULT_WAIT_MS));
    api.handle_timeout(NOW + DEFAULT_WAIT_MS - 1);
    assert!(api.poll_output().is_none());
    api.handle_timeout(NOW + DEFAULT_WAIT_MS);
    let expired = responses(settle(&mut api, &StoppedClock));
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].0, label);
    assert_eq!(expired[0].1.status, 408);
    assert!(text_of(&expired[0].1).contains("10000 ms"));
    assert_eq!(api.poll_timeout(), None);

    let (id, _, _) = wait(&mut api, "/api/emails/wait?afterId=");
    assert_eq!(api.pending_waits(), 1);
    api.handle_cancel(id);
    assert_eq!(api.pending_waits(), 0);
    api.handle_cancel(id);
    assert!(
        api.poll_output().is_none(),
        "a cancelled wait is never answered"
    );
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
    wait(&mut api, &format!("/api/emails/wait?afterId={a}"));
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
    let response = match api.answer(0, &Request::new("POST", "/api/emails"), NOW, &StoppedClock) {
        Answered::Ready(r) => r,
        Answered::Waiting { .. } | Answered::Subscribed(_) => unreachable!(),
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
        wait(&mut api, "/api/emails/wait");
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
    let Answered::Ready(response) = api.answer(0, &request, NOW, &slow) else {
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
    let label = label();
    let Answered::Waiting { .. } = api.answer(label, &request, NOW, &slow) else {
        panic!("should park");
    };
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
    let label = label();
    let id = api.handle_request(label, &Request::new("GET", "/api/emails/wait?to=b@x"), NOW);
    let Some(Output::Run(job)) = api.poll_output() else {
        panic!("a wait starts with a job");
    };
    assert_eq!(job.request(), id);
    assert!(api.poll_output().is_none());
    let done = job.run(&StoppedClock);
    // A matching message lands between the job and its result.
    let stored = api.deliver(message(&["b@x"], "in between"), NOW, [1; 10]);
    assert_eq!(api.pending_waits(), 0, "the wait is not parked yet");
    assert!(api.poll_output().is_none(), "so no batch tries it");
    api.handle_done(done, NOW);
    assert_eq!(
        api.pending_waits(),
        0,
        "it must look at the new message first"
    );
    let Some(Output::Run(again)) = api.poll_output() else {
        panic!("it looks again with a job");
    };
    api.handle_done(again.run(&StoppedClock), NOW);
    let answered = responses(settle(&mut api, &StoppedClock));
    assert_eq!(answered.len(), 1, "the new message matches");
    let (client, response) = answered.into_iter().next().unwrap();
    assert_eq!(client, label);
    let body: Value = serde_json::from_str(&response.into_text()).unwrap();
    assert_eq!(body["email"]["id"], stored.to_string());
    assert_eq!(api.pending_waits(), 0);
}

#[test]
fn a_batch_answers_each_wait_with_its_oldest_match_and_only_once() {
    let mut api = api();
    let (id, _, label) = wait(&mut api, "/api/emails/wait?to=c@x");
    let first = api.deliver(message(&["c@x"], "first"), NOW, [1; 10]);
    api.deliver(message(&["c@x"], "second"), NOW, [1; 10]);
    assert_eq!(api.pending_waits(), 1);
    let Some(Output::Match(batch)) = api.poll_output() else {
        panic!("two new messages, one wait: a batch");
    };
    assert_eq!(batch.messages(), 2);
    assert!(api.poll_output().is_none());
    let matches = batch.run(&StoppedClock);
    assert_eq!(matches.len(), 1);
    api.handle_matches(matches);
    let woken = responses(settle(&mut api, &StoppedClock));
    assert_eq!(woken.len(), 1);
    let (client, response) = woken.into_iter().next().unwrap();
    assert_eq!(client, label);
    let body: Value = serde_json::from_str(&response.into_text()).unwrap();
    assert_eq!(body["email"]["id"], first.to_string());
    // Resolving the same wait again (a second batch racing) answers nothing.
    let email = api.store().get(first).unwrap();
    api.handle_matches(Matches::one(id, Ok(email.clone())));
    assert!(api.poll_output().is_none());
    // A cancel names one wait: the other stays parked, and is answered.
    let (other, _, other_label) = wait(&mut api, "/api/emails/wait?to=z@x");
    assert_eq!(other, RequestId(id.0 + 1));
    api.handle_cancel(id);
    assert_eq!(api.pending_waits(), 1);
    api.handle_matches(Matches::one(other, Ok(email)));
    let woken = responses(settle(&mut api, &StoppedClock));
    assert_eq!(woken.len(), 1);
    assert_eq!(woken[0].0, other_label);
    api.handle_cancel(other);
    assert_eq!(api.pending_waits(), 0);
}

#[test]
fn deleting_hands_the_messages_back_to_free_outside_the_lock() {
    let mut api = api();
    let a = deliver(&mut api, &["a@x"], "1").id;
    let b = deliver(&mut api, &["b@x"], "2").id;
    assert!(removed(settle(&mut api, &StoppedClock)).is_empty());
    let (a, b) = (
        Arc::downgrade(&api.store().get(a).unwrap()),
        Arc::downgrade(&api.store().get(b).unwrap()),
    );
    let (_, label, outputs) = request(&mut api, "DELETE", "/api/emails?to=a@x");
    let (answers, rest): (Vec<_>, Vec<_>) = outputs
        .into_iter()
        .partition(|o| matches!(o, Output::Respond(..)));
    let answers = responses(answers);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].0, label);
    let (status, body) = (answers[0].1.status, text_of(&answers[0].1));
    assert_eq!((status, body.as_str()), (200, r#"{"deleted":1}"#));
    let trash = removed(rest);
    assert_eq!(trash.len(), 1);
    assert!(!trash[0].trash.is_empty());
    assert!(trash[0].answer_after_write.is_none(), "no disk to wait for");
    assert!(
        a.upgrade().is_some(),
        "the API let go of it, the host frees it"
    );
    drop(trash);
    assert!(a.upgrade().is_none());
    let (_, _, outputs) = request(&mut api, "DELETE", "/api/emails");
    let (answers, rest): (Vec<_>, Vec<_>) = outputs
        .into_iter()
        .partition(|o| matches!(o, Output::Respond(..)));
    assert_eq!(text_of(&responses(answers)[0].1), r#"{"deleted":1}"#);
    let trash = removed(rest);
    assert_eq!(trash.len(), 1);
    assert!(b.upgrade().is_some());
    drop(trash);
    assert!(b.upgrade().is_none());
    assert!(api.poll_output().is_none(), "nothing twice");
}

/// A response answered at once, whatever its content type.
fn raw_answer(api: &mut TestApi, target: &str) -> Response {
    match api.answer(label(), &Request::new("GET", target), NOW, &StoppedClock) {
        Answered::Ready(r) => r,
        other => panic!("{target} was not answered at once: {other:?}"),
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
        transcript: Default::default(),
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
    let mut post = Request::new("POST", "/api/faults");
    post.content_type = Some("application/json".to_owned());
    post.body =
        bytes::Bytes::from_static(br#"{"stage": "rcpt", "action": {"reply": {"code": 550}}}"#);
    // handle_request() is what runs under the host's lock: it only hands the body over.
    let label = label();
    api.handle_request(label, &post, NOW);
    let Some(Output::Run(job)) = api.poll_output() else {
        panic!("a fault request is a job");
    };
    assert!(api.poll_output().is_none(), "no answer before the job ran");
    assert!(!job.is_heavy(), "small: it runs on the async worker");
    assert_eq!(api.fault_count(), 0, "not parsed yet");
    api.handle_done(job.run(&StoppedClock), NOW);
    let added = responses(settle(&mut api, &StoppedClock));
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].0, label);
    assert_eq!(added[0].1.status, 200);
    assert_eq!(api.fault_count(), 1);
    api.handle_request(label, &Request::new("GET", "/api/faults"), NOW);
    let Some(Output::Run(list)) = api.poll_output() else {
        panic!("listing the rules is a job too");
    };
    api.handle_done(list.run(&StoppedClock), NOW);
    let mut listed = responses(settle(&mut api, &StoppedClock));
    let listed: Value = serde_json::from_str(&listed.remove(0).1.into_text()).expect("JSON");
    assert_eq!(listed["faults"].as_array().map(Vec::len), Some(1));
}

/// A text body of a response, streamed or not.
fn text(response: Response) -> String {
    response.into_text()
}

#[test]
fn poll_timeout_is_the_earliest_of_a_wait_deadline_and_the_oldest_message_expiry() {
    let mut api = api();
    assert_eq!(api.poll_timeout(), None, "nothing parked, no --max-age");
    api.set_max_age(Some(5_000));
    assert_eq!(api.poll_timeout(), None, "nothing stored");
    let old = api.deliver(message(&["a@x"], "old"), NOW, [1; 10]);
    api.deliver(message(&["a@x"], "newer"), NOW + 2_000, [1; 10]);
    assert_eq!(
        api.poll_timeout(),
        Some(NOW + 5_000),
        "the oldest expires first"
    );
    let (_, deadline_ms, label) = wait(&mut api, "/api/emails/wait?to=b@x&timeoutMs=1000");
    assert_eq!(api.poll_timeout(), Some(deadline_ms));
    let (_, _, later) = wait(&mut api, "/api/emails/wait?to=b@x&timeoutMs=9000");
    assert_eq!(api.poll_timeout(), Some(NOW + 1_000), "the earliest wait");

    // handle_timeout: the wait that is due gets its 408, nothing else moves.
    api.handle_timeout(NOW + 1_000);
    let out = settle(&mut api, &StoppedClock);
    let answered = responses(out);
    assert_eq!(answered.len(), 1);
    assert_eq!((answered[0].0, answered[0].1.status), (label, 408));
    assert_eq!(api.pending_waits(), 1);
    assert_eq!(
        api.poll_timeout(),
        Some(NOW + 5_000),
        "now the oldest message"
    );

    // Just before its expiry nothing leaves; at it, it leaves the store and comes out.
    api.handle_timeout(NOW + 4_999);
    assert!(api.poll_output().is_none());
    api.handle_timeout(NOW + 5_000);
    let gone = removed(settle(&mut api, &StoppedClock));
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].trash.removals(), [Removal::One(old)]);
    assert_eq!(api.store().len(), 1);
    assert_eq!(
        api.poll_timeout(),
        Some(NOW + 7_000),
        "the next message's expiry"
    );
    api.handle_timeout(NOW + 9_000);
    let out = settle(&mut api, &StoppedClock);
    assert_eq!(removed_count(&out), 1);
    assert_eq!(
        responses(out)
            .iter()
            .map(|(l, r)| (*l, r.status))
            .collect::<Vec<_>>(),
        [(later, 408)]
    );
    assert_eq!(api.store().len(), 0);
    assert_eq!(api.poll_timeout(), None);
}

fn removed_count(outputs: &[Output<u64>]) -> usize {
    outputs
        .iter()
        .filter(|o| matches!(o, Output::Removed(_)))
        .count()
}

#[test]
fn a_delete_to_job_whose_client_left_still_deletes() {
    for durable in [false, true] {
        let mut api: TestApi = Api::new(ApiConfig {
            durable,
            ..ApiConfig::default()
        });
        let gone = deliver(&mut api, &["a@x"], "to delete").id;
        let kept = deliver(&mut api, &["b@x"], "to keep").id;
        let id = api.handle_request(label(), &Request::new("DELETE", "/api/emails?to=a@x"), NOW);
        let Some(Output::Run(job)) = api.poll_output() else {
            panic!("a DELETE ?to= is a job");
        };
        // The client goes away while the job runs.
        api.handle_cancel(id);
        api.handle_done(job.run(&StoppedClock), NOW);
        let out = settle(&mut api, &StoppedClock);
        assert!(responses_of(&out).is_empty(), "nobody to answer");
        let trash = removed(out);
        assert_eq!(trash.len(), 1, "durable: {durable}");
        assert_eq!(trash[0].trash.removals(), [Removal::One(gone)]);
        assert!(
            trash[0].answer_after_write.is_none(),
            "no answer waits for the disk"
        );
        assert!(api.store().get(gone).is_none());
        assert!(api.store().get(kept).is_some());
    }
}

fn responses_of(outputs: &[Output<u64>]) -> Vec<u16> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Respond(_, r) => Some(r.status),
            _ => None,
        })
        .collect()
}

/// A `DELETE` on a durable API: its client, its name, and what came out.
fn durable_delete(api: &mut TestApi, target: &str) -> (u64, RequestId, Removed) {
    let (id, label, out) = request(api, "DELETE", target);
    assert!(
        responses_of(&out).is_empty(),
        "{target}: no answer before the disk took it"
    );
    let mut trash = removed(out);
    assert_eq!(trash.len(), 1, "{target}");
    let trash = trash.remove(0);
    assert_eq!(trash.answer_after_write, Some(id));
    (label, id, trash)
}

#[test]
fn a_durable_delete_is_answered_once_the_disk_took_it() {
    let mut api: TestApi = Api::new(ApiConfig {
        durable: true,
        ..ApiConfig::default()
    });
    let ids: Vec<MessageId> = (0..4)
        .map(|i| deliver(&mut api, &["a@x"], &i.to_string()).id)
        .collect();
    // By id, by recipient (a job), and all: each is held until written.
    let (label, id, trash) = durable_delete(&mut api, &format!("/api/emails/{}", ids[0]));
    assert_eq!(trash.trash.removals(), [Removal::One(ids[0])]);
    assert!(
        api.store().get(ids[0]).is_none(),
        "gone from memory at once"
    );
    drop(trash);
    api.handle_written(id, Ok(()));
    let answered = responses(settle(&mut api, &StoppedClock));
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].0, label);
    assert_eq!(answered[0].1.status, 200);
    assert_eq!(text_of(&answered[0].1), r#"{"deleted":1}"#);
    // A second report for the same request answers nothing.
    api.handle_written(id, Ok(()));
    assert!(api.poll_output().is_none());

    let (label, id, trash) = durable_delete(&mut api, "/api/emails?to=a@x");
    assert_eq!(trash.trash.removals().len(), 3);
    api.handle_written(id, Err(WriteError::Failed("disk full".to_owned())));
    let answered = responses(settle(&mut api, &StoppedClock));
    assert_eq!(answered.len(), 1);
    assert_eq!((answered[0].0, answered[0].1.status), (label, 503));
    let failed = text(answered.into_iter().next().unwrap().1);
    assert!(failed.contains("disk full"), "{failed}");
    assert!(failed.contains("not yet from disk"), "{failed}");
    assert!(failed.contains("retries"), "{failed}");

    deliver(&mut api, &["b@x"], "last");
    let (label, id, _trash) = durable_delete(&mut api, "/api/emails");
    api.handle_written(id, Err(WriteError::Stopped));
    let answered = responses(settle(&mut api, &StoppedClock));
    assert_eq!((answered[0].0, answered[0].1.status), (label, 503));
    let stopped = text(answered.into_iter().next().unwrap().1);
    assert!(stopped.contains("not from disk"), "{stopped}");
    assert!(stopped.contains("stopped"), "{stopped}");

    // A client that left before the write: its held answer is forgotten.
    let keep = deliver(&mut api, &["c@x"], "c").id;
    let (_, id, _trash) = durable_delete(&mut api, &format!("/api/emails/{keep}"));
    api.handle_cancel(id);
    api.handle_written(id, Ok(()));
    assert!(api.poll_output().is_none());
}

#[test]
fn a_delete_on_a_memory_only_api_is_answered_at_once() {
    let mut api = api();
    let id = deliver(&mut api, &["a@x"], "m").id;
    let (_, label, out) = request(&mut api, "DELETE", &format!("/api/emails/{id}"));
    assert_eq!(responses_of(&out), [200]);
    let Some(Output::Respond(client, _)) = out.first() else {
        panic!("the answer first, then what to free");
    };
    assert_eq!(*client, label);
    let trash = removed(out);
    assert_eq!(trash.len(), 1);
    assert!(trash[0].answer_after_write.is_none());
}

#[test]
fn one_match_batch_is_out_at_a_time() {
    let mut api = api();
    let (_, _, for_b) = wait(&mut api, "/api/emails/wait?to=b@x");
    let (_, _, for_c) = wait(&mut api, "/api/emails/wait?to=c@x");
    let first = api.deliver(message(&["a@x"], "first"), NOW, [1; 10]);
    let Some(Output::Match(batch)) = api.poll_output() else {
        panic!("a batch for the first message");
    };
    assert_eq!((batch.messages(), batch.waits()), (1, 2));
    // A delivery while the batch is out: no second batch yet.
    let second = api.deliver(message(&["b@x"], "second"), NOW, [1; 10]);
    assert!(api.poll_output().is_none(), "the first batch is still out");
    // Split in two parts: accounting for one part is not enough.
    let mut parts = batch.split(2).into_iter();
    let (one, two) = (parts.next().unwrap(), parts.next().unwrap());
    api.handle_matches(one.run(&StoppedClock));
    assert!(api.poll_output().is_none(), "half the batch is still out");
    // A wait settled on its own (run_each) covers nothing of the count either.
    let mut settled = Vec::new();
    let rest = two.run_each(&StoppedClock, &mut |id, found| settled.push((id, found)));
    assert!(settled.is_empty(), "the first message is for neither wait");
    api.handle_matches(rest);
    // Now the next batch: the second message only, not the first again.
    let Some(Output::Match(next)) = api.poll_output() else {
        panic!("the next batch once the first is accounted for");
    };
    assert_eq!(next.messages(), 1);
    let matches = next.run(&StoppedClock);
    assert_eq!(matches.len(), 1);
    api.handle_matches(matches);
    let mut woken = responses(settle(&mut api, &StoppedClock));
    assert_eq!(woken.len(), 1);
    assert_eq!(woken[0].0, for_b);
    let body: Value = serde_json::from_str(&text(woken.remove(0).1)).unwrap();
    assert_eq!(body["email"]["id"], second.to_string());
    assert_ne!(body["email"]["id"], first.to_string());
    assert_eq!(api.pending_waits(), 1, "the wait for c@x stays parked");
    // A part that failed is accounted for with nothing: its waits stay parked.
    api.deliver(message(&["c@x"], "third"), NOW, [1; 10]);
    let Some(Output::Match(failed)) = api.poll_output() else {
        panic!("a batch");
    };
    api.handle_matches(Matches::nothing(failed.waits()));
    assert_eq!(api.pending_waits(), 1);
    let fourth = api.deliver(message(&["c@x"], "fourth"), NOW, [1; 10]);
    let mut woken = responses(settle(&mut api, &StoppedClock));
    assert_eq!(woken.len(), 1, "the next batch runs");
    assert_eq!(woken[0].0, for_c);
    let body: Value = serde_json::from_str(&text(woken.remove(0).1)).unwrap();
    assert_eq!(body["email"]["id"], fourth.to_string());
}

#[test]
fn shutdown_answers_every_parked_wait_with_503() {
    let mut api = api();
    let labels: Vec<u64> = (0..3)
        .map(|_| wait(&mut api, "/api/emails/wait?to=nobody@x").2)
        .collect();
    api.handle_shutdown();
    let answered = responses(settle(&mut api, &StoppedClock));
    let mut got: Vec<u64> = answered.iter().map(|(l, _)| *l).collect();
    got.sort_unstable();
    assert_eq!(got, labels);
    for (_, response) in &answered {
        assert_eq!(response.status, 503);
        assert!(text_of(response).contains("shutting down"));
    }
    assert_eq!(api.pending_waits(), 0);
    assert_eq!(api.poll_timeout(), None);
}

#[test]
fn a_job_that_cannot_run_answers_its_client_with_503() {
    let mut api = api();
    deliver(&mut api, &["a@x"], "m");
    let label = label();
    api.handle_request(label, &Request::new("GET", "/api/emails?to=a@x"), NOW);
    let Some(Output::Run(job)) = api.poll_output() else {
        panic!("a list is a job");
    };
    api.handle_done(job.failed(), NOW);
    let answered = responses(settle(&mut api, &StoppedClock));
    assert_eq!(answered.len(), 1);
    assert_eq!((answered[0].0, answered[0].1.status), (label, 503));
}

#[test]
fn answer_leaves_the_outputs_of_other_requests_queued_in_order() {
    let mut api = api();
    let (_, deadline_ms, first) = wait(&mut api, "/api/emails/wait?timeoutMs=10");
    let (_, _, second) = wait(&mut api, "/api/emails/wait?timeoutMs=20");
    api.handle_timeout(deadline_ms + 10);
    // Both 408s are queued; another request is answered on its own.
    let (status, _) = get(&mut api, "/health");
    assert_eq!(status, 200);
    let queued = responses(settle(&mut api, &StoppedClock));
    let queued: Vec<(u64, u16)> = queued.iter().map(|(l, r)| (*l, r.status)).collect();
    assert_eq!(queued, [(first, 408), (second, 408)]);
}

#[test]
fn waits_settled_by_one_batch_are_answered_in_wait_order() {
    let mut api = api();
    let (_, _, for_a) = wait(&mut api, "/api/emails/wait?to=a@x");
    let (_, _, for_b) = wait(&mut api, "/api/emails/wait?to=b@x");
    // The later wait's message comes first: the batch finds it first.
    api.deliver(message(&["b@x"], "for b"), NOW, [1; 10]);
    api.deliver(message(&["a@x"], "for a"), NOW, [1; 10]);
    let Some(Output::Match(batch)) = api.poll_output() else {
        panic!("one batch for both messages");
    };
    assert_eq!(batch.messages(), 2);
    api.handle_matches(batch.run(&StoppedClock));
    let woken = responses(settle(&mut api, &StoppedClock));
    let order: Vec<u64> = woken.iter().map(|(label, _)| *label).collect();
    assert_eq!(order, [for_a, for_b]);
}
