//! Fault rules of an inbox, and what an inbox token admitted ending with
//! that token: the API with real SMTP sessions and requests, no host.

use super::*;
use crate::budget::StoppedClock;
use crate::smtp::{Config as SmtpConfig, Output as SmtpOutput, Session, Unlimited};
use serde_json::{Value, json};

const NOW: u64 = 1_763_779_327_000;

type TestApi = Api<u64>;

/// An inbox's token and SMTP password, and the scope its token gives.
struct Made {
    scope: Scope,
    password: String,
}

fn request(method: &str, target: &str, scope: Scope, body: Option<Value>) -> Request {
    let mut request = Request::new(method, target);
    request.scope = scope;
    if let Some(body) = body {
        request.body = bytes::Bytes::from(body.to_string());
        request.content_type = Some("application/json".into());
    }
    static N: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(1);
    request.entropy = [N.fetch_add(1, std::sync::atomic::Ordering::Relaxed); 32];
    request
}

fn ready(
    api: &mut TestApi,
    method: &str,
    target: &str,
    scope: Scope,
    body: Option<Value>,
) -> (u16, Value) {
    match api.answer(0, &request(method, target, scope, body), NOW, &StoppedClock) {
        Answered::Ready(r) => (r.status, serde_json::from_str(&r.into_text()).unwrap()),
        other => panic!("{method} {target} was not answered at once: {other:?}"),
    }
}

fn make(api: &mut TestApi, name: &str, addresses: &[&str]) -> Made {
    let body = json!({"name": name, "addresses": addresses});
    let (status, created) = ready(api, "POST", "/api/inboxes", Scope::All, Some(body));
    assert_eq!(status, 200, "{created}");
    let token = created["inbox"]["token"].as_str().unwrap();
    Made {
        scope: api.inboxes().token_scope(&Digest32::of(token)).unwrap(),
        password: created["inbox"]["smtp"]["password"]
            .as_str()
            .unwrap()
            .to_owned(),
    }
}

fn two_inboxes() -> (TestApi, Made, Made) {
    let mut api = Api::new(ApiConfig {
        access_control: true,
        ..ApiConfig::default()
    });
    let a = make(&mut api, "a", &["*@a.test"]);
    let b = make(&mut api, "b", &["*@b.test"]);
    (api, a, b)
}

/// The reply codes of an SMTP dialogue whose sessions ask `api` about faults and logins.
fn smtp(api: &mut TestApi, lines: &[String]) -> Vec<u16> {
    let mut session = Session::new(SmtpConfig::default());
    session.open(0, api);
    let mut codes = Vec::new();
    for line in lines {
        session.handle_input(format!("{line}\r\n").as_bytes(), 0, &mut Unlimited, api);
        while let Some(output) = session.poll_output() {
            match output {
                SmtpOutput::Reply(reply) => codes.push(reply.code),
                SmtpOutput::Message(_) => session.handle_stored(Ok(())),
                _ => {}
            }
        }
    }
    codes
}

fn lines(login: Option<(&str, &str)>, to: &str) -> Vec<String> {
    let mut lines = vec!["EHLO c".to_owned()];
    if let Some((user, password)) = login {
        use base64::Engine as _;
        let raw = format!("\0{user}\0{password}");
        let plain = base64::engine::general_purpose::STANDARD.encode(raw);
        lines.push(format!("AUTH PLAIN {plain}"));
    }
    lines.push("MAIL FROM:<app@app.test>".to_owned());
    lines.push(format!("RCPT TO:<{to}>"));
    lines
}

