//! The conformance vectors against `mailjar-core` directly: no sockets, fake time.
//!
//! SMTP transcripts are also replayed in other chunkings (byte by byte, in one
//! piece, and split at every point) and must give the same result; each
//! message must come out before the 250 that acknowledges it.

use std::collections::{HashMap, HashSet};

use mailjar_core::api::DEFAULT_MAX_FAULTS;
use mailjar_core::api::{
    Answered, Api, ApiConfig, Event, NextEvents, Output as ApiOutput, Request, Response,
    Subscription,
};
use mailjar_core::budget::StoppedClock;
use mailjar_core::smtp::{Config, Envelope, Incoming, Output, Session, Unlimited};
use mailjar_core::store::{Prepared, StoreLimits};
use mailjar_tests::matcher::{Vars, substitute};
use mailjar_tests::vectors::{
    self, ApiVector, DOMAIN, SentEvent, SmtpVector, Step, check_events, check_listed,
    check_replies, check_response,
};

/// The fake clock's start: any fixed time works.
const START_MS: u64 = 1_763_779_327_000;

fn session_config(v: &SmtpVector) -> Config {
    let d = Config::default();
    let l = &v.limits;
    Config {
        hostname: DOMAIN.to_owned(),
        max_message_bytes: l.max_message_bytes.unwrap_or(d.max_message_bytes),
        max_recipients: l.max_recipients.unwrap_or(d.max_recipients),
        max_line_bytes: l.max_line_bytes.unwrap_or(d.max_line_bytes),
        max_errors: l.max_errors.unwrap_or(d.max_errors),
        security: mailjar_core::smtp::Security {
            credentials: mailjar_core::smtp::Credentials::parse(&l.auth).expect("valid auth"),
            require_auth: l.require_auth,
            ..Default::default()
        },
        // Time stands still here: only the idle timer is run out, by hand.
        command_timeout_ms: u64::MAX,
        data_timeout_ms: u64::MAX,
        ..d
    }
}

/// Drains the session's outputs as a host does, reporting each message stored.
fn drain(session: &mut Session, outputs: &mut Vec<Output>) {
    while let Some(output) = session.poll_output() {
        if matches!(output, Output::Message(_)) {
            session.handle_stored(Ok(()));
        }
        outputs.push(output);
    }
}

/// Feeds `chunks` to a fresh session and checks everything the vector expects.
fn run_smtp(v: &SmtpVector, chunks: &[Vec<u8>]) -> Result<(), String> {
    let mut session = Session::new(session_config(v));
    // Fresh rules for every replay: a rule's `times` is spent as it fires.
    let mut rules = mailjar_core::api::Faults::new(DEFAULT_MAX_FAULTS, 0);
    for rule in &v.faults {
        let body = rule.to_string();
        let added = rules.handle("POST", None, Some("application/json"), body.as_bytes());
        if added.as_ref().map(|r| r.status) != Ok(200) {
            return Err(format!("the fault rule {body} was refused"));
        }
    }
    let mut outputs = Vec::new();
    session.open(0, &mut rules);
    drain(&mut session, &mut outputs);
    for chunk in chunks {
        session.handle_input(chunk, 0, &mut Unlimited, &mut rules);
        drain(&mut session, &mut outputs);
    }
    if v.idle_timeout {
        session.handle_timeout(session_config(v).idle_timeout_ms);
        drain(&mut session, &mut outputs);
    }
    let mut replies = Vec::new();
    let mut messages = Vec::new();
    let mut closed = false;
    for (i, output) in outputs.iter().enumerate() {
        match output {
            Output::Reply(r) => replies.push((r.code, r.lines.clone())),
            Output::Message(m) => {
                match outputs.get(i + 1) {
                    Some(Output::Reply(r)) if r.code == 250 => {}
                    other => {
                        return Err(format!("a message is followed by {other:?}, not its 250"));
                    }
                }
                messages.push(m.clone());
            }
            Output::Close => {
                if i + 1 != outputs.len() {
                    return Err("outputs after Close".to_owned());
                }
                closed = true;
            }
            // Logged and waited on by the native host; nothing to check here.
            Output::Fault(_) => {}
            Output::StartTls => return Err("an upgrade without TLS configured".to_owned()),
        }
    }
    check_replies(&replies, &v.replies)?;
    if closed != v.closed {
        return Err(format!("closed is {closed}, expected {}", v.closed));
    }
    if !closed && session.is_receiving_message() {
        return Err("the vector ends inside a message without closing: the native runner cannot end it with QUIT".to_owned());
    }
    let got: Vec<_> = messages
        .iter()
        .map(|m| {
            (
                m.envelope.from.clone(),
                m.envelope.to.clone(),
                m.raw.clone(),
            )
        })
        .collect();
    let want: Vec<_> = v
        .messages
        .iter()
        .map(|m| (m.from.clone(), m.to.clone(), m.raw.clone()))
        .collect();
    if got != want {
        return Err(format!(
            "stored messages differ:\n got: {got:?}\nwant: {want:?}"
        ));
    }
    // Stored through the API, the list shows them as the native host's does.
    let mut api: Api = Api::new(ApiConfig::default());
    for (n, m) in messages.into_iter().enumerate() {
        api.deliver(Prepared::new(m), START_MS, [n as u8; 10]);
    }
    let list = Request::new("GET", "/api/emails");
    match api.answer((), &list, START_MS, &StoppedClock) {
        Answered::Ready(r) => {
            let list = serde_json::from_str(&r.into_text()).map_err(|e| e.to_string())?;
            check_listed(&list, &v.messages)
        }
        Answered::Waiting { .. } | Answered::Subscribed(_) => Err("the list parked".to_owned()),
    }
}

