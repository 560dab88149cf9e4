use super::*;

const POOR: &str = r#"<!DOCTYPE html><html><head><style>
:root { --brand: #c00; }
.row { display: flex; position: relative; color: var(--brand); }
</style></head><body>
<div class="row"><p>Hello</p></div>
<video src="https://example.com/a.mp4"></video>
</body></html>"#;

const PLAIN: &str = r#"<html><body><table><tr><td><p>Hello</p></td></tr></table></body></html>"#;

fn warned(report: &HtmlReport) -> Vec<&'static str> {
    report.warnings.iter().map(|w| w.feature).collect()
}

#[test]
fn poorly_supported_features_are_warned_with_the_clients_that_lack_them() {
    let report = check(POOR);
    for feature in [
        "css-display-flex",
        "css-position",
        "html-video",
        "css-variables",
    ] {
        let warning = report.warnings.iter().find(|w| w.feature == feature);
        let warning =
            warning.unwrap_or_else(|| panic!("{feature} not warned: {:?}", warned(&report)));
        assert!(!warning.unsupported.is_empty() || !warning.partial.is_empty());
        let named = warning.supported.len() + warning.partial.len() + warning.unsupported.len();
        assert!(named <= report.clients);
    }
    assert_eq!(report.clients, clients().len());
    let plain = check(PLAIN);
    for feature in [
        "css-display-flex",
        "css-position",
        "html-video",
        "css-variables",
    ] {
        assert!(
            !warned(&plain).contains(&feature),
            "{feature} in {:?}",
            warned(&plain)
        );
    }
    assert!(
        plain.score > report.score,
        "{} vs {}",
        plain.score,
        report.score
    );
}

#[test]
fn css_is_read_from_sheets_and_style_attributes_as_browsers_read_it() {
    let facts = facts(
        r#"<style>/* c */ @media (prefers-color-scheme: dark) { a:hover > b::before { margin: 1rem !important } }
        .x ~ .y { background: linear-gradient(red, blue); width: calc(100% - 2em) }</style>
        <p style="display:grid; font-family: system-ui">x</p>
        <p style="content: 'display:flex'">not flex: a string</p>"#,
    );
    for needle in [
        "css-comment",
        "at:media",
        "media:prefers-color-scheme",
        "pseudo:hover",
        "pseudo:before",
        "sel:child",
        "sel:general-sibling",
        "sel:class",
        "prop:margin",
        "unit:rem",
        "important",
        "fn:linear-gradient",
        "fn:calc",
        "unit:%",
        "decl:display:grid",
        "ident:system-ui",
    ] {
        assert!(facts.has(needle), "{needle} missing: {facts:?}");
    }
    assert!(!facts.has("decl:display:flex"));
}

#[test]
fn html_elements_attributes_links_and_images_are_noted() {
    let facts = facts(
        r##"<!doctype html><!-- c --><a href="#top">t</a><a href="MAILTO:x@y">m</a>
        <img src="a.WEBP?x=1" srcset="b.avif 2x, data:image/png;base64,AAAA 3x" loading="lazy">
        <input><button type="reset">r</button><meta name="color-scheme" content="light dark">"##,
    );
    for needle in [
        "doctype:html5",
        "html-comment",
        "link:anchor",
        "link:mailto",
        "img:webp",
        "img:avif",
        "img:base64",
        "img:png",
        "attr:loading",
        "attr:srcset",
        "input:text",
        "button:reset",
        "meta:color-scheme",
        "el:img",
    ] {
        assert!(facts.has(needle), "{needle} missing: {facts:?}");
    }
}

#[test]
fn markup_inside_style_and_comments_is_not_taken_for_elements() {
    let facts = facts("<style>video { color: red }</style><!-- <video> --><p>x</p>");
    assert!(!facts.has("el:video"));
}

#[test]
fn hostile_nesting_and_garbage_end_without_running_out_of_stack() {
    let deep = format!(
        "<style>{}</style><p style=\"{}\">",
        "{(".repeat(200_000),
        "f(".repeat(200_000)
    );
    let report = check(&deep);
    assert!(report.score <= 100);
    let garbage: String = (0..50_000u32)
        .map(|i| char::from_u32(i % 0x2000 + 1).unwrap_or('x'))
        .collect();
    assert!(check(&garbage).score <= 100);
}

#[test]
fn no_used_feature_scores_full_marks() {
    let report = check("just text");
    assert_eq!(report.score, 100);
    assert!(report.warnings.is_empty());
}

#[test]
fn the_table_has_a_support_letter_per_client() {
    for feature in super::FEATURES {
        assert_eq!(feature.support.len(), clients().len(), "{}", feature.slug);
        assert!(
            feature.support.iter().all(|s| b"yanu".contains(s)),
            "{}",
            feature.slug
        );
        assert!(!feature.needles.is_empty(), "{}", feature.slug);
    }
}
