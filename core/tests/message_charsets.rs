//! Chinese, Japanese and Korean charsets decode in subjects (RFC 2047 words)
//! and bodies (issue 9, finding 13). The encoded bytes were made with
//! Python's codecs (`"...".encode("shift_jis")` and so on).

use mailjar_core::id::IdGenerator;
use mailjar_core::message::{ParsedMessage, header_fields, parse};
use mailjar_core::smtp::{Envelope, Incoming};
use mailjar_core::store::{Email, Prepared};

/// A message with `subject` as its Subject header and `body` as an 8-bit
/// text/plain body in `charset`.
fn message(subject: &str, charset: &str, cte: &str, body: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "From: a@example.com\r\nSubject: {subject}\r\nMIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset={charset}\r\nContent-Transfer-Encoding: {cte}\r\n\r\n"
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw.extend_from_slice(b"\r\n");
    raw
}

/// Parses `raw`, and checks that the stored form and the header map agree.
fn parsed(raw: &[u8]) -> ParsedMessage {
    let p = parse(raw);
    assert_eq!(header_fields(raw).headers["subject"], p.subject);
    let email = Email::new(
        IdGenerator::new().next(1, [0; 10]),
        1,
        Prepared::new(Incoming {
            envelope: Envelope::default(),
            raw: raw.to_vec(),
            helo: None,
            session: Default::default(),
            transcript: Default::default(),
        }),
    );
    assert_eq!(email.subject(), p.subject);
    assert_eq!(email.text(), p.text);
    p
}

/// (charset label, B-encoded subject, 8-bit body bytes, the decoded text).
const CASES: &[(&str, &str, &[u8], &str)] = &[
    (
        "iso-2022-jp",
        "=?iso-2022-jp?B?GyRCJDMkcyRLJEEkT0AkMyYhIjNORyclMyE8JUkbKEI=?=",
        b"\x1b$B$3$s$K$A$O@$3&!\x223NG'%3!<%I\x1b(B",
        "こんにちは世界、確認コード",
    ),
    (
        "shift_jis",
        "=?shift_jis?B?g26DjYFbgUWDj4Fbg4uDaIFBim2URoNSgVuDaA==?=",
        b"\x83n\x83\x8d\x81[\x81E\x83\x8f\x81[\x83\x8b\x83h\x81A\x8am\x94F\x83R\x81[\x83h",
        "ハロー・ワールド、確認コード",
    ),
    (
        "euc-jp",
        "=?euc-jp?B?xvzL3LjspM6l4aG8peuhorPOx6els6G8pck=?=",
        b"\xc6\xfc\xcb\xdc\xb8\xec\xa4\xce\xa5\xe1\xa1\xbc\xa5\xeb\xa1\xa2\xb3\xce\xc7\xa7\xa5\xb3\xa1\xbc\xa5\xc9",
        "日本語のメール、確認コード",
    ),
    (
        "euc-kr",
        "=?euc-kr?B?vsiz58fPvLy/5CC8vLDoLCDAzsH1IMTateU=?=",
        b"\xbe\xc8\xb3\xe7\xc7\xcf\xbc\xbc\xbf\xe4 \xbc\xbc\xb0\xe8, \xc0\xce\xc1\xf5 \xc4\xda\xb5\xe5",
        "안녕하세요 세계, 인증 코드",
    ),
    (
        "gb2312",
        "=?gb2312?B?xOO6w8rAveejrNHp1qTC6w==?=",
        b"\xc4\xe3\xba\xc3\xca\xc0\xbd\xe7\xa3\xac\xd1\xe9\xd6\xa4\xc2\xeb",
        "你好世界，验证码",
    ),
    (
        "gbk",
        "=?gbk?B?xOO6w8rAveejrNHp1qTC66OovPLM5aOp?=",
        b"\xc4\xe3\xba\xc3\xca\xc0\xbd\xe7\xa3\xac\xd1\xe9\xd6\xa4\xc2\xeb\xa3\xa8\xbc\xf2\xcc\xe5\xa3\xa9",
        "你好世界，验证码（简体）",
    ),
    (
        "gb18030",
        "=?gb18030?B?xOO6w8rAvecgouMgqKYglTKCNg==?=",
        b"\xc4\xe3\xba\xc3\xca\xc0\xbd\xe7 \xa2\xe3 \xa8\xa6 \x952\x826",
        "你好世界 € é 𠀀",
    ),
    (
        "big5",
        "=?big5?B?p0GmbqVArMmhQcXnw9K9WA==?=",
        b"\xa7A\xa6n\xa5@\xac\xc9\xa1A\xc5\xe7\xc3\xd2\xbdX",
        "你好世界，驗證碼",
    ),
];

