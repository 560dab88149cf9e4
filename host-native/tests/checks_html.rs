//! `GET /api/emails/:id/checks/html` on the real binary: poorly supported
//! features are warned with the clients that lack them, a plain message is
//! not, and the check's time on a 100 KB newsletter.

mod common;

use std::time::Instant;

use common::Server;

fn html_message(subject: &str, html: &str) -> Vec<u8> {
    format!(
        "From: a@example.com\r\nTo: b@example.com\r\nSubject: {subject}\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n{}\r\n",
        html.replace('\n', "\r\n")
    )
    .into_bytes()
}

fn stored_id(server: &Server, raw: &[u8]) -> String {
    assert_eq!(
        server.send("a@example.com", &["b@example.com"], raw).code,
        250
    );
    server.latest()["id"].as_str().unwrap().to_owned()
}

const POOR: &str = r#"<!DOCTYPE html><html><head><style>
:root { --brand: #c00; }
.row { display: flex; position: absolute; color: var(--brand); }
</style></head><body><div class="row">Hi</div><video src="https://example.com/v.mp4"></video></body></html>"#;

/// Features that `POOR` uses and that many mail clients lack.
const POORLY_SUPPORTED: [&str; 4] = [
    "css-display-flex",
    "css-position",
    "html-video",
    "css-variables",
];

/// The features an HTML check warned about.
fn features(check: &serde_json::Value) -> Vec<&str> {
    check["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["feature"].as_str().unwrap())
        .collect()
}

#[test]
fn poorly_supported_features_are_warned_and_a_plain_message_is_not() {
    let server = Server::start();
    let poor = server.get_ok(&format!(
        "/api/emails/{}/checks/html",
        stored_id(&server, &html_message("poor", POOR))
    ));
    let clients = poor["clients"].as_u64().unwrap();
    assert!(clients >= 10, "{poor}");
    let warned = features(&poor);
    for feature in POORLY_SUPPORTED {
        assert!(warned.contains(&feature), "{feature} not in {warned:?}");
    }
    let video = poor["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["feature"] == "html-video")
        .unwrap();
    assert!(
        video["unsupported"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str().unwrap().starts_with("Outlook")),
        "{video}"
    );
    assert_eq!(video["title"], "<video> element");

    let plain_html = "<html><body><table><tr><td><p>Hello</p></td></tr></table></body></html>";
    let plain = server.get_ok(&format!(
        "/api/emails/{}/checks/html",
        stored_id(&server, &html_message("plain", plain_html))
    ));
    let plain_warned = features(&plain);
    for feature in POORLY_SUPPORTED {
        assert!(
            !plain_warned.contains(&feature),
            "{feature} in {plain_warned:?}"
        );
    }
    assert!(
        plain["score"].as_u64() > poor["score"].as_u64(),
        "{plain} vs {poor}"
    );
}

#[test]
fn no_html_unknown_ids_and_other_methods_are_clear_errors() {
    let server = Server::start();
    let text = stored_id(
        &server,
        &common::message("a@example.com", "b@example.com", "t", "just text"),
    );
    let response = server.get(&format!("/api/emails/{text}/checks/html"));
    assert_eq!(response.status, 404);
    assert!(response.error().contains("no HTML"), "{}", response.body);
    let response = server.get("/api/emails/00000000-0000-0000-0000-000000000000/checks/html");
    assert_eq!(response.status, 404);
    let response = server.get("/api/emails/not-an-id/checks/links");
    assert_eq!(response.status, 404);
    let response = server.request("POST", &format!("/api/emails/{text}/checks/html"));
    assert_eq!(response.status, 405);
}

/// A 100 KB newsletter: tables, inline styles, a style sheet, images and links.
pub fn newsletter() -> String {
    let mut html = String::from(
        "<!DOCTYPE html><html><head><style>@media (max-width: 600px) { .col { width: 100% !important } }\
         .btn:hover { background: #004; } body { margin: 0; font-family: Arial, sans-serif }</style></head><body><table role=\"presentation\" width=\"100%\">",
    );
    let mut i = 0;
    while html.len() < 100 * 1024 {
        html.push_str(&format!(
            "<tr><td class=\"col\" style=\"padding: 12px 24px; border-radius: 4px; background-color: #f4f4f4\">\
             <img src=\"https://cdn.example.com/img/{i}.png\" width=\"560\" alt=\"\" style=\"display:block; max-width:100%\">\
             <h2 style=\"font-size: 20px; line-height: 1.4em\">Story {i}</h2><p style=\"margin: 0 0 12px\">Lorem ipsum dolor sit amet, \
             consectetur adipiscing elit.</p><a class=\"btn\" href=\"https://example.com/story/{i}\" style=\"color: #fff; background: #06c\">Read</a></td></tr>"
        ));
        i += 1;
    }
    html.push_str("</table></body></html>");
    html
}

#[test]
fn the_check_of_a_100_kb_newsletter_takes_milliseconds() {
    let server = Server::start();
    let letter = newsletter();
    let id = stored_id(&server, &html_message("newsletter", &letter));
    let started = Instant::now();
    let report = server.get_ok(&format!("/api/emails/{id}/checks/html"));
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    eprintln!(
        "FIGURE html check of a {} KB newsletter: {ms:.1} ms (score {})",
        letter.len() / 1024,
        report["score"]
    );
    assert!(!report["warnings"].as_array().unwrap().is_empty());
    assert!(ms < 2000.0, "{ms} ms");
}