/// The vector as given, then in other chunkings of the same bytes.
fn run_smtp_chunkings(v: &SmtpVector) -> Result<(), String> {
    run_smtp(v, &v.input)?;
    let all: Vec<u8> = v.input.concat();
    let again =
        |chunks: Vec<Vec<u8>>, how: &str| run_smtp(v, &chunks).map_err(|e| format!("{how}: {e}"));
    again(vec![all.clone()], "in one chunk")?;
    again(all.iter().map(|b| vec![*b]).collect(), "byte by byte")?;
    let step = (all.len() / 300).max(1);
    for split in (1..all.len()).step_by(step) {
        again(
            vec![all[..split].to_vec(), all[split..].to_vec()],
            &format!("split at {split}"),
        )?;
    }
    Ok(())
}

#[test]
fn smtp_vectors_against_the_core() {
    vectors::run_smtp_vectors("core SMTP", run_smtp_chunkings);
}

/// A response as the vectors check it: status, headers (lower-case names) and body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn of(response: Response) -> Answer {
        let mut headers = vec![("content-type".to_owned(), response.content_type.to_string())];
        for (name, value) in &response.headers {
            headers.push((name.to_ascii_lowercase(), value.clone()));
        }
        Answer {
            status: response.status,
            headers,
            body: response.body.collect(),
        }
    }
}

fn answers(woken: Vec<(String, Response)>) -> impl Iterator<Item = (String, Answer)> {
    woken.into_iter().map(|(name, r)| (name, Answer::of(r)))
}

/// One API vector's state on the core: the API (each wait parked under its
/// name as the handle), the fake clock, and what waits got.
struct CoreRun {
    api: Api<String>,
    now: u64,
    vars: Vars,
    waits: HashSet<String>,
    answered: HashMap<String, Answer>,
    streams: HashMap<String, Subscription>,
    deliveries: u8,
}

/// Everything a stream has to send now: its replay, then its live events.
fn drain_events(api: &mut Api<String>, stream: &mut Subscription) -> Vec<SentEvent> {
    let mut events = Vec::new();
    loop {
        match api.poll_events(stream.id) {
            NextEvents::Batch(batch) => {
                let ran = batch.run(&StoppedClock);
                if let Some(progress) = ran.progress {
                    api.handle_progress(progress);
                }
                events.extend(ran.events);
            }
            NextEvents::Overflow => {
                events.push(Event::Overflow);
                break;
            }
            NextEvents::Idle | NextEvents::Ended => break,
        }
    }
    events
        .iter()
        .map(|e| {
            let data = serde_json::from_slice(e.data()).unwrap_or(serde_json::Value::Null);
            (e.name().to_owned(), e.id().map(|id| id.to_string()), data)
        })
        .collect()
}

impl CoreRun {
    /// Carries out what the API queued: the answers of parked waits go to their names.
    fn drain_outputs(&mut self) {
        while let Some(output) = self.api.poll_output() {
            match output {
                ApiOutput::Respond(name, r) => {
                    self.answered.insert(name, Answer::of(r));
                }
                ApiOutput::Run(job) => {
                    let done = job.run(&StoppedClock);
                    self.api.handle_done(done, self.now);
                }
                ApiOutput::Match(batch) => {
                    let matches = batch.run(&StoppedClock);
                    self.api.handle_matches(matches);
                }
                ApiOutput::Subscribed(..) | ApiOutput::Removed(_) | ApiOutput::Seen { .. } => {}
            }
        }
    }

