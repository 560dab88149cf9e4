//! The PROXY protocol (v1 text, v2 binary) in front of the SMTP listeners:
//! `--proxy-protocol CIDR`. A load balancer such as HAProxy opens the TCP
//! connection, so the peer mailjar sees is the balancer; the header it sends
//! first names the client, which becomes the session's `remoteAddr`.
//!
//! With the flag, a connection from a listed address must start with a
//! header; a connection from elsewhere, a malformed header, or one that has
//! not arrived by the deadline (`--smtp-command-timeout`) is closed without a
//! greeting. The header is read exactly (never a byte past it, which belongs
//! to the session or to a TLS handshake) and is bounded: 107 bytes for v1,
//! [`MAX_V2_BYTES`] for v2. Parsing is `ppp`'s (a well-kept parser of both
//! versions); this module only decides how many bytes to read and what the
//! header's addresses mean.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;
use ppp::{HeaderResult, v1, v2};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The longest v1 header, CRLF included (HAProxy's specification).
const MAX_V1_BYTES: usize = 107;

/// The longest v2 header accepted: its 16 fixed bytes and up to 4 KiB of
/// addresses and TLVs (a balancer's TLS and id TLVs take a few hundred).
pub const MAX_V2_BYTES: usize = 16 + 4096;

/// The 12 bytes every v2 header starts with.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// The shortest header of either version: `PROXY UNKNOWN\r\n`.
const SHORTEST: usize = 15;

/// Who may send a header, and how long it may take.
#[derive(Debug, Clone)]
pub struct ProxyProtocol {
    trusted: Vec<IpNet>,
    timeout: Duration,
}

/// Why a connection was closed before its greeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl From<Refused> for std::io::Error {
    fn from(refused: Refused) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, refused.0)
    }
}

/// What the bytes read so far say about the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Read exactly this many more bytes.
    Need(usize),
    /// The header is complete.
    Complete,
    /// Not a header, or longer than allowed.
    Invalid(&'static str),
}

