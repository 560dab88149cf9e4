//! `GET /api/emails/:id/checks/spam`: the message's score from SpamAssassin's
//! `spamd` (`--spamassassin HOST:PORT`), over the spamc protocol
//! (`REPORT SPAMC/1.5`): the verdict from its `Spam:` header, each rule's
//! points, name and description from the report's table.

use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long spamd may take to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long spamd may take to score one message.
const SCORE_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest answer read from spamd.
const MAX_ANSWER_BYTES: u64 = 1024 * 1024;

/// The answer of the spam check.
#[derive(Debug, Serialize, PartialEq)]
pub struct SpamReport {
    /// spamd's score.
    pub score: f64,
    /// spamd's required score.
    pub threshold: f64,
    /// Whether the score reaches the threshold.
    pub spam: bool,
    /// The rules that matched.
    pub rules: Vec<Rule>,
}

/// A rule that matched.
#[derive(Debug, Serialize, PartialEq)]
pub struct Rule {
    /// Its name, e.g. `GTUBE`.
    pub name: String,
    /// Its points.
    pub score: f64,
    /// What it means, from spamd's report.
    pub description: String,
}

/// Scores `raw` with the spamd at `address`; the error says why spamd gave no score.
pub async fn check(address: &str, raw: &[u8]) -> Result<SpamReport, String> {
    let mut stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address))
        .await
        .map_err(|_| format!("spamd at {address} did not accept a connection within 5 s"))?
        .map_err(|e| format!("spamd at {address} is not reachable: {e}"))?;
    let exchange = async {
        let head = format!("REPORT SPAMC/1.5\r\nContent-length: {}\r\n\r\n", raw.len());
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(raw).await?;
        stream.shutdown().await?;
        let mut answer = Vec::new();
        (&mut stream)
            .take(MAX_ANSWER_BYTES)
            .read_to_end(&mut answer)
            .await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(SCORE_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("spamd at {address} gave no score within 60 s"))?
        .map_err(|e| format!("spamd at {address} broke off: {e}"))?;
    parse(&String::from_utf8_lossy(&answer)).map_err(|e| format!("spamd at {address}: {e}"))
}

/// Reads spamd's answer: `SPAMD/1.1 0 EX_OK`, headers with `Spam: True ; 1000.0 / 5.0`, the report.
pub fn parse(answer: &str) -> Result<SpamReport, String> {
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .or_else(|| answer.split_once("\n\n"))
        .unwrap_or((answer, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap_or("");
    let mut words = status.split_whitespace();
    if !words.next().is_some_and(|w| w.starts_with("SPAMD/")) {
        return Err(format!(
            "not a spamd answer: {}",
            status.chars().take(80).collect::<String>()
        ));
    }
    if words.next() != Some("0") {
        return Err(format!("refused the message: {status}"));
    }
    let verdict = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("spam"))
        .map(|(_, value)| value.trim())
        .ok_or("no Spam header in the answer")?;
    // "True ; 1000.0 / 5.0"
    let (flag, numbers) = verdict.split_once(';').ok_or("bad Spam header")?;
    let (score, threshold) = numbers.split_once('/').ok_or("bad Spam header")?;
    let number = |s: &str| {
        s.trim()
            .parse::<f64>()
            .map_err(|_| "bad Spam header".to_owned())
    };
    Ok(SpamReport {
        score: number(score)?,
        threshold: number(threshold)?,
        spam: flag.trim().eq_ignore_ascii_case("true") || flag.trim().eq_ignore_ascii_case("yes"),
        rules: rules(body),
    })
}

/// The rules of the report's table: ` pts rule name  description`, after the
/// `---- ----` line; descriptions may go on over indented lines.
fn rules(report: &str) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    let mut in_table = false;
    for line in report.lines() {
        if line.trim_start().starts_with("----") {
            in_table = true;
            continue;
        }
        if !in_table || line.trim().is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let first = parts.next().unwrap_or("");
        match first.parse::<f64>() {
            Ok(score) => {
                let Some(name) = parts.next() else { continue };
                rules.push(Rule {
                    name: name.to_owned(),
                    score,
                    description: parts.collect::<Vec<_>>().join(" "),
                });
            }
            Err(_) => {
                if let Some(last) = rules.last_mut() {
                    last.description.push(' ');
                    last.description.push_str(line.trim());
                }
            }
        }
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spamd_report_gives_score_threshold_and_rules() {
        let answer = "SPAMD/1.1 0 EX_OK\r\nContent-length: 9\r\nSpam: True ; 1000.3 / 5.0\r\n\r\n\
            Spam detection software...\n\nContent analysis details:   (1000.3 points, 5.0 required)\n\n \
            pts rule name              description\n---- ---------------------- --------------------------------------------------\n\
            1000 GTUBE                  BODY: Generic Test for Unsolicited Bulk Email\n\
            -0.0 NO_RELAYS              Informational: message was not relayed via\n                            SMTP\n\
             0.3 MISSING_DATE          Missing Date: header\n";
        let report = parse(answer).unwrap();
        assert_eq!(
            (report.score, report.threshold, report.spam),
            (1000.3, 5.0, true)
        );
        let names: Vec<_> = report.rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["GTUBE", "NO_RELAYS", "MISSING_DATE"]);
        assert_eq!(
            report.rules[1].description,
            "Informational: message was not relayed via SMTP"
        );
        assert!(parse("HTTP/1.1 200 OK\r\n\r\n").is_err());
        assert!(parse("SPAMD/1.0 76 Bad header line\r\n\r\n").is_err());
    }
}