#[test]
fn subjects_and_8bit_bodies_in_each_charset() {
    for &(charset, subject, body, decoded) in CASES {
        let cte = if charset == "iso-2022-jp" {
            "7bit"
        } else {
            "8bit"
        };
        let p = parsed(&message(subject, charset, cte, body));
        assert_eq!(p.subject, decoded, "{charset} subject");
        assert_eq!(p.text, format!("{decoded}\n"), "{charset} body");
    }
}

#[test]
fn charset_labels_are_case_insensitive_and_quoted() {
    for &(charset, subject, body, decoded) in CASES {
        let upper = charset.to_ascii_uppercase();
        let subject = subject.replacen(charset, &upper, 1);
        let quoted = format!("\"{upper}\"");
        let p = parsed(&message(&subject, &quoted, "8bit", body));
        assert_eq!(p.subject, decoded, "{upper} subject");
        assert_eq!(p.text, format!("{decoded}\n"), "{upper} body");
    }
}

#[test]
fn iso_2022_jp_split_across_encoded_words() {
    // Mailers split long subjects into words, each with its own escapes.
    let p = parsed(&message(
        "=?ISO-2022-JP?B?GyRCM05HJyUzITwlSRsoQg==?=\r\n =?ISO-2022-JP?B?GyRCJE8bKEIxMjM0NTYbJEIkRyQ5GyhC?=",
        "us-ascii",
        "7bit",
        b"-",
    ));
    assert_eq!(p.subject, "確認コードは123456です");
    assert_eq!(p.codes, ["123456"]);
}

#[test]
fn q_encoded_words_and_aliases() {
    let p = parsed(&message(
        "=?ks_c_5601-1987?Q?=C0=CE=C1=F5_=C4=DA=B5=E5?= 482913",
        "us-ascii",
        "7bit",
        b"-",
    ));
    assert_eq!(p.subject, "인증 코드 482913");
    assert_eq!(p.codes, ["482913"]);
    let p = parsed(&message(
        "=?Shift_JIS?Q?=83p=83X=83=8F=81=5B=83h=8D=C4=90=DD=92=E8?=",
        "us-ascii",
        "7bit",
        b"-",
    ));
    assert_eq!(p.subject, "パスワード再設定");
}

#[test]
fn transfer_encoded_bodies() {
    let p = parsed(&message(
        "s",
        "big5",
        "base64",
        b"xefD0r1YoUcyNDY4MTANCsHCwcI=",
    ));
    assert_eq!(p.text, "驗證碼：246810\n謝謝");
    assert_eq!(p.codes, ["246810"]);
    let p = parsed(&message(
        "s",
        "GB18030",
        "quoted-printable",
        b"=D1=E9=D6=A4=C2=EB=A3=BA135790=A3=AC=D0=BB=D0=BB",
    ));
    assert_eq!(p.text, "验证码：135790，谢谢\n");
    assert_eq!(p.codes, ["135790"]);
}

#[test]
fn html_only_body_in_shift_jis() {
    let mut raw = b"Subject: s\r\nContent-Type: text/html; charset=Shift_JIS\r\n\r\n".to_vec();
    raw.extend_from_slice(b"<html><body><p>\x83p\x83X\x83\x8f\x81[\x83h\x8d\xc4\x90\xdd\x92\xe8</p><p>\x83R\x81[\x83h: <b>739215</b></p></body></html>\r\n");
    let p = parsed(&raw);
    assert_eq!(
        p.html,
        "<html><body><p>パスワード再設定</p><p>コード: <b>739215</b></p></body></html>\n"
    );
    assert_eq!(p.text, "パスワード再設定\n\nコード: 739215");
    assert_eq!(p.codes, ["739215"]);
}
