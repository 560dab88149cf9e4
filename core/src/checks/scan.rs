//! What a message's HTML uses: its elements, attributes, links, images,
//! doctype and comments, read with `html5gum` (a WHATWG tokenizer, so tag
//! soup is read as a browser reads it), and its CSS handed to [`super::css`].

use html5gum::{DefaultEmitter, Token, Tokenizer};

use super::css;
use super::facts::Facts;

/// Notes in `facts` everything `html` uses that a feature of the table names.
pub(super) fn scan(html: &str, facts: &mut Facts) {
    let mut emitter = DefaultEmitter::default();
    // `<style>`'s content is raw text, not markup.
    emitter.naively_switch_states(true);
    let mut style: Option<String> = None;
    for token in Tokenizer::new_with_emitter(html, emitter).flatten() {
        match token {
            Token::StartTag(tag) => {
                let name = String::from_utf8_lossy(&tag.name).to_ascii_lowercase();
                facts.note2("el:", &name);
                for (attribute, value) in &tag.attributes {
                    let attribute = String::from_utf8_lossy(attribute).to_ascii_lowercase();
                    let value = String::from_utf8_lossy(value);
                    facts.note2("attr:", &attribute);
                    attribute_facts(&name, &attribute, &value, &tag.attributes, facts);
                }
                let typed = tag
                    .attributes
                    .keys()
                    .any(|k| k.eq_ignore_ascii_case(b"type"));
                // Without a `type`, an input is a text field and a button submits.
                match name.as_str() {
                    "input" if !typed => facts.note("input:text"),
                    "button" if !typed => facts.note("button:submit"),
                    _ => {}
                }
                if name == "style" && !tag.self_closing {
                    style = Some(String::new());
                }
            }
            Token::String(text) => {
                if let Some(style) = style.as_mut() {
                    style.push_str(&String::from_utf8_lossy(&text));
                }
            }
            Token::EndTag(tag) if tag.name.eq_ignore_ascii_case(b"style") => {
                if let Some(sheet) = style.take() {
                    css::stylesheet(&sheet, facts);
                }
            }
            Token::Comment(_) => facts.note("html-comment"),
            Token::Doctype(doctype)
                if doctype.name.eq_ignore_ascii_case(b"html")
                    && doctype.public_identifier.is_none() =>
            {
                facts.note("doctype:html5")
            }
            _ => {}
        }
    }
    // An unclosed `<style>` still styles the message.
    if let Some(sheet) = style {
        css::stylesheet(&sheet, facts);
    }
}

type Attributes =
    std::collections::BTreeMap<html5gum::HtmlString, html5gum::Spanned<html5gum::HtmlString, ()>>;

/// The facts one attribute gives beyond its name.
fn attribute_facts(tag: &str, name: &str, value: &str, all: &Attributes, facts: &mut Facts) {
    match (tag, name) {
        (_, "style") => css::declarations(value, facts),
        ("a" | "area", "href") => {
            let href = value.trim();
            if href.starts_with('#') {
                facts.note("link:anchor");
            } else if href.len() >= 7 && href[..7].eq_ignore_ascii_case("mailto:") {
                facts.note("link:mailto");
            }
        }
        ("input" | "button", "type") => {
            facts.note2(
                if tag == "input" { "input:" } else { "button:" },
                &value.trim().to_ascii_lowercase(),
            );
        }
        ("img" | "source", "src") => image(value, facts),
        ("img" | "source", "srcset") => {
            for candidate in value.split(',') {
                image(candidate.split_whitespace().next().unwrap_or(""), facts);
            }
        }
        ("meta", "name") => {
            let has_content = all.keys().any(|k| k.eq_ignore_ascii_case(b"content"));
            if has_content {
                facts.note2("meta:", &value.trim().to_ascii_lowercase());
            }
        }
        _ => {}
    }
}

/// The image format a URL names: `data:` URLs by their media type, others by extension.
fn image(url: &str, facts: &mut Facts) {
    let url = url.trim();
    if url
        .get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("data:"))
    {
        let head = &url[5..url.find(',').unwrap_or(url.len())];
        if head.to_ascii_lowercase().ends_with(";base64") {
            facts.note("img:base64");
        }
        if let Some(kind) = head
            .split(';')
            .next()
            .and_then(|t| t.strip_prefix("image/"))
        {
            facts.note2("img:", &kind.to_ascii_lowercase().replace("svg+xml", "svg"));
        }
        return;
    }
    let path = url.split(['?', '#']).next().unwrap_or("");
    if let Some((_, extension)) = path.rsplit_once('.')
        && extension.len() <= 5
        && !extension.contains('/')
    {
        facts.note2("img:", &extension.to_ascii_lowercase());
    }
}
