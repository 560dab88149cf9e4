//! Micro-benchmarks of the core, each beside a baseline measured in the same run.
//!
//! `cargo bench -p mailjar-core --bench core`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mailjar_core::api::{Answered, Api, ApiConfig, Digest32, Request, Scope};
use mailjar_core::budget::{Budget, StoppedClock};
use mailjar_core::smtp::{Config, Envelope, Incoming, NoFaults, Output, Session, Unlimited};
use mailjar_core::store::{Filter, FilterParams, FilterSpec};
use mailjar_core::store::{Prepared, StoreLimits};

/// Feeds `input` as a host does; the outputs, each message reported stored.
fn feed(session: &mut Session, input: &[u8]) -> Vec<Output> {
    session.handle_input(input, 0, &mut Unlimited, &mut NoFaults);
    let mut out = Vec::new();
    while let Some(output) = session.poll_output() {
        if matches!(output, Output::Message(_)) {
            session.handle_stored(Ok(()));
        }
        out.push(output);
    }
    out
}

/// A 2 KiB-ish message like the ones the system benchmark sends.
fn message(i: usize) -> Vec<u8> {
    format!(
        "From: App <app@example.com>\r\nTo: user{}@local.test\r\nSubject: Order #{i} confirmed\r\n\
         Date: Sun, 22 Nov 2026 02:42:07 +0000\r\nMessage-ID: <{i}@example.com>\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\r\n{}Your code is {:06}. https://example.com/o/{i}\r\n",
        i % 50,
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit.\r\n".repeat(30),
        i % 1_000_000
    )
    .into_bytes()
}

fn incoming(i: usize) -> Incoming {
    Incoming {
        envelope: Envelope {
            from: "app@example.com".into(),
            to: vec![format!("user{}@local.test", i % 50)],
        },
        raw: message(i),
        helo: None,
        session: Default::default(),
        transcript: Default::default(),
    }
}

fn receive(c: &mut Criterion) {
    // 8 MiB of message text in 64 KiB reads, as a host hands it over.
    let line = b"Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod.\r\n";
    let mut data = Vec::new();
    while data.len() < 8 * 1024 * 1024 {
        data.extend_from_slice(line);
    }
    let mut group = c.benchmark_group("smtp_receive_8MiB");
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.bench_function("baseline_copy", |b| {
        b.iter(|| {
            let mut out = Vec::new();
            for chunk in data.chunks(64 * 1024) {
                out.extend_from_slice(black_box(chunk));
            }
            out
        })
    });
    group.bench_function("session_receive", |b| {
        b.iter(|| {
            let mut session = Session::new(Config::default());
            feed(
                &mut session,
                b"EHLO c\r\nMAIL FROM:<a@b.test>\r\nRCPT TO:<c@d.test>\r\nDATA\r\n",
            );
            for chunk in data.chunks(64 * 1024) {
                black_box(feed(&mut session, chunk));
            }
            feed(&mut session, b".\r\n")
        })
    });
    group.finish();
}

fn deliver(c: &mut Criterion) {
    let raw = message(7);
    let mut group = c.benchmark_group("deliver_2KiB");
    group.bench_function("baseline_mail_parser", |b| {
        b.iter(|| {
            mail_parser::MessageParser::default()
                .parse(black_box(&raw))
                .map(|m| m.parts.len())
        })
    });
    group.bench_function("parse_and_store", |b| {
        let mut api: Api = Api::new(ApiConfig::default());
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            let prepared = Prepared::new(incoming(7));
            let id = api.deliver(prepared, 1_000_000 + i, [1; 10]);
            // As a host does: what the store evicted is freed, not kept.
            while let Some(output) = api.poll_output() {
                drop(output);
            }
            id
        })
    });
    group.finish();
}

fn stored_api(n: usize) -> Api {
    let mut api: Api = Api::new(ApiConfig::default());
    for i in 0..n {
        api.deliver(Prepared::new(incoming(i)), 1_000_000 + i as u64, [1; 10]);
    }
    api
}