    fn step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::Deliver {
                from,
                to,
                raw,
                bind,
            } => {
                self.deliveries = self.deliveries.wrapping_add(1);
                let incoming = Incoming {
                    envelope: Envelope {
                        from: from.clone(),
                        to: to.clone(),
                    },
                    raw: raw.clone(),
                    helo: Some("vectors".to_owned()),
                    session: Default::default(),
                    transcript: Default::default(),
                };
                let delivered = self.api.deliver_and_wake(
                    Prepared::new(incoming),
                    self.now,
                    [self.deliveries; 10],
                    &StoppedClock,
                );
                self.answered.extend(answers(delivered.woken));
                if let Some(name) = bind {
                    self.vars.insert(name.clone(), delivered.id.to_string());
                }
            }
            Step::Request {
                method,
                target,
                body,
                content_type,
                expect,
            } => {
                let target = substitute(target, &self.vars)?;
                let mut request = Request::new(method, &target);
                request.content_type = content_type.clone();
                request.body = body.clone().unwrap_or_default().into();
                match self
                    .api
                    .answer(String::new(), &request, self.now, &StoppedClock)
                {
                    Answered::Ready(r) => {
                        let r = Answer::of(r);
                        check_response(r.status, &r.headers, &r.body, expect, &self.vars)
                            .map_err(|e| format!("{method} {target}: {e}"))?;
                    }
                    Answered::Waiting { .. } => {
                        return Err(format!("{method} {target} parked; use a wait step"));
                    }
                    Answered::Subscribed(_) => {
                        return Err(format!("{method} {target} is an event stream"));
                    }
                }
            }
            Step::Wait {
                method,
                target,
                name,
            } => {
                let target = substitute(target, &self.vars)?;
                let request = Request::new(method, &target);
                match self
                    .api
                    .answer(name.clone(), &request, self.now, &StoppedClock)
                {
                    Answered::Waiting { .. } => {
                        self.waits.insert(name.clone());
                    }
                    Answered::Subscribed(_) => {
                        return Err(format!("{method} {target} is an event stream"));
                    }
                    Answered::Ready(r) => {
                        let status = r.status;
                        return Err(format!(
                            "{method} {target} did not park: {status} {}",
                            r.into_text()
                        ));
                    }
                }
            }
            Step::Advance(ms) => {
                self.now += ms;
                self.api.handle_timeout(self.now);
                self.drain_outputs();
            }
            Step::Resolve { name, expect } => {
                if !self.waits.contains(name) {
                    return Err(format!("no wait named {name}"));
                }
                let r = self
                    .answered
                    .remove(name)
                    .ok_or(format!("wait {name} is still pending"))?;
                check_response(r.status, &r.headers, &r.body, expect, &self.vars)
                    .map_err(|e| format!("wait {name}: {e}"))?;
            }
            Step::Subscribe {
                target,
                last_event_id,
                name,
            } => {
                let target = substitute(target, &self.vars)?;
                let mut request = Request::new("GET", &target);
                request.last_event_id = last_event_id
                    .as_deref()
                    .map(|id| substitute(id, &self.vars))
                    .transpose()?;
                match self
                    .api
                    .answer(String::new(), &request, self.now, &StoppedClock)
                {
                    Answered::Subscribed(subscription) => {
                        self.streams.insert(name.clone(), subscription);
                    }
                    Answered::Ready(r) => {
                        let status = r.status;
                        return Err(format!(
                            "GET {target} did not subscribe: {status} {}",
                            r.into_text()
                        ));
                    }
                    Answered::Waiting { .. } => return Err(format!("GET {target} parked")),
                }
            }
            Step::Events { name, expect } => {
                let stream = self
                    .streams
                    .get_mut(name)
                    .ok_or(format!("no stream named {name}"))?;
                let got = drain_events(&mut self.api, stream);
                check_events(&got, expect, &self.vars)
                    .map_err(|e| format!("stream {name}: {e}"))?;
            }
            Step::Pending(name) => {
                if !self.waits.contains(name) {
                    return Err(format!("no wait named {name}"));
                }
                if let Some(r) = self.answered.get(name) {
                    return Err(format!(
                        "wait {name} was answered: {} {}",
                        r.status,
                        String::from_utf8_lossy(&r.body)
                    ));
                }
            }
        }
        Ok(())
    }
}

fn run_api(v: &ApiVector) -> Result<(), String> {
    let mut store = StoreLimits::default();
    if let Some(n) = v.limits.max_messages {
        store.max_messages = n;
    }
    let mut run = CoreRun {
        api: Api::new(ApiConfig {
            store,
            ..ApiConfig::default()
        }),
        now: START_MS,
        vars: Vars::new(),
        waits: HashSet::new(),
        answered: HashMap::new(),
        streams: HashMap::new(),
        deliveries: 0,
    };
    vectors::run_steps(&v.steps, |step| run.step(step))
}

#[test]
fn api_vectors_against_the_core() {
    vectors::run_api_vectors("core API", run_api);
}
