//! The OpenAPI document (`/api/openapi.json`) against a mailjar with
//! `--admin-token`: it describes the bearer and cookie schemes, the session
//! and inbox routes and the `inbox` parameter; every operation it says needs
//! credentials answers 401 without them (and documents that 401), every
//! one it leaves open does not; every status an inbox token or the admin
//! gets is one the document lists for the operation; and every documented
//! path is served.

mod common;
mod inboxes_common;

use serde_json::{Value, json};

use inboxes_common::{ADMIN, call, inbox, start};

/// Every operation of the document: (method, path template, operation).
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut all = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            if matches!(method.as_str(), "get" | "post" | "delete") {
                all.push((method.to_uppercase(), path.clone(), operation.clone()));
            }
        }
    }
    all
}

/// A path template with its parameters filled in: a message id no message
/// has, attachment 0, inbox `name`; a wait gives up after 50 ms.
fn concrete(path: &str, name: &str) -> String {
    let target = path
        .replace("{id}", "0190a0a0-0000-7000-8000-000000000000")
        .replace("{index}", "0")
        .replace("{name}", name);
    if path == "/api/emails/wait" {
        return target + "?timeoutMs=50";
    }
    target
}

/// A JSON body a POST to `path` takes.
fn body_for(method: &str, path: &str) -> Option<Value> {
    match (method, path) {
        ("POST", "/api/session") => Some(json!({ "token": ADMIN })),
        ("POST", "/api/inboxes") => Some(json!({"name": "made-here"})),
        ("POST", _) => Some(json!({})),
        _ => None,
    }
}

/// The operation's security: its own, else the document's.
fn needs_credentials(doc: &Value, operation: &Value) -> bool {
    let security = operation.get("security").unwrap_or(&doc["security"]);
    !security.as_array().expect("security").is_empty()
}

fn documents(operation: &Value, status: u16) -> bool {
    operation["responses"].get(status.to_string()).is_some()
}

fn fetch_document(server: &common::Server) -> Value {
    let answer = call(server, "GET", "/api/openapi.json", None, None);
    assert_eq!(answer.status, 200, "the document is open: {}", answer.body);
    answer.json()
}

#[test]
fn the_document_describes_the_schemes_the_inbox_routes_and_the_inbox_parameter() {
    let server = start(&[]);
    let doc = fetch_document(&server);
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(
        schemes["bearerAuth"],
        json!({"type": "http", "scheme": "bearer", "description": schemes["bearerAuth"]["description"]})
    );
    assert_eq!(
        (
            &schemes["sessionCookie"]["type"],
            &schemes["sessionCookie"]["in"]
        ),
        (&json!("apiKey"), &json!("cookie"))
    );
    assert_eq!(schemes["sessionCookie"]["name"], "mailjar_session");
    assert_eq!(
        doc["security"],
        json!([{"bearerAuth": []}, {"sessionCookie": []}])
    );
    for (path, methods) in [
        ("/api/session", &["post", "delete"][..]),
        ("/api/inboxes", &["get", "post"]),
        ("/api/inboxes/{name}", &["get", "delete"]),
        ("/api/inboxes/{name}/token", &["post"]),
    ] {
        for method in methods {
            assert!(
                doc["paths"][path][method].is_object(),
                "{method} {path} missing"
            );
        }
    }
    for path in [
        "/api/emails",
        "/api/emails/latest",
        "/api/emails/wait",
        "/api/events",
    ] {
        let parameters = doc["paths"][path]["get"]["parameters"].to_string();
        assert!(
            parameters.contains("#/components/parameters/inbox"),
            "{path}: {parameters}"
        );
        assert!(
            documents(&doc["paths"][path]["get"], 404),
            "{path}: an unknown inbox is 404"
        );
    }
    let unauthorized = &doc["components"]["responses"]["Unauthorized"];
    assert!(
        unauthorized["headers"]["WWW-Authenticate"].is_object(),
        "{unauthorized}"
    );
    let created = &doc["components"]["schemas"]["CreatedInbox"]["properties"]["inbox"]["required"];
    assert_eq!(
        *created,
        json!(["name", "addresses", "limits", "token", "smtp"])
    );
    for status in ["401", "403", "404", "409"] {
        assert!(
            doc["paths"]["/api/inboxes"]["post"]["responses"]
                .get(status)
                .is_some(),
            "POST /api/inboxes {status}"
        );
    }
}

#[test]
fn every_operation_that_needs_credentials_answers_401_without_them_and_documents_it() {
    let server = start(&[]);
    let doc = fetch_document(&server);
    let mut open = Vec::new();
    for (method, path, operation) in operations(&doc) {
        let target = concrete(&path, "team-a");
        let body = body_for(&method, &path);
        let answer = call(&server, &method, &target, None, body.as_ref());
        if needs_credentials(&doc, &operation) {
            assert_eq!(
                answer.status, 401,
                "{method} {target} without a token: {}",
                answer.body
            );
            assert_eq!(
                answer.header("www-authenticate"),
                Some("Bearer"),
                "{method} {target}"
            );
            assert!(
                documents(&operation, 401),
                "{method} {path}: its 401 is not documented"
            );
        } else {
            assert_ne!(
                answer.status, 401,
                "{method} {target} is documented as open"
            );
            assert!(
                documents(&operation, answer.status),
                "{method} {path}: {} not documented",
                answer.status
            );
            open.push(format!("{method} {path}"));
        }
    }
    open.sort();
    assert_eq!(
        open,
        [
            "DELETE /api/session",
            "GET /api/openapi.json",
            "GET /health",
            "POST /api/session"
        ]
    );
}

#[test]
fn every_status_an_inbox_token_or_the_admin_gets_is_documented_and_every_path_is_served() {
    let server = start(&[]);
    let doc = fetch_document(&server);
    let team = inbox(&server, "team-a", &["*@a.test"]);
    let other = inbox(&server, "team-b", &["*@b.test"]);
    inboxes_common::send(&server, &["x@a.test"], "for a");
    // The inbox token first: the admin's pass below rotates and deletes team-a.
    for token in [team.token.as_str(), ADMIN] {
        for (method, path, operation) in operations(&doc) {
            // A stream stays open: tests/inboxes.rs follows it.
            if path == "/api/events" {
                continue;
            }
            let name = if token == ADMIN { "team-a" } else { "team-b" };
            let target = concrete(&path, name);
            let body = body_for(&method, &path);
            let answer = call(&server, &method, &target, Some(token), body.as_ref());
            let what = format!(
                "{method} {target} with {}",
                if token == ADMIN {
                    "the admin token"
                } else {
                    "an inbox token"
                }
            );
            assert!(
                documents(&operation, answer.status),
                "{what}: {} not documented ({})",
                answer.status,
                answer.body
            );
            if answer.status == 404 {
                assert!(
                    !answer.error().starts_with("no such endpoint"),
                    "{what}: not served"
                );
            }
        }
    }
    // The inbox routes answered the admin, and another inbox's name was 404 for team-a.
    let listed = call(&server, "GET", "/api/inboxes", Some(ADMIN), None).json();
    let names: Vec<&str> = listed["inboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["made-here", "team-b"]);
    assert_eq!(
        call(
            &server,
            "GET",
            "/api/inboxes/team-b",
            Some(&team.token),
            None
        )
        .status,
        401,
        "team-a was deleted"
    );
    assert_eq!(
        call(
            &server,
            "GET",
            "/api/inboxes/team-a",
            Some(&other.token),
            None
        )
        .status,
        404
    );
}