fn filter(c: &mut Criterion) {
    let api = stored_api(10_000);
    let mut group = c.benchmark_group("filter_10000");
    let snapshot = api.store().snapshot();
    let count = |filter: &Filter| {
        let mut budget = Budget::new(u64::MAX);
        snapshot
            .iter()
            .filter(|e| {
                filter
                    .matches(e, &mut budget, &StoppedClock)
                    .unwrap_or(false)
            })
            .count()
    };
    let compile =
        |params: FilterParams| FilterSpec::new(params).and_then(|spec| spec.compile(None));
    let none = compile(FilterParams::default()).expect("empty filter");
    group.bench_function("baseline_no_filter", |b| b.iter(|| count(&none)));
    let to = compile(FilterParams {
        to: Some("user7@local.test"),
        subject: Some("confirmed"),
        ..Default::default()
    })
    .expect("filter");
    group.bench_function("to_and_subject", |b| b.iter(|| count(&to)));
    let regex = compile(FilterParams {
        subject_pattern: Some(r"^Order #\d+7 confirmed$"),
        subject_flags: Some("i"),
        ..Default::default()
    })
    .expect("filter");
    group.bench_function("subject_pattern", |b| b.iter(|| count(&regex)));
    let lookahead = compile(FilterParams {
        subject_pattern: Some(r"^(?=Order)(?!.*cancel).*#(\d)\d*\1"),
        ..Default::default()
    })
    .expect("filter");
    group.bench_function("subject_pattern_lookaround", |b| {
        b.iter(|| count(&lookahead))
    });
    group.finish();
}

fn list(c: &mut Criterion) {
    let mut api = stored_api(1_000);
    let mut group = c.benchmark_group("list_100");
    let raws: Vec<String> = (0..100)
        .map(|i| String::from_utf8_lossy(&message(i)).into_owned())
        .collect();
    group.bench_function("baseline_serialise_raw_strings", |b| {
        b.iter(|| serde_json::to_string(black_box(&raws)).map(|s| s.len()))
    });
    let request = Request::new("GET", "/api/emails?limit=100");
    group.bench_function("api_list_limit_100", |b| {
        b.iter(|| match api.answer((), &request, 0, &StoppedClock) {
            Answered::Ready(r) => r.body.collect().len(),
            Answered::Waiting { .. } | Answered::Subscribed(_) => 0,
        })
    });
    group.finish();
}

/// Paging and downloads over 100,000 stored messages (issue 10's figures):
/// a summary page, the oldest page by `beforeId`, and a 20 MiB raw message.
fn paging(c: &mut Criterion) {
    let mut api = stored_api(100_000);
    let ids: Vec<String> = api
        .store()
        .snapshot()
        .iter()
        .map(|e| e.id.to_string())
        .collect();
    let mut group = c.benchmark_group("paging_100000");
    let mut answer =
        |target: &str| match api.answer((), &Request::new("GET", target), 0, &StoppedClock) {
            Answered::Ready(r) => r.body.collect().len(),
            Answered::Waiting { .. } | Answered::Subscribed(_) => 0,
        };
    group.bench_function("baseline_health", |b| b.iter(|| answer("/health")));
    group.bench_function("summary_limit_50", |b| {
        b.iter(|| answer("/api/emails?view=summary&limit=50"))
    });
    let oldest_page = format!("/api/emails?view=summary&limit=50&beforeId={}", ids[50]);
    group.bench_function("summary_oldest_page_by_before_id", |b| {
        b.iter(|| answer(&oldest_page))
    });
    let middle_page = format!("/api/emails?limit=50&beforeId={}", ids[50_000]);
    group.bench_function("full_limit_50_middle_page_by_before_id", |b| {
        b.iter(|| answer(&middle_page))
    });
    group.finish();

    let mut big = b"Subject: big\r\nContent-Type: application/octet-stream\r\n\r\n".to_vec();
    big.extend((0..20 * 1024 * 1024).map(|i| b'a' + (i % 26) as u8));
    let id = api.deliver(
        Prepared::new(Incoming {
            envelope: Envelope::default(),
            raw: big.clone(),
            helo: None,
            session: Default::default(),
            transcript: Default::default(),
        }),
        2_000_000,
        [2; 10],
    );
    let mut group = c.benchmark_group("raw_20mib");
    group.throughput(Throughput::Bytes(big.len() as u64));
    group.sample_size(10);
    group.bench_function("baseline_copy", |b| {
        b.iter(|| black_box(black_box(&big).to_vec()).len())
    });
    let target = format!("/api/emails/{id}/raw");
    group.bench_function("api_raw_chunks", |b| {
        b.iter(
            || match api.answer((), &Request::new("GET", &target), 0, &StoppedClock) {
                Answered::Ready(r) => match r.body {
                    mailjar_core::api::Body::Stream(mut source) => {
                        let mut chunk = Vec::new();
                        let mut total = 0;
                        while source.next_chunk(&mut chunk) {
                            total += chunk.len();
                            chunk.clear();
                        }
                        total
                    }
                    mailjar_core::api::Body::Full(bytes) => bytes.len(),
                },
                Answered::Waiting { .. } | Answered::Subscribed(_) => 0,
            },
        )
    });
    group.finish();
}

