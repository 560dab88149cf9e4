use super::*;

fn rule(body: &str) -> NewRule {
    parse_rule(body.as_bytes()).expect("a valid rule")
}

fn refused(body: &str) -> String {
    parse_rule(body.as_bytes()).expect_err("refused")
}

fn event<'a>(stage: Stage, from: Option<&'a str>, to: &'a [String]) -> FaultEvent<'a> {
    FaultEvent {
        stage,
        from,
        to,
        login: None,
    }
}

#[test]
fn a_rule_reads_with_its_defaults() {
    let r = rule(
        r#"{"match": {"to": "Bob@Example.com"}, "stage": "rcpt", "action": {"reply": {"code": 550, "text": "5.1.1 No such user"}}}"#,
    );
    assert_eq!(r.to.as_deref(), Some("Bob@Example.com"));
    assert_eq!(r.from, None);
    assert_eq!(r.stage, Stage::Rcpt);
    assert_eq!(
        r.action,
        Action::Reply {
            code: 550,
            text: "5.1.1 No such user".into()
        }
    );
    assert_eq!(r.times, Some(1));
    assert_eq!(r.probability, None);
    let always = rule(r#"{"stage": "connect", "action": {"disconnect": true}, "times": null}"#);
    assert_eq!(always.times, None);
    assert_eq!(always.action, Action::Disconnect);
    let slow = rule(r#"{"stage": "message", "action": {"delayMs": 250}, "probability": 0.5}"#);
    assert_eq!(slow.action, Action::Delay { ms: 250 });
    assert_eq!(slow.probability, Some(0.5));
    let plain = rule(r#"{"stage": "mail", "action": {"reply": {"code": 451}}}"#);
    let Action::Reply { text, .. } = plain.action else {
        panic!("a reply")
    };
    assert!(text.starts_with("4.0.0 "), "{text}");
}

#[test]
fn bad_rules_are_refused_naming_the_field() {
    for (body, field) in [
        ("{", "not valid JSON"),
        ("[]", "JSON object"),
        (r#"{"stage": "rcpt"}"#, "action is required"),
        (r#"{"action": {"disconnect": true}}"#, "stage is required"),
        (
            r#"{"stage": "quit", "action": {"disconnect": true}}"#,
            "stage must be",
        ),
        (
            r#"{"stage": "rcpt", "action": {"reply": {"code": 250}}}"#,
            "action.reply.code",
        ),
        (
            r#"{"stage": "rcpt", "action": {"reply": {"code": 600}}}"#,
            "action.reply.code",
        ),
        (
            r#"{"stage": "rcpt", "action": {"reply": {"code": "550"}}}"#,
            "action.reply.code",
        ),
        (
            r#"{"stage": "rcpt", "action": {"reply": {"code": 550, "text": "a\r\nb"}}}"#,
            "action.reply.text",
        ),
        (
            r#"{"stage": "rcpt", "action": {"reply": {"code": 550, "x": 1}}}"#,
            "action.reply.x",
        ),
        (
            r#"{"stage": "rcpt", "action": {"disconnect": false}}"#,
            "action.disconnect",
        ),
        (
            r#"{"stage": "rcpt", "action": {"delayMs": 60001}}"#,
            "action.delayMs",
        ),
        (
            r#"{"stage": "rcpt", "action": {"delayMs": -1}}"#,
            "action.delayMs",
        ),
        (r#"{"stage": "rcpt", "action": {}}"#, "exactly one"),
        (
            r#"{"stage": "rcpt", "action": {"delayMs": 1, "disconnect": true}}"#,
            "exactly one",
        ),
        (
            r#"{"stage": "rcpt", "action": {"explode": 1}}"#,
            "action.explode",
        ),
        (
            r#"{"stage": "rcpt", "action": {"disconnect": true}, "times": 0}"#,
            "times",
        ),
        (
            r#"{"stage": "rcpt", "action": {"disconnect": true}, "times": 1.5}"#,
            "times",
        ),
        (
            r#"{"stage": "rcpt", "action": {"disconnect": true}, "probability": 1.5}"#,
            "probability",
        ),
        (
            r#"{"stage": "rcpt", "action": {"disconnect": true}, "probability": "x"}"#,
            "probability",
        ),
        (
            r#"{"stage": "rcpt", "action": {"disconnect": true}, "extra": 1}"#,
            "\"extra\"",
        ),
        (
            r#"{"stage": "rcpt", "action": {"disconnect": true}, "match": {"cc": "a@b"}}"#,
            "match.cc",
        ),
        (
            r#"{"stage": "rcpt", "action": {"disconnect": true}, "match": {"to": ""}}"#,
            "match.to",
        ),
        (
            r#"{"stage": "rcpt", "action": {"disconnect": true}, "match": {"to": 5}}"#,
            "match.to",
        ),
        (
            r#"{"stage": "rcpt", "action": {"disconnect": true}, "match": "a@b"}"#,
            "match must be",
        ),
        (
            r#"{"stage": "connect", "action": {"disconnect": true}, "match": {"from": "a@b"}}"#,
            "match.from",
        ),
        (
            r#"{"stage": "helo", "action": {"disconnect": true}, "match": {"to": "a@b"}}"#,
            "match.to",
        ),
        (
            r#"{"stage": "mail", "action": {"disconnect": true}, "match": {"to": "a@b"}}"#,
            "match.to",
        ),
    ] {
        let error = refused(body);
        assert!(error.contains(field), "{body}: {error}");
    }
}

#[test]
fn the_first_matching_rule_fires_and_goes_after_its_times() {
    let mut faults = Faults::new(10, 0);
    let bob = ["bob@example.com".to_owned()];
    let carol = ["carol@example.com".to_owned()];
    faults.add(rule(r#"{"match": {"to": "BOB@example.com"}, "stage": "rcpt", "action": {"reply": {"code": 451}}, "times": 2}"#));
    faults.add(rule(
        r#"{"stage": "rcpt", "action": {"reply": {"code": 550}}}"#,
    ));
    let fire = |faults: &mut Faults, to: &[String]| {
        faults
            .fire(&event(Stage::Rcpt, Some("a@b"), to))
            .map(|f| f.id)
    };
    // Another stage never fires a rcpt rule.
    assert_eq!(faults.fire(&event(Stage::Mail, Some("a@b"), &[])), None);
    assert_eq!(fire(&mut faults, &bob).as_deref(), Some("1"));
    assert_eq!(faults.rules()[0].times, Some(1));
    assert_eq!(faults.rules()[0].fired, 1);
    assert_eq!(fire(&mut faults, &bob).as_deref(), Some("1"));
    // Rule 1 is used up; the catch-all fires once and goes too.
    assert_eq!(faults.rules().len(), 1);
    assert_eq!(fire(&mut faults, &carol).as_deref(), Some("2"));
    assert_eq!(fire(&mut faults, &bob), None);
    assert!(faults.rules().is_empty());
}

#[test]
fn from_and_to_must_both_match() {
    let mut faults = Faults::new(10, 0);
    faults.add(rule(r#"{"match": {"from": "app@x.test", "to": "bob@x.test"}, "stage": "message", "action": {"disconnect": true}, "times": null}"#));
    let both = ["carol@x.test".to_owned(), "Bob@X.test".to_owned()];
    let other = ["carol@x.test".to_owned()];
    assert!(
        faults
            .fire(&event(Stage::Message, Some("other@x.test"), &both))
            .is_none()
    );
    assert!(
        faults
            .fire(&event(Stage::Message, Some("APP@x.test"), &other))
            .is_none()
    );
    assert!(faults.fire(&event(Stage::Message, None, &both)).is_none());
    let fired = faults.fire(&event(Stage::Message, Some("APP@x.test"), &both));
    assert_eq!(fired.map(|f| f.action), Some(Action::Disconnect));
    // `times: null` never runs out.
    assert!(
        faults
            .fire(&event(Stage::Message, Some("app@x.test"), &both))
            .is_some()
    );
    assert_eq!(faults.rules()[0].fired, 2);
}

#[test]
fn probabilities_are_deterministic_given_the_seed() {
    let outcomes = |seed: u64| {
        let mut faults = Faults::new(10, seed);
        faults.add(rule(
            r#"{"stage": "helo", "action": {"delayMs": 1}, "times": null, "probability": 0.3}"#,
        ));
        (0..1000)
            .map(|_| faults.fire(&event(Stage::Helo, None, &[])).is_some())
            .collect::<Vec<_>>()
    };
    assert_eq!(outcomes(7), outcomes(7));
    assert_ne!(outcomes(7), outcomes(8));
    let fired = outcomes(7).iter().filter(|&&f| f).count();
    // 0.3 of 1000 rolls, within a wide margin (binomial sd is about 14.5).
    assert!((200..400).contains(&fired), "{fired}");
    // 0 never fires, 1 always does.
    for (p, expect) in [("0", 0), ("1", 50)] {
        let mut faults = Faults::new(10, 0);
        faults.add(rule(&format!(
            r#"{{"stage": "helo", "action": {{"delayMs": 1}}, "times": null, "probability": {p}}}"#
        )));
        let n = (0..50)
            .filter(|_| faults.fire(&event(Stage::Helo, None, &[])).is_some())
            .count();
        assert_eq!(n, expect);
    }
}

#[test]
fn the_number_of_rules_is_bounded() {
    let mut rules = Faults::new(2, 0);
    let post = |rules: &mut Faults| {
        rules
            .handle(
                "POST",
                None,
                Some("application/json"),
                br#"{"stage": "helo", "action": {"disconnect": true}}"#,
            )
            .map(|r| r.status)
    };
    assert_eq!(post(&mut rules), Ok(200));
    assert_eq!(post(&mut rules), Ok(200));
    assert_eq!(rules.len(), 2);
    assert_eq!(post(&mut rules), Ok(503));
    assert_eq!(rules.len(), 2);
}

#[test]
fn the_api_adds_lists_and_removes_rules() {
    let mut rules = Faults::new(DEFAULT_MAX_FAULTS, 0);
    let body = br#"{"match": {"to": "bob@x.test"}, "stage": "rcpt", "action": {"reply": {"code": 550, "text": "5.1.1 No"}}}"#;
    let added = rules
        .handle("POST", None, Some("Application/JSON; charset=utf-8"), body)
        .expect("added");
    assert_eq!(added.status, 200);
    let added: Value = serde_json::from_slice(&added.body.collect()).expect("json");
    let id = added["fault"]["id"].as_str().expect("an id").to_owned();
    assert_eq!(added["fault"]["match"]["to"], "bob@x.test");
    assert_eq!(added["fault"]["action"]["reply"]["code"], 550);
    assert_eq!(added["fault"]["times"], 1);
    let list = rules.handle("GET", None, None, b"").expect("listed");
    let list: Value = serde_json::from_slice(&list.body.collect()).expect("json");
    assert_eq!(list["faults"][0]["id"], id.as_str());
    // Wrong or missing content type, and a body too large.
    for content_type in [None, Some("text/plain"), Some("application/jsonx")] {
        let r = rules
            .handle("POST", None, content_type, body)
            .expect("answered");
        assert_eq!(r.status, 415);
    }
    let big = vec![b' '; MAX_FAULT_BODY_BYTES + 1];
    let r = rules.handle("POST", None, Some("application/json"), &big);
    assert_eq!(r.map(|r| r.status), Ok(413));
    let bad = rules.handle("POST", None, Some("application/json"), b"{}");
    assert_eq!(bad.map_err(|e| e.status()).err(), Some(400));
    // Delete one: then it is gone.
    let deleted = rules
        .handle("DELETE", Some(&id), None, b"")
        .expect("deleted");
    assert_eq!(deleted.status, 200);
    let again = rules.handle("DELETE", Some(&id), None, b"");
    assert_eq!(again.map_err(|e| e.status()).err(), Some(404));
    // Delete all.
    rules
        .handle("POST", None, Some("application/json"), body)
        .expect("added");
    rules
        .handle("POST", None, Some("application/json"), body)
        .expect("added");
    let cleared = rules.handle("DELETE", None, None, b"").expect("cleared");
    let cleared: Value = serde_json::from_slice(&cleared.body.collect()).expect("json");
    assert_eq!(cleared["deleted"], 2);
    assert!(rules.is_empty());
    let wrong = rules.handle("PUT", None, None, b"");
    assert_eq!(wrong.map_err(|e| e.status()).err(), Some(405));
}

mod through_the_api {
    use crate::api::{Answered, Api, ApiConfig, Request};
    use crate::smtp::{Config, Output, Session};
    use serde_json::Value;

    fn send(api: &mut Api, method: &str, target: &str, body: Option<&str>) -> (u16, Value) {
        let mut request = Request::new(method, target);
        if let Some(body) = body {
            request.content_type = Some("application/json".into());
            request.body = body.as_bytes().to_vec().into();
        }
        // A fault request is a job (parsed outside the API lock) or, refused early, a response.
        let clock = crate::budget::StoppedClock;
        let response = match api.answer((), &request, 1_763_779_327_000, &clock) {
            Answered::Ready(r) => r,
            other => panic!("not ready: {other:?}"),
        };
        let status = response.status;
        let json = serde_json::from_slice(&response.body.collect()).expect("JSON");
        (status, json)
    }

    #[test]
    fn rules_posted_to_the_api_reach_the_sessions_and_health_counts_them() {
        let mut api: Api = Api::new(ApiConfig {
            max_faults: 3,
            ..ApiConfig::default()
        });
        let (status, added) = send(
            &mut api,
            "POST",
            "/api/faults",
            Some(
                r#"{"match": {"to": "bob@x.test"}, "stage": "rcpt", "action": {"reply": {"code": 550}}}"#,
            ),
        );
        assert_eq!(status, 200);
        let (_, health) = send(&mut api, "GET", "/health", None);
        assert_eq!(health["faults"], 1);
        assert_eq!(health["limits"]["maxFaults"], 3);
        let mut session = Session::new(Config::default());
        session.open(0, &mut api);
        session.handle_input(
            b"HELO c\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<Bob@X.test>\r\n",
            0,
            &mut crate::smtp::Unlimited,
            &mut api,
        );
        let out: Vec<Output> = std::iter::from_fn(|| session.poll_output()).collect();
        let fired = out.iter().find_map(|o| match o {
            Output::Fault(f) => Some(f.id.clone()),
            _ => None,
        });
        assert_eq!(fired.as_deref(), added["fault"]["id"].as_str());
        // Used up (times 1): gone from the list and from /health.
        let (_, list) = send(&mut api, "GET", "/api/faults", None);
        assert_eq!(list["faults"].as_array().map(Vec::len), Some(0));
        let (_, health) = send(&mut api, "GET", "/health", None);
        assert_eq!(health["faults"], 0);
    }

    #[test]
    fn the_routes_refuse_what_they_do_not_take() {
        let mut api: Api = Api::new(ApiConfig::default());
        let (status, body) = send(&mut api, "DELETE", "/api/faults?all=1", None);
        assert_eq!(status, 400, "{body}");
        assert!(body["error"].as_str().is_some_and(|e| e.contains("all")));
        let (status, _) = send(&mut api, "GET", "/api/faults/1", None);
        assert_eq!(status, 405);
        let (status, _) = send(&mut api, "PATCH", "/api/faults", None);
        assert_eq!(status, 405);
        let (status, body) = send(
            &mut api,
            "POST",
            "/api/faults",
            Some("{\"stage\": \"rcpt\"}"),
        );
        assert_eq!(status, 400);
        assert!(body["error"].as_str().is_some_and(|e| e.contains("action")));
        let (status, _) = send(&mut api, "POST", "/api/faults", None);
        assert_eq!(status, 415);
        let (_, doc) = send(&mut api, "GET", "/api/openapi.json", None);
        assert!(doc["paths"]["/api/faults"]["post"].is_object());
        assert!(doc["paths"]["/api/faults/{id}"]["delete"].is_object());
    }
}

#[test]
fn duplicate_keys_are_refused_naming_them_at_every_level() {
    let cases = [
        (
            r#"{"stage": "rcpt", "stage": "data", "action": {"disconnect": true}}"#,
            "stage",
        ),
        (
            r#"{"match": {"to": "a@b.test", "to": "c@b.test"}, "stage": "rcpt", "action": {"disconnect": true}}"#,
            "match.to",
        ),
        (
            r#"{"stage": "rcpt", "action": {"delayMs": 1, "delayMs": 60000}}"#,
            "action.delayMs",
        ),
        (
            r#"{"stage": "rcpt", "action": {"reply": {"code": 550, "text": "a", "code": 450}}}"#,
            "action.reply.code",
        ),
        (
            r#"{"stage": "rcpt", "action": {"reply": {"code": 550}, "reply": {"code": 450}}}"#,
            "action.reply",
        ),
        (
            r#"{"stage": "rcpt", "action": {"disconnect": true}, "times": 1, "times": null}"#,
            "times",
        ),
    ];
    for (body, key) in cases {
        let error = refused(body);
        assert!(
            error.contains(&format!("duplicate field {key:?}")),
            "{body}: {error}"
        );
    }
    // The same key in two different objects is no duplicate.
    let r = rule(
        r#"{"match": {"to": "a@b.test"}, "stage": "rcpt", "action": {"reply": {"code": 550, "text": "to"}}, "times": 2}"#,
    );
    assert_eq!(r.times, Some(2));
}