impl ProxyProtocol {
    /// Parses the `--proxy-protocol` values (`10.0.0.0/8`, `::1/128`, or a
    /// bare address); `None` without any.
    pub fn new(cidrs: &[String], timeout: Duration) -> Result<Option<ProxyProtocol>, String> {
        if cidrs.is_empty() {
            return Ok(None);
        }
        let trusted = cidrs
            .iter()
            .map(|cidr| {
                let cidr = cidr.trim();
                cidr.parse::<IpNet>()
                    .or_else(|_| cidr.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("--proxy-protocol {cidr}: not an address or CIDR"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(ProxyProtocol { trusted, timeout }))
    }

    /// Reads the header of a connection from `peer` and answers the client
    /// address it names (`peer` itself for a v2 LOCAL or a v1 UNKNOWN header:
    /// the balancer's own health checks).
    pub async fn accept(
        &self,
        tcp: &mut TcpStream,
        peer: SocketAddr,
    ) -> Result<SocketAddr, Refused> {
        let ip = peer.ip().to_canonical();
        if !self.trusted.iter().any(|net| net.contains(&ip)) {
            return Err(Refused(format!("{peer} is not a --proxy-protocol address")));
        }
        let header = tokio::time::timeout(self.timeout, read_header(tcp))
            .await
            .map_err(|_| Refused(format!("no PROXY header from {peer} in time")))??;
        Ok(client_address(&header)?.unwrap_or(peer))
    }
}

/// Reads one header exactly: never a byte past its end.
async fn read_header(tcp: &mut TcpStream) -> Result<Vec<u8>, Refused> {
    let mut header = Vec::with_capacity(SHORTEST);
    loop {
        match progress(&header) {
            Progress::Complete => return Ok(header),
            Progress::Invalid(why) => return Err(Refused(why.to_owned())),
            Progress::Need(more) => {
                let start = header.len();
                header.resize(start + more, 0);
                tcp.read_exact(&mut header[start..])
                    .await
                    .map_err(|e| Refused(format!("the PROXY header was cut short: {e}")))?;
            }
        }
    }
}

/// How many more bytes the header needs, judging by those read so far.
fn progress(read: &[u8]) -> Progress {
    if read.len() < SHORTEST {
        return Progress::Need(SHORTEST - read.len());
    }
    if read.starts_with(V2_SIGNATURE) {
        if read.len() < 16 {
            return Progress::Need(16 - read.len());
        }
        let total = 16 + usize::from(u16::from_be_bytes([read[14], read[15]]));
        return if total > MAX_V2_BYTES {
            Progress::Invalid("the PROXY v2 header is too long")
        } else if read.len() < total {
            Progress::Need(total - read.len())
        } else {
            Progress::Complete
        };
    }
    if !read.starts_with(b"PROXY ") {
        return Progress::Invalid("the connection did not start with a PROXY header");
    }
    if read.ends_with(b"\r\n") {
        Progress::Complete
    } else if read.len() >= MAX_V1_BYTES {
        Progress::Invalid("the PROXY v1 header is too long")
    } else {
        // v1 has no length field: one byte at a time up to its CRLF.
        Progress::Need(1)
    }
}

/// The client address a complete header names; `None` when it names none.
fn client_address(header: &[u8]) -> Result<Option<SocketAddr>, Refused> {
    let invalid = |e: &dyn std::fmt::Display| Refused(format!("a malformed PROXY header: {e}"));
    match HeaderResult::parse(header) {
        HeaderResult::V1(Ok(h)) => Ok(match h.addresses {
            v1::Addresses::Tcp4(a) => Some(SocketAddr::new(a.source_address.into(), a.source_port)),
            v1::Addresses::Tcp6(a) => Some(SocketAddr::new(a.source_address.into(), a.source_port)),
            v1::Addresses::Unknown => None,
        }),
        HeaderResult::V2(Ok(h)) => Ok(match (h.command, h.addresses) {
            (v2::Command::Local, _) => None,
            (_, v2::Addresses::IPv4(a)) => {
                Some(SocketAddr::new(a.source_address.into(), a.source_port))
            }
            (_, v2::Addresses::IPv6(a)) => {
                Some(SocketAddr::new(a.source_address.into(), a.source_port))
            }
            (_, v2::Addresses::Unix(_) | v2::Addresses::Unspecified) => None,
        }),
        HeaderResult::V1(Err(e)) => Err(invalid(&e)),
        HeaderResult::V2(Err(e)) => Err(invalid(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(command: v2::Command, source: &str) -> Vec<u8> {
        let source: SocketAddr = source.parse().unwrap();
        let destination: SocketAddr = if source.is_ipv4() {
            "10.0.0.1:25".parse().unwrap()
        } else {
            "[fd00::1]:25".parse().unwrap()
        };
        v2::Builder::with_addresses(
            v2::Version::Two | command,
            v2::Protocol::Stream,
            (source, destination),
        )
        .build()
        .unwrap()
    }

    /// Feeds `bytes` to [`progress`] the way [`read_header`] reads them.
    fn read(bytes: &[u8]) -> Result<Vec<u8>, &'static str> {
        let mut header = Vec::new();
        loop {
            match progress(&header) {
                Progress::Complete => return Ok(header),
                Progress::Invalid(why) => return Err(why),
                Progress::Need(more) => {
                    let end = header.len() + more;
                    if end > bytes.len() {
                        return Err("cut short");
                    }
                    header.extend_from_slice(&bytes[header.len()..end]);
                }
            }
        }
    }

    #[test]
    fn headers_are_read_to_their_end_and_not_a_byte_further() {
        let v1 = b"PROXY TCP4 192.0.2.7 10.0.0.1 40000 25\r\nEHLO x\r\n";
        let header = read(v1).unwrap();
        assert_eq!(header, b"PROXY TCP4 192.0.2.7 10.0.0.1 40000 25\r\n");
        assert_eq!(
            client_address(&header).unwrap(),
            Some("192.0.2.7:40000".parse().unwrap())
        );
        let mut binary = v2(v2::Command::Proxy, "[2001:db8::9]:5000");
        let length = binary.len();
        binary.extend_from_slice(b"\x16\x03\x01 a TLS hello");
        let header = read(&binary).unwrap();
        assert_eq!(header.len(), length);
        assert_eq!(
            client_address(&header).unwrap(),
            Some("[2001:db8::9]:5000".parse().unwrap())
        );
        assert_eq!(read(b"PROXY UNKNOWN\r\n").unwrap(), b"PROXY UNKNOWN\r\n");
        assert_eq!(client_address(b"PROXY UNKNOWN\r\n").unwrap(), None);
        let local = v2(v2::Command::Local, "192.0.2.7:1");
        assert_eq!(client_address(&read(&local).unwrap()).unwrap(), None);
    }

    #[test]
    fn anything_else_is_refused() {
        assert!(read(b"EHLO client.example\r\n").is_err());
        assert!(read(&[b'P'; 200]).is_err());
        let long = format!("PROXY TCP4 {}\r\n", "1".repeat(120));
        assert_eq!(
            read(long.as_bytes()),
            Err("the PROXY v1 header is too long")
        );
        let mut huge = V2_SIGNATURE.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        assert_eq!(read(&huge), Err("the PROXY v2 header is too long"));
        for bad in [
            &b"PROXY TCP4 999.0.0.1 10.0.0.1 1 25\r\n"[..],
            b"PROXY TCP4 192.0.2.7 10.0.0.1 99999 25\r\n",
            b"PROXY TCP9 192.0.2.7 10.0.0.1 1 25\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 1 25\n\r\n",
        ] {
            let header = read(bad).unwrap();
            assert!(client_address(&header).is_err(), "{bad:?}");
        }
        let mut wrong_version = v2(v2::Command::Proxy, "192.0.2.7:1");
        wrong_version[12] = 0x31;
        assert!(client_address(&read(&wrong_version).unwrap()).is_err());
    }

    #[test]
    fn no_mangled_header_panics() {
        let seeds = [
            b"PROXY TCP4 192.0.2.7 10.0.0.1 40000 25\r\n".to_vec(),
            b"PROXY TCP6 2001:db8::5 2001:db8::1 42000 25\r\n".to_vec(),
            v2(v2::Command::Proxy, "192.0.2.7:1"),
            v2(v2::Command::Proxy, "[2001:db8::9]:5000"),
        ];
        // xorshift: every byte of every seed replaced, cut or grown, deterministically.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for seed in &seeds {
            for _ in 0..2000 {
                let mut bytes = seed.clone();
                let at = (next() % bytes.len() as u64) as usize;
                match next() % 3 {
                    0 => bytes[at] = next() as u8,
                    1 => bytes.truncate(at),
                    _ => bytes.insert(at, next() as u8),
                }
                if let Ok(header) = read(&bytes) {
                    let _ = client_address(&header);
                }
            }
        }
    }

    #[test]
    fn only_listed_addresses_are_trusted() {
        let proxy =
            ProxyProtocol::new(&["10.0.0.0/8".into(), "::1".into()], Duration::from_secs(1))
                .unwrap()
                .unwrap();
        let trusted = |ip: &str| {
            let ip: IpAddr = ip.parse().unwrap();
            proxy.trusted.iter().any(|n| n.contains(&ip.to_canonical()))
        };
        assert!(trusted("10.1.2.3") && trusted("::1") && trusted("::ffff:10.0.0.9"));
        assert!(!trusted("127.0.0.1") && !trusted("11.0.0.1"));
        assert!(ProxyProtocol::new(&["10.0.0.0/33".into()], Duration::ZERO).is_err());
        assert!(ProxyProtocol::new(&[], Duration::ZERO).unwrap().is_none());
    }
}