/// An Api with access control and `inboxes` inboxes (`team-N`, each
/// `*@team-N.test` and `qa+*@team-N.test`) holding `per_inbox` messages
/// each, one message in turn to each, in a store of at most `max_messages`;
/// the scope of `team-7`'s token (None without inboxes).
fn inbox_api(inboxes: usize, per_inbox: usize, max_messages: usize) -> (Api, Option<Scope>) {
    let mut api: Api = Api::new(ApiConfig {
        access_control: true,
        store: StoreLimits {
            max_messages,
            max_bytes: usize::MAX,
        },
        ..ApiConfig::default()
    });
    let mut scope = None;
    for n in 0..inboxes {
        let mut create = Request::new("POST", "/api/inboxes");
        create.body = format!(
            r#"{{"name":"team-{n}","addresses":["*@team-{n}.test","qa+*@team-{n}.test"]}}"#
        )
        .into();
        create.entropy[..8].copy_from_slice(&(n as u64 + 1).to_le_bytes());
        let Answered::Ready(created) = api.answer((), &create, 0, &StoppedClock) else {
            panic!("inbox not made");
        };
        let created: serde_json::Value =
            serde_json::from_str(&created.into_text()).expect("inbox JSON");
        if n == 7 % inboxes {
            let token = created["inbox"]["token"].as_str().expect("token");
            scope = api.inboxes().token_scope(&Digest32::of(token));
        }
    }
    for i in 0..inboxes * per_inbox {
        let mut message = incoming(i);
        message.envelope.to = vec![format!("qa+{i}@team-{}.test", i % inboxes)];
        api.deliver(Prepared::new(message), 1_000_000 + i as u64, [1; 10]);
    }
    (api, scope)
}

/// A list and a wait in one inbox of 100 while the store holds 100,000
/// messages, against the same queries in an Api with that one inbox and its
/// 1,000 messages only: equal times mean no other inbox's mail is looked at.
fn inbox_queries(c: &mut Criterion) {
    let mut group = c.benchmark_group("inbox_1000_of");
    for (inboxes, name) in [(1, "1_inbox"), (100, "100_inboxes_100000_stored")] {
        let (mut api, scope) = inbox_api(inboxes, 1_000, 1_000_000);
        let scope = scope.expect("team-7's scope");
        let query = |target: &str| {
            let mut request = Request::new("GET", target);
            request.scope = scope;
            request
        };
        // Takes no message: the look goes through all the inbox's mail.
        let list = query("/api/emails?subject=never-sent");
        let newest = query("/api/emails?limit=100");
        let wait = query("/api/emails/wait?subject=never-sent&timeoutMs=60000");
        group.bench_function(format!("list_no_match/{name}"), |b| {
            b.iter(|| match api.answer((), &list, 0, &StoppedClock) {
                Answered::Ready(r) => r.body.collect().len(),
                _ => panic!("the list waits"),
            })
        });
        group.bench_function(format!("list_newest_100/{name}"), |b| {
            b.iter(|| match api.answer((), &newest, 0, &StoppedClock) {
                Answered::Ready(r) => r.body.collect().len(),
                _ => panic!("the list waits"),
            })
        });
        group.bench_function(format!("wait_look_and_park/{name}"), |b| {
            b.iter(|| match api.answer((), &wait, 0, &StoppedClock) {
                Answered::Waiting { id, .. } => api.handle_cancel(id).is_some(),
                other => panic!("the wait did not park: {other:?}"),
            })
        });
    }
    group.finish();
}

/// Storing one message (and the host's next `poll_timeout`, as it asks
/// after every input) with 0, 100 and 10,000 inboxes configured, the
/// message routed to one of them: what routing and the inboxes' upkeep cost.
fn ingest_with_inboxes(c: &mut Criterion) {
    let mut group = c.benchmark_group("deliver_with_inboxes");
    for inboxes in [0, 100, 10_000] {
        let (mut api, _) = inbox_api(inboxes, 0, 10_000);
        let mut i = 0;
        group.bench_function(format!("{inboxes}"), |b| {
            b.iter(|| {
                i += 1;
                let mut message = incoming(i);
                message.envelope.to = vec![format!("qa+{i}@team-7.test")];
                api.deliver(Prepared::new(message), 1_000_000 + i as u64, [1; 10]);
                api.poll_timeout()
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    receive,
    deliver,
    filter,
    list,
    paging,
    inbox_queries,
    ingest_with_inboxes
);
criterion_main!(benches);