#[test]
fn an_inbox_rule_acts_on_its_own_mail_only_and_only_it_sees_the_rule() {
    let (mut api, a, b) = two_inboxes();
    let rule = json!({"stage": "rcpt", "action": {"reply": {"code": 550}}, "times": null});
    let (status, made) = ready(&mut api, "POST", "/api/faults", a.scope, Some(rule));
    assert_eq!(status, 200, "{made}");
    assert_eq!(made["fault"]["inbox"], "a");
    let id = made["fault"]["id"].as_str().unwrap().to_owned();

    assert_eq!(
        *smtp(&mut api, &lines(None, "x@a.test")).last().unwrap(),
        550
    );
    assert_eq!(
        *smtp(&mut api, &lines(None, "x@b.test")).last().unwrap(),
        250
    );
    assert_eq!(
        *smtp(&mut api, &lines(None, "x@else.test")).last().unwrap(),
        250
    );

    let listed = |api: &mut TestApi, scope| ready(api, "GET", "/api/faults", scope, None).1;
    assert_eq!(
        listed(&mut api, a.scope)["faults"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(listed(&mut api, b.scope), json!({"faults": []}));
    assert_eq!(listed(&mut api, Scope::All)["faults"][0]["inbox"], "a");
    let target = format!("/api/faults/{id}");
    assert_eq!(ready(&mut api, "DELETE", &target, b.scope, None).0, 404);
    assert_eq!(
        ready(&mut api, "DELETE", "/api/faults", b.scope, None).1,
        json!({"deleted": 0})
    );
    assert_eq!(ready(&mut api, "DELETE", &target, a.scope, None).0, 200);
    assert_eq!(
        *smtp(&mut api, &lines(None, "x@a.test")).last().unwrap(),
        250
    );
}

#[test]
fn an_inbox_rule_before_rcpt_needs_a_login_as_that_inbox_and_goes_with_the_inbox() {
    let (mut api, a, b) = two_inboxes();
    let rule = json!({"stage": "mail", "action": {"reply": {"code": 451}}, "times": null});
    assert_eq!(
        ready(&mut api, "POST", "/api/faults", a.scope, Some(rule)).0,
        200
    );
    // MAIL's reply is the one before RCPT's.
    let mail = |codes: Vec<u16>| codes[codes.len() - 2];
    assert_eq!(mail(smtp(&mut api, &lines(None, "x@a.test"))), 250);
    let as_b = lines(Some(("b", &b.password)), "x@a.test");
    assert_eq!(mail(smtp(&mut api, &as_b)), 250);
    let as_a = lines(Some(("a", &a.password)), "x@b.test");
    assert_eq!(mail(smtp(&mut api, &as_a)), 451);
    // The inbox goes, its rules with it.
    assert_eq!(
        ready(&mut api, "DELETE", "/api/inboxes/a", Scope::All, None).0,
        200
    );
    assert_eq!(api.fault_count(), 0);
}

/// Parks a wait (or opens a stream) in `scope`; its request id.
fn park(api: &mut TestApi, target: &str, scope: Scope) -> Answered {
    api.answer(7, &request("GET", target, scope, None), NOW, &StoppedClock)
}

#[test]
fn rotation_ends_the_old_tokens_waits_with_401_and_keeps_the_admins() {
    let (mut api, a, _) = two_inboxes();
    let Answered::Waiting { id: by_token, .. } = park(&mut api, "/api/emails/wait", a.scope) else {
        panic!("not parked");
    };
    let Answered::Waiting { id: by_admin, .. } =
        park(&mut api, "/api/emails/wait?inbox=a", Scope::All)
    else {
        panic!("not parked");
    };
    let _ = by_admin;
    assert_eq!(api.pending_waits(), 2);
    let request = request("POST", "/api/inboxes/a/token", Scope::All, None);
    api.handle_request(1, &request, NOW);
    let mut answers = Vec::new();
    while let Some(output) = api.poll_output() {
        if let Output::Respond(client, response) = output {
            answers.push((client, response.status, response.into_text()));
        }
    }
    // The rotation's own answer first, then the wait it ended.
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!((answers[0].0, answers[0].1), (1, 200), "{answers:?}");
    assert_eq!((answers[1].0, answers[1].1), (7, 401), "{answers:?}");
    assert!(answers[1].2.contains("unauthorized"));
    assert_eq!(api.pending_waits(), 1);
    // The old grant admits nothing new either.
    assert_eq!(ready(&mut api, "GET", "/api/emails", a.scope, None).0, 401);
    let _ = by_token;
}

#[test]
fn deletion_ends_every_wait_and_stream_in_the_inbox() {
    let (mut api, a, b) = two_inboxes();
    park(&mut api, "/api/emails/wait", a.scope);
    park(&mut api, "/api/emails/wait?inbox=a", Scope::All);
    park(&mut api, "/api/emails/wait", b.scope);
    let Answered::Subscribed(stream) = park(&mut api, "/api/events", a.scope) else {
        panic!("no stream");
    };
    let head = api.event_head();
    // Its own answer first (a one-thread host takes the first), then the waits it ended.
    let (status, _) = ready(&mut api, "DELETE", "/api/inboxes/a", Scope::All, None);
    assert_eq!(status, 200);
    let statuses: Vec<u16> = std::iter::from_fn(|| api.poll_output())
        .filter_map(|o| match o {
            Output::Respond(_, r) => Some(r.status),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, [401, 404]);
    assert_eq!(api.pending_waits(), 1, "b's wait goes on");
    // The stream's host wakes (the head moved) and finds it ended.
    assert!(api.event_head() > head);
    assert!(matches!(api.poll_events(stream.id), NextEvents::Ended));
}

#[test]
fn a_wait_whose_token_is_rotated_while_its_job_runs_is_401_not_parked() {
    let (mut api, a, _) = two_inboxes();
    api.handle_request(7, &request("GET", "/api/emails/wait", a.scope, None), NOW);
    let job = std::iter::from_fn(|| api.poll_output())
        .find_map(|o| match o {
            Output::Run(job) => Some(job),
            _ => None,
        })
        .expect("the wait's look runs as a job");
    let (status, _) = ready(&mut api, "POST", "/api/inboxes/a/token", Scope::All, None);
    assert_eq!(status, 200);
    api.handle_done(job.run(&StoppedClock), NOW);
    let answer = std::iter::from_fn(|| api.poll_output()).find_map(|o| match o {
        Output::Respond(client, r) => Some((client, r.status)),
        _ => None,
    });
    assert_eq!(answer, Some((7, 401)));
    assert_eq!(api.pending_waits(), 0);
}
